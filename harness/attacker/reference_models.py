"""Reference (shadow) models and the signal matrix they give: samples × models, ML Privacy Meter
style, so one set of models serves every membership attack and the audit of a run.

Two designs:
- `halves` (LiRA online, Carlini et al. 2022 Sec. IV-B): K models on random halves of the
  evaluation set ∪ the attacker's pool. Each point is IN for half of the models: point i gets a
  random offset o_i (each offset equally often) and is IN for model k when (o_i + k) mod K < K/2,
  so every model trains on the same number of points (trimmed to the smallest row) and the models
  stack into one batched training run.
- `pool` (offline attacks: RMIA's and LiRA's offline setting): K models on random halves of the
  attacker's pool only; every evaluation point is OUT for every model.

Models are trained with the victim's declared recipe, each with its own random initialisation
(unless `known_init`), in batches with stacked parameters where the recipe allows
(harness/attacker/stacked_training.py), else one by one. Signals are φ (harness/attacker/signals.py)
on the evaluation set and the pool, optionally on shifted copies of image inputs (augmentations).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.attacker.signals import phi_from_logits
from harness.attacker.stacked_training import stackable, train_stacked

SHIFTS = ((0, 0), (0, 1), (0, -1), (1, 0), (-1, 0))  # (dy, dx) pixel shifts for `augment: shift`


@dataclass
class ReferenceSet:
    """K trained reference models and which points each one trained on."""

    design: str
    flat: torch.Tensor  # (K, P) parameters, state_dict order
    keep_eval: torch.Tensor  # (K, N) bool: model k trained on evaluation point i
    keep_pool: torch.Tensor  # (K, Npool) bool
    seconds: float
    batched: bool
    signals: dict[Any, torch.Tensor] = field(default_factory=dict)  # cache of φ matrices

    def __len__(self) -> int:
        return len(self.flat)


def balanced_keep(k: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """(k, n) bool: each row a random subset of the same size (≈ n/2), each column IN for
    ⌊k/2⌋ rows (up to the trimming that equalises the rows); k = 1: one random half."""
    if k == 1:
        keep = torch.zeros(1, n, dtype=torch.bool)
        keep[0, torch.randperm(n, generator=gen)[: n // 2]] = True
        return keep
    offsets = torch.randperm(n, generator=gen) % k
    keep = ((offsets[None, :] + torch.arange(k)[:, None]) % k) < (k // 2)
    size = int(keep.sum(1).min())
    for r in range(k):  # trim every row to the smallest: identical training-set sizes
        extra = int(keep[r].sum()) - size
        if extra:
            on = keep[r].nonzero()[:, 0]
            keep[r, on[torch.randperm(len(on), generator=gen)[:extra]]] = False
    return keep


def _rows(keep: torch.Tensor) -> torch.Tensor:
    """(K, n) indices of the True entries of each row (rows of equal count)."""
    n = int(keep[0].sum())
    return torch.stack([r.nonzero()[:, 0][:n] for r in keep])


def train_reference_set(recipe: Any, ev: Any, k: int, design: str, seed: int, known_init: bool,
                        allow_loop: bool) -> ReferenceSet:
    """Train K reference models of `design` ("halves" or "pool") for the evaluation set `ev`."""
    n_eval, n_pool = len(ev.x), len(ev.x_pool)
    gen = torch.Generator().manual_seed(seed)
    if design == "halves":
        x = torch.cat([ev.x, ev.x_pool]) if n_pool else ev.x
        y = torch.cat([ev.y, ev.y_pool.to(ev.y.device)]) if n_pool else ev.y
        keep = balanced_keep(k, n_eval + n_pool, gen)
        keep_eval, keep_pool = keep[:, :n_eval], keep[:, n_eval:]
    elif design == "pool":
        if n_pool < 2:
            raise ValueError("the pool design needs an attacker pool")
        x, y = ev.x_pool, ev.y_pool
        keep_pool = torch.stack([torch.randperm(n_pool, generator=gen) < n_pool // 2
                                 for _ in range(k)]) if k > 1 else balanced_keep(1, n_pool, gen)
        keep = keep_pool
        keep_eval = torch.zeros(k, n_eval, dtype=torch.bool)
    else:
        raise ValueError(f"unknown reference design {design!r}")
    idx = _rows(keep)
    inits = None if known_init else [seed * 7 + 1000 + j for j in range(k)]
    t0 = time.perf_counter()
    if stackable(recipe):
        flat, batched = train_stacked(recipe, x, y, idx, seed=seed * 31 + 17, init_seeds=inits), True
    elif allow_loop:
        from harness.attacker.shadows import flatten_state

        flat = torch.stack([flatten_state(recipe.train(x[r], y[r], seed=seed * 31 + 17 + j,
                                                       init_seed=None if inits is None else inits[j]))
                            for j, r in enumerate(idx)])
        batched = False
    else:
        raise NotImplementedError("the recipe cannot be trained in batches")
    return ReferenceSet(design, flat, keep_eval.to(ev.x.device), keep_pool.to(ev.x.device),
                        time.perf_counter() - t0, batched)


def shared_reference_set(kn: Any, ev: Any, k: int, design: str, seed: int, known_init: bool = False,
                         allow_loop: bool = False) -> ReferenceSet:
    """The run's reference set of this design and size (trained on first request, then shared)."""
    cache = kn.shared()
    key = (design, k, known_init, len(ev.x), len(ev.x_pool))
    if key not in cache:
        cache[key] = train_reference_set(kn.recipe, ev, k, design, seed, known_init, allow_loop)
    return cache[key]


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
