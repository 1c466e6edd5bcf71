"""Hostile ONNX files written by hand with onnx.helper (tests and benchmarks/hostile_round4.py):
a 3 KB graph that allocates a [12000, 12000] tensor, and a graph whose weight is NaN."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _graph(path: Path, nodes: list, inits: list, out_dim: int = 1) -> Path:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", out_dim])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def linear_onnx(path: Path, w: np.ndarray | None = None) -> Path:
    """y = x @ w (w (4, 1) float32): a plain, valid victim; `w` with NaN for the NaN case."""
    from onnx import helper, numpy_helper

    w = np.full((4, 1), 0.5, np.float32) if w is None else w.astype(np.float32)
    return _graph(path, [helper.make_node("MatMul", ["x", "w"], ["y"])], [numpy_helper.from_array(w, "w")])


def big_constant_onnx(path: Path, side: int = 12000) -> Path:
    """y = x @ w + sum(ConstantOfShape([side, side])) * 0: a few KB that allocate side² floats."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.full((4, 1), 0.5, np.float32), "w"),
             numpy_helper.from_array(np.array([side, side], np.int64), "shape"),
             numpy_helper.from_array(np.zeros((1,), np.float32), "zero")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]),
             helper.make_node("ConstantOfShape", ["shape"], ["big"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
             helper.make_node("Mul", ["s", "zero"], ["z"]),
             helper.make_node("Add", ["xw", "z"], ["y"])]
    return _graph(path, nodes, inits)
