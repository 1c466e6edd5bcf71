"""The local victim: built and trained in this process (`build_local_victim`), answering its API
(`LocalBackend`: predictions, input gradients, SmoothGrad and weights of a torch model).

This is the undefended answer; the oracle (and `leakmeter serve`) apply defenses on top.

Gradient semantics (`interface.gradient_of`): `predicted` = gradient of the logit of the class
the model predicts at x (for one-output models: of the scalar output); `class` = of the logit of
`interface.gradient_class`; `sum` = of the sum of all raw outputs. SmoothGrad averages that same
gradient over `samples` points x + N(0, sigma² I) (paper 000, App. D).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch import nn

from victims import devices
from victims.data.datasets import Dataset, load_dataset
from victims.errors import BadInput
from victims.models.builders import count_parameters, first_layer_weight
from victims.models.facts import model_facts
from victims.models.files import model_for
from victims.models.training import TrainRecord, train
from victims.victim import PublicInfo, Truth, Victim

# inputs per SmoothGrad pass (it expands each input by `samples`)
CHUNK = 8192


class LocalBackend:
    """Answers queries from an in-process torch module (on its device, in its dtype), every
    forward and backward pass on a block of exactly `rows` inputs (victims/devices.py): a query's
    answer is the same bits whatever else is in its batch."""

    remote = False

    def __init__(self, model: nn.Module, task: str, n_classes: int, interface: Any,
                 device: torch.device, dtype: torch.dtype):
        self.model = model
        self.task = task
        self.n_classes = n_classes
        self.iface = interface
        self.device = device
        self.dtype = dtype
        self.rows = devices.answer_rows(device)

    def _blocks(self, x: torch.Tensor):
        """(block of exactly `rows` inputs, how many of them are real) over x."""
        r = self.rows
        for i in range(0, len(x), r):
            xi = x[i : i + r]
            if len(xi) < r:
                xi = torch.cat([xi, xi.new_zeros((r - len(xi),) + tuple(xi.shape[1:]))])
            yield xi, min(r, len(x) - i)

    # ------------------------------------------------------------------ predictions
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Raw outputs (N, K) for a flat batch, computed in blocks of `rows`."""
        x = x.to(self.device, self.dtype)
        with torch.no_grad():
            outs = [self.model(xi).reshape(len(xi), -1)[:k] for xi, k in self._blocks(x)]
        out = torch.cat(outs) if outs else torch.empty(0, 1, device=self.device)
        return out.reshape(len(x), -1)

    def predict(self, x: torch.Tensor, kind: str) -> torch.Tensor:
        """Predictions of `kind`: label (N,), probabilities (N, C) or logits (N, K). A model file
        that answers probabilities itself (an ONNX graph's) answers them as it computes them."""
        if kind == "probabilities" and getattr(self.model, "read_as", "") == "probabilities":
            x = x.to(self.device, self.dtype)
            with torch.no_grad():
                outs = [self.model.probabilities(xi)[:k] for xi, k in self._blocks(x)]
            return torch.cat(outs) if outs else torch.empty(0, self.n_classes, device=self.device)
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
        """Input gradients (N, d) of the documented output, one backward per block of `rows`
        (each row's gradient is its own output's: the padding rows' are dropped)."""
        x = x.to(self.device, self.dtype)
        grads = []
        for xi, k in self._blocks(x):
            xi = xi.detach().requires_grad_(True)
            with torch.enable_grad():
                out = self.model(xi).reshape(len(xi), -1)
                (g,) = torch.autograd.grad(self._target(out).sum(), xi)
            grads.append(g.detach()[:k])
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
        if kind == "label":
            return (z[:, 0] > 0).long()
        # both columns in full precision (a small p₀ is not 1 − p₁, which loses it)
        return torch.stack([torch.sigmoid(-z[:, 0]), torch.sigmoid(z[:, 0])], dim=1)
    if kind == "label":
        return z.argmax(dim=1)
    return torch.softmax(z, dim=1)


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


def build_local_victim(s: Any) -> Victim:
    """Build (and train, unless pre-trained or random) the scenario's victim in this process, on
    the device the run's policy gives it (victims/devices.py: under `auto`, CUDA only for a
    victim whose training is big enough to pay)."""
    policy = devices.current(s.device)
    dtype = torch.float64 if s.victim.training.dtype == "float64" else torch.float32
    torch.manual_seed(s.seed)
    np.random.seed(s.seed)
    data = load_dataset(s.victim.data, s.seed, scale_target=s.victim.model.arch != "file")
    _check_task(s, data)
    model = model_for(s.victim.model, data.input_shape, data.n_outputs)
    _check_model(s, model)
    step = 3 * devices.forward_flop(model, torch.zeros(1, data.dim)) * min(
        s.victim.training.batch_size or len(data.x_train), max(len(data.x_train), 1))
    device = policy.place("victim", training_flop(s, model, data), "training and answers", step)
    pretrained = s.victim.model.arch == "file"
    if pretrained:  # a user's model keeps its own precision
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), dtype)
    model = model.to(device, dtype)
    t0 = time.perf_counter()
    record = TrainRecord(notes=["pre-trained model file: not retrained"]) if pretrained else None
    if data.name == "gaussian":
        if s.victim.data.labels == "teacher":
            torch.manual_seed(s.seed + 1)
            teacher = model_for(s.victim.model, data.input_shape, data.n_outputs).to(device, dtype)
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
    lo, hi, domain_source = input_domain(s, data)
    info = PublicInfo(
        input_shape=tuple(data.input_shape), dim=data.dim, n_outputs=data.n_outputs,
        n_classes=data.n_classes, task=data.task, interface=s.interface.kind,
        output=s.interface.output, gradient_of=s.interface.gradient_of, x_pool=pool,
        input_low=lo, input_high=hi, device=device, dtype=dtype, input_domain_source=domain_source,
        gradient_class=s.interface.gradient_class,
    )
    info.declared, info.declared_as = model_facts(model)
    truth = Truth(model, data, _first_layer(model, data, device, dtype), record)
    rec = {
        "data": data.record, "parameters": count_parameters(model), "train_seconds": train_s,
        "train_steps": record.steps, "notes": record.notes, "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
    }
    if record.grad_norm is not None:
        rec["optimality_grad_norm"] = record.grad_norm
    if hasattr(model, "describe"):  # which output of a model file answers, and how it is read
        rec["model_output"] = model.describe()
    return Victim(backend, truth, info, utility, rec)


def training_flop(s: Any, model: nn.Module, data: Dataset) -> float:
    """Estimated flop of training the victim: 3 forward passes' worth per example and epoch
    (forward + backward), or one forward per point when it is not trained (labels, utility)."""
    dt = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    one = devices.forward_flop(model, torch.zeros(1, data.dim, dtype=dt))
    t = s.victim.training
    n = max(len(data.x_train), 1)
    passes = (t.steps * n if t.steps else t.epochs * n) if s.victim.model.arch != "file" else 0
    return one * (3 * passes + len(data.x_train) + len(data.x_test) + len(data.x_pool))


def _check_task(s: Any, data: Dataset) -> None:
    if data.n_outputs > 1 and s.interface.gradient_class >= data.n_outputs:
        raise BadInput(f"interface.gradient_class: {s.interface.gradient_class} is not a class of this "
                       f"victim (allowed: 0 to {data.n_outputs - 1})")
    if data.task == "regression" and s.interface.output == "label":
        raise BadInput("interface.output: label is not defined for a regression victim")


def _check_model(s: Any, model: nn.Module) -> None:
    if getattr(model, "predictions_only", False) and s.interface.kind != "prediction":
        raise BadInput(f"interface.kind: {s.interface.kind} needs input gradients or weights, which an "
                       "ONNX model does not give; allowed with ONNX: prediction (or use a state_dict "
                       "or safetensors file)")


def check_local(s: Any) -> None:
    """What `build_local_victim` would refuse as bad input, without training: the dataset loads,
    the task suits the interface, and a model file loads into its `spec` with finite weights (its
    shapes only, when it declares more than READ_AT_CHECK; a TorchScript file is never run here)."""
    data = load_dataset(s.victim.data, s.seed, scale_target=s.victim.model.arch != "file")
    _check_task(s, data)
    if s.victim.model.arch == "file":
        from victims.models.files import check_model_file

        _check_model(s, check_model_file(s.victim.model, data.input_shape, data.n_outputs))
    else:
        model_for(s.victim.model, data.input_shape, data.n_outputs)


def input_domain(s: Any, data: Dataset) -> tuple[float, float, str]:
    """(low, high, where it comes from) of the inputs, as the attacker may know them: declared
    (attacker.input_domain), else documented with the dataset, else the attacker's own pool, else
    assumed for standardised inputs. Never the training split: that is the defender's secret."""
    declared = getattr(getattr(s, "attacker", None), "input_domain", None)
    if declared is not None:
        return float(declared[0]), float(declared[1]), "declared (attacker.input_domain)"
    if data.domain is not None:
        return data.domain[0], data.domain[1], f"documented: {data.domain_note}"
    if len(data.x_pool):
        return float(data.x_pool.min()), float(data.x_pool.max()), "the attacker's pool"
    return -3.0, 3.0, "assumed: ±3 (no documented range, no pool; declare attacker.input_domain)"


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
