"""What a scenario declares its model to be, for the attacks that assume something of it.

`model_facts(model)` reads the structure of the model the scenario names (never its answers):
- `network`: a neural network (hidden units behind a linear first layer), so its input gradients
  lie in that layer's row span (the span attacks' premise); a tree ensemble or a linear model
  (whose weights are the whole model, no hidden layer to recover) is not one;
- `relu_network`: a fully connected piecewise-linear ReLU network (Linear and ReLU layers only;
  an output softmax or sigmoid is its link), which the exact extraction attacks assume.
A fact is True or False when the scenario's model shows it; absent when nothing says (an endpoint
without a model file): the attacks then run and their own tests decide.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# ONNX ops of a piecewise-linear graph (affine maps, ReLU, reshaping, scikit-learn's scaler)
_PL_OPS = {"Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Relu", "Scaler", "Identity", "Flatten",
           "Reshape", "Cast", "Transpose", "Unsqueeze", "Squeeze", "Constant", "Shape", "Gather",
           "Concat"}
_LINK_OPS = {"Softmax", "LogSoftmax", "Sigmoid", "ZipMap", "Normalizer"}  # at the output only
_LINEAR_OPS = {"LinearClassifier", "LinearRegressor"}
_TREE_PREFIX = "TreeEnsemble"


def describe_facts(facts: dict[str, bool]) -> str:
    if facts.get("relu_network"):
        return "a ReLU network"
    if facts.get("network"):
        return "a network that is not a piecewise-linear ReLU network"
    if facts.get("network") is False:
        return "not a neural network"
    return "not declared"


def model_facts(model: Any) -> tuple[dict[str, bool], str]:
    """(facts, what the model is, in words) for the scenario's model."""
    graph_facts = getattr(model, "facts", None)
    if callable(graph_facts):
        return graph_facts()
    if not isinstance(model, nn.Module) or isinstance(model, torch.jit.ScriptModule):
        return {}, "a model whose structure is not declared"
    mods = [m for m in model.modules() if not list(m.children())]
    if not mods:
        return {}, "a model whose structure is not declared"
    kinds = sorted({type(m).__name__.lower() for m in mods if not isinstance(m, nn.Linear | nn.Dropout)})
    convs = any(isinstance(m, nn.Conv1d | nn.Conv2d | nn.Conv3d) for m in mods)
    relu_only = all(isinstance(m, nn.Linear | nn.ReLU | nn.Dropout) for m in mods)
    linear = all(isinstance(m, nn.Linear) for m in mods)
    if linear:
        return {"network": False, "relu_network": False}, "a linear model (no hidden layer)"
    facts = {"network": True, "relu_network": relu_only and not convs}
    if convs:
        return facts, "a convolutional network, not a fully connected network"
    what = "a fully connected ReLU network" if facts["relu_network"] else \
        f"a network with {', '.join(kinds)} layers"
    return facts, what


def graph_facts(nodes: list[Any], output: str) -> tuple[dict[str, bool], str]:
    """Facts of an ONNX graph from the nodes that feed `output` (the answer), not the label's."""
    by_out = {o: n for n in nodes for o in n.output}
    seen: list[Any] = []
    todo = [output]
    done: set[str] = set()
    while todo:
        name = todo.pop()
        node = by_out.get(name)
        if node is None or id(node) in done:
            continue
        done.add(id(node))
        seen.append(node)
        todo.extend(node.input)
    ops = {n.op_type for n in seen}
    if any(op.startswith(_TREE_PREFIX) for op in ops):
        return {"network": False, "relu_network": False}, "a tree ensemble (ONNX)"
    link_fed = {i for n in seen if n.op_type in ("Gemm", "MatMul") for i in n.input}
    links_inside = any(o in link_fed for n in seen if n.op_type in _LINK_OPS for o in n.output)
    if ops & _LINEAR_OPS or (ops <= _PL_OPS | _LINK_OPS and "Relu" not in ops and not links_inside):
        return {"network": False, "relu_network": False}, "a linear model (ONNX, no hidden layer)"
    if "Relu" in ops and ops <= _PL_OPS | _LINK_OPS and not links_inside:
        return {"network": True, "relu_network": True}, "a ReLU network (ONNX)"
    if ops & {"Gemm", "MatMul", "Conv"}:
        other = sorted(ops - _PL_OPS - _LINK_OPS) or sorted(ops & _LINK_OPS)
        return ({"network": True, "relu_network": False},
                f"a network with {', '.join(other[:4]) or 'no ReLU'} (ONNX), not piecewise-linear ReLU")
    return {}, f"an ONNX graph of {', '.join(sorted(ops)[:4])}"
