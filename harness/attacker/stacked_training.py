"""Reference models in batches: K copies of a recipe's model trained at once with stacked parameters
(torch.func: functional_call + vmap), model k on its own training set, a row of an index matrix into
shared arrays. This is what makes 64 shadow models cost about as much as a few.

Minibatch recipes are reproduced as the victim is trained (victims/models/training.py):
- SGD: a fresh permutation of the model's n points per epoch from a generator seeded like the
  victim's, batches of `batch_size` (the last one smaller), mean loss + ½·wd·‖W‖² on weight
  matrices, momentum as torch.optim.SGD. Model k equals `recipe.train(x[idx[k]], y[idx[k]],
  seed=seed + k)` (tested).
- DP-SGD as Opacus does it (Abadi et al. 2016; Opacus `make_private` with Poisson sampling):
  ceil(n/B) steps per epoch, each example in a step's batch independently with probability
  q = 1/ceil(n/B); per-example gradients clipped to C (factor min(1, C/(‖g‖ + 1e-6))); Gaussian
  noise σ·C on their sum, divided by the expected batch size int(n·q); the optimizer's weight decay
  on every parameter and momentum; a step whose Poisson batch is empty is skipped (as the victim's
  training loop does). Batches are drawn as Opacus draws them, so with negligible noise model k
  equals `recipe.train(..., seed=seed + k)` (tested); the noise comes from the attacker's
  generators, one per model. σ is the recipe's noise multiplier, or the one Opacus derives from
  its target ε for this q and number of epochs.
Per-example norms use ghost norms for Sequential MLPs (harness/attacker/shadows.py) and vmap(vmap(grad))
otherwise. Non-private SGD's gradients are written out for ReLU MLPs, one batched autograd pass for
other MLPs, vmap(grad) for the rest. Full-batch recipes (batch_size null or `steps`) take one step
per epoch/step on all n.

Device (victims/devices.py): the K models train where the run's policy sends their work (under
`device: auto`, CUDA once K × n × epochs × 3 forward passes reach its threshold, even when the
victim answers on the CPU) and come back on the recipe's device. Every random draw (batch order,
Poisson masks, DP noise) comes from CPU generators, so model k is the same draw on either device.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch.func import functional_call, grad, vmap

from defenses.dp_sgd import noise_for_epsilon
from harness.attacker.ghost_norms import ghost_clipped_sum, ghost_layers
from victims import devices
from victims.models.training import loss_fn

STACKABLE_ARCHS = ("mlp", "logistic", "linear", "cnn")
CUDA_CHUNK = 256  # models trained at once on a GPU (64 on the CPU, train_stacked's `chunk`)


def stackable(recipe: Any) -> bool:
    """True when `train_stacked` reproduces this recipe (SGD, a model leakmeter builds)."""
    return recipe.training.optimizer == "sgd" and recipe.spec.arch in STACKABLE_ARCHS


def dp_schedule(n: int, training: Any) -> tuple[float, int, int, int]:
    """(sample rate q, steps per epoch, epochs, expected batch size) of Opacus' Poisson loader
    for a training set of n points under this training spec."""
    bs = min(training.batch_size or n, n)
    per_epoch = math.ceil(n / bs)
    q = 1.0 / per_epoch
    epochs = training.epochs if training.steps is None else max(1, round(training.steps * bs / n))
    return q, per_epoch, epochs, int(n * q)


def dp_noise_multiplier(dp: Any, q: float, epochs: int) -> float:
    """σ of a DP-SGD run: the given one, or Opacus' for the target ε at this q and epochs."""
    if dp.noise_multiplier is not None:
        return float(dp.noise_multiplier)
    return noise_for_epsilon(float(dp.epsilon), float(dp.delta), float(q), int(epochs),
                             dp.accountant)


def train_stacked(recipe: Any, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, seed: int = 0,
                  init_seeds: list[int] | None = None, chunk: int = 64, run_chunks: Any = None,
                  sizes: list[int] | None = None, part: str = "reference_models") -> torch.Tensor:
    """(K, P) flat parameters (state_dict order) of K models, model k trained by the recipe on
    (x[idx[k]], y[idx[k]]). idx: (K, n) row indices, every model the same n. `init_seeds`: one
    initialisation seed per model (None = the recipe's known initialisation for all); `seed + k`
    drives model k's batch order, Poisson sampling and DP noise. A model is the same whichever
    chunk trains it: DP-SGD pads every step's batches to the largest Poisson batch of all K models
    (`sizes`, computed here when not given), so no chunk sees shapes another does not.
    `run_chunks(recipe, x, y, idx, seed, init_seeds, sizes)`: trains the models elsewhere (Ray
    tasks, harness/attacker/reference_executors.py) by calling this function on parts. `part`:
    what the models are, for the device policy's record (reference_models, shadows)."""
    if not stackable(recipe):
        raise ValueError(f"train_stacked: recipe {recipe.training.optimizer}/{recipe.spec.arch} "
                         "is not stackable")
    if sizes is None and recipe.dp is not None:
        sizes = dp_batch_sizes(idx.shape[1], recipe.training, seed, len(idx))
    if run_chunks is not None:
        return run_chunks(recipe, x, y, idx, seed, init_seeds, sizes)
    dev, dt = training_device(recipe, idx, part), recipe.dtype
    x = x.to(dev, dt)
    y = y.to(dev)
    if recipe.task == "regression":
        y = y.to(dt)
    idx = idx.to(dev)
    if dev.type == "cuda":  # one chunk fills a GPU better (chunks change no number)
        chunk = max(chunk, CUDA_CHUNK)
    parts = []
    for i in range(0, len(idx), chunk):
        seeds = None if init_seeds is None else init_seeds[i : i + chunk]
        parts.append(_train_chunk(recipe, x, y, idx[i : i + chunk], seed + i, seeds, sizes, dev))
    return torch.cat(parts).to(recipe.device)


def stacked_flop(recipe: Any, k: int, n: int) -> float:
    """Estimated flop of training k models of the recipe on n points each (3 forward passes'
    worth per example and epoch; DP-SGD's per-example norms about one more)."""
    t = recipe.training
    with torch.random.fork_rng(devices=[]):  # build() seeds torch's generator: leave it as it was
        model = recipe.build()
    p = next(model.parameters())
    one = devices.forward_flop(model, torch.zeros(1, *recipe_input_shape(recipe), dtype=p.dtype))
    passes = (t.steps * n if t.steps is not None else t.epochs * n) * (4 if recipe.dp is not None else 3)
    return one * k * passes


def recipe_input_shape(recipe: Any) -> tuple[int, ...]:
    """The flat input the recipe's models take (their `dim`)."""
    shape = tuple(getattr(recipe, "input_shape", ()) or ())
    return (math.prod(shape),) if shape else (1,)


def training_device(recipe: Any, idx: torch.Tensor, part: str = "reference_models") -> torch.device:
    """Where K stacked models train: the run's policy for their work under `device: auto`;
    the recipe's device under an explicit `device:`."""
    policy = devices.current()
    if policy.requested != "auto":
        policy.record(part, recipe.device, f"device: {policy.requested}")
        return torch.device(recipe.device)
    k, n = idx.shape
    t = recipe.training
    steps = t.steps if t.steps is not None else t.epochs * (
        1 if t.batch_size is None else math.ceil(n / min(t.batch_size, n)))
    flop = stacked_flop(recipe, k, n)
    return policy.place(part, flop, f"{k} models of {n} points, stacked", flop / max(1, steps))


def _poisson_masks(n: int, training: Any, seed: int, k: int, device: Any = "cpu"):
    """Per step, the (k, n) Poisson masks of models seed + 0..k-1, drawn as Opacus' sampler draws
    them (float32 uniforms from a CPU generator seeded like the victim's loader; a DataLoader
    iterator draws its base seed every epoch)."""
    q, per_epoch, epochs, _ = dp_schedule(n, training)
    samplers = [torch.Generator(device="cpu").manual_seed(seed + j) for j in range(k)]
    for step_no in range(epochs * per_epoch):
        if step_no % per_epoch == 0:
            for g in samplers:
                torch.empty((), dtype=torch.int64).random_(generator=g)
        if q >= 1.0:
            yield torch.ones(k, n, dtype=torch.bool, device=device)
        else:
            yield torch.stack([torch.rand(n, generator=g) < q for g in samplers]).to(device)


def dp_batch_sizes(n: int, training: Any, seed: int, k: int) -> list[int]:
    """The largest Poisson batch of models seed + 0..k-1 at every DP-SGD step."""
    return [int(m.sum(1).max()) for m in _poisson_masks(n, training, seed, k)]


def _stack_init(recipe: Any, k: int, init_seeds: list[int] | None):
    if init_seeds is None:
        model = recipe.build()
        base = {n: p.detach() for n, p in model.named_parameters()}
        return model, {n: p[None].expand(k, *p.shape).clone() for n, p in base.items()}
    models = [recipe.build(s) for s in init_seeds]
    params = {n: torch.stack([dict(m.named_parameters())[n].detach() for m in models])
              for n, _ in models[0].named_parameters()}
    return models[0], params


def _train_chunk(recipe, x, y, idx, seed, init_seeds, sizes=None, dev=None) -> torch.Tensor:
    t0 = time.perf_counter()
    t = recipe.training
    k, n = idx.shape
    model, params = _stack_init(recipe, k, init_seeds)
    if dev is not None:
        model = model.to(dev)
        params = {m: p.to(dev) for m, p in params.items()}
    names = list(params)
    crit = loss_fn(recipe.task)

    def out(p, xb):
        return functional_call(model, p, (xb,))

    if recipe.dp is None:
        params = _sgd(model, params, names, out, crit, x, y, idx, seed, t, recipe.task)
    else:
        params = _dp_sgd(model, params, names, out, crit, x, y, idx, seed, recipe, sizes)
    flat = torch.cat([params[m].reshape(k, -1) for m in model.state_dict()], dim=1)
    recipe.n_trained += k
    recipe.train_seconds += time.perf_counter() - t0
    return flat.detach()


def _sgd(model, params, names, out, crit, x, y, idx, seed, t, task):
    """Non-private SGD, minibatch or full batch, every model its own batch order."""
    k, n = idx.shape
    is_w = {m: float(params[m].dim() > 2) for m in names}  # stacked: a weight matrix has 3 dims
    wd, lr, mom = t.weight_decay, t.lr, t.momentum
    bufs = {m: torch.zeros_like(p) for m, p in params.items()}

    def loss(p, xb, yb):
        pen = sum(is_w[m] * (p[m] ** 2).sum() for m in names) if wd else 0.0
        return crit(out(p, xb), yb) + 0.5 * wd * pen

    layers = ghost_layers(model)
    step_grad = (vmap(grad(loss)) if layers is None else
                 _relu_grads(layers, names, task, wd, is_w) or _mlp_grads(layers, names, crit, wd, is_w))

    def step(rows):
        g = step_grad(params, x[rows], y[rows])
        with torch.no_grad():
            for m in names:
                bufs[m] = mom * bufs[m] + g[m] if mom else g[m]
                params[m] = params[m] - lr * bufs[m]

    full = t.batch_size is None or t.steps is not None
    if full:
        for _ in range(t.steps if t.steps is not None else t.epochs):
            step(idx)
        return params
    gens = [torch.Generator(device="cpu").manual_seed(seed + j) for j in range(k)]
    bs = t.batch_size
    for _ in range(t.epochs):
        perm = torch.stack([torch.randperm(n, generator=g) for g in gens]).to(idx.device)
        for i in range(0, n, bs):
            step(idx.gather(1, perm[:, i : i + bs]))
    return params


def _mlp_grads(layers, names, crit, wd, is_w):
    """What vmap(grad(loss)) computes for K stacked MLPs (Linear layers and elementwise
    activations), from one batched forward (bmm) and one backward of the sum of the K models'
    losses (each model's gradient is its own loss's: the models share nothing). Several times
    faster than vmap on small layers, where its per-call overhead dominates."""
    def grads(params, xb, yb):
        p = {m: params[m].detach().requires_grad_(True) for m in names}
        with torch.enable_grad():
            a = xb
            for item in layers:
                if isinstance(item, str):
                    b = p.get(f"{item}.bias")
                    a = torch.bmm(a, p[f"{item}.weight"].transpose(1, 2))
                    a = a + b[:, None, :] if b is not None else a
                else:
                    a = item(a)
            k, n = yb.shape[:2]
            total = crit(a.reshape(k * n, -1), yb.reshape(k * n)) * k  # Σ_k of model k's mean loss
            if wd:
                total = total + 0.5 * wd * sum(is_w[m] * (p[m] ** 2).sum() for m in names)
            g = torch.autograd.grad(total, [p[m] for m in names])
        return dict(zip(names, g, strict=True))

    return grads


def _relu_grads(layers, names, task, wd, is_w):
    """`_mlp_grads` for ReLU MLPs, written out: the loss's gradient with respect to the logits
    (softmax − one-hot for cross-entropy, σ(z) − y for the binary logit, z − y for the halved
    squared error; each over the model's batch size) taken back through the layers by hand.
    The same gradients to rounding (~1e-16 relative) without autograd's graph: ~40% less CPU for
    the gradients of a quickstart shadow's step. None for any other layout or activation (then
    `_mlp_grads`)."""
    kinds = ["linear" if isinstance(item, str) else "relu" if type(item) is torch.nn.ReLU else "other"
             for item in layers]
    if kinds != ["linear", *(["relu", "linear"] * (len(kinds) // 2))]:  # Linear (ReLU Linear)*
        return None
    linear = [item for item in layers if isinstance(item, str)]

    def grads(params, xb, yb):
        inputs, masks, z = [], [], xb  # each Linear's input; each ReLU's z > 0
        for item in layers:
            if isinstance(item, str):
                w, b = params[f"{item}.weight"], params.get(f"{item}.bias")
                inputs.append(z)
                z = (torch.baddbmm(b[:, None, :], z, w.transpose(1, 2)) if b is not None
                     else torch.bmm(z, w.transpose(1, 2)))
            else:
                masks.append(z > 0)
                z = z.clamp_min(0)
        n = yb.shape[1]
        if task == "multiclass":
            dz = torch.softmax(z, -1)
            dz.scatter_add_(2, yb[..., None], torch.full_like(dz[..., :1], -1.0))
        elif task == "binary":
            dz = torch.sigmoid(z) - yb[..., None].to(z.dtype)
        else:
            dz = z - yb[..., None].to(z.dtype)
        dz = dz / n
        out = {}
        for j in range(len(linear) - 1, -1, -1):
            item = linear[j]
            out[f"{item}.weight"] = torch.bmm(dz.transpose(1, 2), inputs[j])
            if f"{item}.bias" in params:
                out[f"{item}.bias"] = dz.sum(1)
            if j:  # back through the ReLU before this layer
                dz = torch.bmm(dz, params[f"{item}.weight"]) * masks[j - 1]
        if wd:
            for m in names:
                if is_w[m]:
                    out[m] = out[m] + wd * params[m]
        return {m: out[m] for m in names}

    return grads


def _dp_sgd(model, params, names, out, crit, x, y, idx, seed, recipe, sizes=None):
    """DP-SGD with Poisson sampling, per-example clipping and Gaussian noise (Opacus' semantics);
    `sizes`: the batch length every step is padded to (None: the largest batch of this chunk)."""
    k, n = idx.shape
    t, dp = recipe.training, recipe.dp
    q, per_epoch, epochs, expected = dp_schedule(n, t)
    sigma = dp_noise_multiplier(dp, q, epochs)
    c = dp.max_grad_norm
    wd, lr, mom = t.weight_decay, t.lr, t.momentum
    dev, dt = x.device, x.dtype
    # one noise generator per model: model k's noise does not depend on which chunk trains it,
    # nor on the device (CPU generators; the draws are moved)
    noise_gens = [torch.Generator(device="cpu").manual_seed(seed + j + 15485863) for j in range(k)]
    bufs = {m: torch.zeros_like(p) for m, p in params.items()}
    layers = ghost_layers(model)
    if layers is not None:
        def clipped_sum(p, xb, yb, w):
            return ghost_clipped_sum(layers, p, xb, yb, crit, c, weight=w)
    else:
        def one(p, x1, y1):
            return crit(out(p, x1[None]), y1[None])

        per_example = vmap(vmap(grad(one), in_dims=(None, 0, 0)))

        def clipped_sum(p, xb, yb, w):
            g = per_example(p, xb, yb)  # (K, m, ...)
            norm = torch.sqrt(sum((g[m].flatten(2) ** 2).sum(2) for m in names))
            f = (c / (norm + 1e-6)).clamp(max=1.0) * w
            return {m: torch.einsum("km,km...->k...", f, g[m]).detach() for m in names}

    ar = torch.arange(n, device=dev)
    for step_no, mask in enumerate(_poisson_masks(n, t, seed, k, dev)):
        counts = mask.sum(1)
        size = int(counts.max()) if sizes is None else sizes[step_no]
        if size == 0:
            continue
        # each model's sampled points first (stable order), padded to the step's batch length
        order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)[:, :size]
        valid = (ar[None, :size] < counts[:, None]).to(dt)
        rows = idx.gather(1, order)
        sums = clipped_sum(params, x[rows], y[rows], valid)
        active = (counts > 0).to(dt)
        with torch.no_grad():
            for m in names:
                p = params[m]
                shape = (k,) + (1,) * (p.dim() - 1)
                noise = torch.stack([torch.randn(p.shape[1:], generator=g, dtype=dt)
                                     for g in noise_gens]).to(dev)
                g = (sums[m] + sigma * c * noise) / expected + wd * p
                new_buf = mom * bufs[m] + g if mom else g
                a = active.reshape(shape)
                bufs[m] = a * new_buf + (1 - a) * bufs[m]
                params[m] = p - lr * a * new_buf
    return params
