"""Black-box audit with a worst-case initialisation (Annamalai & De Cristofaro, NeurIPS 2024,
Sec. 4): many DP-SGD runs of the recipe from one crafted starting point, the final model only.

The starting point is the recipe's model trained to fit the base data without DP (their
"pre-trained on the rest of the data" initialisation): there the base examples' gradients are
small, while the target — a held-out point with a wrong label, the one of a few candidates the
crafted model fits worst (chosen without any coin) — keeps a large, consistent gradient, so its
presence moves the final model as far as the clipped steps allow. Each run includes the target
by a secret fair coin; its score is the final model's logit margin for the target's (wrong)
label, φ = z_y − log Σ_{j≠y} e^{z_j} (the final model only: their "final model" threat model, no
intermediate step; on the digits MLP at ε = 8 it separates the runs by 1.2–1.3 standard
deviations where the displacement along the target's starting gradient, the earlier score, gave
0.9–1.0). Runs are independent trials, so the Clopper–Pearson analysis is exact.
They train stacked on one device (torch.func / ghost norms, as harness/attacker/
stacked_training.py): Poisson sampling at the recipe's rate, per-example clipping, σ·C noise.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch.func import functional_call, vmap

from harness.attacker.ghost_norms import ghost_clipped_sum, ghost_layers
from harness.attacker.stacked_training import dp_noise_multiplier, dp_schedule, stackable
from victims.models.training import loss_fn, train


def _runs_dp(model, theta0, x, y, present, recipe, seed: int) -> dict:
    """DP-SGD for K stacked models from theta0 on rows x (N), model k seeing the rows present[k]."""
    k, n_rows = present.shape
    t, dp = recipe.training, recipe.dp
    n = int(present[0, :-1].sum())  # the base data: what the recipe's sampler and accountant see
    q, per_epoch, epochs, expected = dp_schedule(n, t)
    sigma = dp_noise_multiplier(dp, q, epochs)
    c, lr, mom, wd = dp.max_grad_norm, t.lr, t.momentum, t.weight_decay
    crit = loss_fn(recipe.task)
    layers = ghost_layers(model)
    params = {m: p[None].expand(k, *p.shape).clone() for m, p in theta0.items()}
    bufs = {m: torch.zeros_like(p) for m, p in params.items()}
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dev, dt = x.device, x.dtype
    steps = epochs * per_epoch
    for _ in range(steps):
        mask = (torch.rand(k, n_rows, generator=gen) < q).to(dev) & present
        counts = mask.sum(1)
        size = int(counts.max())
        if size == 0:
            continue
        order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)[:, :size]
        valid = (torch.arange(size, device=dev)[None] < counts[:, None]).to(dt)
        if layers is not None:
            sums = ghost_clipped_sum(layers, params, x[order], y[order], crit, c, weight=valid)
        else:
            raise ValueError("the black-box audit trains MLPs leakmeter builds (ghost norms)")
        with torch.no_grad():
            for m in params:
                noise = torch.randn(params[m].shape, generator=gen).to(dev, dt)
                g = (sums[m] + sigma * c * noise) / expected + wd * params[m]
                bufs[m] = mom * bufs[m] + g if mom else g
                params[m] = params[m] - lr * bufs[m]
    return {"params": params, "sigma": sigma, "q": q, "steps": steps}


def blackbox_runs(provider, runs: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """(scores of `runs` final models, notes, their coins, the runs' DPRecord) — the truth side:
    the caller keeps the last two with the truth."""
    from defenses.dp_sgd import DPRecord
    from harness.core.errors import AttackFailed
    from harness.core.progress import stage

    recipe = provider.recipe
    if recipe is None or recipe.dp is None or not stackable(recipe) or recipe.task != "multiclass":
        raise AttackFailed("the black-box audit retrains a multiclass SGD MLP recipe with DP-SGD")
    d = provider.victim.truth.data
    info = provider.victim.info
    dev, dt = info.device, info.dtype
    xb = torch.as_tensor(d.x_train, dtype=dt, device=dev)
    yb = torch.as_tensor(d.y_train, device=dev)
    stage("black-box audit: crafting the worst-case initialisation")
    model = recipe.build()
    train(model, xb, yb, info.task, recipe.training, None, seed, bar=None)  # fit the base data
    for p in model.parameters():
        p.requires_grad_(False)
    theta0 = {m: p.detach().clone() for m, p in model.named_parameters()}
    pool = np.random.default_rng([seed, 17]).permutation(len(d.x_test))[:64]  # public candidates
    cx = torch.as_tensor(d.x_test[pool], dtype=dt, device=dev)
    cy_true = torch.as_tensor(d.y_test[pool], device=dev)
    with torch.no_grad():
        logits = model(cx)
    wrong = logits.clone()
    wrong[torch.arange(len(pool)), cy_true] = -torch.inf
    cy = wrong.argmax(1)  # the most plausible wrong label
    crit = torch.nn.CrossEntropyLoss(reduction="none")
    j = int(crit(logits, cy).argmax())  # the candidate the crafted model fits worst
    x = torch.cat([xb, cx[j : j + 1]])
    y = torch.cat([yb, cy[j : j + 1]])
    secret = np.random.default_rng([provider.secret, seed, 4])
    coins = secret.random(runs) < 0.5
    present = torch.ones(runs, len(x), dtype=torch.bool, device=dev)
    present[:, -1] = torch.as_tensor(coins, device=dev)
    stage(f"black-box audit: {runs} DP-SGD runs stacked from the crafted start")
    out = {"params": {}}
    scores = []
    yt = int(y[-1])
    for i in range(0, runs, 64):  # chunks of 64 stacked models
        got = _runs_dp(model, theta0, x, y, present[i : i + 64], recipe, int(secret.integers(1 << 30)))
        with torch.no_grad():  # the final models' logits on the target
            logits = vmap(lambda p: functional_call(model, p, (x[-1:],)))(got["params"])[:, 0]
        others = torch.cat([logits[:, :yt], logits[:, yt + 1 :]], 1)
        scores.append(logits[:, yt] - torch.logsumexp(others, 1))  # φ: the target label's margin
        out = got
    from opacus.accountants import create_accountant

    acc = create_accountant(recipe.dp.accountant)
    acc.history = [(out["sigma"], out["q"], out["steps"])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eps = float(acc.get_epsilon(delta=recipe.dp.delta))
    rec = DPRecord(eps, recipe.dp.delta, recipe.dp.accountant, out["sigma"], out["q"], out["steps"],
                   recipe.dp.max_grad_norm)
    notes = [f"black-box audit: {runs} final models, DP-SGD (σ = {out['sigma']:.4g}, q = {out['q']:.4g}, "
             f"{out['steps']} steps) from the base data's non-private fit; target a held-out point "
             "with a wrong label; score: the final model's logit margin for the target's label "
             "(final weights only)"]
    return torch.cat(scores).double().cpu().numpy(), notes, coins, rec
