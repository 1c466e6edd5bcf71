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

from harness.errors import BadInput

DATASETS = ("digits", "breast_cancer", "diabetes", "fashion_mnist")
INTERFACES = ("prediction", "gradient", "smoothgrad", "whitebox")
OUTPUTS = ("label", "probabilities", "logits")


@dataclass
class Answers:
    """What `init` asks: the model (a file, or None for one leakmeter trains), the data (a bundled
    data set's name, an .npz file or an IDX folder) and the interface the deployment offers."""

    data: str = "digits"
    interface: str = "prediction"
    output: str = "probabilities"
    model: str | None = None
    name: str | None = None
    notes: list[str] = field(default_factory=list)


def slug(text: str) -> str:
    """A scenario name from free text: lower-case letters, digits and dashes."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s or "my-model"


def _c(code: str, comment: str = "") -> str:
    """A YAML line with its comment aligned at column 40."""
    return f"{code:<39} # {comment}" if comment else code


def _q(v: Any) -> str:
    """A YAML scalar (JSON strings are valid YAML and quote paths safely)."""
    return json.dumps(v) if isinstance(v, str) else str(v)


def relative_to(path: str, folder: Path) -> str:
    """`path` as the scenario will name it: relative to the scenario's folder when possible."""
    p = Path(path).resolve()
    try:
        return p.relative_to(folder.resolve()).as_posix()
    except ValueError:
        return str(p)


def data_section(data: str, folder: Path) -> tuple[list[str], list[str]]:
    """(YAML lines of victim.data, notes for the user) for a data set name, .npz file or IDX folder."""
    if data in DATASETS:
        extra = [_c("    n_train: 1000", "training records (the rest: test and the attacker's pool)")]
        if data == "fashion_mnist":
            extra.append("    # needs the Debian package: apt-get install dataset-fashion-mnist")
        return [f"    dataset: {data}"] + extra, []
    p = Path(data)
    if p.is_dir():
        return [_c("    dataset: idx", "a folder of (gzipped) IDX files, as MNIST ships"),
                f"    path: {_q(relative_to(data, folder))}",
                "    n_train: 1000"], []
    if p.suffix == ".npz" and p.is_file():
        task, notes = _npz_task(p)
        return [_c("    dataset: npz", "arrays x_train, y_train, x_test, y_test"),
                f"    path: {_q(relative_to(data, folder))}",
                _c(f"    task: {task}", "inferred from y_train; multiclass | binary | regression"),
                _c("    n_train: null", "null: every training record")], notes
    raise BadInput(f"--data: {data} is neither a bundled data set ({', '.join(DATASETS)}), an existing .npz "
                   "file nor a folder of IDX files")


def _npz_task(path: Path) -> tuple[str, list[str]]:
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in z.files]
            if missing:
                raise BadInput(f"--data: {path} lacks the arrays {', '.join(missing)} "
                               "(needs x_train, y_train, x_test, y_test)")
            y = np.asarray(z["y_train"])
    except (OSError, ValueError) as exc:
        raise BadInput(f"--data: {path} is not a readable .npz without pickles ({exc})") from None
    if np.issubdtype(y.dtype, np.floating) and not np.allclose(y, np.round(y)):
        return "regression", []
    k = len(np.unique(y))
    return ("binary" if k == 2 else "multiclass"), [f"{path.name}: {k} classes in y_train"]


def model_section(model: str | None, folder: Path) -> tuple[list[str], list[str]]:
    """(YAML lines of victim.model (+ training), notes) for a model file or a model leakmeter trains."""
    if model is None:
        return [_c("  model:", "a model leakmeter trains here, like the one you deploy"),
                _c("    arch: mlp", "mlp | cnn | logistic | linear"),
                "    hidden: [64]",
                "  training: {optimizer: sgd, lr: 0.1, momentum: 0.9, epochs: 30, batch_size: 64}"], []
    p = Path(model)
    if not p.is_file():
        raise BadInput(f"--model: {model}: no such file")
    lines = [_c("  # claimed_privacy: {epsilon: 1.0, delta: 1.0e-5}", "its DP claim, if any: audited"),
             _c("  model:", "your model, loaded as it is (never retrained)"),
             "    arch: file",
             f"    path: {_q(relative_to(model, folder))}",
             _c("    format: auto", "auto never runs code from the file")]
    notes: list[str] = []
    if p.suffix in (".pt", ".pth"):
        widths = _state_dict_widths(p)
        if widths is not None:
            lines += [_c("    spec:", "the architecture the state_dict's weights fit"),
                      "      arch: mlp",
                      _c(f"      hidden: {list(widths)}", "read from the file; check it"),
                      _c("      activation: relu", "not stored in a state_dict: check it")]
            notes.append(f"{p.name}: a state_dict with hidden widths {list(widths)}; check the activation")
    return lines, notes


def _state_dict_widths(path: Path) -> list[int] | None:
    """Hidden widths of an MLP state_dict (its 2-D weight matrices in order), or None."""
    import torch

    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - not a weights-only state_dict: leave the spec to the user
        return None
    if not isinstance(state, dict):
        return None
    mats = [v for k, v in state.items() if k.endswith("weight") and getattr(v, "ndim", 0) == 2]
    if not mats:
        return None
    return [int(m.shape[0]) for m in mats[:-1]]


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
    if a.output not in OUTPUTS:
        raise BadInput(f"--output: {a.output!r}; allowed: {', '.join(OUTPUTS)}")
    name = slug(a.name or (Path(a.model).stem if a.model else Path(a.data).stem))
    mlines, mnotes = model_section(a.model, folder)
    dlines, dnotes = data_section(a.data, folder)
    a.notes = mnotes + dnotes
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
        _c("  pool: 200", "in-distribution records it holds, disjoint from training"),
        _c("  knows_architecture: false", "true: widths and activations are public"),
        _c("interface:", "what a user of the deployment can ask"),
        _c(f"  kind: {a.interface}", "prediction | gradient | smoothgrad | whitebox"),
        _c(f"  output: {a.output}", "label | probabilities | logits"),
        _c("defenses:", "uncomment what the deployment has, or try them out"),
        _c("  query_budget: 10000", "queries all attacks together may send"),
        "  # rounding: {decimals: 2}             # round what predict returns",
        "  # output_noise: {sigma: 0.01}         # Gaussian noise on predict outputs",
        "  # explanation_noise: {sigma: 0.05}    # Gaussian noise on gradients / SmoothGrad",
        "  # dp_sgd: {epsilon: 8.0, delta: 1.0e-5, max_grad_norm: 1.0}   # DP-SGD (models leakmeter trains)",
        f"# `all`: every registered attack; those the {a.interface} interface allows (the others are",
        "# listed as skipped, with the reason):",
        *attack_comment(a.interface),
        "attacks: all",
        "policy:",
        _c("  fail_on: high", "the lowest risk that fails the run (exit 1)"),
        _c("  on_inconclusive: fail", "an attack that could not finish fails CI too (exit 4)"),
        "tracking:",
        _c("  experiment: leakmeter", "MLflow experiment (default store: ./mlflow.db)"),
    ]
    return "\n".join(lines) + "\n"
