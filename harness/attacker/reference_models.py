"""Reference (shadow) models and the signal matrix they give: samples × models, ML Privacy Meter
style, so one set of models serves every membership attack and the audit of a run.

The layout is the LiRA authors' (Carlini et al. 2022, Sec. IV-B and their code): every model trains
on as many points as the victim did, and membership is drawn per point, independently of every
other point. Two designs:
- `halves` (LiRA online; RMIA online): each evaluation point is IN for a random half of the K
  models, drawn for that point alone (`balanced_keep`); a model's evaluation half is topped up to
  the victim's training-set size with points of the attacker's pool (drawn the same way), so a
  reference model sees as much data as the victim.
- `pool` (offline attacks: LiRA offline, RMIA offline): every model trains on a random subset of the
  attacker's pool of the victim's size (at most ¾ of the pool, so that models differ in data and
  every pool point is OUT for some of them); every evaluation point is OUT for every model.

Models are trained with the victim's declared recipe, each with its own random initialisation
(unless `known_init`), in batches with stacked parameters where the recipe allows
(harness/attacker/stacked_training.py), else one by one; batches run here or as Ray tasks
(harness/attacker/reference_executors.py: `membership.executor`), with the same numbers either way.
A model that failed to train — non-finite, or its parameter norm or its loss on its own training
set far outside the others' (`screen`) — is dropped before any attack reads the set, and counted.
Signals are φ (harness/attacker/signals.py) on the evaluation set and the pool, optionally on
shifted copies of image inputs (augmentations).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.attacker.signals import phi_from_logits
from harness.attacker.stacked_training import stackable, train_stacked
from harness.core.progress import stage

SHIFTS = ((0, 0), (0, 1), (0, -1), (1, 0), (-1, 0))  # (dy, dx) pixel shifts for `augment: shift`
POOL_SHARE = 0.75  # `pool` design: a model trains on at most this share of the pool
OUTLIER_MADS = 8.0  # `screen`: robust deviations (1.4826·MAD) past which a model stands out
NORM_RATIO = 1.5  # ...and its parameter norm at least this factor off the median norm


@dataclass
class ReferenceSet:
    """K trained reference models (those that trained: failed ones are dropped and counted) and
    which points each one trained on."""

    design: str
    flat: torch.Tensor  # (K, P) parameters, state_dict order
    keep_eval: torch.Tensor  # (K, N) bool: model k trained on evaluation point i
    keep_pool: torch.Tensor  # (K, Npool) bool
    seconds: float
    batched: bool
    trained: int = 0  # models trained (before dropping the failed ones)
    dropped: list[str] = field(default_factory=list)  # one line per dropped model: why
    train_size: int = 0  # points per model
    executor: str = "local"
    signals: dict[Any, torch.Tensor] = field(default_factory=dict)  # cache of φ matrices

    def __len__(self) -> int:
        return len(self.flat)

    def describe(self) -> str:
        """One line: how many models, on what, how trained, and how many were dropped."""
        how = "batched" if self.batched else "one by one"
        where = "" if self.executor == "local" else f" on {self.executor}"
        line = (f"{len(self)} reference models ({self.design} design, {self.train_size} points each, "
                f"{how}{where}, {self.seconds:.1f} s)")
        if self.dropped:
            line += f"; {len(self.dropped)} of {self.trained} dropped as failed to train"
        return line


def balanced_keep(k: int, n: int, row: int, gen: torch.Generator) -> torch.Tensor:
    """(k, n) bool with `row` True entries in every row and ⌊k·row/n⌋ or ⌈k·row/n⌉ in every column
    (exactly k/2 when row = n/2 and k is even), each column's rows drawn at random for that point
    alone (LiRA's per-point assignment); rows are then evened by swapping single entries between
    a long and a short row, which keeps every column's count."""
    if not 0 <= row <= n:
        raise ValueError(f"balanced_keep: row {row} outside 0..{n}")
    if n == 0:  # no points (e.g. no attacker pool): nothing to assign
        return torch.zeros(k, 0, dtype=torch.bool)
    total = k * row
    base, extra = divmod(total, n)
    counts = base + (torch.randperm(n, generator=gen) < extra).long()  # per-column IN counts
    rank = torch.rand(k, n, generator=gen).argsort(0).argsort(0)  # a random order of rows per column
    keep = rank < counts[None, :]
    sizes = keep.sum(1)
    while True:
        long_rows = (sizes > row).nonzero()[:, 0]
        short_rows = (sizes < row).nonzero()[:, 0]
        if len(long_rows) == 0:
            break
        a, b = int(long_rows[0]), int(short_rows[0])
        d = min(int(sizes[a]) - row, row - int(sizes[b]))
        movable = (keep[a] & ~keep[b]).nonzero()[:, 0]  # at least sizes[a] − sizes[b] ≥ d of them
        pick = movable[torch.randperm(len(movable), generator=gen)[:d]]
        keep[a, pick], keep[b, pick] = False, True
        sizes[a] -= d
        sizes[b] += d
    return keep


def _rows(keep: torch.Tensor) -> torch.Tensor:
    """(K, n) indices of the True entries of each row (rows of equal count)."""
    return torch.stack([r.nonzero()[:, 0] for r in keep])


def layout(design: str, k: int, n_eval: int, n_pool: int, train_size: int,
           gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(keep_eval (K, N), keep_pool (K, Npool)) of a design (see the module docstring)."""
    if design == "halves":
        half = n_eval // 2
        keep_eval = balanced_keep(k, n_eval, half, gen)
        fill = min(max(0, train_size - half), n_pool)
        keep_pool = balanced_keep(k, n_pool, fill, gen)
    elif design == "pool":
        if n_pool < 2:
            raise ValueError("the pool design needs an attacker pool")
        size = max(1, min(train_size, int(POOL_SHARE * n_pool)))
        keep_pool = balanced_keep(k, n_pool, size, gen)
        keep_eval = torch.zeros(k, n_eval, dtype=torch.bool)
    else:
        raise ValueError(f"unknown reference design {design!r}")
    return keep_eval, keep_pool


def _loss_from_phi(phi: torch.Tensor, task: str) -> torch.Tensor:
    """The training loss of a point from its φ: cross-entropy softplus(−φ), squared error −φ."""
    return -phi if task == "regression" else torch.nn.functional.softplus(-phi)


def _constant_loss(y: torch.Tensor, task: str) -> float:
    """The loss of the best constant predictor on labels y (label entropy; variance of y)."""
    if task == "regression":
        return float(y.double().var())
    p = torch.bincount(y.long().cpu()).double()
    p = p[p > 0] / p.sum()
    return float(-(p * p.log()).sum())


def screen(recipe: Any, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor,
           task: str) -> tuple[torch.Tensor, list[str]]:
    """(retained (K,) bool, one line per dropped model). A model failed to train when its
    parameters or its loss on its own training set are not finite; when its parameter norm stands
    out from the others' (more than OUTLIER_MADS robust deviations of log-norm from the median,
    and at least NORM_RATIO× off it); or when its training loss stands out above theirs (more than
    OUTLIER_MADS deviations) and is nearer a constant predictor's loss than their median. Uses
    only the attacker's own models and data."""
    k = len(flat)
    with torch.no_grad():
        out = torch.cat([recipe.outputs_many(flat[i : i + 16], x) for i in range(0, k, 16)])
    phi = phi_from_logits(out, y, task)  # (K, N)
    loss = _loss_from_phi(phi, task).gather(1, idx.to(phi.device)).mean(1).cpu()
    norm = flat.double().norm(dim=1).cpu()
    ok = torch.isfinite(flat).all(1).cpu() & torch.isfinite(loss) & torch.isfinite(norm)
    keep = ok.clone()
    if int(ok.sum()) >= 3:  # an outlier needs a crowd to stand out from
        ln = norm[ok].clamp_min(1e-300).log()
        dev = (ln - ln.median()).abs()
        far_norm = dev > max(OUTLIER_MADS * 1.4826 * float(dev.median()), math.log(NORM_RATIO))
        lo, med = loss[ok], float(loss[ok].median())
        mad = 1.4826 * float((lo - med).abs().median())
        chance = _constant_loss(y[idx.reshape(-1).to(y.device)], task)
        far_loss = (lo > med + OUTLIER_MADS * mad) & (lo > med + 0.5 * (chance - med))
        keep[ok] = ~far_norm & ~far_loss
    med_n = float(norm[ok].median()) if ok.any() else float("nan")
    med_l = float(loss[ok].median()) if ok.any() else float("nan")
    lines = [f"model {j}: parameter norm {float(norm[j]):.3g} (median {med_n:.3g}), training loss "
             f"{float(loss[j]):.3g} (median {med_l:.3g})" for j in (~keep).nonzero()[:, 0].tolist()]
    return keep, lines


def train_reference_set(recipe: Any, ev: Any, k: int, design: str, seed: int, known_init: bool,
                        allow_loop: bool, executor: Any = None) -> ReferenceSet:
    """Train K reference models of `design` ("halves" or "pool") for the evaluation set `ev`
    (`executor`: where batches run, None = here); failed models are dropped (`screen`)."""
    n_eval, n_pool = len(ev.x), len(ev.x_pool)
    gen = torch.Generator().manual_seed(seed)
    train_size = int(getattr(ev, "train_size", 0) or n_eval // 2)
    keep_eval, keep_pool = layout(design, k, n_eval, n_pool, train_size, gen)
    stage(f"training {k} reference models ({design} design)")
    x = torch.cat([ev.x, ev.x_pool]) if n_pool else ev.x
    y = torch.cat([ev.y, ev.y_pool.to(ev.y.device)]) if n_pool else ev.y
    keep = torch.cat([keep_eval, keep_pool], 1)
    idx = _rows(keep)
    inits = None if known_init else [seed * 7 + 1000 + j for j in range(k)]
    t0 = time.perf_counter()
    where = "local"
    if stackable(recipe):
        run_chunks = None if executor is None else executor.run_chunks
        where = "local" if executor is None else executor.name
        xs = recipe.inputs(x) if hasattr(recipe, "inputs") else x  # a stand-in's standardisation
        flat = train_stacked(recipe, xs, y, idx, seed=seed * 31 + 17, init_seeds=inits,
                             run_chunks=run_chunks)
        batched = True
    elif allow_loop:
        from harness.attacker.shadows import flatten_state

        flat = torch.stack([flatten_state(recipe.train(x[r], y[r], seed=seed * 31 + 17 + j,
                                                       init_seed=None if inits is None else inits[j]))
                            for j, r in enumerate(idx)])
        batched = False
    else:
        raise NotImplementedError("the recipe cannot be trained in batches")
    seconds = time.perf_counter() - t0
    retained, dropped = screen(recipe, flat, x.to(recipe.device, recipe.dtype), y.to(recipe.device),
                               idx, recipe.task)
    dev = ev.x.device
    r = retained.to(flat.device)
    return ReferenceSet(design, flat[r], keep_eval[retained].to(dev), keep_pool[retained].to(dev),
                        seconds, batched, trained=k, dropped=dropped, train_size=int(idx.shape[1]),
                        executor=where)


def shared_reference_set(kn: Any, ev: Any, k: int, design: str, seed: int, known_init: bool = False,
                         allow_loop: bool = False, recipe: Any = None) -> ReferenceSet:
    """The run's reference set of this design, size and recipe (`recipe`: a named stand-in; None:
    the knowledge's own), trained on first request, then shared."""
    recipe = kn.recipe if recipe is None else recipe
    cache = kn.shared()
    key = (design, k, known_init, len(ev.x), len(ev.x_pool), recipe.stand_in)
    if key not in cache:
        executor = getattr(kn, "executor", None)
        cache[key] = train_reference_set(recipe, ev, k, design, seed, known_init, allow_loop,
                                         executor() if callable(executor) else executor)
    return cache[key]


def offline_design(requested: str, k: int, n_pool: int) -> tuple[str, str]:
    """(design, note) for an offline attack with k reference models: the paper's `halves` (each
    point scored against the models that did not train on it), or `pool`; one model leaves half
    of the points with no OUT model, so k = 1 uses the pool (and the halves without a pool
    never fall back)."""
    if requested == "pool" and n_pool < 2:
        return "halves", "no attacker pool: the OUT models of the halves design instead"
    if requested == "halves" and k == 1 and n_pool >= 2:
        return "pool", "one reference model: trained on the attacker's pool, every point OUT"
    return requested, ""


def unscored(keep: torch.Tensor, online: bool) -> torch.Tensor:
    """(n,) bool: points with no OUT model (or, online, no IN model) among the retained models."""
    lack = (~keep).sum(0) == 0
    if online:
        lack |= keep.sum(0) == 0
    return lack


def shifted(x: torch.Tensor, shape: tuple[int, ...], shift: tuple[int, int]) -> torch.Tensor:
    """Flat inputs rolled by (dy, dx) pixels (image shapes only; identity otherwise)."""
    if shift == (0, 0) or len(shape) < 2:
        return x
    h, w = shape[-2], shape[-1]
    img = x.reshape(len(x), -1, h, w)
    return torch.roll(img, shifts=shift, dims=(2, 3)).reshape(len(x), -1)


def reference_phi(recipe: Any, refs: ReferenceSet, x: torch.Tensor, y: torch.Tensor, task: str,
                  name: str, shifts: tuple[tuple[int, int], ...] = ((0, 0),)) -> torch.Tensor:
    """(K, n, A) φ of every reference model on x (A = len(shifts)), cached under `name`."""
    key = (name, shifts)
    if key not in refs.signals:
        shape = recipe.input_shape
        cols = [phi_from_logits(recipe.outputs_many(refs.flat, shifted(x, shape, s)), y, task)
                for s in shifts]
        refs.signals[key] = torch.stack(cols, -1)
    return refs.signals[key]
