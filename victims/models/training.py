"""Training a victim: minibatch SGD/Adam, full-batch GD for a fixed number of steps, L-BFGS to
the ERM optimum (GLMs), or DP-SGD through Opacus. Shows a progress bar (hidden in CI).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from defenses.dp_sgd import DPRecord, PrivateTraining
from victims.models import optim


def progress_disabled() -> bool:
    """Progress bars hide in CI and when stderr is not a terminal."""
    return bool(os.environ.get("CI")) or not sys.stderr.isatty()


@dataclass
class TrainRecord:
    """What training did: steps, final loss, optimality gap (L-BFGS), DP accounting."""

    steps: int = 0
    final_loss: float = float("nan")
    grad_norm: float | None = None
    dp: DPRecord | None = None
    notes: list[str] = field(default_factory=list)


def loss_fn(task: str) -> nn.Module:
    if task == "multiclass":
        return nn.CrossEntropyLoss()
    if task == "binary":
        return _BinaryLoss()
    return _RegressionLoss()


class _BinaryLoss(nn.Module):
    def forward(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.binary_cross_entropy_with_logits(out.reshape(-1), y.to(out.dtype))


class _RegressionLoss(nn.Module):
    def forward(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return 0.5 * ((out.reshape(-1) - y.to(out.dtype)) ** 2).mean()


def l2_penalty(model: nn.Module, wd: float) -> torch.Tensor | float:
    """½·wd·Σ‖W‖² over weight matrices (biases unpenalised)."""
    if wd == 0:
        return 0.0
    return 0.5 * wd * sum((p**2).sum() for n, p in model.named_parameters() if p.dim() > 1)


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, task: str, spec: Any,
          dp_spec: Any | None, seed: int, bar: str | None = "training victim",
          dp_tap: Any = None) -> TrainRecord:
    """Train `model` in place on (x, y); returns the record. `bar`: the progress bar's label, or
    None for none (the attacker's reference and shadow models: their attack says it trains them).
    `dp_tap`: a DP audit's hook on the private optimizer (defenses/dp_sgd.py), DP-SGD only."""
    crit = loss_fn(task)
    hide = bar is None or progress_disabled()
    if dp_spec is not None:
        return _train_dp(model, x, y, crit, spec, dp_spec, seed, bar, hide, dp_tap)
    if spec.optimizer == "lbfgs":
        return _train_lbfgs(model, x, y, crit, spec)
    opt = _optimizer(model, spec, optim)
    full_batch = spec.batch_size is None or spec.steps is not None
    rec = TrainRecord()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    model.train()
    if full_batch:
        steps = spec.steps if spec.steps is not None else spec.epochs
        for _ in tqdm(range(steps), desc=f"{bar} (full batch)", disable=hide, leave=False):
            opt.zero_grad()
            loss = crit(model(x), y) + l2_penalty(model, spec.weight_decay)
            loss.backward()
            opt.step()
            rec.final_loss = float(loss.detach())
        rec.steps = steps
    else:
        n, bs = len(x), spec.batch_size
        for _ in tqdm(range(spec.epochs), desc=bar, disable=hide, leave=False):
            perm = torch.randperm(n, generator=gen).to(x.device)
            for i in range(0, n, bs):
                idx = perm[i : i + bs]
                opt.zero_grad()
                loss = crit(model(x[idx]), y[idx]) + l2_penalty(model, spec.weight_decay)
                loss.backward()
                opt.step()
                rec.steps += 1
            rec.final_loss = float(loss.detach())
    model.eval()
    return rec


def _optimizer(model: nn.Module, spec: Any, kind: Any, weight_decay: float = 0.0):
    """The recipe's Adam or SGD from `kind`: victims/models/optim.py (no torch._dynamo import; the
    same updates), or torch.optim where Opacus wraps the optimizer (DP-SGD)."""
    if spec.optimizer == "adam":
        return kind.Adam(model.parameters(), lr=spec.lr, weight_decay=weight_decay)
    return kind.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum,
                    weight_decay=weight_decay)


NEWTON_MAX_PARAMS = 2000  # small models (GLMs): finish L-BFGS with exact Newton steps


def _newton_polish(model: nn.Module, x, y, crit, wd: float, steps: int = 20) -> None:
    """Newton steps with the full Hessian until the gradient stops shrinking (in place): brings a
    GLM from L-BFGS's ~1e-9 to the float64 floor of the ERM optimum (the Thm. 1 attacks need it)."""
    from torch.func import functional_call, grad, hessian

    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    is_w = torch.cat([torch.full((k,), float(len(s) > 1)) for k, s in zip(sizes, shapes, strict=True)])
    is_w = is_w.to(x.device, x.dtype)

    def f(flat):
        parts = torch.split(flat, sizes)
        params = {n: t.reshape(s) for n, t, s in zip(names, parts, shapes, strict=True)}
        return crit(functional_call(model, params, (x,)), y) + 0.5 * wd * (is_w * flat**2).sum()

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    g = grad(f)(flat)
    for _ in range(steps):
        h = hessian(f)(flat)
        mu = 1e-12 * float(h.diagonal().abs().mean())
        eye = torch.eye(len(flat), dtype=flat.dtype, device=flat.device)
        new = flat - torch.linalg.solve(h + mu * eye, g)
        g_new = grad(f)(new)
        if not bool(torch.isfinite(g_new).all()) or g_new.norm() >= g.norm():
            break
        flat, g = new, g_new
    with torch.no_grad():
        for p, t in zip(model.parameters(), torch.split(flat, sizes), strict=True):
            p.copy_(t.reshape(p.shape))


def _train_lbfgs(model, x, y, crit, spec) -> TrainRecord:
    """Full-batch L-BFGS to a tight gradient tolerance (the ERM optimum a GLM attack assumes)."""
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=max(1, spec.steps or 5000),
                            tolerance_grad=spec.tol, tolerance_change=0.0, history_size=50,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = crit(model(x), y) + l2_penalty(model, spec.weight_decay)
        loss.backward()
        return loss

    model.train()
    loss = opt.step(closure)
    if sum(p.numel() for p in model.parameters()) <= NEWTON_MAX_PARAMS:
        _newton_polish(model, x, y, crit, spec.weight_decay)
    loss = closure().detach()
    gnorm = float(torch.sqrt(sum((p.grad**2).sum() for p in model.parameters())))
    model.eval()
    state = opt.state[opt._params[0]]
    return TrainRecord(steps=int(state.get("n_iter", 0)), final_loss=float(loss), grad_norm=gnorm,
                       notes=[f"L-BFGS stopped with gradient norm {gnorm:.3e}"])


def _train_dp(model, x, y, crit, spec, dp_spec, seed, bar, hide, tap=None) -> TrainRecord:
    """DP-SGD via Opacus with Poisson sampling; expected batch = batch_size (or all of x)."""
    from torch.utils.data import DataLoader, TensorDataset

    bs = spec.batch_size or len(x)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    loader = DataLoader(TensorDataset(x, y), batch_size=bs, shuffle=True, generator=gen)
    epochs = spec.epochs if spec.steps is None else max(1, round(spec.steps * bs / len(x)))
    priv = PrivateTraining(dp_spec, epochs)
    opt = _optimizer(model, spec, torch.optim, weight_decay=spec.weight_decay)
    pmodel, popt, ploader = priv.wrap(model, opt, loader, crit, tap=tap)
    pmodel.train()
    rec = TrainRecord()
    for _ in tqdm(range(epochs), desc=f"{bar} (DP-SGD)", disable=hide, leave=False):
        for xb, yb in ploader:
            if len(xb) == 0:
                continue
            popt.zero_grad()
            loss = crit(pmodel(xb), yb)
            loss.backward()
            popt.step()
            rec.steps += 1
            rec.final_loss = float(loss.detach())
    pmodel.eval()
    rec.dp = priv.record(popt)
    rec.notes.append("under DP-SGD, weight_decay is the optimizer's (applies to biases too)")
    if hasattr(pmodel, "_close"):
        pmodel._close()
    model.eval()
    return rec
