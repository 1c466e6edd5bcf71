"""Shadow models in batches: K copies of the recipe's model trained at once with stacked
parameters (torch.func vmap), each on D₋ ∪ {one extra point} (paper 004, Sec. IV-B step 1).

Covers the recipes where batching pays and the semantics are simple to reproduce exactly:
full-batch SGD (momentum, ½·wd·‖W‖² on weight matrices) with the same init for every copy, and
full-batch DP-GD (per-example clipping to C with factor min(1, C/(‖g‖ + 1e-6)), Gaussian noise
σ·C, divided by n, the optimizer's weight decay on every parameter: what Opacus does with Poisson
sample rate 1, as victims/models/training.py trains the real DP victim; equal up to the noise draws).
Anything else falls back to a loop over `Recipe.train`. Returns flat parameter vectors in
state_dict order.

DP-GD on a Sequential of Linear layers and elementwise activations uses the ghost-norm trick
(Goodfellow 2015; Li et al. 2022): per-example gradients are never materialised. One backward of
the summed loss gives each example's output gradient δ at every Linear layer; its weight gradient
is δ aᵀ (a = the layer's input), so ‖g‖² = Σ_layers ‖δ‖²·(‖a‖² + [bias]) and the clipped sum is
(f·δ)ᵀa. Other models fall back to per-example gradients by vmap(vmap(grad)).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.func import functional_call, grad, vmap

from defenses.dp_sgd import noise_for_epsilon
from harness.attacker.ghost_norms import ghost_clipped_sum, ghost_layers
from harness.attacker.stacked_training import train_stacked
from victims.models.training import loss_fn


def batchable(recipe: Any) -> bool:
    """True when `train_many` can train this recipe in batches (minibatch SGD and DP-SGD with
    Poisson sampling go through harness/attacker/stacked_training.py)."""
    t = recipe.training
    return t.optimizer == "sgd" and recipe.spec.arch in ("mlp", "logistic", "linear")


def _full_batch(recipe: Any) -> bool:
    t = recipe.training
    if recipe.dp is not None:
        return t.batch_size is None
    return t.batch_size is None or t.steps is not None


def noise_multiplier(recipe: Any, steps: int) -> float:
    """σ of the recipe's DP-GD (full batch, sample rate 1)."""
    dp = recipe.dp
    if dp.noise_multiplier is not None:
        return float(dp.noise_multiplier)
    return noise_for_epsilon(float(dp.epsilon), float(dp.delta), 1.0, int(steps), dp.accountant)


def flatten_state(model: torch.nn.Module) -> torch.Tensor:
    """The model's parameters as one flat vector (state_dict order)."""
    return torch.cat([p.detach().reshape(-1) for p in model.state_dict().values()])


def train_many(recipe: Any, x_minus: torch.Tensor, y_minus: torch.Tensor, x_extra: torch.Tensor,
               y_extra: torch.Tensor, seed: int = 0, init_seed: int | None = None,
               chunk: int = 256, dp_method: str = "auto") -> torch.Tensor:
    """(K, P) flat parameters of K models, model k trained on D₋ ∪ {(x_extra[k], y_extra[k])}.

    `dp_method` (DP-GD only): "ghost" (ghost norms), "vmap" (per-example gradients) or "auto"
    (ghost where the model allows)."""
    if not batchable(recipe):
        out = []
        for k in range(len(x_extra)):
            m = recipe.train(torch.cat([x_minus, x_extra[k : k + 1]]),
                             torch.cat([y_minus, y_extra[k : k + 1]]), seed=seed + k,
                             init_seed=init_seed)
            out.append(flatten_state(m))
        return torch.stack(out)
    if not _full_batch(recipe):
        return _minibatch_many(recipe, x_minus, y_minus, x_extra, y_extra, seed, init_seed)
    parts = [_train_chunk(recipe, x_minus, y_minus, x_extra[i : i + chunk],
                          y_extra[i : i + chunk], seed + i, init_seed, dp_method)
             for i in range(0, len(x_extra), chunk)]
    return torch.cat(parts)


def _minibatch_many(recipe, x_minus, y_minus, x_extra, y_extra, seed, init_seed) -> torch.Tensor:
    """Minibatch recipes: every model's training set as a row of indices into D₋ ∪ extras."""

    n, k = len(x_minus), len(x_extra)
    x = torch.cat([x_minus.to(x_extra), x_extra])
    y = torch.cat([y_minus.to(y_extra.device), y_extra])
    base = torch.arange(n)[None].expand(k, n)
    idx = torch.cat([base, (n + torch.arange(k))[:, None]], 1)
    init = None if init_seed is None else [init_seed] * k
    return train_stacked(recipe, x, y, idx, seed, init, part="shadows")


def _train_chunk(recipe, x_minus, y_minus, xk, yk, seed, init_seed, dp_method="auto") -> torch.Tensor:
    import time

    t0 = time.perf_counter()
    model = recipe.build(init_seed)
    t = recipe.training
    dev, dt = recipe.device, recipe.dtype
    crit = loss_fn(recipe.task)
    names = [n for n, _ in model.named_parameters()]
    base = {n: p.detach() for n, p in model.named_parameters()}
    is_w = {n: float(p.dim() > 1) for n, p in base.items()}
    k = len(xk)
    params = {n: p[None].expand(k, *p.shape).clone() for n, p in base.items()}
    bufs = {n: torch.zeros_like(p) for n, p in params.items()}
    xm = x_minus.to(dev, dt)
    ym = y_minus.to(dev)
    xk = xk.to(dev, dt)
    yk = yk.to(dev)
    if recipe.task == "regression":
        ym, yk = ym.to(dt), yk.to(dt)
    n = len(xm) + 1
    steps = t.steps if t.steps is not None else t.epochs
    wd, lr, mom = t.weight_decay, t.lr, t.momentum

    def out(p, x):
        return functional_call(model, p, (x,))

    if recipe.dp is None:
        def loss(p, x1, y1):
            total = crit(out(p, xm), ym) * (n - 1) + crit(out(p, x1[None]), y1[None])
            pen = sum(is_w[m] * (p[m] ** 2).sum() for m in names)
            return total / n + 0.5 * wd * pen

        step_grad = vmap(grad(loss))
        for _ in range(steps):
            g = step_grad(params, xk, yk)
            with torch.no_grad():
                for m in names:
                    bufs[m] = mom * bufs[m] + g[m] if mom else g[m]
                    params[m] = params[m] - lr * bufs[m]
    else:
        sigma = noise_multiplier(recipe, steps)
        c = recipe.dp.max_grad_norm
        gen = torch.Generator(device="cpu").manual_seed(seed + 15485863)

        layers = ghost_layers(model) if dp_method in ("auto", "ghost") else None
        if dp_method == "ghost" and layers is None:
            raise ValueError("ghost norms need a Sequential of Linear layers and elementwise "
                             "activations")
        if layers is not None:
            x_all = torch.cat([xm[None].expand(k, *xm.shape), xk[:, None]], 1)
            y_all = torch.cat([ym[None].expand(k, *ym.shape), yk[:, None]], 1)

            def clipped_sum(p):
                return ghost_clipped_sum(layers, p, x_all, y_all, crit, c)
        else:
            def one(p, x1, y1):
                return crit(out(p, x1[None]), y1[None])

            per_sample = vmap(vmap(grad(one), in_dims=(None, 0, 0)), in_dims=(0, None, None))
            per_extra = vmap(grad(one))

            def clipped_sum(p):
                gm = per_sample(p, xm, ym)  # (K, n-1, ...)
                ge = per_extra(p, xk, yk)  # (K, ...)
                norm_m = torch.sqrt(sum((gm[m].flatten(2) ** 2).sum(2) for m in names))
                norm_e = torch.sqrt(sum((ge[m].flatten(1) ** 2).sum(1) for m in names))
                fm = (c / (norm_m + 1e-6)).clamp(max=1.0)
                fe = (c / (norm_e + 1e-6)).clamp(max=1.0)
                return {m: (gm[m] * fm.reshape(k, -1, *[1] * (gm[m].dim() - 2))).sum(1)
                        + ge[m] * fe.reshape(k, *[1] * (ge[m].dim() - 1)) for m in names}

        for _ in range(steps):
            sums = clipped_sum(params)
            with torch.no_grad():
                for m in names:
                    s = sums[m]
                    noise = torch.randn(s.shape, generator=gen, dtype=torch.float64).to(dev, dt)
                    g = (s + sigma * c * noise) / n + wd * params[m]
                    bufs[m] = mom * bufs[m] + g if mom else g
                    params[m] = params[m] - lr * bufs[m]
    state_names = list(model.state_dict())
    flat = torch.cat([params[m].reshape(k, -1) for m in state_names], dim=1)
    recipe.n_trained += k
    recipe.train_seconds += time.perf_counter() - t0
    return flat


def outputs_many(recipe: Any, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(K, N, out) raw outputs of K flat-parameter models on the inputs x."""
    model = recipe.build()
    shapes = {n: p.shape for n, p in model.state_dict().items()}
    sizes = [p.numel() for p in model.state_dict().values()]

    def f(v):
        ps = dict(zip(shapes, (t.reshape(s) for t, s in zip(torch.split(v, sizes), shapes.values(),
                                                             strict=True)), strict=True))
        return functional_call(model, ps, (x,))

    with torch.no_grad():
        return torch.cat([vmap(f)(flat[i : i + 256]) for i in range(0, len(flat), 256)])
