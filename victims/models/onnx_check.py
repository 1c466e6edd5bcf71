"""An ONNX graph checked before onnxruntime builds a session from it: what it would allocate, and
whether its weights are numbers.

A 2.9 KB file holding `ConstantOfShape([12000, 12000])` passed `validate` at 1.5 GB peak, and larger
shapes allocate on every query; an initializer of NaN passed `validate` and crashed `run`. Here the
graph is read as data (protobuf, no external data followed), its shapes inferred with constant
folding of shape computations (`onnx.shape_inference`, `data_prop`), and refused (BadInput, exit 2)
when any tensor it names — an initializer, a constant, a node's output — would hold more than
MAX_ONNX_ELEMENTS values for one row (symbolic sizes such as the batch count as 1), or when a
floating-point initializer or constant holds NaN or ±inf.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from victims.errors import BadInput

MAX_ONNX_ELEMENTS = 2**25  # values in one tensor for one row: 128 MiB as float32


def _elements(dims: Any) -> int | None:
    n = 1
    for d in dims:
        if isinstance(d, int):
            if d < 0:
                return None
            n *= d
    return n


def _static(shape: Any) -> list[int]:
    """A TensorShapeProto as ints (symbolic or unknown sizes as 1)."""
    return [d.dim_value if d.HasField("dim_value") else 1 for d in shape.dim]


def check_onnx_graph(path: Path, key: str = "victim.model.path",
                     max_elements: int = MAX_ONNX_ELEMENTS) -> None:
    """BadInput when the graph at `path` would allocate a tensor over `max_elements` values per
    row, or has a non-finite floating-point weight. Needs the `onnx` package (leakmeter[onnx])."""
    try:
        import numpy as np
        import onnx
        from onnx import numpy_helper, shape_inference
    except ImportError:
        raise BadInput(f"{key}: {path} is an ONNX model; checking it needs the onnx package "
                       "(pip install 'leakmeter[onnx]')") from None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises its own types
        raise BadInput(f"{key}: {path} is not a readable ONNX model ({type(exc).__name__})") from None
    g = model.graph
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in g.initializer):
        raise BadInput(f"{key}: {path} keeps weights in external files; leakmeter reads one file only")

    def too_big(name: str, n: int | None, what: str) -> None:
        if n is not None and n > max_elements:
            raise BadInput(f"{key}: {path}: {what} {name[:60]!r} would hold {n:,} values per row "
                           f"(at most {max_elements:,}); refused before onnxruntime allocates it")

    consts = [(t.name, t) for t in g.initializer]
    for node in g.node:
        if node.op_type in ("Constant", "ConstantOfShape"):
            consts += [(node.output[0] if node.output else "?", a.t) for a in node.attribute
                       if a.type == onnx.AttributeProto.TENSOR]
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
              onnx.TensorProto.BFLOAT16}
    for name, t in consts:
        too_big(name, _elements(list(t.dims)), "the weight")
        if t.data_type in floats:
            arr = numpy_helper.to_array(t)
            if not np.isfinite(arr.astype(np.float64, copy=False)).all():
                raise BadInput(f"{key}: {path}: the weight {name[:60]!r} holds NaN or infinite values")
    try:
        inferred = shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - a graph whose shapes cannot be inferred
        raise BadInput(f"{key}: {path}: its shapes cannot be checked ({type(exc).__name__}); "
                       "refused before onnxruntime builds it") from None
    ig = inferred.graph
    for v in list(ig.value_info) + list(ig.output):
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            too_big(v.name, _elements(_static(v.type.tensor_type.shape)), "the tensor")
    # a ConstantOfShape / Expand whose shape is a constant, in case inference left it unsized
    known = {name: t for name, t in consts}
    for node in g.node:
        idx = {"ConstantOfShape": 0, "Expand": 1}.get(node.op_type)
        if idx is not None and len(node.input) > idx and node.input[idx] in known:
            dims = numpy_helper.to_array(known[node.input[idx]]).reshape(-1).tolist()
            too_big(node.output[0] if node.output else "?", _elements(int(d) for d in dims),
                    f"the output of {node.op_type}")
