"""Model builders: MLPs (per-layer width, activation, bias, init scale), small CNNs, logistic
and linear models, and user model files (TorchScript, or a state_dict plus an architecture).

Every model maps a flat input batch (N, d) to raw outputs (N, K): class logits for multiclass,
one logit for binary, one value for regression.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.errors import BadInput

ACTIVATIONS = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "softplus": nn.Softplus,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
}


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
              init_std: Any = None) -> MLP:
    """Return an MLP d → hidden… → k."""
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
        return build_mlp(d, n_outputs, spec.hidden, spec.activation, spec.bias, spec.init_std)
    if spec.arch in ("logistic", "linear"):
        return build_mlp(d, n_outputs, [], "relu", spec.bias, spec.init_std)
    if spec.arch == "cnn":
        if len(input_shape) < 2:
            raise BadInput(f"victim.model.arch: cnn needs image inputs, data has shape {input_shape}")
        return SmallCNN(input_shape, n_outputs, spec.channels, spec.hidden, spec.activation)
    return load_model_file(spec, input_shape, n_outputs)


def load_model_file(spec: Any, input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """Load a user's model file: TorchScript, or a state_dict (weights_only) plus `spec.spec`."""
    path = Path(spec.path)
    if not path.is_file():
        raise BadInput(f"victim.model.path: {path} not found")
    fmt = spec.format
    if fmt in ("auto", "torchscript"):
        try:
            return torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:  # noqa: BLE001 - any load failure means "not TorchScript"
            if fmt == "torchscript":
                raise BadInput(f"victim.model.path: {path} is not a TorchScript file ({exc})") from None
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001
        raise BadInput(
            f"victim.model.path: {path} is neither TorchScript nor a weights-only state_dict "
            f"({type(exc).__name__})"
        ) from None
    if not isinstance(state, dict):
        raise BadInput(f"victim.model.path: {path} holds a {type(state).__name__}, not a state_dict")
    if spec.spec is None:
        raise BadInput(
            f"victim.model.spec: {path} is a state_dict; give its architecture under "
            "victim.model.spec (e.g. {arch: mlp, hidden: [64]})"
        )
    model = build_model(spec.spec, input_shape, n_outputs)
    floats = [v.dtype for v in state.values() if torch.is_tensor(v) and v.is_floating_point()]
    if floats:
        model = model.to(floats[0])  # keep the file's precision: no float64 → float32 round trip
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise BadInput(f"victim.model.spec: does not match {path}: {first}") from None
    return model


def first_layer_weight(model: nn.Module) -> torch.Tensor | None:
    """The first Linear/Conv weight as a (k, d) matrix acting on flat inputs, if defined."""
    if isinstance(model, MLP):
        return model.first.weight.detach()
    for m in model.modules():
        if isinstance(m, nn.Linear):
            return m.weight.detach()
    return None


def count_parameters(model: nn.Module) -> int:
    return int(sum(p.numel() for p in model.parameters()))
