"""reconn — paper 004 (Balle, Cherubin, Hayes, S&P 2022), Sec. IV-B, V, VI-C, VI-D.

Informed adversary with D₋ and the recipe A: train K shadow models θ̄ᵢ = A(D₋ ∪ {z̄ᵢ}) on shadow
targets z̄ᵢ from its own pool (disjoint from D₋ and from the test targets), then a reconstructor
network φ mapping a model's representation to its extra training point, and apply φ to each of T
released models (one per target, each trained on D₋ ∪ {z_t}). Representation: the flattened,
standardised parameters (white-box; standardiser fitted on the shadows only), or the released
model's outputs on a probe set, concatenated (prediction API, Sec. VI-C; the paper probes with
200 shadow-pool images, we use D₋ points so that the whole pool stays available as targets).
Shadows use the released models' known initialisation by default (the paper's default; a
parameter). φ: MLP hidden–hidden–d with a sigmoid output scaled to the attacker-known input
range, MAE + MSE loss, RMSProp (the authors' notebook: 1000-1000, lr 3e-4).

Beyond the paper: with output features, `decode: ridge` first maps a model's standardised
outputs to its parameters by ridge regression fitted on the shadows (whose parameters the
adversary knows), and the reconstructor then works on (decoded) parameters as in the white-box
attack. On 8×8 digits (1,500 shadows, 200 held-out targets) the paper's representation
(`decode: none`, outputs straight into φ) reached success 0.82–0.84, decoded outputs 0.87–0.885,
the weights themselves 0.88: the logits of 200 probes carry about what the weights do, but φ
learns the map from 1,500 examples far worse than least squares does. Other probe sets and
feature maps did not help (same 200 targets, decode: none): 200 pool points 0.80, 200 uniform
random inputs 0.755, all 500 of D₋ 0.84, D₋ ∪ pool (1,000) 0.85, PCA-whitened features 0.475,
one global scale instead of per-feature standardisation 0.41; the reconstructor's own seed moves
success by ±0.02. Fitting each released model's parameters to its logits (Gauss–Newton) matches
them to 1e-7 but recovers nothing beyond the ridge decode (0.865).
When the pool is smaller than K, shadow targets are augmented (`augment`):
D₋ points reused as shadow targets, ±1-pixel shifts (images), Gaussian noise, same-class mixup.
Shadows are trained in batches with stacked parameters where the recipe allows
(harness/attacker/shadows.py: full-batch SGD / DP-GD), else one by one; the time is bounded by
`max_seconds` (fewer shadows, reported as partial).
"""

from __future__ import annotations

import math
import time
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from harness.attacker.compute import place as place_work
from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.core.errors import AttackFailed, AttackSkipped
from harness.core.optim import RMSprop


class ReconnParams(Params):
    """Defaults are sized for `attacks: all` (seconds); the paper-scale settings (≥ 1,000
    shadows, a 1000-1000 reconstructor) are in scenarios/reconstruction-reconn-digits.yaml."""

    targets: int = Field(default=10, ge=1)  # released models, one target each
    shadows: int = Field(default=64, ge=2)  # shadow models (paper: ≥ 1,000)
    augment: list[str] = []  # any of: reuse, shift, noise, mixup
    features: str = "auto"  # auto | weights | outputs
    probes: int = Field(default=200, ge=1)  # D₋ points whose outputs represent a model
    decode: Literal["none", "ridge"] = "none"  # outputs → φ (the paper) | → parameters → φ
    ridge: float = Field(default=1e-4, gt=0)  # decode's penalty, relative to the shadow count
    hidden: int = Field(default=256, ge=1)
    epochs: int = Field(default=30, ge=1)
    lr: float = Field(default=3e-4, gt=0)
    batch: int = Field(default=64, ge=1)
    known_init: bool = True  # shadows start from the released models' initialisation
    max_seconds: float = Field(default=10.0, gt=0)  # bound on shadow training
    slow_recipes: bool = False  # run even when shadows must be trained one by one


def augmented_targets(x_pool, y_pool, x_minus, y_minus, k, kinds, shape, gen):
    """K shadow targets: the pool first, then augmentations of pool (and D₋) points."""
    xs, ys = [x_pool], [y_pool]
    src_x, src_y = x_pool, y_pool
    if "reuse" in kinds:
        xs.append(x_minus)
        ys.append(y_minus)
        src_x, src_y = torch.cat([x_pool, x_minus]), torch.cat([y_pool, y_minus])
    have = sum(len(a) for a in xs)
    ops = [o for o in ("shift", "noise", "mixup") if o in kinds]
    i = 0
    while have < k and ops and len(src_x):
        op = ops[i % len(ops)]
        i += 1
        n = min(k - have, len(src_x))
        idx = torch.randperm(len(src_x), generator=gen)[:n].to(src_x.device)
        x, y = src_x[idx], src_y[idx]
        if op == "shift" and len(shape) >= 2:
            h, w = shape[-2], shape[-1]
            img = x.reshape(n, -1, h, w)
            dx, dy = (int(v) for v in torch.randint(-1, 2, (2,), generator=gen))
            x = torch.roll(img, shifts=(dy, dx), dims=(2, 3)).reshape(n, -1)
        elif op == "noise":
            x = x + 0.05 * x.std() * torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x)
        elif op == "mixup":
            perm = torch.randperm(n, generator=gen).to(x.device)
            same = y[perm] == y
            lam = 0.5 + 0.5 * torch.rand(n, 1, generator=gen, dtype=torch.float64).to(x)
            mixed = lam * x + (1 - lam) * x[perm]
            x, y = mixed[same], y[same]
        xs.append(x)
        ys.append(y)
        have += len(x)
    return torch.cat(xs)[:k], torch.cat(ys)[:k]


def ridge_decode(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor, lam: float) -> torch.Tensor:
    """Rows of b mapped to parameters: ridge regression w ≈ a·M fitted on the shadows (a, w),
    columns of a standardised, penalty lam·len(a); float64; primal or dual, whichever is smaller."""
    a, b, w = a.double(), b.double(), w.double()
    mu, sd = a.mean(0), a.std(0)
    sd = torch.where(sd > 1e-12, sd, torch.ones_like(sd))
    a, b = (a - mu) / sd, (b - mu) / sd
    wm = w.mean(0)
    wc = w - wm
    k, p = a.shape
    reg = lam * k
    if p <= k:
        m = torch.linalg.solve(a.T @ a + reg * torch.eye(p, dtype=a.dtype, device=a.device), a.T @ wc)
        return wm + b @ m
    alpha = torch.linalg.solve(a @ a.T + reg * torch.eye(k, dtype=a.dtype, device=a.device), wc)
    return wm + (b @ a.T) @ alpha


def format_outputs(z: torch.Tensor, task: str, output: str) -> torch.Tensor:
    """What the API would return for raw outputs z (K, N, out), flattened per model."""
    if output == "probabilities" and task == "multiclass":
        z = torch.softmax(z, -1)
    elif output == "probabilities" and task == "binary":
        p = torch.sigmoid(z[..., :1])
        z = torch.cat([1 - p, p], -1)
    return z.reshape(len(z), -1)


@register
class Reconn(Attack):
    name = "reconn"
    family = "reconstruction"
    needs = frozenset({"whitebox", "prediction", "gradient", "smoothgrad"})
    paper = "004 Sec. IV-B, VI-C, VI-D"
    summary = "informed adversary: a reconstructor network trained on shadow models"
    Params = ReconnParams

    def skip_reason(self, info):
        if info.interface != "whitebox" and info.output == "label":
            return "needs weights or real-valued outputs; the API returns labels only"
        return super().skip_reason(info)

    def run(self, oracle, params: ReconnParams, ctx) -> Artifact:
        kn = ctx.knowledge
        if kn is None or not kn.available:
            raise AttackSkipped("an informed adversary needs a locally trained victim")
        feats = params.features
        if feats == "auto":
            feats = "weights" if oracle.offers("weights") else "outputs"
        if feats == "weights" and not oracle.offers("weights"):
            raise AttackSkipped("features: weights needs a white-box release")
        if not params.slow_recipes and not kn.recipe_batchable:
            raise AttackSkipped("the training recipe cannot be batched (only full-batch SGD / DP-GD "
                               "MLPs can): every shadow would be a full training run; set "
                               "params.slow_recipes: true to run anyway")
        t = max(1, min(params.targets, kn.max_targets()))
        rel = kn.release(t)
        recipe = rel.recipe
        info = oracle.info
        gen = ctx.gen
        init_seed = None if params.known_init else ctx.seed + 1
        xs, ys = augmented_targets(rel.x_aux, rel.y_aux, rel.x_minus, rel.y_minus,
                                   params.shadows, params.augment, info.input_shape, gen)
        if feats == "outputs":  # probes: D₋ points (known to the informed adversary)
            probe = rel.x_minus[: params.probes]
            if len(probe) == 0:
                raise AttackFailed("outputs features need probe points (D₋ is empty)")
        if len(xs) < 2:
            raise AttackFailed("too few shadow targets (enlarge the pool or set augment)")
        # shadows, in chunks, within the time bound (each chunk's seeds differ: DP noise)
        t0 = time.perf_counter()
        flats, done, chunk = [], 0, 64
        bar = ctx.progress("reconn: shadow models", len(xs)) if ctx.progress else None
        while done < len(xs):
            n = min(chunk, len(xs) - done)
            flats.append(recipe.train_many(rel.x_minus, rel.y_minus, xs[done : done + n],
                                           ys[done : done + n], seed=ctx.seed * 7919 + done,
                                           init_seed=init_seed))
            done += n
            if bar is not None:
                bar.update(n)
            if time.perf_counter() - t0 > params.max_seconds:
                break
        if bar is not None:
            bar.close()
        shadow_s = time.perf_counter() - t0
        flat = torch.cat(flats)
        xs = xs[:done]
        if feats == "weights":
            f_sh = flat
            f_rel = torch.stack([torch.cat([v.reshape(-1) for v in view.weights().values()])
                                 for view in rel.views]).to(f_sh)
        else:
            f_sh = format_outputs(recipe.outputs_many(flat, probe), info.task, info.output)
            need = len(probe) * len(rel.views)
            if oracle.affordable(need) < need:
                raise oracle.cannot_pay(need, "probe queries")
            f_rel = torch.stack([view.predict(probe).reshape(-1) for view in rel.views]).to(f_sh)
            if params.decode == "ridge":
                f_rel = ridge_decode(f_sh, f_rel, flat, params.ridge).to(flat)
                f_sh = flat
        mu, sd = f_sh.mean(0), f_sh.std(0)
        sd = torch.where(sd > 1e-12, sd, torch.ones_like(sd))
        f_sh, f_rel = (f_sh - mu) / sd, (f_rel - mu) / sd
        lo, hi = float(info.input_low), float(info.input_high)
        net, curve = self._fit(f_sh.float(), xs.float(), lo, hi, params, gen)
        with torch.no_grad():
            x_hat = net(f_rel.float()).double()
            fit_mse = float(((net(f_sh.float()).double() - xs) ** 2).mean())
        metrics = {"released_models": float(t), "shadows": float(done),
                   "shadow_seconds": shadow_s, "shadow_ms_each": 1e3 * shadow_s / max(done, 1),
                   "feature_dim": float(f_sh.shape[1]), "train_mse": fit_mse,
                   "n_minus": float(len(rel.x_minus))}
        art = Artifact("reconstruction", data={
            "x_hat": x_hat.cpu(), "outdir": ctx.outdir, "curves": {"reconn_loss": curve},
            "eta_spec": ctx.threat.rero_eta if ctx.threat else None},
            metrics=metrics, notes=rel.notes + [f"features: {feats}",
                                                f"{done} shadows in {shadow_s:.1f} s"]
                       + ([f"outputs decoded to parameters (ridge {params.ridge:g})"]
                          if feats == "outputs" and params.decode == "ridge" else []))
        art.progress = f"{done} of {params.shadows} shadows"
        if done < params.shadows:
            art.stopped_by = "time"
            art.reason = f"{done} of {params.shadows} shadows within max_seconds"
        return art

    @staticmethod
    def _fit_device(n: int, features: int, d: int, params: ReconnParams):
        """Where φ trains on n feature vectors (the run's device policy: harness/attacker/compute.py)."""
        h = params.hidden
        fwd = 2.0 * (features * h + h * h + h * d)
        return place_work("reconstructor", 3 * fwd * n * params.epochs,
                          f"{n} feature vectors, {params.epochs} epochs",
                          3 * fwd * min(max(1, params.batch), n))

    @staticmethod
    def _fit(f, x, lo, hi, params: ReconnParams, gen):
        """The reconstructor φ: features → inputs, trained with MAE + MSE (RMSProp)."""
        d, h, home = x.shape[1], params.hidden, f.device
        torch.manual_seed(int(torch.randint(1 << 30, (1,), generator=gen)))
        dev = Reconn._fit_device(len(f), f.shape[1], d, params)
        f, x = f.to(dev), x.to(dev)
        body = nn.Sequential(nn.Linear(f.shape[1], h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(),
                             nn.Linear(h, d), nn.Sigmoid()).to(dev)

        def fit(v):
            return lo + (hi - lo) * body(v)

        def net(v):  # the fitted φ, on the features' own device
            return fit(v.to(dev)).to(home)

        opt = RMSprop(body.parameters(), lr=params.lr)
        n, bs = len(f), max(1, params.batch)
        curve = []
        for ep in range(params.epochs):
            perm = torch.randperm(n, generator=gen).to(f.device)
            tot = 0.0
            for i in range(0, n, bs):
                idx = perm[i : i + bs]
                err = fit(f[idx]) - x[idx]
                loss = err.abs().mean() + (err**2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                tot += float(loss.detach()) * len(idx)
            if ep % max(1, params.epochs // 20) == 0 or ep == params.epochs - 1:
                curve.append((ep, tot / n))
            if not math.isfinite(tot):
                break
        body.eval()
        return net, curve

    def judge(self, m, artifact):
        if "success_rate" not in m:
            return None, "reconstructions made; no truth to score them (not verified)"
        k, t = int(m["reconstructed"]), int(m["targets"])
        ci = f"[{m['success_ci_low']:.2f}, {m['success_ci_high']:.2f}]"
        if k > 0:
            return "high", (f"{k} of {t} targets rebuilt closer than the nearest-neighbour oracle "
                            f"(success {m['success_rate']:.2f}, 95% CI {ci})")
        return "low", f"no target beat the nearest-neighbour oracle (95% CI {ci})"
