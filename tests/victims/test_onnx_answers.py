"""ONNX files answer with their score output (issue 30, item 1): scikit-learn exports (label +
probabilities, with or without ZipMap), torch exports with a probabilities output and multi-output
graphs; compared with the exporting model's own predictions (the ground truth)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from harness.core.errors import BadInput
from harness.scenario import scenario_from_dict
from victims.build import build_victim, check_buildable

skl2onnx = pytest.importorskip("skl2onnx")
pytest.importorskip("onnxruntime")


def _iris():
    from sklearn.datasets import load_iris

    x, y = load_iris(return_X_y=True)
    idx = np.random.default_rng(0).permutation(len(x))
    return x[idx], y[idx]


def _npz(tmp_path, x, y, n=100):
    path = tmp_path / "data.npz"
    np.savez(path, x_train=x[:n], y_train=y[:n], x_test=x[n:], y_test=y[n:])
    return path


def _scenario(model_path, data_path, task=None, output="probabilities", **model):
    data = {"dataset": "npz", "path": str(data_path), "n_train": None}
    if task:
        data["task"] = task
    return scenario_from_dict({
        "name": "onnx", "seed": 0, "device": "cpu",
        "victim": {"model": {"arch": "file", "path": str(model_path), **model}, "data": data},
        "interface": {"kind": "prediction", "output": output},
        "attacks": [{"name": "surrogate"}], "tracking": {"enabled": False}})


@pytest.mark.parametrize("zipmap", [True, False])
def test_three_class_sklearn_export_answers_its_probabilities(tmp_path, zipmap):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = _iris()
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(x[:100], y[:100])
    opts = None if zipmap else {LogisticRegression: {"zipmap": False}}
    onx = skl2onnx.to_onnx(clf, x[:1].astype(np.float32), options=opts)
    assert onx.graph.output[0].name in ("label", "output_label")  # the integer label comes first
    path = tmp_path / "iris.onnx"
    path.write_bytes(onx.SerializeToString())
    s = _scenario(path, _npz(tmp_path, x, y))
    check_buildable(s)
    v = build_victim(s)
    probs = v.backend.predict(torch.as_tensor(x[100:]), "probabilities").double().numpy()
    np.testing.assert_allclose(probs, clf.predict_proba(x[100:]), atol=1e-5)  # never soft-maxed again
    labels = v.backend.predict(torch.as_tensor(x[100:]), "label").numpy()
    assert (labels == clf.predict(x[100:])).all()
    assert "probabilities" in v.record["model_output"] and "label" not in v.record["model_output"]


def test_binary_sklearn_export_answers_as_one_logit_or_two_classes(tmp_path):
    from sklearn.datasets import load_breast_cancer
    from sklearn.ensemble import GradientBoostingClassifier

    x, y = load_breast_cancer(return_X_y=True)
    clf = GradientBoostingClassifier(n_estimators=20, random_state=0).fit(x[:400], y[:400])
    path = tmp_path / "gb.onnx"
    path.write_bytes(skl2onnx.to_onnx(clf, x[:1].astype(np.float32)).SerializeToString())
    data = _npz(tmp_path, x, y, 400)
    truth = clf.predict_proba(x[400:])
    for task in ("multiclass", "binary"):
        v = build_victim(_scenario(path, data, task=task))
        p = v.backend.predict(torch.as_tensor(x[400:]), "probabilities").double().numpy()
        np.testing.assert_allclose(p, truth, atol=1e-5)
        assert v.info.declared == {"network": False, "relu_network": False}  # a tree ensemble
    # the label output is never the answer, even when named: one line with the outputs
    with pytest.raises(BadInput, match="output_label.*not a floating-point score"):
        check_buildable(_scenario(path, data, output_name="output_label"))
    with pytest.raises(BadInput, match="no_such.*its outputs: output_label, output_probability"):
        check_buildable(_scenario(path, data, output_name="no_such"))


def test_torch_export_with_probabilities_only_is_not_softmaxed_twice(tmp_path):
    pytest.importorskip("onnx")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3), nn.Softmax(dim=1)).double()
    path = tmp_path / "probs.onnx"
    torch.onnx.export(net, (torch.zeros(1, 4, dtype=torch.float64),), str(path), input_names=["x"],
                      output_names=["probs"], dynamic_axes={"x": {0: "n"}, "probs": {0: "n"}}, dynamo=False)
    x, y = _iris()
    v = build_victim(_scenario(path, _npz(tmp_path, x, y)))
    q = torch.as_tensor(x[100:])
    np.testing.assert_allclose(v.backend.predict(q, "probabilities").numpy(), net(q).detach().numpy(),
                               atol=1e-9)
    assert v.info.declared == {"network": True, "relu_network": True}


def test_multi_output_graph_answers_the_named_output(tmp_path):
    pytest.importorskip("onnx")

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 3)

        def forward(self, x):
            return self.a(x), self.b(x)

    torch.manual_seed(1)
    net = Two().double()
    path = tmp_path / "two.onnx"
    torch.onnx.export(net, (torch.zeros(1, 4, dtype=torch.float64),), str(path), input_names=["x"],
                      output_names=["first", "second"], dynamic_axes={"x": {0: "n"}}, dynamo=False)
    x, y = _iris()
    data = _npz(tmp_path, x, y)
    q = torch.as_tensor(x[100:])
    for name, head in ((None, net.a), ("second", net.b)):
        v = build_victim(_scenario(path, data, output="logits", output_name=name))
        np.testing.assert_allclose(v.backend.predict(q, "logits").numpy(), head(q).detach().numpy(),
                                   atol=1e-9)


def test_task_mismatch_is_caught_by_validate(tmp_path):
    from sklearn.linear_model import LogisticRegression

    x, y = _iris()
    path = tmp_path / "iris.onnx"
    clf = LogisticRegression(max_iter=1000).fit(x[:100], y[:100])
    path.write_bytes(skl2onnx.to_onnx(clf, x[:1].astype(np.float32)).SerializeToString())
    with pytest.raises(BadInput, match="answers 3 outputs per row.*the task needs 1"):
        check_buildable(_scenario(path, _npz(tmp_path, x, y), task="regression", output="logits"))


def test_three_class_export_is_served_over_http(tmp_path):
    """`leakmeter serve` of a 3-class scikit-learn export answers its probabilities (was: 500)."""
    import requests
    from sklearn.linear_model import LogisticRegression

    from victims.http.served import build_served
    from victims.http.server import VictimServer

    x, y = _iris()
    clf = LogisticRegression(max_iter=1000).fit(x[:100], y[:100])
    path = tmp_path / "iris.onnx"
    path.write_bytes(skl2onnx.to_onnx(clf, x[:1].astype(np.float32)).SerializeToString())
    served, _ = build_served(_scenario(path, _npz(tmp_path, x, y)))
    server = VictimServer(served).start()
    try:
        r = requests.post(server.url, json={"inputs": x[100:110].tolist()}, timeout=30)
    finally:
        server.close()
    assert r.status_code == 200, r.text
    body = r.json()
    got = np.asarray(body["predictions"] if isinstance(body, dict) else body, dtype=np.float64)
    np.testing.assert_allclose(got, clf.predict_proba(x[100:110]), atol=1e-5)


def test_a_regression_file_is_scored_against_its_targets_in_their_own_units(tmp_path):
    """A regressor trained outside leakmeter answers in its target's units: the targets it is
    scored against stay as the .npz gives them (z-scoring them, as leakmeter does for a model it
    trains itself, made every loss a function of the prediction alone and mia_loss blind)."""
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import LinearRegression

    from harness.attacker.signals import phi_from_logits

    x, y = load_diabetes(return_X_y=True)
    reg = LinearRegression().fit(x[:300], y[:300])
    path = tmp_path / "diabetes.onnx"
    path.write_bytes(skl2onnx.to_onnx(reg, x[:1].astype(np.float32)).SerializeToString())
    v = build_victim(_scenario(path, _npz(tmp_path, x, y, n=300), task="regression", output="logits"))
    d = v.truth.data
    assert set(np.round(d.y_train, 6)) <= set(np.round(y[:300], 6)) and d.y_train.max() > 100
    q = torch.as_tensor(d.x_test)
    answers = v.backend.predict(q, "logits")
    np.testing.assert_allclose(answers.numpy()[:, 0], reg.predict(d.x_test), rtol=1e-4, atol=1e-2)
    # the loss the membership attacks read is the model's own squared error
    phi = phi_from_logits(answers, torch.as_tensor(d.y_test), "regression")
    np.testing.assert_allclose(-phi.numpy(), (reg.predict(d.x_test) - d.y_test) ** 2, rtol=1e-3, atol=1.0)


def test_a_binary_export_is_answered_bit_for_bit(tmp_path):
    """What the deployed graph returns is what the attacks read: exact zeros of a saturated class
    and the 1 − p column's last bits included (never log → softmax again, which made a 0 into
    1e-30 and moved a 1 − p value off the grid that tells its precision)."""
    import onnxruntime
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression

    from harness.core.answers import logit_signals, readable

    x, y = load_breast_cancer(return_X_y=True)
    clf = LogisticRegression(max_iter=5000).fit(x[:400], y[:400])
    path = tmp_path / "lr.onnx"
    path.write_bytes(skl2onnx.to_onnx(clf, x[:1].astype(np.float32),
                                      options={LogisticRegression: {"zipmap": False}}).SerializeToString())
    v = build_victim(_scenario(path, _npz(tmp_path, x, y, 400)))
    q = np.concatenate([x[400:], x[400:] * 3.0])  # raw rows, and rows far into saturation
    got = v.backend.predict(torch.as_tensor(q), "probabilities").double().numpy()
    sess = onnxruntime.InferenceSession(str(path))
    want = sess.run(["probabilities"], {sess.get_inputs()[0].name: q.astype(np.float32)})[0]
    assert np.array_equal(got, want.astype(np.float64))
    assert (want == 0).any()  # some rows saturated to an exact 0 ...
    yt = torch.as_tensor(got)
    keep = readable(yt, logit_signals(yt, "probabilities"))
    assert not bool(keep[torch.as_tensor((want == 0).any(1))].any())  # ... which carry no logit
