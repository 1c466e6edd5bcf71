"""Small first-order optimizers: SGD with momentum, Adam (Kingma & Ba, ICLR 2015, Alg. 1) and
RMSprop (Tieleman & Hinton 2012), as plain tensor updates under no_grad.

Why not torch.optim: every torch.optim optimizer's constructor imports torch._dynamo (its
`_disable_dynamo` wrappers), about 1.2 s of CPU per process, more than a quickstart spends in
most attacks. The updates are the textbook ones, with torch.optim's conventions (L2 weight decay
added to the gradient; the first momentum buffer is the gradient itself; Adam's bias corrections;
RMSprop's ε outside the root), each written in the same order of tensor operations as torch's
single-tensor CPU path, so a model trains to the same float64 numbers either way (tested).
`param_groups` carries `lr` and `weight_decay` as torch's does, so schedules may change them.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class Optimizer:
    """Parameters with a gradient each step; `zero_grad` drops the gradients (set to None)."""

    def __init__(self, params: Iterable[torch.Tensor], **group):
        self.params = [p for p in params if p.requires_grad]
        self.param_groups = [dict(group, params=self.params)]
        self.state: list[dict] = [{} for _ in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def _grads(self):
        g = self.param_groups[0]
        for p, st in zip(self.params, self.state, strict=True):
            if p.grad is None:
                continue
            d = p.grad if g["weight_decay"] == 0 else p.grad.add(p, alpha=g["weight_decay"])
            yield p, d, st


class SGD(Optimizer):
    """p ← p − lr·b, b ← μ·b + d (b₀ = d; d = ∇ + wd·p); plain SGD when μ = 0."""

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(params, lr=lr, momentum=momentum, weight_decay=weight_decay)

    @torch.no_grad()
    def step(self) -> None:
        g = self.param_groups[0]
        for p, d, st in self._grads():
            if g["momentum"] != 0:
                if "b" not in st:
                    st["b"] = d.detach().clone()
                else:
                    st["b"].mul_(g["momentum"]).add_(d)
                d = st["b"]
            p.add_(d, alpha=-g["lr"])


class Adam(Optimizer):
    """Adam: m ← β₁m + (1−β₁)d, v ← β₂v + (1−β₂)d², p ← p − lr/(1−β₁ᵗ) · m / (√v/√(1−β₂ᵗ) + ε)."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)

    @torch.no_grad()
    def step(self) -> None:
        g = self.param_groups[0]
        b1, b2 = g["betas"]
        for p, d, st in self._grads():
            if "t" not in st:
                st.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
            st["t"] += 1
            t = float(st["t"])
            st["m"].lerp_(d, 1 - b1)
            st["v"].mul_(b2).addcmul_(d, d, value=1 - b2)
            denom = (st["v"].sqrt() / (1 - b2**t) ** 0.5).add_(g["eps"])
            p.addcdiv_(st["m"], denom, value=-(g["lr"] / (1 - b1**t)))


class RMSprop(Optimizer):
    """RMSprop: s ← αs + (1−α)d², p ← p − lr · d / (√s + ε)."""

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0):
        super().__init__(params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay)

    @torch.no_grad()
    def step(self) -> None:
        g = self.param_groups[0]
        for p, d, st in self._grads():
            s = st.setdefault("s", torch.zeros_like(p))
            s.mul_(g["alpha"]).addcmul_(d, d, value=1 - g["alpha"])
            p.addcdiv_(d, s.sqrt().add_(g["eps"]), value=-g["lr"])
