"""Datasets a victim is trained on: bundled scikit-learn sets, synthetic Gaussian inputs,
user `.npz` arrays, and gzip IDX files (Fashion-MNIST or any IDX folder).

Every loader returns a `Dataset` with four disjoint splits: train (the victim's private data),
test (utility), pool (the attacker's public data, disjoint from train) and the record of how
inputs were split and normalised.
"""

from __future__ import annotations

import gzip
import os
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from victims.errors import BadInput
from victims.http.secrets import clip

FASHION_DIRS = ("/usr/share/datasets/fashion-mnist", "/usr/share/fashion-mnist")
# each dataset's documented raw input range (what its documentation promises every record obeys)
DOCUMENTED_RANGE = {"digits": (0.0, 16.0, "pixels 0..16"), "fashion_mnist": (0.0, 1.0, "pixels 0..255 / 255"),
                    "idx": (0.0, 1.0, "bytes 0..255 / 255")}


@dataclass
class Dataset:
    """Arrays of one dataset, already split and normalised (float64 inputs)."""

    name: str
    task: str  # multiclass | binary | regression
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    x_pool: np.ndarray
    y_pool: np.ndarray
    input_shape: tuple[int, ...]
    n_classes: int  # 0 for regression
    record: dict[str, Any] = field(default_factory=dict)
    # per-feature mean subtracted by `center` / `minmax_center`: scorers add it back to compare
    # and show images in pixel space
    offset: np.ndarray | None = None
    # the documented input range in the model's units (the raw range, e.g. digits' pixels 0..16,
    # mapped through the deployed preprocessing): public knowledge, unlike the training split's
    domain: tuple[float, float] | None = None
    domain_note: str = ""

    @property
    def dim(self) -> int:
        return int(np.prod(self.input_shape))

    @property
    def n_outputs(self) -> int:
        """Width of the model's raw output: classes for multiclass, 1 for binary/regression."""
        return self.n_classes if self.task == "multiclass" else 1


def _read_idx(path: Path) -> np.ndarray:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise BadInput(f"{path}: not an IDX file (bad magic number)")
    dtypes = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
    code, ndim = raw[2], raw[3]
    if code not in dtypes:
        raise BadInput(f"{path}: unknown IDX data type 0x{code:02x}")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=dtypes[code], offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise BadInput(f"{path}: IDX header says {shape} but holds {data.size} values")
    return data.reshape(shape)


def _find(folder: Path, stems: tuple[str, ...]) -> Path:
    for stem in stems:
        for suffix in ("", ".gz"):
            for cand in folder.glob(f"{stem}*{suffix}"):
                if cand.is_file():
                    return cand
    raise BadInput(f"{folder}: no IDX file matching {' or '.join(stems)}")


def load_idx_folder(folder: str | Path) -> tuple[np.ndarray, ...]:
    """Read train/test images and labels from a folder of IDX files (MNIST naming)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BadInput(f"victim.data.path: {folder} is not a folder of IDX files")
    xtr = _read_idx(_find(folder, ("train-images", "train_images")))
    ytr = _read_idx(_find(folder, ("train-labels", "train_labels")))
    xte = _read_idx(_find(folder, ("t10k-images", "test-images", "test_images")))
    yte = _read_idx(_find(folder, ("t10k-labels", "test-labels", "test_labels")))
    return xtr, ytr, xte, yte


def fashion_mnist_dir() -> Path | None:
    """The installed Fashion-MNIST folder (Debian's dataset-fashion-mnist), or None."""
    env = os.environ.get("LEAKMETER_FASHION_MNIST")
    for d in ((env,) if env else ()) + FASHION_DIRS:
        p = Path(d)
        if p.is_dir() and any(p.glob("*images*")):
            return p
    return None


def _sklearn(name: str) -> tuple[np.ndarray, np.ndarray, tuple[int, ...], str]:
    """A scikit-learn dataset as fresh (x, y) copies, its input shape and task."""
    x, y, shape, task = _sklearn_arrays(name)
    return x.copy(), y.copy(), shape, task


@lru_cache(maxsize=3)
def _sklearn_arrays(name: str) -> tuple[np.ndarray, np.ndarray, tuple[int, ...], str]:
    """Read once per process: load_digits parses a gzipped CSV (~20 ms), which a sweep or a
    scan of many cells would otherwise repeat for every victim."""
    from sklearn import datasets as skd

    if name == "digits":
        b = skd.load_digits()
        return b.data.astype(np.float64), b.target.astype(np.int64), (1, 8, 8), "multiclass"
    if name == "breast_cancer":
        b = skd.load_breast_cancer()
        return b.data.astype(np.float64), b.target.astype(np.int64), (30,), "binary"
    b = skd.load_diabetes()
    return b.data.astype(np.float64), b.target.astype(np.float64), (10,), "regression"


NPZ_ARRAYS = ("x_train", "y_train", "x_test", "y_test")
NUMERIC = "biuf"  # numpy dtype kinds an array may have: bool, integers, floats
MAX_LABEL = 100_000  # class labels are indices 0..K-1 with K at most this


def check_npz(path: str | Path) -> dict[str, Any]:
    """BadInput unless `path` is an .npz whose arrays leakmeter can use, judged from the archive's
    directory and the .npy headers alone (victims/limits.py: declared sizes within the limit,
    plain numeric dtypes): x_train, y_train, x_test, y_test (and x_pool/y_pool together),
    inputs of at least one feature with the same features in every split, labels one per row.
    Returns the manifest (name → declared shape and dtype)."""
    from victims.limits import npz_manifest

    p = Path(path)
    where = f"victim.data.path: {p}"
    if not p.is_file():
        raise BadInput(f"{where} not found (an .npz file)")
    arrays = npz_manifest(p)
    missing = [k for k in NPZ_ARRAYS if k not in arrays]
    if missing:
        raise BadInput(f"{where} lacks arrays {missing}; needs x_train, y_train, x_test, y_test")
    if ("x_pool" in arrays) != ("y_pool" in arrays):
        raise BadInput(f"{where}: x_pool and y_pool come together (the attacker's own data and labels)")
    for name, e in arrays.items():
        if name not in (*NPZ_ARRAYS, "x_pool", "y_pool"):
            continue
        if e.dtype.kind not in NUMERIC:
            raise BadInput(f"{where}: {name} has dtype {e.dtype}; allowed: numbers (bool, int, float)")
        if len(e.shape) == 0:
            raise BadInput(f"{where}: {name} is a single value (0-d); allowed: one row per record")
    for split in ("train", "test", "pool"):
        if f"x_{split}" not in arrays:
            continue
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.shape[0] == 0 and split != "pool":
            raise BadInput(f"{where}: x_{split} is empty; allowed: at least one row")
        if len(y.shape) > 2 or (len(y.shape) == 2 and y.shape[1] != 1):
            raise BadInput(f"{where}: y_{split} has shape {list(y.shape)}; allowed: one label per row "
                           f"({x.shape[0]},) or ({x.shape[0]}, 1)")
        if y.shape[0] != x.shape[0]:
            raise BadInput(f"{where}: x_{split} has {x.shape[0]} rows but y_{split} {y.shape[0]} labels")
        if x.shape[1:] != arrays["x_train"].shape[1:]:
            raise BadInput(f"{where}: x_{split} rows have shape {list(x.shape[1:])}, x_train rows "
                           f"{list(arrays['x_train'].shape[1:])}; allowed: the same features in every split")
        if 0 in x.shape[1:]:
            raise BadInput(f"{where}: x_{split} rows have no features (shape {list(x.shape)})")
    return arrays


def _check_values(p: Path, arrays: dict[str, np.ndarray], task: str | None) -> None:
    """BadInput for values a victim cannot be trained on: non-finite inputs or targets, and class
    labels that are not indices 0..K-1 (negative, fractional, or K over MAX_LABEL)."""
    where = f"victim.data.path: {p}"
    for name, a in arrays.items():
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            bad = int((~np.isfinite(a)).sum())
            raise BadInput(f"{where}: {name} holds {bad} NaN or infinite value(s); allowed: finite numbers")
    labels = np.concatenate([arrays[k].ravel() for k in arrays if k.startswith("y_")])
    if task == "regression" or len(labels) == 0:
        return
    if labels.dtype.kind == "f" and not np.allclose(labels, np.round(labels)):
        return  # fractional: a regression target (the task is inferred from it)
    low, high = labels.min(), labels.max()
    if low < 0 or high >= MAX_LABEL:
        raise BadInput(f"{where}: class labels range over [{low:g}, {high:g}]; allowed: class indices "
                       f"0 to {MAX_LABEL - 1} (or fractional values for regression)")


def _npz(path: str, task: str | None = None) -> tuple[np.ndarray, ...]:
    p = Path(path)
    check_npz(p)
    names = [*NPZ_ARRAYS, "x_pool", "y_pool"]
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: np.asarray(z[k]) for k in names if k in z}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise BadInput(f"victim.data.path: {p} is not a readable .npz ({type(exc).__name__}: "
                       f"{clip(exc, 200)})") from None
    for k in list(arrays):
        if k.startswith("y_"):
            arrays[k] = arrays[k].reshape(len(arrays[k]))  # (n, 1) labels: one per row
    _check_values(p, arrays, task)
    pool = (arrays["x_pool"], arrays["y_pool"]) if "x_pool" in arrays else None  # the attacker's own
    return (*(arrays[k] for k in NPZ_ARRAYS), pool)


def _split(n: int, sizes: list[int], rng: np.random.Generator) -> list[np.ndarray]:
    perm = rng.permutation(n)
    out, start = [], 0
    for s in sizes:
        out.append(perm[start : start + s])
        start += s
    return out


def _check_classes(classes: list[int], y: np.ndarray, name: str) -> None:
    """BadInput naming the problem when `classes` cannot select a classification task."""
    present = sorted(int(c) for c in np.unique(y))
    shown = f"{present[0]}..{present[-1]}" if present == list(range(present[0], present[-1] + 1)) else present
    missing = [c for c in classes if c not in present]
    if missing:
        raise BadInput(f"victim.data.classes: {missing} not among the labels of {name} ({shown})")
    if len(set(classes)) != len(classes):
        raise BadInput(f"victim.data.classes: {list(classes)} lists a class twice")
    if len(classes) < 2:
        raise BadInput(f"victim.data.classes: {list(classes)} selects one class; a classifier needs "
                       f"at least two (labels of {name}: {shown})")


def _infer_task(y: np.ndarray) -> str:
    if np.issubdtype(y.dtype, np.floating) and not np.allclose(y, np.round(y)):
        return "regression"
    return "binary" if len(np.unique(y)) == 2 else "multiclass"


def load_dataset(spec: Any, seed: int, scale_target: bool = True) -> Dataset:
    """Load and split the dataset a `DataSpec` names; raises BadInput for unusable data.
    `scale_target`: z-score a regression target (for a model leakmeter trains); False for a model
    file or an endpoint, which answer in the target's own units."""
    rng = np.random.default_rng(seed)
    name = spec.dataset
    record: dict[str, Any] = {"dataset": name}
    if name == "gaussian":
        d = int(spec.dim)
        n_tr = spec.n_train or 1000
        n_te = spec.n_test or 1000
        x = rng.standard_normal((n_tr + n_te + spec.attacker_pool, d))
        task = spec.task or "multiclass"
        # labels are filled in by the builder (victim or teacher network)
        y = np.zeros(len(x), dtype=np.float64 if task == "regression" else np.int64)
        tr, te, pool = _split(len(x), [n_tr, n_te, spec.attacker_pool], rng)
        record.update(split={"train": n_tr, "test": n_te, "pool": spec.attacker_pool},
                      normalisation="none (N(0, I) inputs)", labels=spec.labels)
        n_classes = 0 if task == "regression" else (2 if task == "binary" else 10)
        return Dataset(name, task, x[tr], y[tr], x[te], y[te], x[pool], y[pool], (d,),
                       n_classes, record, domain=(-4.0, 4.0),
                       domain_note="±4 standard deviations of the documented N(0, I) inputs")

    npz_pool = None
    pixels = False  # x holds stored pixel values, scaled to [0, 1] (÷ 255) once the split is made
    if name in ("digits", "breast_cancer", "diabetes"):
        x, y, shape, task = _sklearn(name)
        x_te_fixed = y_te_fixed = None
    elif name == "npz":
        xtr, ytr, xte, yte, npz_pool = _npz(spec.path, spec.task)
        shape = tuple(xtr.shape[1:]) or (1,)
        x = xtr.reshape(len(xtr), -1).astype(np.float64)
        y = ytr
        x_te_fixed, y_te_fixed = xte.reshape(len(xte), -1).astype(np.float64), yte
        task = _infer_task(np.concatenate([ytr.ravel(), yte.ravel()]))
    else:  # fashion_mnist | idx
        folder = spec.path if name == "idx" else fashion_mnist_dir()
        if folder is None:
            raise BadInput(
                "victim.data.dataset: fashion_mnist is not installed; "
                "apt-get install dataset-fashion-mnist, or use dataset: idx with path"
            )
        xtr, ytr, xte, yte = load_idx_folder(folder)
        shape = (1, *xtr.shape[1:]) if xtr.ndim == 3 else tuple(xtr.shape[1:])
        # pixels stay as stored until the split has picked its rows: scaling all 70,000 images to
        # float64 first took ~1 s and ~0.9 GB for a victim that trains on a few thousand
        x = xtr.reshape(len(xtr), -1)
        y = ytr.astype(np.int64)
        x_te_fixed = xte.reshape(len(xte), -1)
        y_te_fixed = yte.astype(np.int64)
        pixels = True
        task = "multiclass"
        record["source"] = str(folder)

    task = spec.task or task
    if task != "regression":
        y = np.asarray(y).astype(np.int64)
        if y_te_fixed is not None:
            y_te_fixed = np.asarray(y_te_fixed).astype(np.int64)
    if spec.classes is not None:
        if task == "regression":
            raise BadInput("victim.data.classes: only for classification tasks")
        _check_classes(spec.classes, y, name)
        keep = np.isin(y, spec.classes)
        x, y = x[keep], y[keep]
        remap = {c: i for i, c in enumerate(spec.classes)}
        y = np.vectorize(remap.get)(y).astype(np.int64)
        if y_te_fixed is not None:
            keep_te = np.isin(y_te_fixed, spec.classes)
            x_te_fixed = x_te_fixed[keep_te]
            y_te_fixed = np.vectorize(remap.get)(y_te_fixed[keep_te]).astype(np.int64)
        record["classes"] = list(spec.classes)
        if task == "multiclass" and len(spec.classes) == 2:
            task = "binary"
    if task == "binary" and len(np.unique(y)) > 2:
        y = (y % 2).astype(np.int64)  # parity split, e.g. even vs odd digits
        record["binary_labels"] = "label % 2"

    n = len(x)
    of = f"{name}" + (f" (classes {list(spec.classes)})" if spec.classes is not None else "")
    most = n - 1 if x_te_fixed is None else n
    explicit = "n_train" in getattr(spec, "model_fields_set", {"n_train"})
    # a fixed test split leaves every record to training: the default n_train is an upper limit there
    if spec.n_train is not None and spec.n_train > most and (explicit or x_te_fixed is None):
        default = "" if explicit else " (the default)"
        rest = " and leave one to test" if x_te_fixed is None else ""
        raise BadInput(f"victim.data.n_train: {spec.n_train}{default} is more than {of} can give: it has "
                       f"{n} records, so at most {most} can train{rest}")
    n_train = min(spec.n_train or n, n)
    if x_te_fixed is None:
        n_test = spec.n_test or max(1, min(n - n_train - spec.attacker_pool, n // 4))
        n_pool = min(spec.attacker_pool, max(0, n - n_train - n_test))
        if n_train + n_test + n_pool > n or n_test < 1:
            raise BadInput(
                f"victim.data.n_train: {n_train} leaves no test data ({name} has {n} records)"
            )
        tr, te, pool = _split(n, [n_train, n_test, n_pool], rng)
        parts = (x[tr], y[tr], x[te], y[te], x[pool], y[pool])
    else:
        n_pool = min(spec.attacker_pool, n - n_train) if npz_pool is None else 0
        tr, pool = _split(n, [n_train, n_pool], rng)
        held = rng.permutation(len(x_te_fixed))
        # what training leaves of the pool comes from the held-out split (never from records the
        # model trained on), keeping at least half of it to measure accuracy
        n_held = min(spec.attacker_pool - n_pool, len(held) // 2) if npz_pool is None else 0
        pool_te, held = held[:n_held], held[n_held:]
        n_test = min(spec.n_test or len(held), len(held))
        te = held[:n_test]
        parts = (x[tr], y[tr], x_te_fixed[te], y_te_fixed[te],
                 np.concatenate([x[pool], x_te_fixed[pool_te]]),
                 np.concatenate([y[pool], y_te_fixed[pool_te]]))
        if n_held:
            unused = f"{n_pool} unused training records and " if n_pool else ""
            record["pool_source"] = (f"{unused}{n_held} held-out test records (no x_pool/y_pool given); "
                                     "the other test records measure accuracy")
        if npz_pool is not None:  # the user's x_pool/y_pool: the attacker's data, as given
            px = npz_pool[0].reshape(len(npz_pool[0]), -1).astype(np.float64)
            py = npz_pool[1].astype(y.dtype)
            parts = (*parts[:4], px, py)
            record["pool_source"] = "x_pool/y_pool of the .npz"
    x_tr, y_tr, x_te, y_te, x_pl, y_pl = parts
    if pixels:
        x_tr, x_te, x_pl = (a.astype(np.float64) / 255.0 for a in (x_tr, x_te, x_pl))

    documented = DOCUMENTED_RANGE.get(name)
    rows = (np.array([[documented[0]], [documented[1]]]) * np.ones((1, x_tr.shape[1]))
            if documented else np.zeros((0, x_tr.shape[1])))
    x_tr, x_te, x_ext, norm = _normalise(x_tr, x_te, np.concatenate([x_pl, rows]),
                                         spec.standardize or "standard")
    x_pl, rows = x_ext[: len(x_pl)], x_ext[len(x_pl):]  # the documented box, preprocessed as inputs are
    domain = (float(rows.min()), float(rows.max())) if len(rows) else None
    offset = norm.pop("_offset", None)
    if task == "regression" and scale_target:
        mu, sd = float(y_tr.mean()), float(y_tr.std() or 1.0)
        y_tr, y_te, y_pl = ((v - mu) / sd for v in (y_tr, y_te, y_pl))
        norm["target"] = {"mean": mu, "std": sd}
    n_classes = 0 if task == "regression" else int(max(y.max() + 1, 2))
    record.update(
        split={"train": len(x_tr), "test": len(x_te), "pool": len(x_pl), "seed": seed},
        normalisation=norm, task=task,
    )
    note = f"{name} {documented[2]}, preprocessed as the inputs are" if documented else ""
    return Dataset(name, task, x_tr, y_tr, x_te, y_te, x_pl, y_pl, tuple(shape), n_classes,
                   record, offset, domain, note)


def _normalise(x_tr, x_te, x_pl, how: str):
    """Fit the normalisation on the training split only; returns arrays and its record."""
    if how == "none":
        return x_tr, x_te, x_pl, {"kind": "none"}
    if how in ("minmax", "minmax_center"):
        lo, hi = x_tr.min(), x_tr.max()
        scale = (hi - lo) or 1.0
        f = lambda a: (a - lo) / scale  # noqa: E731
        rec = {"kind": how, "min": float(lo), "max": float(hi)}
        x_tr, x_te, x_pl = f(x_tr), f(x_te), f(x_pl)
        if how == "minmax":
            return x_tr, x_te, x_pl, rec
        mu = x_tr.mean(axis=0)  # then the training mean subtracted (paper 002's preprocessing)
        return x_tr - mu, x_te - mu, x_pl - mu, {**rec, "centered": True, "_offset": mu}
    mu = x_tr.mean(axis=0)
    if how == "center":
        sd = np.ones_like(mu)
    else:
        sd = x_tr.std(axis=0)
        sd[sd < 1e-8] = 1.0
    f = lambda a: (a - mu) / sd  # noqa: E731
    rec: dict[str, Any] = {"kind": how, "per_feature": True}
    if how == "center":
        rec["_offset"] = mu
    return f(x_tr), f(x_te), f(x_pl), rec
