"""Model builders: MLPs (per-layer width, activation, bias, init scale), small CNNs, logistic
and linear models.

Every model maps a flat input batch (N, d) to raw outputs (N, K): class logits for multiclass,
one logit for binary, one value for regression.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from victims.errors import BadInput

ACTIVATIONS = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "softplus": nn.Softplus,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
}
NORMS = {"batch": nn.BatchNorm1d, "layer": nn.LayerNorm}


def _per_layer(value: Any, n: int, key: str) -> list[Any]:
    if isinstance(value, list):
        if len(value) != n:
            raise BadInput(f"victim.model.{key}: expected {n} entries (one per layer), got {len(value)}")
        return list(value)
    return [value] * n


class MLP(nn.Sequential):
    """Fully connected network; `first` is the first Linear layer (the span attacks' A)."""

    __jit_unused_properties__ = ["first"]

    @property
    def first(self) -> nn.Linear:
        return next(m for m in self.modules() if isinstance(m, nn.Linear))


def build_mlp(d: int, k: int, hidden: list[int], activation: Any, bias: Any,
              init_std: Any = None, norm: str = "none") -> MLP:
    """Return an MLP d → hidden… → k; each hidden layer is Linear → norm (batch | layer | none)
    → activation (dropout holds no weights and is inert at inference: not built)."""
    widths = [d, *hidden, k]
    n_layers = len(widths) - 1
    acts = _per_layer(activation, len(hidden), "activation") if hidden else []
    biases = _per_layer(bias, n_layers, "bias")
    stds = _per_layer(init_std, n_layers, "init_std")
    layers: list[nn.Module] = []
    for i in range(n_layers):
        lin = nn.Linear(widths[i], widths[i + 1], bias=bool(biases[i]))
        if stds[i] is not None:
            nn.init.normal_(lin.weight, std=float(stds[i]))
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        layers.append(lin)
        if i < len(hidden):
            if norm in NORMS:
                layers.append(NORMS[norm](widths[i + 1]))
            layers.append(ACTIVATIONS[acts[i]]())
    return MLP(*layers)


class SmallCNN(nn.Module):
    """Two conv blocks and a linear head, for 8×8 or 28×28 single-channel images."""

    def __init__(self, shape: tuple[int, ...], k: int, channels: list[int], hidden: list[int],
                 activation: str):
        super().__init__()
        c, h, w = shape if len(shape) == 3 else (1, *shape)
        self.shape = (c, h, w)
        act = ACTIVATIONS[activation if isinstance(activation, str) else activation[0]]
        convs: list[nn.Module] = []
        for ch in channels:
            convs += [nn.Conv2d(c, ch, 3, padding=1), act()]
            if h >= 8:
                convs.append(nn.AvgPool2d(2))
                h, w = h // 2, w // 2
            c = ch
        self.features = nn.Sequential(*convs)
        self.head = build_mlp(c * h * w, k, hidden, activation, True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.features(x.reshape(-1, *self.shape))
        return self.head(z.flatten(1))


def build_model(spec: Any, input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """Build the architecture a `ModelSpec` names (untrained)."""
    d = 1
    for s in input_shape:
        d *= s
    if spec.arch == "mlp":
        return build_mlp(d, n_outputs, spec.hidden, spec.activation, spec.bias, spec.init_std,
                         getattr(spec, "norm", "none"))
    if spec.arch in ("logistic", "linear"):
        return build_mlp(d, n_outputs, [], "relu", spec.bias, spec.init_std)
    if spec.arch == "cnn":
        if len(input_shape) < 2:
            raise BadInput(f"victim.model.arch: cnn needs image inputs, data has shape {input_shape}")
        return SmallCNN(input_shape, n_outputs, spec.channels, spec.hidden, spec.activation)
    raise BadInput(f"victim.model.arch: {spec.arch!r} is not an architecture leakmeter builds "
                   "(a model file is loaded by victims/models/files.py)")


def first_layer_weight(model: nn.Module) -> torch.Tensor | None:
    """The first Linear/Conv weight as a (k, d) matrix acting on flat inputs, if defined."""
    if isinstance(model, MLP):
        return model.first.weight.detach()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            return m.weight.detach()
    return None


def count_parameters(model: nn.Module) -> int | None:
    """The model's weights and biases (an ONNX graph: its initializers; None when unknown)."""
    if hasattr(model, "n_parameters"):
        return model.n_parameters
    return int(sum(p.numel() for p in model.parameters()))
