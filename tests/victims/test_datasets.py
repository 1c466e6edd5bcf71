"""Dataset loaders: bundled sets, user .npz, gzip IDX folders, Fashion-MNIST when installed."""

import gzip
import struct

import numpy as np
import pytest

from harness.core.errors import BadInput
from harness.scenario.schema import DataSpec
from victims.data.datasets import fashion_mnist_dir, load_dataset, load_idx_folder


def test_digits_splits_are_disjoint_and_normalised_on_train():
    ds = load_dataset(DataSpec(dataset="digits", n_train=500, attacker_pool=100), seed=3)
    assert ds.x_train.shape == (500, 64) and ds.input_shape == (1, 8, 8)
    assert len(ds.x_pool) == 100 and ds.n_classes == 10 and ds.task == "multiclass"
    rows = {r.tobytes() for r in ds.x_train}
    assert not any(r.tobytes() in rows for r in ds.x_pool)
    assert not any(r.tobytes() in rows for r in ds.x_test)
    np.testing.assert_allclose(ds.x_train.mean(axis=0), 0, atol=1e-9)
    assert ds.record["split"] == {"train": 500, "test": len(ds.x_test), "pool": 100, "seed": 3}


def test_minmax_center_subtracts_the_training_mean_and_keeps_it_for_scorers():
    raw = load_dataset(DataSpec(dataset="digits", n_train=50, standardize="none"), seed=1)
    ds = load_dataset(DataSpec(dataset="digits", n_train=50, standardize="minmax_center"), seed=1)
    np.testing.assert_allclose(ds.x_train.mean(axis=0), 0, atol=1e-12)
    back = ds.x_train + ds.offset  # pixel space: the raw images scaled to [0, 1]
    lo, hi = raw.x_train.min(), raw.x_train.max()
    np.testing.assert_allclose(back, (raw.x_train - lo) / (hi - lo), atol=1e-12)
    np.testing.assert_allclose(ds.x_test + ds.offset, (raw.x_test - lo) / (hi - lo), atol=1e-12)
    assert ds.record["normalisation"] == {"kind": "minmax_center", "min": lo, "max": hi,
                                          "centered": True}
    assert load_dataset(DataSpec(dataset="digits", n_train=50, standardize="minmax"), seed=1
                        ).offset is None


def test_binary_subset_and_regression_targets():
    ds = load_dataset(DataSpec(dataset="digits", classes=[3, 8], n_train=200), seed=0)
    assert ds.task == "binary" and set(np.unique(ds.y_train)) == {0, 1}
    reg = load_dataset(DataSpec(dataset="diabetes", n_train=300, attacker_pool=20), seed=0)
    assert reg.task == "regression" and reg.n_outputs == 1
    assert abs(reg.y_train.mean()) < 1e-9 and "target" in reg.record["normalisation"]
    bc = load_dataset(DataSpec(dataset="breast_cancer", n_train=300, attacker_pool=50), seed=0)
    assert bc.task == "binary" and bc.x_train.shape[1] == 30


def test_npz_loader_reads_user_arrays(tmp_path):
    rng = np.random.default_rng(0)
    xtr, xte = rng.normal(size=(80, 5)), rng.normal(size=(20, 5))
    ytr, yte = (xtr[:, 0] > 0).astype(int), (xte[:, 0] > 0).astype(int)
    p = tmp_path / "mine.npz"
    np.savez(p, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    ds = load_dataset(DataSpec(dataset="npz", path=str(p), n_train=60, attacker_pool=10,
                               standardize="none"), seed=0)
    assert ds.task == "binary" and ds.x_train.shape == (60, 5) and len(ds.x_pool) == 10
    assert len(ds.x_test) == 20
    # every training row is one of the user's rows, with its own label
    for x, y in zip(ds.x_train, ds.y_train, strict=True):
        i = int(np.argmin(np.abs(xtr - x).sum(axis=1)))
        assert np.allclose(xtr[i], x) and ytr[i] == y


def test_npz_missing_arrays_and_pickles_are_bad_input(tmp_path):
    p = tmp_path / "half.npz"
    np.savez(p, x_train=np.zeros((3, 2)))
    with pytest.raises(BadInput, match="lacks arrays"):
        load_dataset(DataSpec(dataset="npz", path=str(p)), seed=0)
    q = tmp_path / "obj.npz"
    np.savez(q, x_train=np.array([{"a": 1}], dtype=object), y_train=np.zeros(1),
             x_test=np.zeros(1), y_test=np.zeros(1))
    with pytest.raises(BadInput):
        load_dataset(DataSpec(dataset="npz", path=str(q)), seed=0)


def _write_idx(path, arr):
    with gzip.open(path, "wb") as fh:
        fh.write(bytes([0, 0, 0x08, arr.ndim]))
        fh.write(b"".join(struct.pack(">I", s) for s in arr.shape))
        fh.write(arr.astype(np.uint8).tobytes())


def test_idx_folder_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    imgs = rng.integers(0, 256, size=(50, 6, 6))
    labels = rng.integers(0, 3, size=50)
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", imgs[:40])
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels[:40])
    _write_idx(tmp_path / "t10k-images-idx3-ubyte.gz", imgs[40:])
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels[40:])
    xtr, ytr, xte, yte = load_idx_folder(tmp_path)
    assert np.array_equal(xtr, imgs[:40]) and np.array_equal(yte, labels[40:])
    ds = load_dataset(DataSpec(dataset="idx", path=str(tmp_path), n_train=30, attacker_pool=10,
                               standardize="none"), seed=0)
    assert ds.input_shape == (1, 6, 6) and len(ds.x_test) == 10
    pixels = {r.tobytes() for r in imgs[:40].reshape(40, -1) / 255.0}  # each row a stored image ÷ 255
    assert ds.x_train.dtype == np.float64 and all(r.tobytes() in pixels for r in ds.x_train)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\x01\x02junk"))
    with pytest.raises(BadInput, match="IDX"):
        load_idx_folder(tmp_path)


@pytest.mark.skipif(fashion_mnist_dir() is None, reason="dataset-fashion-mnist not installed")
def test_fashion_mnist_loads_from_debian_package():
    ds = load_dataset(DataSpec(dataset="fashion_mnist", n_train=1000, n_test=200,
                               attacker_pool=100), seed=0)
    assert ds.input_shape == (1, 28, 28) and ds.x_train.shape == (1000, 784)
    assert ds.n_classes == 10 and len(ds.x_test) == 200


@pytest.mark.parametrize("classes, says", [
    ([0, 99], "victim.data.classes: [99] not among the labels of digits (0..9)"),
    ([12, 13], "victim.data.classes: [12, 13] not among the labels of digits (0..9)"),
])
def test_bad_classes_say_what_is_wrong_with_them(classes, says):
    with pytest.raises(BadInput) as exc:
        load_dataset(DataSpec(dataset="digits", classes=classes, n_train=50), 0)
    assert str(exc.value).startswith(says)


@pytest.mark.parametrize("classes, says", [
    ([3], "victim.data.classes: [3] selects one class; a classifier needs at least two"),
    ([1, 1], "victim.data.classes: [1, 1] lists a class twice"),
])
def test_classes_that_cannot_make_a_classifier_are_refused_when_read(classes, says):
    from harness.scenario import scenario_from_dict

    data = {"name": "c", "victim": {"data": {"dataset": "digits", "classes": classes}}}
    with pytest.raises(BadInput) as exc:
        scenario_from_dict(data, "s.yaml")
    assert str(exc.value).startswith(f"s.yaml: {says}")


def test_too_large_n_train_names_the_value_asked_for_and_the_most_possible():
    with pytest.raises(BadInput) as exc:
        load_dataset(DataSpec(dataset="digits", n_train=5000), 0)
    assert str(exc.value) == ("victim.data.n_train: 5000 is more than digits can give: it has 1797 records, "
                              "so at most 1796 can train and leave one to test")
    with pytest.raises(BadInput) as exc:  # the default n_train (1000) against a two-class subset
        load_dataset(DataSpec(dataset="digits", classes=[0, 1]), 0)
    msg = str(exc.value)
    assert "n_train: 1000 (the default) is more than digits (classes [0, 1]) can give: it has 360" in msg
    d = load_dataset(DataSpec(dataset="digits", n_train=1796, attacker_pool=0), 0)
    assert len(d.x_train) == 1796 and len(d.x_test) == 1  # the most it allows really works


def test_n_train_against_a_fixed_test_split(tmp_path):
    """With the user's own test split, the default n_train is an upper limit (every training record
    is used); an n_train the user asked for and the file cannot give is one clear line."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x_train=rng.normal(size=(200, 4)), y_train=rng.integers(0, 2, 200),
             x_test=rng.normal(size=(50, 4)), y_test=rng.integers(0, 2, 50))
    d = load_dataset(DataSpec(dataset="npz", path=str(tmp_path / "d.npz"), attacker_pool=0), 0)
    assert len(d.x_train) == 200 and len(d.x_test) == 50
    with pytest.raises(BadInput) as exc:
        load_dataset(DataSpec(dataset="npz", path=str(tmp_path / "d.npz"), n_train=500), 0)
    assert str(exc.value) == ("victim.data.n_train: 500 is more than npz can give: it has 200 records, "
                              "so at most 200 can train")
