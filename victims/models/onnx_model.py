"""An ONNX graph as a torch module (forward pass only), answering with the right output.

Graphs often have several outputs: scikit-learn exports put an integer `label` first and the
class `probabilities` second (as a tensor, or as a sequence of {class: probability} maps with its
default ZipMap). `victim.model.output_name` names the answer; without it the first floating-point
score output is used, never an integer label output when a score exists. The module returns raw
outputs as leakmeter's models do (class logits, one logit for binary, the value for regression):
an output that is probabilities (a ZipMap, a Softmax's output, or rows that are non-negative and
sum to 1) is turned into log-probabilities, which the API's softmax maps back to the same
probabilities (never soft-maxed twice); a width-1 Sigmoid output becomes its logit.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from victims.errors import BadInput

FLOATS = ("tensor(float)", "tensor(double)", "tensor(float16)")
TINY = 1e-30  # probabilities of exactly 0 become log(TINY) (about -69), not -inf


def onnx_parameters(path: Path) -> int | None:
    """The numbers an ONNX graph stores (its initializers: weights and biases), read with the
    `onnx` package (never run); None without it or for a graph it cannot read."""
    try:
        import onnx

        graph = onnx.load(str(path), load_external_data=False).graph
        return int(sum(math.prod(t.dims) for t in graph.initializer))
    except Exception:  # noqa: BLE001 - the count is a detail; onnxruntime still answers
        return None


def _is_score(kind: str) -> bool:
    return kind in FLOATS or (kind.startswith("seq(map(") and "tensor(float" in kind)


def _nodes(path: Path) -> list:
    """The graph's nodes (empty without the onnx package)."""
    try:
        import onnx

        return list(onnx.load(str(path), load_external_data=False).graph.node)
    except Exception:  # noqa: BLE001 - the graph loaded in onnxruntime; this is a refinement only
        return []


def as_array(out: object) -> np.ndarray:
    """An output as a 2-D float array: a ZipMap's list of {class: p} maps in its class order."""
    if isinstance(out, list):
        if not out:
            return np.zeros((0, 1))
        keys = list(out[0])
        return np.asarray([[row[k] for k in keys] for row in out], dtype=np.float64)
    arr = np.asarray(out)
    return arr.reshape(len(arr), -1) if arr.ndim != 2 else arr


def sums_to_one(arr: np.ndarray) -> bool:
    """Rows (width ≥ 2) that are non-negative and sum to 1: probabilities."""
    a = np.asarray(arr, dtype=np.float64)
    return (a.ndim == 2 and a.shape[1] >= 2 and len(a) > 0 and bool(np.isfinite(a).all())
            and bool((a >= 0).all()) and bool(np.allclose(a.sum(axis=1), 1.0, atol=1e-3)))


class OnnxModel(nn.Module):
    """An ONNX graph answered by onnxruntime, as a torch module for the forward pass only.

    A zero-size parameter carries the graph's input dtype, so the victim keeps the file's
    precision (float64 graphs are queried in float64). `choice` says which output answers and how
    it is read (reported with the victim)."""

    predictions_only = True

    def __init__(self, path: Path, input_shape: tuple[int, ...], n_outputs: int | None = None,
                 output_name: str | None = None):
        super().__init__()
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
        self._input = inputs[0].name
        self._np_dtype, dtype = kinds[inputs[0].type]
        rank = len(inputs[0].shape or [])
        self._shape = (-1, *input_shape) if rank == 1 + len(input_shape) else (-1, int(np.prod(input_shape)))
        self.precision = nn.Parameter(torch.zeros(0, dtype=dtype), requires_grad=False)
        self.n_parameters = onnx_parameters(path)
        self._nodes = _nodes(path)
        self.output_name, self.read_as = self._choose(path, output_name)
        self.width = self._probe_width(input_shape)
        self.to_one_logit = False
        if n_outputs is not None and self.width != n_outputs:
            if n_outputs == 1 and self.width == 2 and self.read_as == "probabilities":
                self.to_one_logit = True  # binary: log p1 − log p0, the model's one logit
            else:
                two = (" (a model with 2 outputs for 2 classes is victim.data.task: multiclass; binary "
                       "means one output, a logit)" if self.width == 2 and n_outputs == 1 else "")
                raise BadInput(f"victim.data.task: {path} answers {self.width} outputs per row (output "
                               f"{self.output_name!r}), the task needs {n_outputs}{two}")

    def _choose(self, path: Path, name: str | None) -> tuple[str, str]:
        """(output name, how it is read: probabilities | sigmoid | scores)."""
        outs = self._session.get_outputs()
        names = [o.name for o in outs]
        if name is not None:
            found = [o for o in outs if o.name == name]
            if not found:
                raise BadInput(f"victim.model.output_name: {name!r} is not an output of {path} "
                               f"(its outputs: {', '.join(names)})")
            chosen = found[0]
            if not _is_score(chosen.type):
                raise BadInput(f"victim.model.output_name: {name!r} of {path} is {chosen.type}, not a "
                               "floating-point score; allowed: the graph's probabilities, logits or "
                               f"values (its outputs: {', '.join(f'{o.name} {o.type}' for o in outs)})")
        else:
            scores = [o for o in outs if _is_score(o.type)]
            if not scores:
                given = ", ".join(f"{o.name} {o.type}" for o in outs)
                raise BadInput(f"victim.model.path: {path} answers only {given}; leakmeter needs a "
                               "floating-point score output (probabilities, logits or values): export "
                               "the model with its scores")
            chosen = scores[0]
        if chosen.type.startswith("seq(map("):
            return chosen.name, "probabilities"
        op = {out: n.op_type for n in self._nodes for out in n.output}.get(chosen.name, "")
        if op == "Softmax":
            return chosen.name, "probabilities"
        if op == "Sigmoid" and (chosen.shape or [None])[-1] == 1:
            return chosen.name, "sigmoid"
        return chosen.name, "scores"

    def _probe_width(self, input_shape: tuple[int, ...]) -> int:
        """Run the graph on a few rows: its answer width, and whether the rows are probabilities."""
        gen = np.random.default_rng(0)
        x = gen.standard_normal((8, int(np.prod(input_shape)))).astype(self._np_dtype).reshape(self._shape)
        try:
            out = as_array(self._session.run([self.output_name], {self._input: x})[0])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own error types
            raise BadInput(f"victim.model.path: the ONNX model does not answer rows of shape "
                           f"{tuple(input_shape)} ({type(exc).__name__}); check victim.data") from None
        if self.read_as == "scores" and sums_to_one(out):
            self.read_as = "probabilities"
        return int(out.shape[1])

    def facts(self) -> tuple[dict[str, bool], str]:
        """What the graph that computes the answer is (victims/models/facts.py)."""
        from victims.models.facts import graph_facts

        return graph_facts(self._nodes, self.output_name) if self._nodes else ({}, "an ONNX graph")

    def describe(self) -> str:
        """Which output answers and how it is read (a stage line and the report's victim)."""
        how = {"probabilities": "probabilities (never soft-maxed again)",
               "sigmoid": "a probability (read as its logit)", "scores": "scores (logits or values)"}
        extra = ", as one logit log p1 − log p0" if self.to_one_logit else ""
        return f"ONNX output {self.output_name!r}: {how[self.read_as]}{extra}"

    def _run(self, x: torch.Tensor) -> torch.Tensor:
        arr = x.detach().cpu().numpy().astype(self._np_dtype, copy=False).reshape(self._shape)
        out = torch.as_tensor(as_array(self._session.run([self.output_name], {self._input: arr})[0]))
        return out.reshape(len(x), -1)

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        """The graph's answer exactly as it computes it: where `read_as` is probabilities, its
        probabilities with their zeros and the last bits of a 1 − p column (the backend asks only
        then)."""
        return self._run(x).to(self.precision.dtype).to(x.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self._run(x)
        if self.read_as == "probabilities":
            out = torch.log(out.double().clamp_min(TINY))
            if self.to_one_logit:
                out = out[:, 1:2] - out[:, 0:1]
        elif self.read_as == "sigmoid":
            p = out.double().clamp(TINY, 1 - 1e-16)
            out = torch.log(p) - torch.log1p(-p)
        return out.to(self.precision.dtype).to(x.device)


def onnx_answer(path: Path) -> tuple[str, int, str, int] | None:
    """(output name, width, how it is read, input width) of the answer an ONNX graph gives, probed
    on its declared input shape (`leakmeter init`); None when the graph's input width is not fixed
    or the file is not answered. Raises BadInput when it has no score output."""
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - `validate` reports an unreadable file with its reason
        return None
    shape = list(sess.get_inputs()[0].shape or [])[1:] if len(sess.get_inputs()) == 1 else []
    if not shape or not all(isinstance(s, int) and s > 0 for s in shape):
        return None
    m = OnnxModel(path, tuple(shape))
    return m.output_name, m.width, m.read_as, int(np.prod(shape))
