"""Each attack declares what it assumes of the model and stays out where the scenario's model is
declared otherwise (issue 30, item 4): exact ReLU attacks on a tree ensemble, a linear pipeline or
a GELU net are skipped with the reason; span attacks on a tree ensemble too. Where nothing is
declared (an endpoint) the attacks run and their own tests decide."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from harness.attacks import registry
from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict
from harness.scoring.fidelity import judge_fidelity
from victims.build import build_victim

EXACT = ("finite_difference_exact", "cryptanalytic", "query_learning")
SPAN = ("span_nonadaptive",)


def _bc(tmp_path):
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    path = tmp_path / "bc.npz"
    np.savez(path, x_train=x[:300], y_train=y[:300], x_test=x[300:], y_test=y[300:])
    return x, y, path


def _scenario(model, data, attacks=("surrogate",), **data_keys):
    return scenario_from_dict({
        "name": "assume", "seed": 0, "device": "cpu",
        "victim": {"model": model, "data": {"dataset": "npz", "path": str(data), "n_train": None,
                                            **data_keys}},
        "interface": {"kind": "prediction", "output": "probabilities"},
        "attacks": [{"name": a} for a in attacks], "tracking": {"enabled": False}})


def _skips(info):
    return {name: registry()[name]().skip_reason(info) for name in EXACT + SPAN}


def test_sklearn_onnx_trees_and_linear_pipelines_are_not_relu_networks(tmp_path):
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y, data = _bc(tmp_path)
    for name, clf, what in (("rf", RandomForestClassifier(4, max_depth=3, random_state=0), "tree ensemble"),
                            ("lr", make_pipeline(StandardScaler(), LogisticRegression()), "linear model")):
        clf.fit(x[:300], y[:300])
        path = tmp_path / f"{name}.onnx"
        path.write_bytes(skl2onnx.to_onnx(clf, x[:1].astype(np.float32)).SerializeToString())
        info = build_victim(_scenario({"arch": "file", "path": str(path)}, data)).info
        skips = _skips(info)
        for a in EXACT:
            assert skips[a] and "piecewise-linear ReLU network" in skips[a], (name, a, skips[a])
            assert what in skips[a]
        assert "assumes a neural network" in skips["span_nonadaptive"] and what in skips["span_nonadaptive"]
    # a scaled ReLU MLP exported the same way is declared one by its graph: nothing skipped for it
    mlp = make_pipeline(StandardScaler(), MLPClassifier((8,), max_iter=20, random_state=0))
    with pytest.warns(Warning):  # not converged: its graph, not its accuracy, is what is read
        mlp.fit(x[:300], y[:300])
    (tmp_path / "mlp.onnx").write_bytes(skl2onnx.to_onnx(mlp, x[:1].astype(np.float32)).SerializeToString())
    info = build_victim(_scenario({"arch": "file", "path": str(tmp_path / "mlp.onnx")}, data)).info
    assert info.declared == {"network": True, "relu_network": True}, info.declared_as
    assert all(v is None for v in _skips(info).values())


def test_a_gelu_state_dict_keeps_span_and_skips_the_exact_attacks(tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(30, 16), nn.GELU(), nn.Linear(16, 2))
    torch.save(net.state_dict(), tmp_path / "gelu.pt")
    _, _, data = _bc(tmp_path)
    model = {"arch": "file", "path": str(tmp_path / "gelu.pt"),
             "spec": {"arch": "mlp", "hidden": [16], "activation": "gelu"}}
    s = _scenario(model, data, attacks=("finite_difference_exact", "span_nonadaptive"), task="multiclass")
    rep = run_scenario(s, out=tmp_path / "out")
    by = {a["name"]: a for a in rep["attacks"]}
    fd = by["finite_difference_exact"]
    assert fd["status"] == "skipped" and fd["queries"] == 0 and "gelu" in fd["reason"]
    assert by["span_nonadaptive"]["status"] != "skipped"
    # a ReLU net with the same file layout is declared one: nothing is skipped for its structure
    relu = nn.Sequential(nn.Linear(30, 16), nn.ReLU(), nn.Linear(16, 2))
    torch.save(relu.state_dict(), tmp_path / "relu.pt")
    info = build_victim(_scenario({**model, "path": str(tmp_path / "relu.pt"),
                                   "spec": {"arch": "mlp", "hidden": [16]}}, data, task="multiclass")).info
    assert info.declared == {"network": True, "relu_network": True}
    assert all(v is None for v in _skips(info).values())


def test_nothing_declared_means_the_attack_runs_and_decides_itself():
    from types import SimpleNamespace

    info = SimpleNamespace(interface="prediction", output="probabilities", task="multiclass",
                           declared={}, declared_as="")
    assert all(v is None for v in _skips(info).values())


def test_no_working_copy_at_negative_output_r2():
    m = {"queries": 500.0, "output_error": 0.5, "output_r2": -0.72, "agreement": 0.99, "kappa": 0.97}
    risk, why = judge_fidelity(m)
    assert risk == "medium" and "working copy" not in why and "labels" in why
    risk, why = judge_fidelity({**m, "agreement": 0.6, "kappa": 0.1})
    assert risk == "low" and "working copy" not in why
    risk, why = judge_fidelity({**m, "output_r2": 0.999, "output_error": 1e-3})
    assert risk == "high" and "a working copy" in why
