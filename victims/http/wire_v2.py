"""The Open Inference Protocol (KServe V2; Triton, MLServer, KServe's model servers), REST.

`url` is the model's root, `http://host:port/v2/models/NAME[/versions/N]`:

- `GET {url}` — the model's metadata: input name, datatype and shape, output names (read once
  at start-up, `read_metadata`; a mismatch with the scenario is bad input, exit 2);
- `POST {url}/infer` — `{"inputs": [{"name", "shape": [n, d], "datatype": "FP32", "data": [row-major
  flat]}], "outputs": [{"name"}]}` → `{"outputs": [{"name", "shape", "datatype", "data"}]}`;
  the output tensor is read by name (`output_name`, default: the metadata's first) and reshaped, after
  checking that its shape matches its data.

FP32 inputs are sent as their float32 values (what the server computes with). Answers of any
numeric datatype are read (FP16/32/64, INT*, UINT*); BYTES only as Triton's classification
extension (`classification: k` asks `"parameters": {"classification": k}` on the output and
reads `"value:index[:label]"` strings into a top-k row: the k values at their class indices, 0
elsewhere). Explanations (where a server offers them) are asked with the request parameter
`"explain": kind` and read from an output named `explanation` (else the one output that is not
the prediction's); predictions are read only from the output chosen at start-up, which every
request names (`"outputs": [{"name"}]`: a server such as MLServer otherwise answers its default,
the labels): `output_name`, else the metadata's output that fits the interface — probabilities
(`predict_proba`, `probabilities`, `scores`, `logits`...) before labels, labels (`predict`,
`label`, integer outputs) for `interface.output: label` — else the first. Without metadata
outputs the first answer's name is kept from then on. For `interface.output: label` a server
that answers one output only is read whatever its name (a label-only answer). An answer without
the chosen output is an error naming the outputs the server has, never another tensor read in its
place.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from victims.http.secrets import clip
from victims.http.wire_base import AnswerError, WireProtocol, error_text, path_suffix

NUMERIC = {"FP16", "FP32", "FP64", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32",
           "UINT64", "BOOL"}
SENDS = ("FP32", "FP64")
EXPLANATION = "explanation"


LABELISH = re.compile(r"(^|[_\-.])(predict|predicted|label|labels|class|classes|argmax|output_label)$",
                      re.IGNORECASE)
PROBISH = re.compile(r"prob|score|softmax|logit|confidence", re.IGNORECASE)
INTEGER = {"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "BOOL"}


def is_label(t: dict) -> bool:
    """Whether a metadata or answer tensor looks like class labels (name or integer datatype)."""
    name = str(t.get("name", ""))
    return (bool(LABELISH.search(name)) and not PROBISH.search(name)) or \
        str(t.get("datatype", "")).upper() in INTEGER


def choose_output(outputs: list[dict], want_label: bool) -> dict | None:
    """The output to ask for: labels first for a label interface (None when there is none: the
    server's own answer is read), probabilities / scores first otherwise, then the first."""
    outputs = [t for t in outputs if t.get("name") != EXPLANATION] or outputs
    labels = [t for t in outputs if is_label(t)]
    if want_label:
        return labels[0] if labels else None
    probs = [t for t in outputs if PROBISH.search(str(t.get("name", ""))) and not is_label(t)]
    others = [t for t in outputs if not is_label(t)]
    return (probs or others or outputs or [None])[0]


class MetadataError(ValueError):
    """The model's metadata does not fit the scenario; the message names the key to change."""


def _names(tensors: list) -> str:
    return ", ".join(clip(str(t.get("name")), 40) for t in tensors[:8] if isinstance(t, dict)) or "none"


class OpenInferenceProtocol(WireProtocol):
    name = "kserve-v2"

    def __init__(self, spec: Any):
        self.input_name: str = spec.input_name or "input-0"
        self.output_name: str | None = spec.output_name
        self.datatype: str = spec.datatype or "FP32"
        self.classification: int | None = spec.classification
        self.input_dims: list[int] | None = None  # non-batch dims from the metadata
        self.n_cols: int | None = None  # classes, for the classification extension
        self.as_label = False  # interface.output: label (classification answers: the top-1 label)
        self.metadata: dict[str, Any] = {}
        self.outputs: list[dict] = []  # the metadata's outputs
        self.labels: list[str] | None = getattr(spec, "classes", None)  # string labels, in class order

    def target(self, explain: str | None) -> str:
        return path_suffix(self.url, "/infer")

    # ------------------------------------------------------------------ start-up
    def read_metadata(self, meta: Any, dim: int, spec: Any) -> dict[str, Any]:
        """Take input name, datatype and shape and the output name from the model's metadata;
        MetadataError naming the scenario key when they do not fit. Returns what was read
        (for the report)."""
        if not isinstance(meta, dict) or not isinstance(meta.get("inputs", []), list) or \
                not isinstance(meta.get("outputs", []), list):
            raise MetadataError("the model metadata is not a V2 metadata object (name, inputs, outputs)")
        inputs = [t for t in meta.get("inputs") or [] if isinstance(t, dict)]
        outputs = [t for t in meta.get("outputs") or [] if isinstance(t, dict)]
        if inputs:
            chosen = [t for t in inputs if t.get("name") == spec.input_name] if spec.input_name else inputs
            if not chosen:
                raise MetadataError(f"victim.endpoint.input_name: {spec.input_name!r} is not an input of the "
                                    f"model (inputs: {_names(inputs)})")
            if len(chosen) > 1:
                raise MetadataError(f"victim.endpoint.input_name: the model takes {len(inputs)} inputs "
                                    f"({_names(inputs)}); leakmeter sends one tensor: name it")
            tin = chosen[0]
            self.input_name = str(tin.get("name") or self.input_name)
            dtype = str(tin.get("datatype", "")).upper()
            if dtype and dtype not in SENDS:
                raise MetadataError(f"victim.endpoint: input {clip(self.input_name, 40)!r} has datatype "
                                    f"{clip(dtype, 20)}; leakmeter sends FP32 or FP64")
            if spec.datatype and dtype and spec.datatype != dtype:
                raise MetadataError(f"victim.endpoint.datatype: {spec.datatype} disagrees with the model's "
                                    f"metadata ({dtype})")
            self.datatype = dtype or self.datatype
            self.input_dims = self._dims(tin.get("shape"), dim)
        self.outputs = outputs
        tout = None
        if outputs:
            if self.output_name:
                hit = [t for t in outputs if t.get("name") == self.output_name]
                if not hit:
                    raise MetadataError(f"victim.endpoint.output_name: {self.output_name!r} is not an "
                                        f"output of the model (outputs: {_names(outputs)})")
                tout = hit[0]
            else:
                tout = choose_output(outputs, self.as_label)
        if tout is not None:
            dtype = str(tout.get("datatype", "")).upper()
            params = tout.get("parameters")
            named = params.get("classes") if isinstance(params, dict) else None
            if self.labels is None and isinstance(named, list) and all(isinstance(c, str) for c in named):
                self.labels = [str(c) for c in named]  # the metadata's class names
            strings = dtype == "BYTES" and (self.classification or self.labels)
            if dtype and dtype not in NUMERIC and not strings:
                tname = clip(str(tout.get("name")), 40)
                raise MetadataError(f"victim.endpoint.output_name: output {tname!r} "
                                    f"has datatype {clip(dtype, 20)}, which leakmeter does not read "
                                    "(numbers; BYTES only with victim.endpoint.classification)")
            shape = tout.get("shape")
            if isinstance(shape, list) and len(shape) >= 2 and isinstance(shape[-1], int) and shape[-1] > 0:
                self.n_cols = self.n_cols or int(shape[-1])
        self.metadata = {"model": clip(str(meta.get("name", "")), 80), "input": self.input_name,
                         "datatype": self.datatype, "output": self.output_name or (
                             str(tout.get("name")) if tout is not None else None)}
        if len(outputs) > 1:
            self.metadata["outputs"] = [clip(str(t.get("name")), 40) for t in outputs[:16]]
        return self.metadata

    def _dims(self, shape: Any, dim: int) -> list[int] | None:
        """The non-batch dims of an input shape; MetadataError when they cannot hold `dim` values."""
        if not isinstance(shape, list) or not shape or not all(isinstance(v, int) for v in shape):
            return None
        dims = shape[1:] if len(shape) >= 2 else shape
        known = [v for v in dims if v > 0]
        if len(known) == len(dims) and int(np.prod(dims)) != dim:
            raise MetadataError(f"victim.endpoint: the model's input {clip(self.input_name, 40)!r} has shape "
                                f"{shape} ({int(np.prod(dims))} values per row), but the scenario's inputs "
                                f"have {dim} (victim.data / victim.endpoint.input_dim)")
        if len(known) < len(dims) and len(dims) > 1:
            return None  # several free dims: send [n, d] and let the server say
        return [int(v) for v in dims] if len(known) == len(dims) and len(dims) > 1 else None

    def check_columns(self, want: set[int]) -> None:
        """MetadataError when the declared output width is none of `want`."""
        if self.n_cols is not None and want and self.n_cols not in want and not self.classification:
            raise MetadataError(f"victim.endpoint.output_name: the model's output has {self.n_cols} "
                                f"columns, the scenario expects {' or '.join(map(str, sorted(want)))} "
                                "(its class count)")

    # ------------------------------------------------------------------ requests
    def body(self, rows: list, explain: str | None) -> Any:
        x = np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
        if self.datatype == "FP32":
            x = x.astype(np.float32).astype(np.float64)  # the values the server computes with
        shape = [len(rows), *(self.input_dims or [x.shape[1]])]
        out: dict[str, Any] = {"inputs": [{"name": self.input_name, "shape": shape,
                                           "datatype": self.datatype, "data": x.reshape(-1).tolist()}]}
        if explain:
            out["parameters"] = {"explain": explain}
        elif self.output_name or self.classification or self.metadata.get("output"):
            want: dict[str, Any] = {"name": self.output_name or self.metadata.get("output") or "output-0"}
            if self.classification:
                want["parameters"] = {"classification": self.classification}
            out["outputs"] = [want]
        return out

    def answer(self, payload: Any, explain: str | None = None) -> Any:
        if not isinstance(payload, dict) or not isinstance(payload.get("outputs"), list):
            err = error_text(payload)
            if err is not None:
                raise AnswerError(f"answered an error: {err}")
            raise AnswerError("the response has no 'outputs' list (Open Inference Protocol)")
        outputs = [t for t in payload["outputs"] if isinstance(t, dict)]
        if not outputs:
            raise AnswerError("the response's 'outputs' list is empty")
        predicted = self.output_name or self.metadata.get("output")
        if explain:
            hit = [t for t in outputs if t.get("name") == EXPLANATION]
            if not hit and predicted is not None:  # a server's own name: the one non-prediction output
                others = [t for t in outputs if t.get("name") != predicted]
                hit = others if len(others) == 1 else []
            if not hit:
                raise AnswerError(f"the response has no explanation output (outputs: {_names(outputs)}): "
                                  "the server may ignore parameters.explain")
            return self._tensor(hit[0])
        if predicted is None and self.as_label and len(outputs) == 1:  # a label-only answer
            return self._tensor(outputs[0])
        if predicted is None:  # no outputs in the metadata: the first answer's name, from then on
            predicted = self.metadata["output"] = str(outputs[0].get("name"))
        hit = [t for t in outputs if t.get("name") == predicted]
        if not hit:
            has = f"; the model's metadata lists {_names(self.outputs)}" if self.outputs else ""
            raise AnswerError(f"the response has no output {clip(predicted, 40)!r} (it answered "
                              f"{_names(outputs)}{has}): set victim.endpoint.output_name to the output "
                              "that holds the predictions, or interface.output: label if the server "
                              "answers labels only")
        if not self.as_label and not self.classification and self._labels_only(hit[0]):
            raise AnswerError(f"output {clip(predicted, 40)!r} holds class labels, not "
                              f"{'scores' if self.output_name else 'probabilities'}: set "
                              "interface.output: label if the server answers labels only, or "
                              "victim.endpoint.output_name to the output with the probabilities "
                              f"(outputs: {_names(self.outputs or outputs)}; MLServer's scikit-learn "
                              "runtime: predict_proba)")
        return self._tensor(hit[0])

    def _labels_only(self, t: dict) -> bool:
        """An answer of one class label per row where several columns were expected."""
        shape = t.get("shape")
        one_col = isinstance(shape, list) and (len(shape) <= 1 or shape[-1] == 1)
        return bool(one_col and (self.n_cols or 0) > 1 and is_label(t))

    def _tensor(self, t: dict) -> np.ndarray:
        """The tensor's data as an array of its shape; AnswerError when they do not match."""
        label = clip(str(t.get("name")), 40)
        dtype = str(t.get("datatype", "")).upper()
        shape = t.get("shape")
        if not isinstance(shape, list) or not all(isinstance(v, int) and v >= 0 for v in shape):
            raise AnswerError(f"output {label!r} has no valid shape ({clip(str(shape), 60)})")
        if dtype == "BYTES" and self.classification:
            return self._classes(t.get("data"), shape, label)
        if dtype == "BYTES" and self.labels:  # string class labels, mapped to their index
            from victims.http.answers import decode

            data = decode(t.get("data") if isinstance(t.get("data"), list) else [], self.labels)
            if len(data) != (int(np.prod(shape)) if shape else 1):
                raise AnswerError(f"output {label!r} has shape {shape} but {len(data)} labels")
            return np.asarray(data, dtype=np.float64).reshape(shape)
        if dtype not in NUMERIC:
            raise AnswerError(f"output {label!r} has datatype {clip(dtype, 20) or 'none'}, which leakmeter "
                              "does not read (numbers; BYTES only with victim.endpoint.classification)")
        try:
            data = np.asarray(t.get("data"), dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise AnswerError(f"output {label!r}: data are not numbers in a regular array") from None
        want = int(np.prod(shape)) if shape else 1
        if data.size != want:
            raise AnswerError(f"output {label!r} has shape {shape} ({want} values) but {data.size} data "
                              "values")
        return data.reshape(shape)

    def _classes(self, data: Any, shape: list, label: str) -> np.ndarray:
        """Triton classification strings "value:index[:label]" → a top-k row per input."""
        if not isinstance(data, list) or len(data) != int(np.prod(shape)) or len(shape) < 1:
            raise AnswerError(f"output {label!r}: classification data do not match shape {shape}")
        n = shape[0]
        k = len(data) // max(n, 1)
        vals, idx = np.zeros((n, k)), np.zeros((n, k), dtype=np.int64)
        for j, item in enumerate(data):  # k strings per row; parsing strings has no vector form
            parts = str(item).split(":")
            try:
                vals[j // k, j % k], idx[j // k, j % k] = float(parts[0]), int(parts[1])
            except (ValueError, IndexError):
                raise AnswerError(f"output {label!r}: {clip(str(item), 40)!r} is not "
                                  '"value:index[:label]"') from None
        if self.as_label:
            return idx[:, :1].astype(np.float64)
        cols = self.n_cols
        if not cols:
            raise AnswerError("the classification extension needs the class count: name a dataset or "
                              "victim.endpoint.n_outputs")
        if idx.min(initial=0) < 0 or idx.max(initial=0) >= cols:
            raise AnswerError(f"output {label!r}: a class index outside 0..{cols - 1}")
        dense = np.zeros((n, cols))
        np.put_along_axis(dense, idx, vals, axis=1)
        return dense
