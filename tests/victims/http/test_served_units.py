"""A regression model leakmeter trained (on a z-scored target) is served in its target's own
units, as a deployed regressor answers and as a scan of it reads its targets (issue 30)."""

from __future__ import annotations

import numpy as np
import torch

from harness.scenario import scenario_from_dict
from victims.data.datasets import load_dataset
from victims.http.served import build_served


def test_a_leakmeter_trained_regressor_is_served_in_its_targets_units():
    s = scenario_from_dict({
        "name": "diabetes-served", "seed": 0, "device": "cpu",
        "victim": {"model": {"arch": "mlp", "hidden": [16]},
                   "data": {"dataset": "diabetes", "n_train": 250},
                   "training": {"epochs": 30, "lr": 0.01, "optimizer": "adam"}},
        "interface": {"kind": "gradient", "output": "logits"},
        "attacks": [{"name": "surrogate"}], "tracking": {"enabled": False}})
    served, victim = build_served(s)
    raw = load_dataset(s.victim.data, s.seed, scale_target=False)  # what a scan holds
    x, y = np.concatenate([raw.x_test, raw.x_pool]), np.concatenate([raw.y_test, raw.y_pool])
    got = served.answer(x.tolist())[:, 0]
    z = victim.backend.predict(torch.as_tensor(x), "logits").double().numpy()[:, 0]
    t = served.meta["target"]
    assert abs(t["mean"] - raw.y_train.mean()) < 1e-9 and abs(t["std"] - raw.y_train.std()) < 1e-9
    np.testing.assert_allclose(got, z * t["std"] + t["mean"], rtol=1e-12)
    # in the target's units: better than its mean on held-out rows (z-scored answers are ~150 off)
    assert len(y) > 50 and np.mean((got - y) ** 2) < 0.8 * np.var(y)
    g = served.answer(x[:4].tolist(), "gradient")
    g_model = victim.backend.explain(torch.as_tensor(x[:4]), "gradient", None).double().numpy()
    np.testing.assert_allclose(g, g_model * t["std"], rtol=1e-9)
