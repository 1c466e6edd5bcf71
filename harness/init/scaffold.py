"""`leakmeter init`: a commented starting scenario from a model file, a data set and an interface.

Nothing here runs a model or unpickles anything: a state_dict is read with `weights_only=True`
only to propose the widths of its linear layers, and an .npz is read with `allow_pickle=False`
only to see its shapes and labels. The text is written with comments a first-time user needs
(what each section means, the defenses to try next), then validated like any scenario.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import BadInput

DATASETS = ("digits", "breast_cancer", "diabetes", "fashion_mnist")
INTERFACES = ("prediction", "gradient", "smoothgrad", "whitebox")
OUTPUTS = ("label", "probabilities", "logits")


@dataclass
class Answers:
    """What `init` asks: the model (a file, or None for one leakmeter trains), the data (a bundled
    data set's name, an .npz file or an IDX folder) and the interface the deployment offers."""

    data: str = "digits"
    interface: str = "prediction"
    output: str | None = None  # None: probabilities (classification) or logits (regression)
    model: str | None = None
    name: str | None = None
    activation: str | None = None  # a state_dict's activation (never in the file): asked, or assumed
    notes: list[str] = field(default_factory=list)


def slug(text: str) -> str:
    """A scenario name from free text: lower-case letters, digits and dashes."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s or "my-model"


def _c(code: str, comment: str = "") -> str:
    """A YAML line with its comment aligned at column 40."""
    return f"{code:<39} # {comment}" if comment else code


def _more(indent: str, text: str) -> str:
    """A comment line continuing the one above (its text at column 40)."""
    return f"{indent}#".ljust(40) + text


def _q(v: Any) -> str:
    """A YAML scalar (JSON strings are valid YAML and quote paths safely)."""
    return json.dumps(v) if isinstance(v, str) else str(v)


def _wrap(text: str, width: int = 60) -> list[str]:
    """A long comment as lines of at most `width` characters."""
    import textwrap

    return textwrap.wrap(text, width)


def relative_to(path: str, folder: Path) -> str:
    """`path` as the scenario will name it: relative to the scenario's folder when possible."""
    p = Path(path).resolve()
    try:
        return p.relative_to(folder.resolve()).as_posix()
    except ValueError:
        return str(p)


@dataclass
class FileModel:
    """What a model file's header and shapes say (nothing is run): its format, the widths of its
    linear layers in order [input, hidden..., output], and which layers carry a bias."""

    fmt: str
    widths: list[int] | None = None
    biases: list[bool] | None = None
    answers: int | None = None  # an ONNX graph's answer width, when its input width is fixed
    norm: str = "none"  # the hidden layers' norm a state_dict's keys show
    output_name: str | None = None  # the ONNX output that answers (its float scores)
    read_as: str | None = None  # how that output is read: probabilities | sigmoid | scores

    @property
    def outputs(self) -> int | None:
        return self.widths[-1] if self.widths else self.answers


# records the bundled data sets hold (train + test + pool are drawn from these)
SIZES = {"digits": 1797, "breast_cancer": 569, "diabetes": 442}
POOL = 200  # the attacker's records asked for by default
MANY_VALUES = 20  # a floating-point target with more distinct values is read as a regression target


def data_section(data: str, folder: Path, model: FileModel | None = None
                 ) -> tuple[list[str], list[str], str, tuple[int, str]]:
    """(YAML lines of victim.data, notes for the user, the task, (attacker pool, where it comes
    from)) for a data set name, .npz file or IDX folder. `model` (a user's file) decides how
    two classes are read (one output: binary; two: multiclass) and turns standardising off."""
    own = model is not None
    keep = ([_c("    standardize: none", "your model's inputs as they are in the data; standard"),
             _more("    ", "| center | minmax only if leakmeter must transform them")] if own else [])
    if data in DATASETS:
        task = {"breast_cancer": "binary", "diabetes": "regression"}.get(data, "multiclass")
        n = SIZES.get(data)
        n_train = 1000 if n is None else min(1000, n // 2)
        pool = POOL if n is None else min(POOL, n // 4)
        lines = [f"    dataset: {data}",
                 _c(f"    n_train: {n_train}", f"training records of {n}; the rest: test and the attacker's"
                    if n else "training records; the rest: test and the attacker's pool")]
        if n:
            lines.append(_more("    ", "pool"))
        notes: list[str] = []
        task, tl, tn = _task_lines(task, model, data)
        lines += tl + keep
        notes += tn
        if data == "fashion_mnist":
            lines.append("    # needs the Debian package: apt-get install dataset-fashion-mnist")
        return lines, notes, task, (pool, "records of the same data set, never used in training")
    p = Path(data)
    if p.is_dir():
        task, tl, tn = _task_lines("multiclass", model, p.name)
        return ([_c("    dataset: idx", "a folder of (gzipped) IDX files, as MNIST ships"),
                 f"    path: {_q(relative_to(data, folder))}",
                 _c("    n_train: null" if own else "    n_train: 1000",
                    "null: every training record" if own else "training records")] + tl + keep,
                tn, task, (POOL, "training records not used in training"))
    if p.suffix == ".npz" and p.is_file():
        info = _npz_info(p)
        task, tl, tn = _task_lines(info["task"], model, p.name, info.get("classes"),
                                   info.get("float_y", False))
        notes = tn
        if info["x_pool"] is not None:
            pool = (info["x_pool"], "the x_pool/y_pool arrays of your .npz")
        else:
            n_pool = min(POOL, info["x_test"] // 2)
            pool = (n_pool, f"{n_pool} of the {info['x_test']} records of x_test (your .npz has no "
                            "x_pool/y_pool: add them to give the attacker records of its own)")
            notes.append(f"{p.name}: no x_pool/y_pool; the attacker's {n_pool} records are taken from "
                         "x_test, the rest of x_test measures accuracy")
        return ([_c("    dataset: npz", "arrays x_train, y_train, x_test, y_test (+ x_pool, y_pool)"),
                 f"    path: {_q(relative_to(data, folder))}"] + tl +
                [_c("    n_train: null", "null: every record of x_train (the members)")] + keep,
                notes, task, pool)
    raise BadInput(f"--data: {data} is neither a bundled data set ({', '.join(DATASETS)}), an existing .npz "
                   "file nor a folder of IDX files")


def _task_lines(task: str, model: FileModel | None, name: str, classes: int | None = None,
                float_y: bool = False) -> tuple[str, list[str], list[str]]:
    """(task, its YAML lines, notes): a two-class model with two outputs is multiclass to leakmeter;
    a target of many values answered by one score (or, without a model, a floating-point target
    of many values) is a regression, never a classifier with one class per value."""
    outs = model.outputs if model is not None else None
    scores = model is None or model.read_as in (None, "scores")
    if task != "regression" and classes and classes > 2 and scores and (
            outs == 1 or (outs is None and float_y and classes > MANY_VALUES)):
        why = ("and your model answers one value" if outs == 1 else "(floating-point)")
        return "regression", [_c("    task: regression", f"y has {classes} distinct values {why}"),
                              _more("    ", "multiclass | binary | regression")], []
    if task == "binary" and outs == 2:
        return "multiclass", [_c("    task: multiclass", "2 classes and your model has 2 outputs, one per"),
                              _more("    ", "class (binary is a model with one output, a logit)")], []
    if task == "regression":
        lines = [_c("    task: regression", "y is real-valued; multiclass | binary | regression")]
    else:
        why = f"{classes} classes in y_train" if classes else "inferred from the data"
        lines = [_c(f"    task: {task}", f"{why}; multiclass | binary | regression")]
    notes: list[str] = []
    want = {"binary": 1, "regression": 1}.get(task)
    if outs is not None and want is not None and outs != want:
        notes.append(f"{name}: a {task} task needs a model with {want} output; yours has {outs}")
    elif outs is not None and task == "multiclass" and classes and outs < classes:
        notes.append(f"{name}: {classes} classes but your model has {outs} outputs")
    return task, lines, notes


def _npz_info(path: Path) -> dict[str, Any]:
    """Task, class count and split sizes of an .npz (read with allow_pickle=False)."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in z.files]
            if missing:
                raise BadInput(f"--data: {path} lacks the arrays {', '.join(missing)} "
                               "(needs x_train, y_train, x_test, y_test)")
            y = np.asarray(z["y_train"])
            n_test = len(z["x_test"])
            n_pool = len(z["x_pool"]) if "x_pool" in z.files and "y_pool" in z.files else None
    except (OSError, ValueError) as exc:
        raise BadInput(f"--data: {path} is not a readable .npz without pickles ({exc})") from None
    floating = bool(np.issubdtype(y.dtype, np.floating))
    if floating and not np.allclose(y, np.round(y)):
        return {"task": "regression", "x_test": n_test, "x_pool": n_pool}
    k = len(np.unique(y))
    return {"task": "binary" if k == 2 else "multiclass", "classes": k, "x_test": n_test, "x_pool": n_pool,
            "float_y": floating}


def model_section(model: str | None, folder: Path, activation: str | None = None
                  ) -> tuple[list[str], list[str], FileModel | None]:
    """(YAML lines of victim.model (+ training), notes, what the file says) for a model file or a
    model leakmeter trains."""
    if model is None:
        return [_c("  model:", "a model leakmeter trains here, like the one you deploy"),
                _c("    arch: mlp", "mlp | cnn | logistic | linear"),
                "    hidden: [64]",
                "  training: {optimizer: sgd, lr: 0.1, momentum: 0.9, epochs: 30, batch_size: 64}"], [], None
    p = Path(model)
    if not p.is_file():
        raise BadInput(f"--model: {model}: no such file")
    info = read_model_file(p)
    lines = [_c("  # claimed_privacy: {epsilon: 1.0, delta: 1.0e-5}", "its DP claim, if any: audited"),
             _c("  model:", "your model, loaded as it is (never retrained)"),
             "    arch: file",
             f"    path: {_q(relative_to(model, folder))}",
             _c("    format: auto", f"auto never runs code from the file (this one: {info.fmt})")]
    notes: list[str] = []
    if info.fmt in ("state_dict", "safetensors") and info.widths is not None:
        hidden = info.widths[1:-1]
        lines += [_c("    spec:", "the architecture the file's weights fit"),
                  "      arch: mlp",
                  _c(f"      hidden: {hidden}", f"read from the file: widths {info.widths}")]
        if info.norm != "none":
            what = "BatchNorm1d" if info.norm == "batch" else "LayerNorm"
            lines.append(_c(f"      norm: {info.norm}", f"read from the file ({what} per hidden layer)"))
        if info.biases is not None and not all(info.biases):
            lines.append(_c(f"      bias: {_bias(info.biases)}", "read from the file"))
        if activation is None:
            lines += [_c("      activation: relu", "ASSUMED: a state_dict does not store it; relu |"),
                      _more("      ", "leaky_relu | gelu | silu | tanh | sigmoid")]
            notes.append(f"{p.name}: the activation is not stored in a {info.fmt} file; relu was ASSUMED "
                         "(wrong activation = a wrong model audited): check victim.model.spec.activation "
                         "or pass --activation")
        else:
            lines.append(_c(f"      activation: {activation}", "as given (a state_dict does not store it)"))
        notes.append(f"{p.name}: a {info.fmt} with layer widths {info.widths}"
                     + (f" and {info.norm} norms" if info.norm != "none" else ""))
    if info.fmt == "onnx" and info.output_name is not None:
        how = {"probabilities": "probabilities", "sigmoid": "a probability",
               "scores": "scores (logits or values)"}[info.read_as or "scores"]
        lines.append(_c(f"    output_name: {_q(info.output_name)}", f"the answer: the graph's {how}"))
        notes.append(f"{p.name}: answers with its output {info.output_name!r} ({how}, width {info.answers})")
    return lines, notes, info


def _bias(biases: list[bool]) -> str:
    return "false" if not any(biases) else "[" + ", ".join("true" if b else "false" for b in biases) + "]"


def read_model_file(path: Path) -> FileModel:
    """The file's format and linear-layer shapes, read without running anything (a state_dict
    with `weights_only=True`, a safetensors header, an ONNX graph's output shape); BadInput for
    files leakmeter does not read."""
    from victims.models.files import sniff

    fmt = sniff(path)
    if fmt == "torchscript":
        raise BadInput(f"--model: {path} is a TorchScript archive, a program whose code runs when it is "
                       "loaded; export its weights as a state_dict, safetensors or ONNX file (or write "
                       "format: torchscript and run with --trust-model-code, for files you trust)")
    if fmt == "unknown":
        raise BadInput(f"--model: {path} is not a model file leakmeter reads (allowed: a state_dict "
                       "saved with torch.save, safetensors, ONNX)")
    if fmt == "onnx":
        found = _onnx_answer(path)
        if found is None:
            return FileModel(fmt)
        name, width, read_as = found
        return FileModel(fmt, answers=width, output_name=name, read_as=read_as)
    shapes: list[tuple[str, tuple[int, ...]]] = []
    try:
        if fmt == "state_dict":
            import torch

            state = torch.load(str(path), map_location="cpu", weights_only=True)
            if isinstance(state, dict):
                shapes = [(k, tuple(v.shape)) for k, v in state.items() if hasattr(v, "shape")]
        elif fmt == "safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as f:
                shapes = [(k, tuple(f.get_slice(k).get_shape())) for k in f.keys()]  # noqa: SIM118
    except Exception as exc:  # noqa: BLE001 - not readable as weights: the same refusal as `run`
        raise BadInput(f"--model: {path} is not a weights-only {fmt} file ({type(exc).__name__}); "
                       "nothing was run") from None
    from victims.models.layers import read_layers

    layers = read_layers(shapes)
    if layers.unsupported:
        raise BadInput("--model: " + layers.refusal(path).removeprefix("victim.model.spec: "))
    if not layers.widths:
        return FileModel(fmt)
    return FileModel(fmt, layers.widths, layers.biases, norm=layers.norm)


def attack_comment(interface: str) -> list[str]:
    """Comment lines naming the attacks `attacks: all` will run against this interface."""
    from harness.attacks import registry

    names = [c.name for c in registry().values() if interface in c.needs]
    out, line = [], "#   "
    for n in names:
        if len(line) + len(n) > 100:
            out.append(line.rstrip(", "))
            line = "#   "
        line += n + ", "
    out.append(line.rstrip(", "))
    return out


def scenario_text(a: Answers, folder: Path) -> str:
    """The commented scenario YAML for these answers (scenario paths relative to `folder`)."""
    if a.interface not in INTERFACES:
        raise BadInput(f"--interface: {a.interface!r}; allowed: {', '.join(INTERFACES)}")
    if a.output is not None and a.output not in OUTPUTS:
        raise BadInput(f"--output: {a.output!r}; allowed: {', '.join(OUTPUTS)}")
    name = slug(a.name or (Path(a.model).stem if a.model else Path(a.data).stem))
    mlines, mnotes, info = model_section(a.model, folder, a.activation)
    dlines, dnotes, task, (pool, pool_from) = data_section(a.data, folder, info)
    a.notes = mnotes + dnotes
    output = a.output or ("logits" if task == "regression" else "probabilities")
    if task == "regression" and output != "logits":
        a.notes.append(f"a regression model's predict returns its value: output {output} became logits")
        output = "logits"
    if info is not None and info.fmt == "onnx" and a.interface != "prediction":
        raise BadInput(f"--interface: {a.interface} needs input gradients or weights, which an ONNX model "
                       "does not give; allowed with ONNX: prediction")
    lines = [
        f"# leakmeter scenario written by `leakmeter init` for {name}.",
        "# It describes a deployment: the model, its data, the interface users get and its defenses;",
        "# `leakmeter run` plays the attacker against it. Check with `leakmeter validate <this file>`.",
        "# Every key: docs/contract.md.",
        f"name: {name}",
        "seed: 0",
        _c("device: auto", "auto | cpu | cuda"),
        "victim:",
        *mlines,
        "  data:",
        *dlines,
        _c("attacker:", "what the attacker knows, reported with the results"),
        _c(f"  pool: {pool}", "in-distribution records it holds, disjoint from training:"),
        *(_more("  ", part) for part in _wrap(pool_from)),
        _c("  knows_architecture: false", "true: widths and activations are public"),
        _c("interface:", "what a user of the deployment can ask"),
        _c(f"  kind: {a.interface}", "prediction | gradient | smoothgrad | whitebox"),
        _c(f"  output: {output}", "label | probabilities | logits" + (" (regression: the value)"
                                                                       if task == "regression" else "")),
        _c("defenses:", "what the deployment has: uncomment what applies, or try it out"),
        _c("  # query_budget: 10000", "what ONE client (one API key) may send, e.g. its daily quota;"),
        _more("  ", "every attack faces it whole, and a budget that stops one"),
        _more("  ", "holds only if a surrogate under it stays below fail_on"),
        "  # rounding: {decimals: 2}             # round what predict returns",
        "  # output_noise: {sigma: 0.01}         # Gaussian noise on predict outputs",
        "  # explanation_noise: {sigma: 0.05}    # Gaussian noise on gradients / SmoothGrad",
    ]
    if a.model is None:
        lines.append("  # dp_sgd: {epsilon: 8.0, delta: 1.0e-5, max_grad_norm: 1.0}   # train with DP-SGD")
    lines += [
        f"# `all`: every registered attack; those the {a.interface} interface allows (the others are",
        "# listed as skipped, with the reason):",
        *attack_comment(a.interface),
        "attacks: all",
        "policy:",
        _c("  fail_on: high", "the lowest risk that fails the run (exit 1)"),
        _c("  on_inconclusive: fail", "an attack that could not finish fails CI too (exit 4)"),
        "tracking:",
        _c(f"  experiment: {name}", "MLflow experiment, one per model: `compare` ranks within one"),
    ]
    return "\n".join(lines) + "\n"


def _onnx_answer(path: Path) -> tuple[str, int, str] | None:
    """(output name, width, how it is read) of the answer an ONNX graph gives (None without
    onnxruntime or a fixed input width); BadInput when it has no score output."""
    try:
        from victims.models.onnx_model import onnx_answer
    except ImportError:
        return None
    try:
        found = onnx_answer(path)
    except ImportError:
        return None
    except BadInput as exc:
        raise BadInput(str(exc).replace("victim.model.path: ", "--model: ", 1)) from None
    return None if found is None else found[:3]
