"""A local victim's API: predictions, input gradients, SmoothGrad and weights of a torch model.

This is the undefended answer; the oracle (and `leakmeter serve`) apply defenses on top.

Gradient semantics (`interface.gradient_of`): `predicted` = gradient of the logit of the class
the model predicts at x (for one-output models: of the scalar output); `class` = of the logit of
`interface.gradient_class`; `sum` = of the sum of all raw outputs. SmoothGrad averages that same
gradient over `samples` points x + N(0, sigma² I) (paper 000, App. D).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# inputs per forward/backward pass (SmoothGrad expands each input by `samples`)
CHUNK = 8192


class LocalBackend:
    """Answers queries from an in-process torch module (on its device, in its dtype)."""

    remote = False

    def __init__(self, model: nn.Module, task: str, n_classes: int, interface: Any,
                 device: torch.device, dtype: torch.dtype):
        self.model = model
        self.task = task
        self.n_classes = n_classes
        self.iface = interface
        self.device = device
        self.dtype = dtype

    # ------------------------------------------------------------------ predictions
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Raw outputs (N, K) for a flat batch, computed in chunks."""
        x = x.to(self.device, self.dtype)
        with torch.no_grad():
            outs = [self.model(x[i : i + CHUNK]) for i in range(0, len(x), CHUNK)]
        out = torch.cat(outs) if outs else torch.empty(0, 1, device=self.device)
        return out.reshape(len(x), -1)

    def predict(self, x: torch.Tensor, kind: str) -> torch.Tensor:
        """Predictions of `kind`: label (N,), probabilities (N, C) or logits (N, K)."""
        z = self.logits(x)
        return format_output(z, self.task, kind)

    # ------------------------------------------------------------------ explanations
    def _target(self, out: torch.Tensor) -> torch.Tensor:
        if out.shape[1] == 1:
            return out[:, 0]
        of = self.iface.gradient_of
        if of == "sum":
            return out.sum(dim=1)
        if of == "class":
            return out[:, self.iface.gradient_class]
        idx = out.detach().argmax(dim=1, keepdim=True)
        return out.gather(1, idx)[:, 0]

    def gradient(self, x: torch.Tensor) -> torch.Tensor:
        """Input gradients (N, d) of the documented output, one backward per chunk."""
        x = x.to(self.device, self.dtype)
        grads = []
        for i in range(0, len(x), CHUNK):
            xi = x[i : i + CHUNK].detach().requires_grad_(True)
            with torch.enable_grad():
                out = self.model(xi).reshape(len(xi), -1)
                (g,) = torch.autograd.grad(self._target(out).sum(), xi)
            grads.append(g.detach())
        return torch.cat(grads) if grads else torch.empty_like(x)

    def smoothgrad(self, x: torch.Tensor, sigma: float, samples: int,
                   gen: torch.Generator) -> torch.Tensor:
        """SmoothGrad: the mean gradient over `samples` Gaussian perturbations of each input."""
        x = x.to(self.device, self.dtype)
        n, d = x.shape
        per = max(1, CHUNK // samples)
        out = []
        for i in range(0, n, per):
            xi = x[i : i + per]
            noise = torch.randn((len(xi), samples, d), generator=gen, dtype=self.dtype,
                                device=gen.device).to(self.device)
            pts = (xi[:, None, :] + sigma * noise).reshape(-1, d)
            out.append(self.gradient(pts).reshape(len(xi), samples, d).mean(dim=1))
        return torch.cat(out) if out else torch.empty_like(x)

    def explain(self, x: torch.Tensor, kind: str, gen: torch.Generator) -> torch.Tensor:
        if kind == "smoothgrad":
            sg = self.iface.smoothgrad
            return self.smoothgrad(x, sg.sigma, sg.samples, gen)
        return self.gradient(x)

    # ------------------------------------------------------------------ white box
    def weights(self) -> dict[str, torch.Tensor]:
        """A detached copy of the state_dict."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}


def format_output(z: torch.Tensor, task: str, kind: str) -> torch.Tensor:
    """Turn raw outputs into what the API returns (probabilities of a binary model: (N, 2))."""
    if task == "regression" or kind == "logits":
        return z
    if task == "binary":
        p1 = torch.sigmoid(z[:, 0])
        if kind == "label":
            return (z[:, 0] > 0).long()
        return torch.stack([1 - p1, p1], dim=1)
    if kind == "label":
        return z.argmax(dim=1)
    return torch.softmax(z, dim=1)
