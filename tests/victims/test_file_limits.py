"""User files that used to pass `validate` and then blow up the run: decompression bombs (a few MB
declaring gigabytes), .npz contents no victim can be trained on, and non-finite weights. Each is
exit 2 at `validate` and at `run`, naming the file, before anything large is read."""

from __future__ import annotations

import resource
import zipfile

import numpy as np
import pytest
import torch
import yaml
from bombs import npz_bomb, pt_bomb
from click.testing import CliRunner
from conftest import message_lines

from harness.cli import main

BASE = {
    "name": "files", "seed": 0, "device": "cpu",
    "victim": {"model": {"arch": "mlp", "hidden": [8]},
               "data": {"dataset": "npz", "path": "data.npz", "n_train": 40},
               "training": {"epochs": 1, "dtype": "float64"}},
    "interface": {"kind": "prediction", "output": "probabilities"}, "attacker": {"pool": 5},
    "attacks": [{"name": "span_nonadaptive"}],
    "tracking": {"enabled": False},
}


def _scenario(tmp_path, **victim) -> str:
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["victim"].update(victim)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def _both(tmp_path, scenario: str, words: list[str]) -> None:
    """validate and run: exit 2, one line naming every word, no traceback."""
    for command in (["validate", scenario], ["run", scenario, "--no-tracking", "--out", str(tmp_path / "o")]):
        res = CliRunner().invoke(main, command)
        lines = message_lines(res.stderr)
        assert res.exit_code == 2, (command[0], res.output[-1500:])
        assert len(lines) == 1 and lines[0].startswith("leakmeter: error: "), res.stderr
        assert all(w in lines[0] for w in words), (words, lines[0])


def _good_arrays(n: int = 60, d: int = 6) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x_train": rng.standard_normal((n, d)), "y_train": rng.integers(0, 3, n),
            "x_test": rng.standard_normal((20, d)), "y_test": rng.integers(0, 3, 20)}


def test_a_good_npz_is_valid_and_runs(tmp_path):
    np.savez(tmp_path / "data.npz", **_good_arrays())
    scen = _scenario(tmp_path)
    assert CliRunner().invoke(main, ["validate", scen]).exit_code == 0
    res = CliRunner().invoke(main, ["run", scen, "--no-tracking", "--out", str(tmp_path / "o")])
    assert res.exit_code in (0, 1, 4), res.output[-2000:]


def _mutated(**change) -> dict[str, np.ndarray]:
    arrays = _good_arrays()
    arrays.update(change)
    return {k: v for k, v in arrays.items() if v is not None}


X, Y = _good_arrays()["x_train"], _good_arrays()["y_train"]
CONTENTS = {
    # kind: (arrays, words the message must hold)
    "nan": (_mutated(x_train=np.where(np.eye(60, 6) > 0, np.nan, X)), ["x_train", "NaN"]),
    "inf": (_mutated(x_test=np.full((20, 6), np.inf)), ["x_test", "infinite"]),
    "strings": (_mutated(y_train=np.array(["a"] * 60)), ["y_train", "dtype", "numbers"]),
    "length": (_mutated(y_train=Y[:50]), ["x_train has 60 rows", "50 labels"]),
    "width": (_mutated(x_test=np.zeros((20, 5))), ["x_test", "[5]", "[6]"]),
    "empty": (_mutated(x_train=np.zeros((0, 6)), y_train=np.zeros(0, dtype=int)), ["x_train is empty"]),
    "0-d": (_mutated(y_test=np.array(3)), ["y_test", "0-d"]),
    "2-d labels": (_mutated(y_train=np.zeros((60, 3), dtype=int)), ["y_train", "one label per row"]),
    "structured": (_mutated(x_test=np.zeros(20, dtype=[("a", "f8"), ("b", "f8")])), ["x_test", "structured"]),
    "negative labels": (_mutated(y_train=Y - 5), ["class labels", "[-5"]),
    "huge labels": (_mutated(y_test=np.full(20, 10**9)), ["class labels", "1e+09"]),
}


@pytest.mark.parametrize("kind", list(CONTENTS))
def test_npz_contents_no_victim_can_use_are_exit_2_at_validate_and_run(kind, tmp_path):
    arrays, words = CONTENTS[kind]
    np.savez(tmp_path / "data.npz", **arrays)
    _both(tmp_path, _scenario(tmp_path), ["victim.data.path", "data.npz", *words])


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_an_npz_bomb_is_refused_before_it_is_read(tmp_path):
    npz_bomb(tmp_path / "data.npz", shape=(25_000, 1000))  # 200 MB of zeros in ~0.3 MB
    assert (tmp_path / "data.npz").stat().st_size < 1_000_000
    before = _peak_mb()
    _both(tmp_path, _scenario(tmp_path), ["victim.data.path", "data.npz", "x_train", "bomb"])
    assert _peak_mb() - before < 150  # nothing near the declared 200 MB was allocated


def test_an_npz_header_declaring_more_than_its_member_holds_is_refused(tmp_path):
    arrays = _good_arrays()
    np.savez(tmp_path / "data.npz", **arrays)
    with zipfile.ZipFile(tmp_path / "data.npz") as zf:  # rewrite x_train's header: 4e8 rows
        members = {n: zf.read(n) for n in zf.namelist()}
    raw = members["x_train.npy"]
    members["x_train.npy"] = raw.replace(b"(60, 6)", b"(400000000, 6)".ljust(len(b"(60, 6)")))[: len(raw)]
    with zipfile.ZipFile(tmp_path / "data.npz", "w") as zf:
        for n, b in members.items():
            zf.writestr(n, b)
    _both(tmp_path, _scenario(tmp_path), ["victim.data.path", "x_train", "declares", "holds"])


def test_an_npz_over_the_data_limit_is_refused(tmp_path, monkeypatch):
    import victims.limits as limits

    monkeypatch.setattr(limits, "MAX_DATA_BYTES", 4096)  # the good file declares ~4 KB as float64
    np.savez(tmp_path / "data.npz", **_good_arrays())
    _both(tmp_path, _scenario(tmp_path), ["victim.data.path", "declares", "allowed: at most"])


def test_a_model_zip_bomb_is_refused_at_validate_without_reading_it(tmp_path):
    pt_bomb(tmp_path / "w.pt")  # 600 MB declared in ~0.6 MB
    np.savez(tmp_path / "data.npz", **_good_arrays())
    before = _peak_mb()
    scen = _scenario(tmp_path, model={"arch": "file", "path": "w.pt", "spec": {"arch": "mlp", "hidden": [8]}})
    _both(tmp_path, scen, ["victim.model.path", "w.pt", "bomb"])
    assert _peak_mb() - before < 300


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_exit_2_naming_the_tensor(bad, tmp_path):
    from harness.scenario import scenario_from_dict
    from victims.models.builders import build_model

    spec = scenario_from_dict({"name": "t", "victim": {"model": {"arch": "mlp", "hidden": [8]}}}).victim.model
    state = {k: v.detach().clone() for k, v in build_model(spec, (6,), 3).state_dict().items()}
    state["2.weight"][1, 2] = bad
    torch.save(state, tmp_path / "w.pt")
    np.savez(tmp_path / "data.npz", **_good_arrays())
    scen = _scenario(tmp_path, model={"arch": "file", "path": "w.pt", "spec": {"arch": "mlp", "hidden": [8]}})
    _both(tmp_path, scen, ["victim.model.path", "w.pt", "'2.weight'", "NaN or infinite"])
