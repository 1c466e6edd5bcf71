"""dp_audit's white-box gradient canaries through real Opacus, the accountant against the claim,
and the test-only faults that break a recipe's accountant (defenses/dp_sgd.py: audit_fault)."""

import numpy as np
import pytest
import torch
from conftest import make_scenario
from torch.utils.data import DataLoader, TensorDataset

from defenses.dp_sgd import PrivateTraining, audit_fault
from harness.attacker.gradient_canaries import GradientCanaries
from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict

VICTIM = {"model": {"arch": "mlp", "hidden": [16]},
          "data": {"dataset": "digits", "n_train": 200, "n_test": 200, "attacker_pool": 100},
          "training": {"lr": 0.5, "epochs": 8, "batch_size": 32, "dtype": "float64"}}
FAST = {"attacks": ["mia_loss"], "one_run": False, "gradient_canaries": 1000}


def _run(tmp_path, dp, params=FAST, victim=VICTIM):
    s = scenario_from_dict(make_scenario(
        victim=victim, interface={"kind": "prediction", "output": "probabilities"},
        defenses={"dp_sgd": dp} if dp else {}, attacks=[{"name": "dp_audit", "params": params}]))
    return run_scenario(s, out=tmp_path)["attacks"][0]


def _tapped_run(sigma, steps_seed=0, fault=None, m=30):
    """Train a tiny model with Opacus and a tap; returns (observations, coins, tap)."""
    from harness.scenario.schema import DPSpec

    torch.manual_seed(steps_seed)
    x, y = torch.randn(64, 5, dtype=torch.float64), torch.randint(0, 3, (64,))
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)).double()
    n = sum(p.numel() for p in model.parameters())
    coins = np.arange(m) % 2 == 0
    tap = GradientCanaries(np.random.default_rng(1).choice(n, m, replace=False), coins, seed=3)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    priv = PrivateTraining(DPSpec(noise_multiplier=sigma, max_grad_norm=1.0), epochs=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ctx = audit_fault(fault) if fault else __import__("contextlib").nullcontext()
    with ctx:
        pm, po, pl = priv.wrap(model, opt, loader, torch.nn.CrossEntropyLoss(), tap=tap)
        for _ in range(3):
            for xb, yb in pl:
                if len(xb):
                    po.zero_grad()
                    torch.nn.functional.cross_entropy(pm(xb), yb).backward()
                    po.step()
    return tap.observations(), coins, tap


def test_tap_sees_exactly_the_clipped_canary_plus_opacus_noise():
    obs, coins, tap = _tapped_run(sigma=1e-9)
    # no noise: a canary's observation is 1 (its clipped Dirac, in units of C) when sampled, else 0
    assert np.allclose(obs[:, ~coins], 0, atol=1e-6)
    assert np.all(np.isclose(obs, 0, atol=1e-6) | np.isclose(obs, 1, atol=1e-6))
    hits = np.isclose(obs[:, coins], 1, atol=1e-6).mean()
    assert abs(hits - tap.q) < 4 * np.sqrt(tap.q * (1 - tap.q) / obs[:, coins].size)  # Poisson at q
    noisy, coins, _ = _tapped_run(sigma=2.0)
    assert np.std(noisy[:, ~coins]) == pytest.approx(2.0, rel=0.15)  # Opacus' σ·C, per step


def test_faults_reach_the_canaries():
    obs, coins, _ = _tapped_run(sigma=1e-9, fault="no_clipping")
    assert np.isclose(obs[:, coins], 10, atol=1e-5).any()  # the 10·C canary passes unclipped
    noisy, coins, tap = _tapped_run(sigma=2.0, fault="low_noise")
    assert np.std(noisy[:, ~coins]) == pytest.approx(0.5, rel=0.15) and tap.sigma_told == 2.0
    obs, coins, tap = _tapped_run(sigma=1e-9, fault="shuffle")
    per_epoch = np.isclose(obs[:, coins], 1, atol=1e-6).reshape(3, tap.per_epoch, -1).sum(axis=1)
    assert not tap.poisson and (per_epoch == 1).all()  # exactly once per epoch


def test_claim_the_accountant_contradicts_is_a_violation_without_an_audit(tmp_path):
    victim = {**VICTIM, "claimed_privacy": {"epsilon": 2.0, "delta": 1e-5}}
    a = _run(tmp_path, {"noise_multiplier": 0.6, "max_grad_norm": 1.0},
             {**FAST, "whitebox": False}, victim)
    m = a["metrics"]
    assert a["risk"] == "high" and m["epsilon_accountant"] > 2.0 and m["epsilon_claimed"] == 2.0
    assert a["reason"].startswith("DP claim violated: the recipe's own accountant gives ε = ")
    assert f"{m['epsilon_accountant']:.3g}" in a["reason"] and "claimed ε = 2" in a["reason"]
    from opacus.accountants import RDPAccountant  # the victim's run: 7 Poisson batches × 8 epochs

    acc = RDPAccountant()
    acc.history = [(0.6, 1 / 7, 56)]
    assert m["epsilon_accountant"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)


@pytest.mark.slow
def test_an_audit_that_could_not_catch_a_violation_is_incomplete(tmp_path):
    a = _run(tmp_path, {"epsilon": 8.0, "delta": 1e-5}, {**FAST, "gradient_canaries": 200})
    m = a["metrics"]
    assert m["epsilon_perfect"] < 8.0 and m["epsilon_lower"] <= m["epsilon_perfect"]
    assert a["status"] == "incomplete" and a["risk"] is None and "untested" in a["reason"]


@pytest.mark.parametrize("fault", [pytest.param("low_noise", marks=pytest.mark.slow), "no_clipping"])
def test_bug_recipes_are_caught_and_the_correct_one_is_not(tmp_path, fault):
    dp = {"epsilon": 2.0, "delta": 1e-5, "max_grad_norm": 1.0}
    with audit_fault(fault, factor=0.2):
        bad = _run(tmp_path / "bad", dp)
    assert bad["risk"] == "high" and bad["reason"].startswith("DP claim violated")
    m = bad["metrics"]
    assert m["epsilon_lower_whitebox"] > m["epsilon_accounted_whitebox_run"] and m["runs"] == 2
    good = _run(tmp_path / "good", dp)
    g = good["metrics"]
    assert good["risk"] != "high" and g["epsilon_lower_whitebox"] <= g["epsilon_accounted_whitebox_run"]


@pytest.mark.slow
def test_blackbox_runs_show_the_target_without_noise_and_report_their_accountant(tmp_path):
    # σ → 0: runs that hold the target move further down its descent direction than runs without
    # it (the base batches' sampling still varies the runs), so the bound is well above 0
    a = _run(tmp_path, {"noise_multiplier": 1e-3, "max_grad_norm": 1.0},
             {**FAST, "whitebox": False, "blackbox_runs": 32})
    m = a["metrics"]
    assert m["runs"] == 33 and m["blackbox_trials_in"] + m["blackbox_trials_out"] == 32
    assert 0 < m["epsilon_lower_blackbox"] <= m["epsilon_perfect_blackbox"]
    assert m["epsilon_accounted_blackbox_run"] > 1e3  # σ = 0.001: no privacy to speak of


def test_judge_separates_a_broken_sampler_from_a_measured_violation():
    from harness.attacks.membership.dp_audit import DpAudit

    m = {"epsilon_lower": 0.4, "epsilon_perfect": 5.5, "epsilon_lower_whitebox": 0.4,
         "epsilon_perfect_whitebox": 5.5, "epsilon_accounted_whitebox_run": 2.0,
         "epsilon_ceiling_whitebox": 0.6, "whitebox_poisson_sampling": 0.0}
    risk, why = DpAudit().judge(m, None)
    assert risk == "high" and why.startswith("DP claim unsupported: the recipe trains on shuffled")
    assert "no violation measured" in why and "would show ε ≥ 0.6" in why
    risk, why = DpAudit().judge({**m, "whitebox_poisson_sampling": 1.0}, None)
    assert risk == "low" and "stands" in why
    risk, why = DpAudit().judge({**m, "epsilon_lower_whitebox": 2.5, "epsilon_lower": 2.5}, None)
    assert risk == "high" and why.startswith("DP claim violated")  # a measurement comes first


@pytest.mark.slow
def test_shuffled_batches_are_seen_by_the_whitebox_auditor(tmp_path):
    dp = {"epsilon": 2.0, "delta": 1e-5, "max_grad_norm": 1.0}
    with audit_fault("shuffle"):
        bad = _run(tmp_path / "bad", dp)
    m = bad["metrics"]
    assert m["whitebox_poisson_sampling"] == 0.0 and bad["risk"] == "high"
    assert bad["reason"].startswith("DP claim unsupported")
    assert m["epsilon_ceiling_whitebox"] <= m["epsilon_perfect_whitebox"]
