"""ONNX graphs are checked before onnxruntime builds a session (victims/models/onnx_check.py):
a 3 KB file allocating a [12000, 12000] tensor, and a NaN weight, are exit 2 at validate and run
(issue 33 E09, E13). Before: the first passed validate at 1.5 GB peak, the second passed validate
and crashed run (exit 3)."""

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from onnx_crafted import big_constant_onnx, linear_onnx

from harness.cli import main
from victims.errors import BadInput

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _scenario(tmp_path, model):
    data = {"name": "onnx", "seed": 0, "device": "cpu",
            "victim": {"model": {"arch": "file", "path": str(model), "format": "onnx"},
                       "data": {"dataset": "gaussian", "dim": 4, "labels": "victim", "task": "regression",
                                "n_train": 20, "n_test": 20, "attacker_pool": 10}},
            "interface": {"kind": "prediction", "output": "logits"},
            "attacks": [{"name": "finite_difference_exact"}], "tracking": {"enabled": False}}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_check_refuses_a_graph_that_would_allocate_a_huge_tensor(tmp_path):
    from victims.models.onnx_check import check_onnx_graph

    path = big_constant_onnx(tmp_path / "big.onnx")
    assert path.stat().st_size < 4096
    with pytest.raises(BadInput, match=r"144,000,000 values per row"):
        check_onnx_graph(path)
    check_onnx_graph(big_constant_onnx(tmp_path / "small.onnx", side=100))  # 10,000 values: fine
    check_onnx_graph(linear_onnx(tmp_path / "ok.onnx"))


def test_check_refuses_non_finite_weights(tmp_path):
    from victims.models.onnx_check import check_onnx_graph

    for bad in (np.nan, np.inf):
        w = np.full((4, 1), 0.5)
        w[2, 0] = bad
        with pytest.raises(BadInput, match="'w' holds NaN or infinite"):
            check_onnx_graph(linear_onnx(tmp_path / "nan.onnx", w))


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("kind", ["big", "nan"])
def test_cli_exit_2_with_one_line(tmp_path, command, kind, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = np.full((4, 1), 0.5)
    w[0, 0] = np.nan
    model = big_constant_onnx(tmp_path / "m.onnx") if kind == "big" else linear_onnx(tmp_path / "m.onnx", w)
    args = [command, str(_scenario(tmp_path, model))] + (["--no-tracking"] if command == "run" else [])
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert ("values per row" if kind == "big" else "NaN or infinite") in res.output


def test_a_valid_onnx_victim_still_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["validate", str(_scenario(tmp_path, linear_onnx(tmp_path / "m.onnx")))])
    assert res.exit_code == 0, res.output
