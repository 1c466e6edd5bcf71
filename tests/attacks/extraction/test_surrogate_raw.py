"""The surrogate against models teams train outside leakmeter (issue 30): raw tabular inputs
(breast_cancer's 30 raw features; a StandardScaler + LogisticRegression pipeline folded into a
state_dict that takes raw rows) and noisy probabilities — beside a plain scikit-learn thief that
standardises with its own queries' statistics, both scored on the victim's test split."""

import numpy as np
import pytest
import torch
from conftest import make_scenario

from harness.attacker.copy_losses import membership_loss
from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict
from victims.build import build_victim
from victims.data.datasets import load_dataset

DATA = {"dataset": "breast_cancer", "standardize": "none", "task": "binary", "n_train": 398}


def _raw_logistic(tmp_path, seed=0):
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    s = scenario_from_dict(make_scenario(victim={"model": {"arch": "mlp"}, "data": DATA}, seed=seed))
    d = load_dataset(s.victim.data, s.seed)
    sc = StandardScaler().fit(d.x_train)
    m = LogisticRegression(max_iter=2000).fit(sc.transform(d.x_train), d.y_train)
    w = m.coef_ / sc.scale_[None, :]
    p = tmp_path / "raw.pt"
    torch.save({"0.weight": torch.as_tensor(w), "0.bias": torch.as_tensor(m.intercept_ - w @ sc.mean_)}, p)
    return p


def test_surrogate_on_raw_features_reaches_the_plain_thief(tmp_path):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    p = _raw_logistic(tmp_path)
    s = scenario_from_dict(make_scenario(
        victim={"model": {"arch": "file", "path": str(p), "spec": {"arch": "mlp", "hidden": []}},
                "data": DATA},
        attacker={"pool": 85}, interface={"kind": "prediction", "output": "probabilities"},
        attacks=[{"name": "surrogate", "params": {"max_queries": 85}}]))
    v = build_victim(s)
    (a,) = run_scenario(s, out=tmp_path / "o", victim=v)["attacks"]
    assert a["metrics"]["standardised_inputs"] == 1.0 and a["metrics"]["n_probes"] == 86
    assert any("standardised with the attacker pool" in n for n in a["notes"])
    # a logistic victim: the linear copy fits its logits exactly and is the one kept
    assert a["metrics"]["linear_copy"] == 1.0 and any("surrogate linear" in n for n in a["notes"])
    # the plain thief on the same 85 points (the whole pool: the surrogate asked each once)
    pool = np.asarray(v.truth.data.x_pool)
    xt = np.asarray(v.truth.data.x_test)
    label = lambda x: v.backend.predict(torch.as_tensor(x), "label").numpy()  # noqa: E731
    thief = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(pool, label(pool))
    plain = float((thief.predict(xt) == label(xt)).mean())
    assert a["metrics"]["fidelity"] >= plain - 0.01, (a["metrics"]["fidelity"], plain)


def test_hard_label_loss_reads_each_answers_top_class():
    """Noisy probabilities whose mass sits mostly on wrong classes: the hard-label loss is the
    cross-entropy against the answers' argmax, computed independently here."""
    gen = torch.Generator().manual_seed(0)
    y = torch.rand(20, 10, generator=gen, dtype=torch.float64)
    y = y / y.sum(1, keepdim=True)
    out = torch.randn(20, 10, generator=gen, dtype=torch.float64)
    want = torch.nn.functional.cross_entropy(out, y.argmax(1))
    assert torch.allclose(membership_loss(out, y, "probabilities", "multiclass", hard=True), want)
    soft = -(y * torch.log_softmax(out, 1)).sum(1).mean()
    assert torch.allclose(membership_loss(out, y, "probabilities", "multiclass"), soft)


@pytest.mark.slow
def test_noisy_probabilities_surrogate_reaches_the_plain_thief(tmp_path):
    """Issue 30's panel finding: σ 0.2 output noise, 10 classes, budget 1500 — the surrogate
    reads the answers' top class and reaches a plain MLPClassifier thief (within 1.5 points)."""
    from sklearn.neural_network import MLPClassifier

    s = scenario_from_dict(make_scenario(
        victim={"model": {"arch": "mlp", "hidden": [32]}, "data": {"dataset": "digits", "n_train": 1000},
                "training": {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "epochs": 30,
                             "batch_size": 64, "dtype": "float64"}},
        attacker={"pool": 500}, interface={"kind": "prediction", "output": "probabilities"},
        defenses={"output_noise": {"sigma": 0.2}, "query_budget": 1500},
        attacks=[{"name": "surrogate"}]))
    v = build_victim(s)
    (a,) = run_scenario(s, out=tmp_path / "o", victim=v)["attacks"]
    pool = np.asarray(v.truth.data.x_pool).reshape(len(v.truth.data.x_pool), -1)
    rng = np.random.default_rng(0)
    x = np.concatenate([pool, pool[rng.integers(0, len(pool), 1000)]
                        + rng.standard_normal((1000, pool.shape[1])) * pool.std(0)])
    p = v.backend.predict(torch.as_tensor(x), "probabilities").numpy()
    y = (p + 0.2 * rng.standard_normal(p.shape)).argmax(1)
    xt = np.asarray(v.truth.data.x_test).reshape(len(v.truth.data.x_test), -1)
    truth = v.backend.predict(torch.as_tensor(xt), "label").numpy()
    plain = float((MLPClassifier(max_iter=500, random_state=0).fit(x, y).predict(xt) == truth).mean())
    assert a["metrics"]["fidelity"] >= plain - 0.015, (a["metrics"], plain)


def test_query_learning_on_raw_features_searches_standardised_coordinates(tmp_path):
    """A ReLU MLP [8] on breast_cancer's raw features (the scaler folded in): query_learning's
    Gaussian lines in raw units would sit far outside the data; in the pool's standardised
    coordinates it recovers the network (scored against the victim on its test split)."""
    p = tmp_path / "mlp.pt"
    torch.manual_seed(0)
    s0 = scenario_from_dict(make_scenario(victim={"model": {"arch": "mlp"}, "data": DATA}))
    d = load_dataset(s0.victim.data, s0.seed)
    mu, sd = d.x_train.mean(0), d.x_train.std(0)
    w0, b0 = torch.randn(8, 30, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    w = w0 / torch.as_tensor(sd)[None, :]
    w2 = torch.randn(1, 8, dtype=torch.float64)
    torch.save({"0.weight": w, "0.bias": b0 - w @ torch.as_tensor(mu), "2.weight": w2,
                "2.bias": torch.zeros(1, dtype=torch.float64)}, p)
    s = scenario_from_dict(make_scenario(
        victim={"model": {"arch": "file", "path": str(p), "spec": {"arch": "mlp", "hidden": [8]}},
                "data": DATA},
        attacker={"pool": 85}, interface={"kind": "prediction", "output": "logits"},
        attacks=[{"name": "query_learning"}]))
    (a,) = run_scenario(s, out=tmp_path / "o")["attacks"]
    m = a["metrics"]
    assert m["standardised_inputs"] == 1.0 and any("standardised" in n for n in a["notes"])
    assert m["output_r2"] > 0.99 and m["output_error"] < 1e-2, m
