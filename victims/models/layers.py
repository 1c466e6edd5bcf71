"""What a state_dict's keys say about its layers, read from names and shapes only (nothing runs).

A fully connected network is Linear layers (a 2-D `weight`, maybe a `bias`), each hidden one
optionally followed by a norm: BatchNorm1d (`running_mean`, `running_var`) or LayerNorm (a 1-D
`weight` without running statistics). Dropout and activations hold no tensors, so the activation
is never in the file. Anything else (a convolution, an embedding, attention, a recurrent layer,
a skip connection) is a layer `victim.model.spec` cannot express: `Layers.unsupported` names it and
the way out is an ONNX export of the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ONNX_WAY_OUT = ("export the model to ONNX (torch.onnx.export) and give that file as victim.model.path: "
                "leakmeter answers any ONNX graph")
NORM_KEYS = {"running_mean", "running_var", "num_batches_tracked"}


@dataclass
class Group:
    """The tensors of one module (keys sharing a prefix), in file order."""

    prefix: str
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """linear | batch | layer | other."""
        w = self.shapes.get("weight")
        names = set(self.shapes)
        if "running_mean" in names:
            return "batch" if names <= {"weight", "bias"} | NORM_KEYS else "other"
        if w is not None and len(w) == 2 and names <= {"weight", "bias"}:
            return "linear"
        if w is not None and len(w) == 1 and names <= {"weight", "bias"}:
            return "layer"
        return "other"

    def describe(self) -> str:
        w = self.shapes.get("weight")
        keys = ", ".join(sorted(self.shapes))
        name = self.prefix or "(top level)"
        if w is not None and len(w) >= 3:
            return f"a convolution {name!r} (weight of shape {tuple(w)})"
        if any(k.startswith(("weight_ih", "weight_hh")) for k in self.shapes):
            return f"a recurrent layer {name!r}"
        if any("in_proj" in k for k in self.shapes):
            return f"an attention layer {name!r}"
        return f"layer {name!r} (tensors {keys})"


def groups(shapes: list[tuple[str, tuple[int, ...]]]) -> list[Group]:
    """Tensors grouped by module, in the order the file lists them."""
    out: dict[str, Group] = {}
    for key, shape in shapes:
        prefix, _, leaf = key.rpartition(".")
        out.setdefault(prefix, Group(prefix)).shapes[leaf] = tuple(shape)
    return list(out.values())


@dataclass
class Layers:
    """A reading of a state_dict as an MLP: widths [input, hidden..., output], biases per Linear
    layer, the hidden layers' norm; `unsupported` (one phrase) when it is not such a network."""

    widths: list[int] | None = None
    biases: list[bool] | None = None
    norm: str = "none"
    unsupported: str | None = None

    def refusal(self, path: object) -> str:
        return (f"victim.model.spec: {path} holds {self.unsupported}, which victim.model.spec cannot "
                f"express (it describes Linear layers with batch or layer norms); {ONNX_WAY_OUT}")


def read_layers(shapes: list[tuple[str, tuple[int, ...]]]) -> Layers:
    """The MLP a state_dict's names and shapes describe (Linear → norm → activation per layer)."""
    gs = groups(shapes)
    other = [g for g in gs if g.kind == "other"]
    if other:
        return Layers(unsupported=other[0].describe())
    lins = [g for g in gs if g.kind == "linear"]
    norms = [g for g in gs if g.kind in ("batch", "layer")]
    if not lins:
        return Layers(unsupported="no Linear layer (no 2-D weight)") if gs else Layers()
    widths = [lins[0].shapes["weight"][1]] + [g.shapes["weight"][0] for g in lins]
    for prev, g in zip(lins, lins[1:], strict=False):
        if g.shapes["weight"][1] != prev.shapes["weight"][0]:
            return Layers(unsupported=(f"layer {g.prefix!r} taking {g.shapes['weight'][1]} inputs after "
                                       f"{prev.prefix!r} gives {prev.shapes['weight'][0]} (a skip "
                                       "connection, concatenation or another order)"))
    biases = ["bias" in g.shapes for g in lins]
    hidden = widths[1:-1]
    if not norms:
        return Layers(widths, biases)
    kinds = {g.kind for g in norms}
    sizes = [g.shapes.get("weight", g.shapes.get("running_mean", (0,)))[0] for g in norms]
    if len(kinds) > 1 or len(norms) != len(hidden) or sizes != hidden:
        what = " and ".join(sorted({"BatchNorm" if k == "batch" else "LayerNorm" for k in kinds}))
        return Layers(unsupported=(f"{what} layers of widths {sizes} after hidden layers of widths "
                                   f"{hidden} (the spec puts one norm after each hidden layer)"))
    return Layers(widths, biases, kinds.pop())
