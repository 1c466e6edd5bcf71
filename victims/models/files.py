"""User model files: TorchScript, or a state_dict (read with weights_only) plus its architecture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from victims.errors import BadInput
from victims.models.builders import build_model


def model_for(spec: Any, input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """The model a `ModelSpec` names: loaded from its file (arch: file), else built untrained."""
    if spec.arch == "file":
        return load_model_file(spec, input_shape, n_outputs)
    return build_model(spec, input_shape, n_outputs)


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
