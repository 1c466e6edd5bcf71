"""glm_closed_form (paper 004 Thm. 1, Thm. 8) against real released GLMs, scored on the truth."""

import pytest
import torch
from conftest import make_scenario

from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict
from harness.scoring.audit import clopper_pearson
from harness.scoring.reconstruction import pairwise_ncc, ssim_pairs


def _glm(dataset, task, arch="logistic", bias=True, wd=1e-2, targets=5, n_train=150):
    return scenario_from_dict(make_scenario(
        victim={"model": {"arch": arch, "bias": bias},
                "data": {"dataset": dataset, "n_train": n_train, "attacker_pool": 50, "task": task},
                "training": {"optimizer": "lbfgs", "weight_decay": wd, "steps": 3000, "tol": 1e-12,
                             "dtype": "float64"}},
        interface={"kind": "whitebox", "output": "probabilities"},
        attacks=[{"name": "glm_closed_form", "params": {"targets": targets}}]))


@pytest.mark.parametrize("dataset,task,arch,targets", [
    ("breast_cancer", "binary", "logistic", 5),
    ("digits", "multiclass", "logistic", 2),
    ("diabetes", "regression", "linear", 5),
])
def test_thm1_exact(tmp_path, dataset, task, arch, targets):
    rep = run_scenario(_glm(dataset, task, arch, targets=targets), out=tmp_path)
    m = rep["attacks"][0]["metrics"]
    assert rep["attacks"][0]["status"] == "ok"
    assert m["rel_error_max"] <= 1e-6
    assert m["success_rate"] == 1.0 and m["reconstructed"] == targets
    assert m.get("label_accuracy", 1.0) == 1.0 and m.get("label_error_max", 0.0) <= 1e-6
    assert m["release_grad_norm_max"] < 1e-9
    assert rep["attacks"][0]["risk"] == "high"


def test_thm8_pair_contains_target(tmp_path):
    rep = run_scenario(_glm("diabetes", "regression", "linear", bias=False, wd=0.0), out=tmp_path)
    m = rep["attacks"][0]["metrics"]
    assert m["rel_error_max"] <= 1e-6 and m["success_rate"] == 1.0


def test_not_a_glm_is_skipped_with_a_reason(tmp_path):
    s = _glm("breast_cancer", "binary")
    s.victim.model.arch = "mlp"
    s.victim.model.hidden = [8]
    s.victim.training.optimizer = "sgd"
    s.victim.training.epochs = 2
    rep = run_scenario(s, out=tmp_path)
    a = rep["attacks"][0]
    assert a["status"] == "skipped" and a["risk"] is None and "not a GLM" in a["reason"]
    assert rep["verdict"] == "inconclusive"  # the only requested attack could not run


def test_clopper_pearson_matches_binomial_tails():
    from scipy.stats import binom

    lo, hi = clopper_pearson(7, 20)
    assert binom.sf(6, 20, lo) == pytest.approx(0.025, abs=1e-9)  # P[X >= 7 | lo] = α/2
    assert binom.cdf(7, 20, hi) == pytest.approx(0.025, abs=1e-9)  # P[X <= 7 | hi] = α/2
    assert clopper_pearson(0, 10)[0] == 0.0 and clopper_pearson(10, 10)[1] == 1.0


def test_ssim_and_ncc_on_known_pairs():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(4, 64, generator=g, dtype=torch.float64)
    assert torch.allclose(ssim_pairs(a, a, (1, 8, 8)), torch.ones(4, dtype=torch.float64))
    assert torch.allclose(pairwise_ncc(a, 3 * a + 1).diagonal(), torch.ones(4, dtype=torch.float64))
    assert (ssim_pairs(a, torch.rand(4, 64, generator=g, dtype=torch.float64), (1, 8, 8)) < 0.5).all()
