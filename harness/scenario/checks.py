"""Checks a scenario needs beyond its schema, done before anything runs (at `validate` and at the
start of every command): the files it names exist and are of a format leakmeter reads safely,
the victim it describes fits in this machine's memory, and Ray is there when reference models
are to train on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.errors import BadInput
from victims.limits import READ_AT_CHECK, check_model_archive, machine_memory  # noqa: F401 (re-exported)

# input features of the bundled datasets
KNOWN_DIMS = {"digits": 64, "breast_cancer": 30, "diabetes": 10, "fashion_mnist": 784}
ROWS_PER_PASS = 8192  # rows per forward/backward pass when answering queries (victims/local.py)
GIB = 1024**3




def memory_estimate(s: Any) -> dict[str, float]:
    """Bytes a locally built victim needs, by part: model (weights, gradients, optimizer state,
    per-example gradients under DP-SGD), activations (one pass) and data. Upper-bound style."""
    m, d, t = s.victim.model, s.victim.data, s.victim.training
    dim = d.dim if d.dataset == "gaussian" else KNOWN_DIMS.get(d.dataset)
    if dim is None:  # user data: its size is known only once read
        return {}
    k = len(d.classes) if d.classes else 10
    width_in = dim * (max(m.channels) if m.arch == "cnn" and m.channels else 1)
    hidden = [] if m.arch in ("logistic", "linear") else list(m.hidden)
    widths = [width_in, *hidden, k]
    params = sum(a * b + b for a, b in zip(widths, widths[1:], strict=False))
    size = 8 if t.dtype == "float64" else 4
    batch = t.batch_size or (d.n_train or 1000)
    per_example = batch * params * size if s.defenses.dp_sgd is not None else 0
    rows = max(batch, ROWS_PER_PASS)
    n_rows = (d.n_train or 1000) + (d.n_test or 1000) + d.attacker_pool
    return {"model": params * size * 4.0 + per_example,
            "activations": rows * sum(widths) * size * 3.0,
            "data": n_rows * dim * 8 * 2.0}


def check_memory(s: Any, available: int | None = None) -> None:
    """BadInput when the victim cannot fit in memory, naming the key that makes it so."""
    if s.victim.endpoint is not None or s.victim.model.arch == "file":
        return
    parts = memory_estimate(s)
    if not parts:
        return
    need = sum(parts.values())
    have = available if available is not None else machine_memory()
    if need <= have:
        return
    biggest = max(parts, key=parts.get)
    key = {"model": "victim.model.hidden", "activations": "victim.model.hidden",
           "data": "victim.data.n_train"}[biggest]
    if biggest == "data" and s.victim.data.dataset == "gaussian":
        key = "victim.data.dim"
    value = {"victim.model.hidden": s.victim.model.hidden, "victim.data.n_train": s.victim.data.n_train,
             "victim.data.dim": s.victim.data.dim}[key]
    raise BadInput(f"{key}: {value} makes a victim that needs about {need / GIB:.1f} GiB "
                   f"({biggest} {parts[biggest] / GIB:.1f} GiB), more than this machine's "
                   f"{have / GIB:.1f} GiB; allowed: a smaller victim")


def check_files(s: Any) -> None:
    """The model file is there and of a format read without running code (or opted in); data
    files are there."""
    m, d = s.victim.model, s.victim.data
    if m.arch == "file":
        from victims.models.files import read_tensors, resolve_format

        fmt = resolve_format(m)  # checks the sizes the file declares first (victims/limits.py)
        if fmt in ("state_dict", "safetensors") and check_model_archive(m.path) <= READ_AT_CHECK:
            read_tensors(Path(m.path), fmt)  # a restricted read: a pickled object is refused now
            if s.victim.endpoint is None and d.dataset not in ("fashion_mnist", "idx", "gaussian"):
                _spec_fits(s)  # `validate` must not pass a spec that `run` cannot load
        if fmt == "onnx" and s.interface.kind != "prediction" and s.victim.endpoint is None:
            raise BadInput(f"interface.kind: {s.interface.kind} needs input gradients or weights, which "
                           "an ONNX model does not give; allowed with ONNX: prediction")
    if d.dataset == "npz":
        from victims.data.datasets import check_npz

        check_npz(d.path)
    if d.dataset == "idx" and not Path(d.path).is_dir():
        raise BadInput(f"victim.data.path: {d.path} is not a folder of IDX files")


def _spec_fits(s: Any) -> None:
    """BadInput (the loader's whole message) when the file's weights do not fit victim.model.spec
    with the data's input and output widths (small data sets only: it reads them)."""
    from victims.data.datasets import load_dataset
    from victims.models.files import load_model_file

    data = load_dataset(s.victim.data, s.seed)
    load_model_file(s.victim.model, data.input_shape, data.n_outputs)


def check_startup_budget(s: Any) -> None:
    """An endpoint is checked with 1 row (2 with explanations) before any attack: the budget
    must leave room for it (nothing is sent otherwise)."""
    budget = s.defenses.query_budget
    need = 2 if s.interface.kind in ("gradient", "smoothgrad") else 1
    if s.victim.endpoint is not None and budget is not None and budget < need:
        raise BadInput(f"defenses.query_budget: {budget} leaves nothing for the start-up check of the "
                       f"endpoint ({need} row(s)); allowed: at least {need}")


def preflight(s: Any) -> None:
    """Every check that needs the file system or the machine; BadInput (exit 2) on the first."""
    from harness.core.ray_cluster import ray_preflight

    check_files(s)
    check_memory(s)
    check_startup_budget(s)
    if s.membership is not None and s.membership.executor == "ray":  # Ray installed, its cluster up
        ray_preflight(s.membership.ray_address, "membership.executor: ray", "membership.ray_address")
