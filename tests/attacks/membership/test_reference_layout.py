"""Reference models as the papers lay them out, against independent computations: each point IN for
a random half of the models drawn for that point alone, models of the victim's size, failed models
dropped and counted, one variance rule for both sides, RMIA's offline fit, tuned a and population,
and where reference models train (here or on Ray: the same parameters)."""

import math
import sys

import numpy as np
import pytest
import torch
import yaml
from conftest import make_scenario
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

from harness.attacker.informed import Recipe
from harness.attacker.reference_models import layout, screen, train_reference_set
from harness.attacks.membership.mia_lira import PRIOR_DF, gaussian_fit, lira_offline, lira_online
from harness.attacks.membership.mia_rmia import A_GRID, population, pr_x, tune_a
from harness.core.errors import BadInput
from harness.run.runner import run_scenario
from harness.scenario import ScenarioError, scenario_from_dict
from victims.build import build_victim

DIGITS = {"model": {"arch": "mlp", "hidden": [16]},
          "data": {"dataset": "digits", "n_train": 200, "n_test": 200, "attacker_pool": 200},
          "training": {"epochs": 4, "lr": 0.1, "momentum": 0.9, "batch_size": 32,
                       "weight_decay": 0.01, "dtype": "float64"}}
PROBS = {"kind": "prediction", "output": "probabilities"}


def _setup(victim=DIGITS, **over):
    from harness.attacker.membership import MembershipKnowledge
    from harness.core.oracle import Oracle

    s = scenario_from_dict(make_scenario(victim=victim, interface=PROBS, **over))
    v = build_victim(s)
    kn = MembershipKnowledge(s, v, Oracle(v.backend, v.info, None, None), "t", 0, 1)
    return s, v, kn.eval_set(), kn.recipe


def test_each_point_is_in_for_a_random_half_and_models_train_on_the_victims_size():
    keep_eval, keep_pool = layout("halves", 64, 400, 300, 260, torch.Generator().manual_seed(0))
    assert (keep_eval.sum(0) == 32).all()  # every evaluation point IN for exactly half the models
    assert (keep_eval.sum(1) == 200).all() and (keep_pool.sum(1) == 60).all()  # 200 + 60 = 260
    assert keep_pool.sum(0).min() >= 12 and keep_pool.sum(0).max() <= 13  # the pool fill, even
    # drawn per point: two points share IN models as two independent halves do (hypergeometric:
    # 16 of 32 on average, sd 2.0); a cyclic layout shares 0..32 uniformly (sd ≈ 9.5)
    k = keep_eval.double()
    shared = (k.T @ k)[torch.triu(torch.ones(400, 400, dtype=torch.bool), 1)]
    assert abs(float(shared.mean()) - 16) < 0.3 and float(shared.std()) < 2.6
    # ...and two models share training points as two random halves do (≈ 100 of 200), never the
    # 97% of neighbouring models in a cyclic layout
    ov = (k @ k.T)[torch.triu(torch.ones(64, 64, dtype=torch.bool), 1)] / 200
    assert abs(float(ov.mean()) - 0.5) < 0.01 and float(ov.max()) < 0.7
    # seeded: the same seed gives the same layout, another seed another one
    again, _ = layout("halves", 64, 400, 300, 260, torch.Generator().manual_seed(0))
    other, _ = layout("halves", 64, 400, 300, 260, torch.Generator().manual_seed(1))
    assert torch.equal(again, keep_eval) and not torch.equal(other, keep_eval)


def test_the_pool_design_keeps_every_evaluation_point_out():
    keep_eval, keep_pool = layout("pool", 8, 400, 300, 260, torch.Generator().manual_seed(0))
    assert not keep_eval.any()
    assert (keep_pool.sum(1) == 225).all()  # the victim's 260, capped at ¾ of the pool
    assert ((~keep_pool).sum(0) > 0).sum() > 250  # models differ in data: most points OUT somewhere


def test_reference_sets_match_the_victims_training_size():
    _, v, ev, recipe = _setup()
    assert ev.train_size == len(v.truth.data.x_train) == 200
    refs = train_reference_set(recipe, ev, 4, "halves", 3, False, False)
    assert refs.train_size == 200 and refs.keep_eval.sum(1).tolist() == [200] * 4  # eval half = 200
    assert not refs.keep_pool.any() and len(refs) == 4 and refs.dropped == []


def test_auto_variance_is_the_moderated_estimate_on_both_sides():
    g = torch.Generator().manual_seed(0)
    phi = torch.randn(12, 30, 1, generator=g, dtype=torch.float64) * torch.linspace(0.5, 3, 30)[None, :, None]
    keep = torch.rand(12, 30, generator=g) < 0.45
    keep[:2, :] = True  # every point has both sides
    keep[2:4, :] = False
    target = torch.randn(30, 1, generator=g, dtype=torch.float64)
    p, kp = phi[..., 0].numpy(), keep.numpy()

    def fit(mask, rule):
        vals = np.where(mask, p, np.nan)
        mu = np.nanmean(vals, 0)
        ss = np.nansum((vals - mu) ** 2, 0)
        df = mask.sum(0) - 1
        pooled = ss.sum() / df.sum()
        var = {"per_example": ss / df, "global": np.full(30, pooled),
               "auto": (ss + PRIOR_DF * pooled) / (df + PRIOR_DF)}[rule]
        return mu, np.sqrt(var)

    for rule in ("auto", "per_example", "global"):
        mu, sd = gaussian_fit(phi, keep, rule)
        emu, esd = fit(kp, rule)
        assert np.allclose(mu[:, 0].numpy(), emu) and np.allclose(sd[:, 0].numpy(), esd)
        mi, si = fit(kp, rule)
        mo, so = fit(~kp, rule)
        t = target[:, 0].numpy()
        expect = norm.logpdf(t, mi, si) - norm.logpdf(t, mo, so)
        assert np.allclose(lira_online(target, phi, keep, rule).numpy(), expect)
        assert np.allclose(lira_offline(target, phi, keep, rule).numpy(), (t - mo) / so)


def test_screen_drops_models_that_failed_to_train_and_only_those():
    _, _, ev, recipe = _setup()
    refs = train_reference_set(recipe, ev, 12, "halves", 5, False, False)
    assert refs.dropped == [] and len(refs) == 12  # healthy models all stay
    x = torch.cat([ev.x, ev.x_pool])
    y = torch.cat([ev.y, ev.y_pool])
    idx = torch.stack([r.nonzero()[:, 0] for r in torch.cat([refs.keep_eval, refs.keep_pool], 1)])
    flat = refs.flat.clone()
    flat[3] *= 6  # diverged: parameter norm far above the others
    model = recipe.build()
    sizes = [p.numel() for p in model.state_dict().values()]
    last_w = sum(sizes[:-2])
    flat[7, last_w:] = 0  # stuck: the output layer predicts nothing, loss = a constant predictor's
    flat[9, 0] = float("nan")
    kept, lines = screen(recipe, flat, x, y, idx, recipe.task)
    assert (~kept).nonzero()[:, 0].tolist() == [3, 7, 9]
    assert [ln.split(":")[0] for ln in lines] == ["model 3", "model 7", "model 9"]


def test_a_failed_reference_model_is_dropped_and_counted_in_the_report(tmp_path, monkeypatch):
    import harness.attacker.reference_models as rm

    real = rm.train_stacked

    def one_diverges(*a, **kw):
        flat = real(*a, **kw)
        flat[2] *= 8  # a model that blew up in training
        return flat

    monkeypatch.setattr(rm, "train_stacked", one_diverges)
    s = scenario_from_dict(make_scenario(victim=DIGITS, interface=PROBS, attacks=[
        {"name": "mia_lira", "params": {"shadows": 8, "mode": "both"}}]))
    a = run_scenario(s, out=tmp_path)["attacks"][0]
    assert a["status"] == "ok" and a["metrics"]["references_dropped"] == 1
    notes = " ".join(a["notes"])
    assert "dropped: model 2" in notes and "7 reference models" in notes and "1 of 8 dropped" in notes


def test_points_left_without_a_model_on_a_side_make_lira_incomplete(tmp_path):
    # one reference model: every point is IN or OUT for it, never both: no online score exists
    s = scenario_from_dict(make_scenario(victim=DIGITS, interface=PROBS, attacks=[
        {"name": "mia_lira", "params": {"shadows": 1, "mode": "online"}}]))
    a = run_scenario(s, out=tmp_path)["attacks"][0]
    assert a["status"] == "incomplete" and a["stopped_by"] == "assumption"
    assert "400 points without an IN or OUT model" in a["reason"]


def test_rmia_offline_pr_x_is_the_papers_linear_fit():
    g = torch.Generator().manual_seed(1)
    p = torch.rand(5, 40, generator=g, dtype=torch.float64)
    keep = torch.rand(5, 40, generator=g) < 0.5
    keep[0] = False
    for a in (0.0, 0.3, 1.0):
        out = (~keep).double()
        p_out = (out * p).sum(0) / out.sum(0)
        assert torch.allclose(pr_x(p, keep, "offline", a), 0.5 * ((1 + a) * p_out + (1 - a)))
    assert torch.allclose(pr_x(p, keep, "online", 0.3), p.mean(0))


def test_tune_a_takes_the_grid_value_with_the_best_mean_auc_over_its_own_models():
    g = torch.Generator().manual_seed(2)
    keep = torch.rand(6, 300, generator=g) < 0.5
    base = torch.rand(300, generator=g, dtype=torch.float64) * 0.6 + 0.2
    p = (base + 0.25 * keep + 0.05 * torch.rand(6, 300, generator=g, dtype=torch.float64)).clamp(0, 1)
    best, best_auc = None, -1.0
    for a in A_GRID:  # brute force, sklearn's AUC, targets 0..3 in turn
        aucs = []
        for t in range(4):
            rest = [j for j in range(6) if j != t]
            out = (~keep[rest]).double()
            known = (out.sum(0) > 0).numpy()
            p_out = (out * p[rest]).sum(0) / out.sum(0).clamp_min(1)
            ratio = (p[t] / (0.5 * ((1 + a) * p_out + (1 - a)))).numpy()
            aucs.append(roc_auc_score(keep[t].numpy()[known], ratio[known]))
        if np.mean(aucs) > best_auc:
            best, best_auc = a, np.mean(aucs)
    assert tune_a(p, keep) == best
    assert tune_a(p[:1], keep[:1]) == 0.3  # one model: nothing to tune on


def test_rmia_population_is_out_for_every_model_first_and_never_without_an_out_model():
    keep = torch.tensor([[0, 1, 1, 0, 1, 0],
                         [0, 1, 0, 1, 1, 0],
                         [0, 1, 1, 0, 0, 0]], dtype=torch.bool)
    assert population(keep, "offline", 10).tolist() == [0, 5, 2, 3, 4]  # 1: IN everywhere, left out
    assert population(keep, "online", 10).tolist() == [0, 5, 1, 2, 3, 4]
    assert population(keep, "offline", 2).tolist() == [0, 5]


def test_offline_attacks_read_the_out_models_of_the_papers_layout(tmp_path):
    s = scenario_from_dict(make_scenario(victim=DIGITS, interface=PROBS, attacks=[
        {"name": "mia_lira", "params": {"shadows": 4, "mode": "both"}},
        {"name": "mia_rmia", "params": {"references": 4}},
        {"name": "mia_rmia", "params": {"references": 1}}]))
    lira, rmia4, rmia1 = run_scenario(s, out=tmp_path)["attacks"]
    assert "offline: each point against its OUT models of 4 reference models (halves design" in \
        " ".join(lira["notes"])
    assert "offline: 4 reference models (halves design" in rmia4["notes"][0]
    assert "(pool design" in rmia1["notes"][0] and "one reference model" in rmia1["notes"][0]
    assert all(a["status"] == "ok" for a in (lira, rmia4, rmia1))
    assert rmia4["metrics"]["population"] == 200  # digits: no pool point trains a halves model


@pytest.mark.parametrize("dp", [None, {"noise_multiplier": 1.0, "max_grad_norm": 1.0}])
def test_a_model_is_the_same_whichever_chunk_trains_it(dp):
    from harness.attacker.stacked_training import dp_batch_sizes, train_stacked

    s = scenario_from_dict(make_scenario(victim=DIGITS, defenses={"dp_sgd": dp} if dp else {}))
    v = build_victim(s)
    d, info = v.truth.data, v.info
    r = Recipe(s, info.task, d.input_shape, info.n_outputs, info.device, info.dtype)
    x, y = torch.as_tensor(d.x_train), torch.as_tensor(d.y_train)
    g = torch.Generator().manual_seed(0)
    idx = torch.stack([torch.randperm(len(x), generator=g)[:120] for _ in range(5)])
    whole = train_stacked(r, x, y, idx, seed=4, init_seeds=[9, 8, 7, 6, 5])
    # parts as a Ray executor trains them: DP batches padded to the whole set's lengths
    sizes = dp_batch_sizes(120, r.training, 4, 5) if dp else None
    assert sizes is None or (len(sizes) == 4 * 4 and max(sizes) <= 120)
    parts = torch.cat([train_stacked(r, x, y, idx[:2], seed=4, init_seeds=[9, 8], sizes=sizes),
                       train_stacked(r, x, y, idx[2:], seed=6, init_seeds=[7, 6, 5], sizes=sizes),
                       ])
    assert torch.equal(whole, parts)  # DP noise included: one noise generator per model
    assert torch.equal(whole, train_stacked(r, x, y, idx, seed=4, init_seeds=[9, 8, 7, 6, 5], chunk=3))


# --------------------------------------------------------------------------- where they train


def test_ray_keys_need_the_ray_executor():
    with pytest.raises(ScenarioError, match="membership.*ray_address is for executor: ray"):
        scenario_from_dict(make_scenario(membership={"ray_address": "127.0.0.1:6379"}))
    with pytest.raises(ScenarioError, match="ray_workers sizes a local Ray"):
        scenario_from_dict(make_scenario(membership={"executor": "ray", "ray_address": "h:1",
                                                     "ray_workers": 2}))
    ok = scenario_from_dict(make_scenario(membership={"executor": "ray", "ray_workers": 2}))
    assert ok.membership.ray_workers == 2
    # where reference models train changes no number: runs stay comparable
    assert ok.fingerprint() == scenario_from_dict(make_scenario()).fingerprint()


def test_ray_executor_without_ray_is_bad_input_before_anything_runs(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from harness.cli import main
    from harness.scenario.checks import preflight

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as when it is not installed
    data = make_scenario(victim=DIGITS, interface=PROBS, membership={"executor": "ray"},
                         attacks=[{"name": "mia_loss"}, {"name": "mia_lira", "params": {"shadows": 2}}])
    with pytest.raises(BadInput, match=r"^membership.executor: ray: Ray is not installed; pip install"):
        preflight(scenario_from_dict(data))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(main, ["run", "s.yaml", "--no-tracking", "--out", "o"])
    assert res.exit_code == 2 and "Traceback" not in res.output and not (tmp_path / "o").exists()
    assert len(res.stderr.strip().splitlines()) == 1 and "Ray is not installed" in res.stderr
    # a library run that skipped the checks: the attack that needs Ray says why; the others run
    loss, lira = run_scenario(scenario_from_dict(data), out=tmp_path / "lib")["attacks"]
    assert loss["status"] == "ok" and lira["status"] == "error"
    assert "Ray is not installed" in lira["reason"]


def test_an_unreachable_ray_cluster_is_bad_input(tmp_path):
    pytest.importorskip("ray")
    import socket

    from harness.scenario.checks import preflight

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = make_scenario(victim=DIGITS, interface=PROBS, attacks=[{"name": "mia_lira"}],
                         membership={"executor": "ray", "ray_address": f"127.0.0.1:{port}"})
    with pytest.raises(BadInput, match=rf"membership.ray_address 127.0.0.1:{port}: nothing answers"):
        preflight(scenario_from_dict(data))


@pytest.mark.slow
def test_reference_models_on_a_local_ray_of_two_workers_equal_the_local_ones(tmp_path):
    pytest.importorskip("ray")
    from harness.attacker import reference_executors as rx

    _, _, ev, recipe = _setup()
    local = train_reference_set(recipe, ev, 8, "halves", 7, False, False)
    try:
        remote = train_reference_set(recipe, ev, 8, "halves", 7, False, False,
                                     rx.RayExecutor(None, 2, 3))  # parts of 3, 3 and 2 models
    finally:
        rx.close()
    assert torch.equal(local.flat, remote.flat) and torch.equal(local.keep_eval, remote.keep_eval)
    assert remote.executor == "ray (local)"
    # and through the scenario key: the same scores, so the same measures, for the same seeds
    attacks = [{"name": "mia_lira", "params": {"shadows": 8, "mode": "both"}},
               {"name": "mia_rmia", "params": {"references": 2}}]
    reps = [run_scenario(scenario_from_dict(make_scenario(victim=DIGITS, interface=PROBS, attacks=attacks,
                                                          membership=m)), out=tmp_path / str(i))
            for i, m in enumerate([{}, {"executor": "ray", "ray_workers": 2}])]
    import ray

    assert not ray.is_initialized()  # the run stopped the Ray it started
    for a, b in zip(*(r["attacks"] for r in reps), strict=True):
        assert a["status"] == b["status"] == "ok"
        keys = [k for k in a["metrics"] if "seconds" not in k]
        assert {k: a["metrics"][k] for k in keys} == {k: b["metrics"][k] for k in keys}
        assert math.isfinite(a["metrics"]["auc"])
    assert "on ray (local)" in " ".join(reps[1]["attacks"][0]["notes"])
