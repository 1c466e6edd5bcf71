"""User model files, safe by default: reading a file never runs code from it.

Formats (`victim.model.format`), told apart by the file's bytes, never by its name:
- `state_dict`: a `torch.save`d dict of tensors, read with `torch.load(weights_only=True)` (a
  restricted unpickler that builds tensors and plain containers only), plus its architecture in
  `victim.model.spec`;
- `safetensors`: a dict of tensors in the safetensors format (a JSON header and raw bytes), plus
  `victim.model.spec`;
- `onnx`: a model graph answered by onnxruntime (the optional extra `leakmeter[onnx]`); it answers
  predictions only (onnxruntime computes no input gradients), which serves the prediction API
  and the finite-difference attacks;
- `torchscript`: a *program* — its code (including `__setstate__` methods) runs when the file is
  loaded. Loaded only when the scenario says `format: torchscript` **and** the command was given
  `--trust-model-code`; never under `auto`.
`auto` (the default) picks state_dict, safetensors or ONNX from the bytes, and refuses TorchScript
archives and anything it does not recognise.
"""

from __future__ import annotations

import json
import math
import struct
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from victims.errors import BadInput
from victims.limits import READ_AT_CHECK, check_model_archive
from victims.models.builders import build_model

FORMATS = ("auto", "state_dict", "safetensors", "onnx", "torchscript")
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024
_trust_model_code = False  # set by the CLI's --trust-model-code only


def allow_model_code(allowed: bool = True) -> None:
    """Allow `format: torchscript` files to be loaded (their code runs): --trust-model-code."""
    global _trust_model_code
    _trust_model_code = bool(allowed)


def model_code_allowed() -> bool:
    return _trust_model_code


def sniff(path: Path) -> str:
    """What the file's bytes say it is: torchscript | state_dict | safetensors | onnx | unknown.
    Reads headers only; nothing is unpickled or run."""
    with open(path, "rb") as fh:
        head = fh.read(16)
        size = path.stat().st_size
    if head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
        except (zipfile.BadZipFile, OSError, ValueError):
            return "unknown"
        if any(n.endswith("constants.pkl") or "/code/" in n for n in names):
            return "torchscript"
        return "state_dict" if any(n.endswith("data.pkl") for n in names) else "unknown"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "state_dict"  # torch.save's legacy (pickle) layout; read by the restricted unpickler
    if len(head) >= 9:
        (n,) = struct.unpack("<Q", head[:8])
        if 2 <= n <= min(MAX_SAFETENSORS_HEADER, size - 8) and head[8:9] == b"{":
            return "safetensors"
    if head[:1] == b"\x08" and 1 <= head[1] <= 20:  # protobuf field 1 (ir_version) of an ONNX model
        return "onnx"
    return "unknown"


def _trust_hint(path: Path) -> str:
    return (f"victim.model.path: {path} is a TorchScript archive, a program whose code runs when it is "
            "loaded; leakmeter does not run it unless the scenario says format: torchscript and the "
            "command is given --trust-model-code (only for files you trust), or export its weights "
            "as a state_dict, safetensors or ONNX file")


def resolve_format(spec: Any) -> str:
    """The format the file will be read as, checked without reading it (validate and run);
    BadInput saying why a file is refused and how to opt in."""
    path = Path(spec.path)
    if not path.is_file():
        raise BadInput(f"victim.model.path: {path} not found")
    found = sniff(path)
    check_model_archive(path)  # declared sizes, before anything is read (victims/limits.py)
    fmt = spec.format
    if fmt == "torchscript":
        if not model_code_allowed():
            raise BadInput("victim.model.format: torchscript runs the file's code when it is loaded; "
                           "pass --trust-model-code to allow it (only for files you trust)")
        if found != "torchscript":
            raise BadInput(f"victim.model.path: {path} is not a TorchScript archive (it looks like "
                           f"{found}); allowed for format: torchscript: a torch.jit.save file")
        return fmt
    if found == "torchscript":
        raise BadInput(_trust_hint(path))
    if found == "unknown":
        raise BadInput(f"victim.model.path: {path} is not a model file leakmeter reads (allowed: a "
                       "state_dict saved with torch.save, safetensors, ONNX)")
    if fmt != "auto" and fmt != found:
        raise BadInput(f"victim.model.format: {fmt} does not match {path}, which is a {found} file")
    if found in ("state_dict", "safetensors") and spec.spec is None:
        raise BadInput(f"victim.model.spec: {path} is a {found} file; give its architecture under "
                       "victim.model.spec (e.g. {arch: mlp, hidden: [64]})")
    if found == "onnx":
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            raise BadInput(f"victim.model.path: {path} is an ONNX model; reading it needs onnxruntime "
                           "(pip install 'leakmeter[onnx]')") from None
    return found


def model_for(spec: Any, input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """The model a `ModelSpec` names: loaded from its file (arch: file), else built untrained."""
    if spec.arch == "file":
        return load_model_file(spec, input_shape, n_outputs)
    return build_model(spec, input_shape, n_outputs)


def load_model_file(spec: Any, input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """Load a user's model file in the format `resolve_format` allows."""
    path = Path(spec.path)
    fmt = resolve_format(spec)
    if fmt == "torchscript":  # opted in twice: the scenario's format and --trust-model-code
        try:
            return torch.jit.load(str(path), map_location="cpu")
        except Exception as exc:  # noqa: BLE001
            raise BadInput(f"victim.model.path: {path} is not a loadable TorchScript file "
                           f"({type(exc).__name__})") from None
    if fmt == "onnx":
        return OnnxModel(path, input_shape, n_outputs)
    state = read_tensors(path, fmt)
    model = build_model(spec.spec, input_shape, n_outputs)
    floats = [v.dtype for v in state.values() if torch.is_tensor(v) and v.is_floating_point()]
    if floats:
        model = model.to(floats[0])  # keep the file's precision: no float64 → float32 round trip
    _load_into(model, state, path)
    return model


def check_model_file(spec: Any, input_shape: tuple[int, ...], n_outputs: int) -> nn.Module:
    """What `load_model_file` would refuse, checked without running code: the format, the weights
    against `spec` (keys and shapes) and their finiteness. A file declaring more than READ_AT_CHECK
    is mapped, not read (shapes only: its values are checked when the run loads it); TorchScript
    is not loaded (loading runs its code). Returns the model (meta-device weights when mapped)."""
    path = Path(spec.path)
    fmt = resolve_format(spec)
    if fmt == "torchscript":
        return nn.Module()
    if fmt == "onnx":
        return OnnxModel(path, input_shape)
    big = check_model_archive(path) > READ_AT_CHECK
    if fmt == "safetensors" and big:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            state = {k: torch.empty(f.get_slice(k).get_shape(), device="meta") for k in f.keys()}
    else:
        state = read_tensors(path, fmt, mmap=big)
    model = build_model(spec.spec, input_shape, n_outputs)
    _load_into(model, state, path, assign=big)
    return model


def _load_into(model: nn.Module, state: dict[str, torch.Tensor], path: Path, assign: bool = False) -> None:
    """Load `state` into `model` (by position when only the key names differ); BadInput with the
    whole cause, in the user's terms, when it does not fit the spec."""
    state = _by_position(state, model)
    try:
        model.load_state_dict(state, assign=assign)
    except RuntimeError as exc:
        whole = " ".join(str(exc).split())
        raise BadInput(f"victim.model.spec: does not match {path}: {_cause(state, model)}({whole})") from None


def _by_position(state: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """The file's tensors under the model's key names when only the names differ (e.g. a class
    with fc1/fc2 for our Sequential 0/2): same count, same shapes, in the same order."""
    want = model.state_dict()
    if set(state) == set(want) or len(state) != len(want):
        return state
    if all(tuple(a.shape) == tuple(b.shape) for a, b in zip(state.values(), want.values(), strict=True)):
        return dict(zip(want, state.values(), strict=True))
    return state


def _cause(state: dict[str, torch.Tensor], model: nn.Module) -> str:
    """What differs between the file and the spec, in the user's terms (empty when unclear)."""
    mats = [v for v in state.values() if getattr(v, "ndim", 0) == 2]
    ours = [v for v in model.state_dict().values() if getattr(v, "ndim", 0) == 2]
    if not mats or not ours:
        return ""
    file_w = [int(mats[0].shape[1])] + [int(m.shape[0]) for m in mats]
    spec_w = [int(ours[0].shape[1])] + [int(m.shape[0]) for m in ours]
    said = f"the file's layer widths are {file_w}, the spec builds {spec_w}"
    if file_w[:-1] == spec_w[:-1] and file_w[-1] == 2 and spec_w[-1] == 1:
        return (f"{said}: the file's model has 2 outputs, and a binary task means one output (one "
                "logit) to leakmeter; for a model with one output per class set victim.data.task: "
                "multiclass (2 classes) ")
    if file_w[-1] != spec_w[-1]:
        return (f"{said}: the last layer's width is the task's output count (multiclass: one per class; "
                "binary and regression: 1); check victim.data.task and classes ")
    if file_w[0] != spec_w[0]:
        return f"{said}: the first width is the data's input dimension; check victim.data "
    return f"{said}: set victim.model.spec.hidden to {file_w[1:-1]} "


def read_tensors(path: Path, fmt: str, mmap: bool = False) -> dict[str, torch.Tensor]:
    """A dict of tensors from a state_dict (restricted unpickler) or safetensors file; BadInput
    when a floating-point tensor holds NaN or infinite values (no attack or scorer can use them).
    `mmap`: map the data instead of reading it (shapes only; values are not checked)."""
    state = _read_tensors(path, fmt, mmap)
    if not mmap:
        for name, t in state.items():
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                bad = int((~torch.isfinite(t)).sum())
                raise BadInput(f"victim.model.path: {path}: tensor {name!r} holds {bad} NaN or infinite "
                               "value(s); allowed: finite weights")
    return state


def _read_tensors(path: Path, fmt: str, mmap: bool) -> dict[str, torch.Tensor]:
    if fmt == "safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError, json.JSONDecodeError) as exc:
            raise BadInput(f"victim.model.path: {path} is not a readable safetensors file "
                           f"({type(exc).__name__})") from None
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols: our one line says it all
            warnings.simplefilter("ignore")
            state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as exc:  # noqa: BLE001 - e.g. UnpicklingError on a pickled object
        raise BadInput(f"victim.model.path: {path} is not a weights-only state_dict: it holds "
                       f"something other than tensors ({type(exc).__name__}); nothing was run") from None
    if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        raise BadInput(f"victim.model.path: {path} holds a {type(state).__name__}, not a state_dict "
                       "of tensors")
    return state


def onnx_parameters(path: Path) -> int | None:
    """The numbers an ONNX graph stores (its initializers: weights and biases), read with the
    `onnx` package (never run); None without it or for a graph it cannot read."""
    try:
        import onnx

        graph = onnx.load(str(path), load_external_data=False).graph
        return int(sum(math.prod(t.dims) for t in graph.initializer))
    except Exception:  # noqa: BLE001 - the count is a detail; onnxruntime still answers
        return None


class OnnxModel(nn.Module):
    """An ONNX graph answered by onnxruntime, as a torch module for the forward pass only.

    A zero-size parameter carries the graph's input dtype, so the victim keeps the file's
    precision (float64 graphs are queried in float64)."""

    predictions_only = True

    def __init__(self, path: Path, input_shape: tuple[int, ...], n_outputs: int | None = None):
        super().__init__()
        import numpy as np
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(str(path), sess_options=opts,
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own error types
            raise BadInput(f"victim.model.path: {path} is not a loadable ONNX model "
                           f"({type(exc).__name__})") from None
        inputs = self._session.get_inputs()
        if len(inputs) != 1:
            raise BadInput(f"victim.model.path: {path} has {len(inputs)} inputs; leakmeter queries "
                           "models with one input (a batch of rows)")
        kinds = {"tensor(double)": (np.float64, torch.float64), "tensor(float)": (np.float32, torch.float32)}
        if inputs[0].type not in kinds:
            raise BadInput(f"victim.model.path: {path} takes {inputs[0].type}; allowed: "
                           "tensor(float), tensor(double)")
        width = (self._session.get_outputs()[0].shape or [None])[-1]
        if n_outputs is not None and isinstance(width, int) and width != n_outputs:
            two = (" (a model with 2 outputs for 2 classes is victim.data.task: multiclass; binary "
                   "means one output, a logit)" if width == 2 and n_outputs == 1 else "")
            raise BadInput(f"victim.data.task: {path} answers {width} outputs per row, the task needs "
                           f"{n_outputs}{two}")
        self._input = inputs[0].name
        self._np_dtype, dtype = kinds[inputs[0].type]
        rank = len(inputs[0].shape or [])
        self._shape = (-1, *input_shape) if rank == 1 + len(input_shape) else (-1, int(np.prod(input_shape)))
        self.precision = nn.Parameter(torch.zeros(0, dtype=dtype), requires_grad=False)
        self.n_parameters = onnx_parameters(path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = len(x)
        arr = x.detach().cpu().numpy().astype(self._np_dtype, copy=False).reshape(self._shape)
        out = self._session.run(None, {self._input: arr})[0]
        return torch.as_tensor(out).reshape(n, -1).to(x.device)
