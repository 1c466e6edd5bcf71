"""`leakmeter init` with models trained outside leakmeter (issue 30, items 1-2): the task is read
from the ONNX graph's score output (never its integer label), a one-output model of an integer-
valued float target is a regression (not one class per value), and `validate` catches a task that
does not fit the model's answer before `run`."""

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from harness.cli import main

skl2onnx = pytest.importorskip("skl2onnx")


def leakmeter(*args):
    return CliRunner().invoke(main, list(args))


def _write(tmp_path, model, x, y, n):
    (tmp_path / "m.onnx").write_bytes(skl2onnx.to_onnx(model, x[:1].astype(np.float32)).SerializeToString())
    np.savez(tmp_path / "d.npz", x_train=x[:n], y_train=y[:n], x_test=x[n:], y_test=y[n:])


def _init(tmp_path):
    res = leakmeter("init", "--model", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "d.npz"),
                    "--no-ask", "-o", str(tmp_path / "s.yaml"), "--force")
    assert res.exit_code == 0, res.output + res.stderr
    return res, yaml.safe_load((tmp_path / "s.yaml").read_text())


def test_binary_sklearn_export_is_read_from_its_probabilities(tmp_path):
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_breast_cancer(return_X_y=True)
    _write(tmp_path, make_pipeline(StandardScaler(), LogisticRegression()).fit(x[:398], y[:398]), x, y, 398)
    res, raw = _init(tmp_path)
    assert raw["victim"]["model"]["output_name"] == "output_probability"
    assert raw["victim"]["data"]["task"] == "multiclass" and raw["victim"]["data"]["standardize"] == "none"
    assert "output_probability" in res.output
    assert leakmeter("validate", str(tmp_path / "s.yaml")).exit_code == 0


def test_integer_valued_regression_target_is_a_regression_and_validate_checks_it(tmp_path):
    from sklearn.datasets import load_diabetes
    from sklearn.ensemble import GradientBoostingRegressor

    x, y = load_diabetes(return_X_y=True)
    y = y.astype(np.float64)  # integer-valued floats: 214 distinct values
    _write(tmp_path, GradientBoostingRegressor(n_estimators=20).fit(x[:300], y[:300]), x, y, 300)
    _, raw = _init(tmp_path)
    assert raw["victim"]["data"]["task"] == "regression" and raw["interface"]["output"] == "logits"
    assert leakmeter("validate", str(tmp_path / "s.yaml")).exit_code == 0
    # a task that does not fit the model's answer is refused by validate, not first by run
    text = (tmp_path / "s.yaml").read_text().replace("task: regression", "task: multiclass")
    (tmp_path / "s.yaml").write_text(text.replace("output: logits", "output: probabilities"))
    res = leakmeter("validate", str(tmp_path / "s.yaml"))
    assert res.exit_code == 2 and "victim.data.task" in res.stderr and "answers 1 outputs" in res.stderr


def test_a_graph_with_only_a_label_output_is_one_line(tmp_path):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("ArgMax", ["x"], ["label"], axis=1, keepdims=0)], "labels",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    x = np.random.default_rng(0).normal(size=(60, 4))
    np.savez(tmp_path / "d.npz", x_train=x[:40], y_train=x[:40].argmax(1), x_test=x[40:],
             y_test=x[40:].argmax(1))
    res = leakmeter("init", "--model", str(tmp_path / "m.onnx"), "--data", str(tmp_path / "d.npz"),
                    "--no-ask", "-o", str(tmp_path / "s.yaml"))
    assert res.exit_code == 2 and "floating-point score output" in res.stderr and "label" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "s.yaml").exists()
