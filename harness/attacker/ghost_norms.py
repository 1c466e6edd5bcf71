"""Per-example gradient clipping without per-example gradients (ghost norms; Goodfellow 2015,
Li et al. 2022) for a Sequential of Linear layers and elementwise activations: one backward of the
summed loss gives each example's output gradient δ at every Linear layer; its weight gradient is
δ aᵀ (a = the layer's input), so ‖g‖² = Σ_layers ‖δ‖²·(‖a‖² + [bias]) and the clipped sum is
(f·δ)ᵀa."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

ELEMENTWISE = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.Softplus, nn.ELU, nn.LeakyReLU, nn.Identity)


def ghost_layers(model: nn.Module) -> list[Any] | None:
    """The model as a list of Linear-layer name prefixes (str) and elementwise activations, or
    None when it is not a Sequential of exactly those (then ghost norms do not apply)."""
    if not isinstance(model, nn.Sequential):
        return None
    out: list[Any] = []
    for name, m in model.named_children():
        if isinstance(m, nn.Linear):
            out.append(name)
        elif isinstance(m, ELEMENTWISE):
            out.append(m)
        else:
            return None
    return out


def ghost_clipped_sum(layers, params, x, y, crit, c, weight=None):
    """Σ_i clip_C(g_i) per parameter for K stacked models: x (K, N, d), y (K, N); `weight`
    (K, N) multiplies each example's clipped gradient (0 drops padding rows)."""
    a, inputs, pre = x, [], []
    for item in layers:
        if isinstance(item, str):
            w, b = params[f"{item}.weight"], params.get(f"{item}.bias")
            inputs.append(a)
            z = torch.bmm(a, w.transpose(1, 2))
            if b is not None:
                z = z + b[:, None, :]
            if not z.requires_grad:
                z.requires_grad_(True)
            pre.append(z)
            a = z
        else:
            a = item(a)
    k, n = y.shape
    total = crit(a.reshape(k * n, -1), y.reshape(k * n)) * (k * n)  # Σ of per-example losses
    deltas = torch.autograd.grad(total, pre)
    with torch.no_grad():
        norm2 = torch.zeros(k, n, dtype=x.dtype, device=x.device)
        for item, d, inp in zip([i for i in layers if isinstance(i, str)], deltas, inputs,
                                strict=True):
            extra = 1.0 if f"{item}.bias" in params else 0.0
            norm2 += (d**2).sum(-1) * ((inp**2).sum(-1) + extra)
        f = (c / (norm2.sqrt() + 1e-6)).clamp(max=1.0)
        if weight is not None:
            f = f * weight
        out = {}
        for item, d, inp in zip([i for i in layers if isinstance(i, str)], deltas, inputs,
                                strict=True):
            fd = d * f[..., None]
            out[f"{item}.weight"] = torch.bmm(fd.transpose(1, 2), inp)
            if f"{item}.bias" in params:
                out[f"{item}.bias"] = fd.sum(1)
    return out
