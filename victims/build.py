"""Build the deployed victim a scenario describes: data, model, training (with DP-SGD when
asked), and the local backend that answers its API. Returns a `Victim`: the truth (for scoring
only) and the public facts an attacker may know (shapes, output kind, the attacker's pool).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from harness.errors import BadInput
from victims.datasets import Dataset, load_dataset
from victims.local import LocalBackend
from victims.models import build_model, count_parameters, first_layer_weight
from victims.training import TrainRecord, train


def resolve_device(name: str) -> torch.device:
    """`auto` → CUDA when present, else CPU; `cuda` without a GPU is bad input."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise BadInput("device: cuda requested but no CUDA device is available (use auto or cpu)")
    return torch.device(name)


@dataclass
class PublicInfo:
    """What any attacker of this deployment knows without querying."""

    input_shape: tuple[int, ...]
    dim: int
    n_outputs: int
    n_classes: int
    task: str
    interface: str
    output: str
    gradient_of: str
    x_pool: torch.Tensor  # the attacker's own data from the same distribution (may be empty)
    input_low: float
    input_high: float
    device: torch.device
    dtype: torch.dtype


@dataclass
class Truth:
    """The victim's ground truth: model and private data. Scorers only; never attacks."""

    model: nn.Module | None
    data: Dataset | None
    first_layer: torch.Tensor | None
    train_record: TrainRecord | None


@dataclass
class Victim:
    backend: Any
    truth: Truth
    info: PublicInfo
    utility: dict[str, float] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)


def _teacher_labels(spec: Any, data: Dataset, model: nn.Module, device, dtype) -> None:
    """Label Gaussian inputs with `model` (in place)."""
    with torch.no_grad():
        for name in ("train", "test", "pool"):
            x = torch.as_tensor(getattr(data, f"x_{name}"), dtype=dtype, device=device)
            z = model(x).reshape(len(x), -1) if len(x) else torch.empty(0, 1)
            if data.task == "regression":
                y = z[:, 0].cpu().numpy().astype(np.float64)
            elif data.task == "binary":
                y = (z[:, 0] > 0).long().cpu().numpy()
            else:
                y = z.argmax(dim=1).cpu().numpy()
            setattr(data, f"y_{name}", y)


def build_victim(s: Any) -> Victim:
    """Build (and train, unless pre-trained or random) the scenario's victim."""
    if s.victim.endpoint is not None:
        from victims.remote import build_remote_victim  # issue 7: HTTP endpoints

        return build_remote_victim(s)
    device = resolve_device(s.device)
    dtype = torch.float64 if s.victim.training.dtype == "float64" else torch.float32
    torch.manual_seed(s.seed)
    np.random.seed(s.seed)
    data = load_dataset(s.victim.data, s.seed)
    if data.task == "regression" and s.interface.output == "label":
        raise BadInput("interface.output: label is not defined for a regression victim")
    model = build_model(s.victim.model, data.input_shape, data.n_outputs)
    pretrained = s.victim.model.arch == "file"
    if pretrained:  # a user's model keeps its own precision
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), dtype)
    model = model.to(device, dtype)
    t0 = time.perf_counter()
    record = TrainRecord(notes=["pre-trained model file: not retrained"]) if pretrained else None
    if data.name == "gaussian":
        if s.victim.data.labels == "teacher":
            torch.manual_seed(s.seed + 1)
            teacher = build_model(s.victim.model, data.input_shape, data.n_outputs).to(device, dtype)
            _teacher_labels(s, data, teacher, device, dtype)
        else:
            _teacher_labels(s, data, model, device, dtype)
            record = TrainRecord(notes=["random network: labels are its own predictions"])
    if record is None:
        torch.manual_seed(s.seed)
        x_tr = torch.as_tensor(data.x_train, dtype=dtype, device=device)
        y_tr = torch.as_tensor(data.y_train, device=device)
        if data.task == "regression":
            y_tr = y_tr.to(dtype)
        if s.victim.training.epochs == 0 and s.victim.training.steps in (None, 0):
            record = TrainRecord(notes=["epochs: 0, the victim is its random initialisation"])
        else:
            record = train(model, x_tr, y_tr, data.task, s.victim.training, s.defenses.dp_sgd,
                           s.seed)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    train_s = time.perf_counter() - t0

    backend = LocalBackend(model, data.task, data.n_classes, s.interface, device, dtype)
    utility = _utility(backend, data)
    pool = torch.as_tensor(data.x_pool, dtype=dtype, device=device)
    # the input range an attacker can know: from its own pool (the private split only if none)
    public = data.x_pool if len(data.x_pool) else data.x_train
    lo, hi = float(public.min()), float(public.max())
    info = PublicInfo(
        input_shape=tuple(data.input_shape), dim=data.dim, n_outputs=data.n_outputs,
        n_classes=data.n_classes, task=data.task, interface=s.interface.kind,
        output=s.interface.output, gradient_of=s.interface.gradient_of, x_pool=pool,
        input_low=lo, input_high=hi, device=device, dtype=dtype,
    )
    truth = Truth(model, data, _first_layer(model, data, device, dtype), record)
    rec = {
        "data": data.record, "parameters": count_parameters(model), "train_seconds": train_s,
        "train_steps": record.steps, "notes": record.notes, "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
    }
    if record.grad_norm is not None:
        rec["optimality_grad_norm"] = record.grad_norm
    return Victim(backend, truth, info, utility, rec)


def _first_layer(model: nn.Module, data: Dataset, device, dtype) -> torch.Tensor | None:
    """The first layer as a linear map on flat inputs (k, d): Linear weight, or a conv probed
    with the identity basis."""
    w = first_layer_weight(model)
    conv = next((m for m in model.modules() if isinstance(m, nn.Conv2d)), None)
    if conv is None:
        return w
    eye = torch.eye(data.dim, device=device, dtype=dtype).reshape(data.dim, *model.shape)
    with torch.no_grad():
        out = conv(eye) - conv(torch.zeros_like(eye[:1]))
    return out.reshape(data.dim, -1).T.contiguous()


def _utility(backend: LocalBackend, data: Dataset) -> dict[str, float]:
    """Test accuracy (classification) or R² (regression) of the deployed model."""
    if len(data.x_test) == 0:
        return {}
    z = backend.logits(torch.as_tensor(data.x_test))
    if data.task == "regression":
        y = torch.as_tensor(data.y_test, dtype=z.dtype, device=z.device)
        ss_res = float(((z[:, 0] - y) ** 2).sum())
        ss_tot = float(((y - y.mean()) ** 2).sum()) or 1.0
        return {"test_r2": 1 - ss_res / ss_tot}
    pred = (z[:, 0] > 0).long() if data.task == "binary" else z.argmax(dim=1)
    acc = float((pred.cpu().numpy() == data.y_test).mean())
    return {"test_accuracy": acc}
