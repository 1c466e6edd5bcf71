"""Membership inference and DP auditing against ground truth: batched reference models equal the
recipe (Opacus included), signals match their definition, the truth stays with the scorer, LiRA
beats the loss attack on an overfit victim, DP victims are never over-claimed, broken claims are
caught."""

import math

import numpy as np
import pytest
import torch
from conftest import make_scenario

from harness.attacker.informed import Recipe
from harness.attacker.shadows import flatten_state
from harness.attacker.signals import phi_from_logits, phi_from_probs
from harness.attacker.stacked_training import train_stacked
from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict
from victims.build import build_victim

DIGITS = {"model": {"arch": "mlp", "hidden": [16]},
          "data": {"dataset": "digits", "n_train": 200, "n_test": 200, "attacker_pool": 200},
          "training": {"epochs": 4, "lr": 0.1, "momentum": 0.9, "batch_size": 32,
                       "weight_decay": 0.01, "dtype": "float64"}}
# overfit: a wide MLP on 1,000 teacher-labelled Gaussian points, 1,000 non-members
OVERFIT = {"model": {"arch": "mlp", "hidden": [256]},
           "data": {"dataset": "gaussian", "dim": 20, "labels": "teacher", "task": "multiclass",
                    "n_train": 1000, "n_test": 1000, "attacker_pool": 1000},
           "training": {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "epochs": 60, "batch_size": 50}}


def _recipe(victim=DIGITS, **over):
    s = scenario_from_dict(make_scenario(victim=victim, **over))
    v = build_victim(s)
    d, info = v.truth.data, v.info
    return s, v, Recipe(s, info.task, d.input_shape, info.n_outputs, info.device, info.dtype)


@pytest.mark.parametrize("dp", [None, {"noise_multiplier": 1e-12, "max_grad_norm": 1.0}])
def test_stacked_models_equal_the_recipe_one_by_one(dp):
    # minibatch SGD (permutation per epoch) and Opacus DP-SGD (Poisson sampling, clipping binds):
    # each stacked model is the recipe trained on its own rows, with its own seed and init
    s, v, r = _recipe(defenses={"dp_sgd": dp} if dp else {})
    d = v.truth.data
    x, y = torch.as_tensor(d.x_train), torch.as_tensor(d.y_train)
    g = torch.Generator().manual_seed(0)
    idx = torch.stack([torch.randperm(len(x), generator=g)[:150] for _ in range(3)])
    flat = train_stacked(r, x, y, idx, seed=11, init_seeds=[5, 6, 7])
    for k in range(3):
        ref = flatten_state(r.train(x[idx[k]], y[idx[k]], seed=11 + k, init_seed=5 + k))
        assert torch.allclose(flat[k], ref, atol=1e-10, rtol=0)


def test_stacked_dp_noise_is_the_recipes_sigma():
    # with real noise the models differ from each other by σ·C/B-sized steps; σ from Opacus' target ε
    from harness.attacker.stacked_training import dp_noise_multiplier, dp_schedule

    s, v, r = _recipe(defenses={"dp_sgd": {"epsilon": 4.0}})
    q, per_epoch, epochs, expected = dp_schedule(150, r.training)
    assert (q, per_epoch, epochs, expected) == (1 / 5, 5, 4, 30)
    from opacus.accountants.utils import get_noise_multiplier

    assert dp_noise_multiplier(r.dp, q, epochs) == pytest.approx(
        get_noise_multiplier(target_epsilon=4.0, target_delta=1e-5, sample_rate=q, epochs=epochs,
                             accountant="rdp"))


def test_phi_is_the_logit_scaled_confidence():
    z = torch.randn(3, 7, 5, dtype=torch.float64) * 4
    y = torch.randint(0, 5, (7,))
    p = torch.softmax(z, -1)
    py = p[..., torch.arange(7), y]
    expect = torch.log(py / (1 - py))
    assert torch.allclose(phi_from_logits(z, y, "multiclass"), expect, atol=1e-9)
    assert torch.allclose(phi_from_probs(p, y), expect, atol=1e-9)
    zb = torch.randn(7, 1, dtype=torch.float64)
    yb = torch.randint(0, 2, (7,))
    pb = torch.sigmoid(zb[:, 0])
    pyb = torch.where(yb == 1, pb, 1 - pb)
    assert torch.allclose(phi_from_logits(zb, yb, "binary"), torch.log(pyb / (1 - pyb)), atol=1e-9)


def test_the_attacker_never_sees_membership(tmp_path):
    from defenses.output import OutputDefenses
    from harness.attacker.membership import MembershipAccess, MembershipKnowledge
    from harness.core.oracle import Oracle

    s, v, _ = _recipe()
    o = Oracle(v.backend, v.info, OutputDefenses(), None)
    provider = MembershipKnowledge(s, v, o, "x", 0, 1)
    kn = MembershipAccess(provider)
    assert not any(hasattr(kn, a) for a in ("truth", "victim", "oracle", "s"))
    ev = kn.eval_set()
    mem = provider.truth.is_member
    assert len(ev) == 400 and mem.sum() == 200  # members and as many non-members
    d = v.truth.data
    train = {tuple(np.round(r, 9)) for r in d.x_train}
    got = [tuple(np.round(r, 9)) in train for r in ev.x.numpy()]
    assert np.array_equal(np.array(got), mem)  # the secret labels are the truth
    assert 0.3 < mem[:100].mean() < 0.7  # ...in a shuffled order


def _run(tmp_path, victim, attacks, **over):
    over.setdefault("interface", {"kind": "prediction", "output": "probabilities"})
    s = scenario_from_dict(make_scenario(victim=victim, attacks=attacks, **over))
    return run_scenario(s, out=tmp_path)


@pytest.mark.slow  # a strength comparison (~4 s); LiRA runs by default in the attack contract
def test_lira_beats_loss_at_low_fpr_on_an_overfit_victim(tmp_path):
    rep = _run(tmp_path, OVERFIT, [{"name": "mia_loss"},
                                   {"name": "mia_lira", "params": {"shadows": 16, "mode": "online"}}])
    loss, lira = (a["metrics"] for a in rep["attacks"])
    assert lira["nonmembers"] >= 1000 and lira["tpr_at_fpr_0.001_measured"] == 1.0
    assert lira["tpr_at_fpr_0.001"] > 3 * max(loss["tpr_at_fpr_0.001"], 1e-3)
    assert lira["auc"] > loss["auc"]
    assert rep["attacks"][1]["risk"] == "high"
    assert (tmp_path / "mia_lira" / "roc.png").is_file()
    assert "roc" in rep["attacks"][1]["artifacts"]


def test_reference_models_are_shared_across_attacks(tmp_path, monkeypatch):
    from harness.attacker import reference_models

    trained, real = [], reference_models.train_reference_set
    monkeypatch.setattr(reference_models, "train_reference_set",  # the real trainer, counted
                        lambda *a, **k: trained.append(a[2]) or real(*a, **k))
    rep = _run(tmp_path, DIGITS, [{"name": "mia_lira", "params": {"shadows": 4, "mode": "online"}},
                                  {"name": "dp_audit", "params": {"shadows": 4, "one_run": False}}])
    lira, audit = rep["attacks"]
    assert audit["status"] == "ok" and "shared" not in audit.get("reason", "")
    # the audit re-used LiRA's reference models: identical scores, so identical ROC measures
    assert audit["metrics"]["auc"] == lira["metrics"]["auc"]
    assert trained == [4]  # one set of 4 trained, for both (a count: load cannot change it)


def test_label_only_api_gets_the_gap_attack(tmp_path):
    rep = _run(tmp_path, DIGITS, [{"name": "mia_loss"}, {"name": "mia_lira"}],
               interface={"kind": "prediction", "output": "label"})
    loss, lira = rep["attacks"]
    assert loss["status"] == "ok" and "1[prediction right]" in " ".join(loss["notes"])
    assert lira["status"] == "skipped"


def test_budget_stops_scoring_partway_and_says_so(tmp_path):
    # a short surrogate listed: the runner then adds no default one to check the stop (1.5 s less)
    rep = _run(tmp_path, DIGITS, [{"name": "mia_loss"}, {"name": "surrogate", "params": {
        "steps": 60, "final_steps": 60}}], defenses={"query_budget": 150})
    a = rep["attacks"][0]
    assert a["status"] == "ok" and a["stopped_by"] == "budget" and a["queries"] == 150
    assert a["metrics"]["evaluated"] == 150 and "150 of 400" in a["reason"]


def test_non_private_model_claiming_eps_0_1_is_caught(tmp_path):
    victim = {**DIGITS, "training": {**DIGITS["training"], "epochs": 40},
              "claimed_privacy": {"epsilon": 0.1, "delta": 1e-5}}
    rep = _run(tmp_path, victim, [{"name": "dp_audit", "params": {"shadows": 4, "canaries": 200}}])
    a = rep["attacks"][0]
    assert a["metrics"]["epsilon_lower"] > 0.1 and a["risk"] == "high"
    assert a["reason"].startswith("DP claim violated") and rep["verdict"] == "fail"
    assert a["metrics"]["epsilon_lower"] <= a["metrics"]["epsilon_perfect"]


@pytest.mark.parametrize("eps", [8.0])
def test_dp_victim_epsilon_lower_never_exceeds_epsilon(tmp_path, eps):
    victim = {**DIGITS, "training": {**DIGITS["training"], "epochs": 10, "lr": 0.5}}
    rep = _run(tmp_path, victim, [{"name": "dp_audit", "params": {"shadows": 4, "canaries": 200,
                                                                   "gradient_canaries": 1000}}],
               defenses={"dp_sgd": {"epsilon": eps, "delta": 1e-5}})
    m = rep["attacks"][0]["metrics"]
    assert m["epsilon_lower"] <= eps and m["epsilon_accounted"] == pytest.approx(eps, rel=0.05)
    assert m["epsilon_lower_one_run"] <= m["epsilon_accounted_canary_run"]
    assert m["epsilon_lower_whitebox"] <= m["epsilon_accounted_whitebox_run"]
    # no audit of this size could have shown ε > 8: not "low", incomplete, and the reason says so
    assert m["epsilon_perfect"] < eps and m["audit_delta"] == 1e-5
    assert rep["attacks"][0]["status"] == "incomplete" and "untested" in rep["attacks"][0]["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("eps", [1.0, 4.0, 8.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_dp_victims_full_audit_never_over_claims(tmp_path, eps, seed):
    s = scenario_from_dict({**make_scenario(
        victim={"model": {"arch": "mlp", "hidden": [128]},
                "data": {"dataset": "digits", "n_train": 500, "n_test": 500, "attacker_pool": 797},
                "training": {"lr": 0.5, "momentum": 0.0, "epochs": 30, "batch_size": 64}},
        attacks=[{"name": "dp_audit", "params": {"shadows": 16, "canaries": 500}}],
        interface={"kind": "prediction", "output": "probabilities"},
        defenses={"dp_sgd": {"epsilon": eps, "delta": 1e-5}}), "seed": seed})
    rep = run_scenario(s, out=tmp_path)
    m = rep["attacks"][0]["metrics"]
    assert m["epsilon_lower"] <= eps, m
    assert rep["verdict"] != "fail" and rep["attacks"][0]["risk"] != "high"  # incomplete where untestable


def test_reconn_and_informed_mia_run_under_minibatch_dp_sgd(tmp_path):
    victim = {"model": {"arch": "mlp", "hidden": [10], "activation": "elu"},
              "data": {"dataset": "digits", "n_train": 200, "attacker_pool": 100, "standardize": "minmax"},
              "training": {"lr": 0.5, "epochs": 3, "batch_size": 50, "dtype": "float64"}}
    s = scenario_from_dict(make_scenario(
        victim=victim, interface={"kind": "whitebox", "output": "logits"},
        defenses={"dp_sgd": {"epsilon": 8.0, "delta": 1e-5}},
        attacks=[{"name": "reconn", "params": {"targets": 2, "shadows": 32, "epochs": 5}},
                 {"name": "informed_mia", "params": {"games": 2, "shadows": 4}}]))
    rep = run_scenario(s, out=tmp_path)
    reconn, mia = rep["attacks"]
    assert reconn["status"] == mia["status"] == "ok"
    assert reconn["metrics"]["shadows"] == 32 and mia["metrics"]["games"] == 2
    checks = {r["bound"]: r for r in rep["rero"] if str(r["bound"]).startswith("check:")}
    assert set(checks) == {"check:reconn", "check:informed_mia"}
    e = math.exp(2 * rep["privacy"]["epsilon"])
    assert checks["check:informed_mia"]["gamma"] == pytest.approx(
        min(1.0, (e + (1 + math.exp(rep["privacy"]["epsilon"])) * 1e-5) / (1 + e)))
    assert not any(r.get("violation") for r in checks.values())


def test_user_model_file_with_npz_pool_and_a_false_claim_is_caught(tmp_path):
    # the user's own model (a state_dict + its architecture) and data (.npz with x_pool/y_pool):
    # no retraining, so no canary run; the threshold audit alone catches an ε = 0.1 claim
    s0, v0, _ = _recipe({**DIGITS, "training": {**DIGITS["training"], "epochs": 40}})
    d = v0.truth.data
    torch.save(v0.truth.model.state_dict(), tmp_path / "model.pt")
    np.savez(tmp_path / "data.npz", x_train=d.x_train, y_train=d.y_train, x_test=d.x_test,
             y_test=d.y_test, x_pool=d.x_pool[:150], y_pool=d.y_pool[:150])
    victim = {"model": {"arch": "file", "path": str(tmp_path / "model.pt"), "format": "state_dict",
                        "spec": {"arch": "mlp", "hidden": [16]}},
              "data": {"dataset": "npz", "path": str(tmp_path / "data.npz"), "standardize": "none"},
              "training": DIGITS["training"], "claimed_privacy": {"epsilon": 0.1}}
    rep = _run(tmp_path / "run", victim, [{"name": "dp_audit", "params": {"shadows": 4}}])
    a = rep["attacks"][0]
    m = a["metrics"]
    assert "epsilon_lower_one_run" not in m and "not trained by leakmeter" in " ".join(a["notes"])
    assert m["members"] == m["nonmembers"] == 200 and m["epsilon_claimed"] == 0.1
    assert m["epsilon_lower"] > 0.1 and a["risk"] == "high" and rep["verdict"] == "fail"
    assert rep["victim"]["data"]["pool_source"] == "x_pool/y_pool of the .npz"


@pytest.mark.parametrize("task, k_out", [("multiclass", 4), ("binary", 1), ("regression", 1)])
@pytest.mark.parametrize("acts", [["tanh", "relu"], ["relu", "relu"]])
def test_batched_mlp_gradients_equal_vmap_grad(task, k_out, acts):
    """The stacked trainer's bmm gradients are torch.func's vmap(grad(loss)), model for model; a
    ReLU MLP's are written out (`_relu_grads`), any other goes through autograd (`_mlp_grads`)."""
    from torch.func import functional_call, grad, vmap

    from harness.attacker.ghost_norms import ghost_layers
    from harness.attacker.stacked_training import _mlp_grads, _relu_grads
    from victims.models.builders import build_mlp
    from victims.models.training import loss_fn

    torch.manual_seed(0)
    model = build_mlp(6, k_out, [5, 3], acts, [True, False, True]).double()
    names = [n for n, _ in model.named_parameters()]
    params = {n: torch.randn(7, *p.shape, dtype=torch.float64) for n, p in model.named_parameters()}
    is_w = {n: float(params[n].dim() > 2) for n in names}
    x = torch.randn(7, 9, 6, dtype=torch.float64)
    y = (torch.randint(0, k_out, (7, 9)) if task == "multiclass" else
         torch.randint(0, 2, (7, 9)) if task == "binary" else torch.randn(7, 9, dtype=torch.float64))
    crit, wd = loss_fn(task), 0.03

    def loss(p, xb, yb):
        pen = sum(is_w[m] * (p[m] ** 2).sum() for m in names)
        return crit(functional_call(model, p, (xb,)), yb) + 0.5 * wd * pen

    want = vmap(grad(loss))(params, x, y)
    written = _relu_grads(ghost_layers(model), names, task, wd, is_w)
    assert (written is not None) == (acts == ["relu", "relu"])
    for fn in [_mlp_grads(ghost_layers(model), names, crit, wd, is_w), *([written] if written else [])]:
        got = fn(params, x, y)
        assert set(got) == set(names)
        for n in names:
            assert torch.allclose(got[n], want[n], atol=1e-13, rtol=1e-11), n
