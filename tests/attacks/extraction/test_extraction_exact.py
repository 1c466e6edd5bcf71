"""gradient_exact and finite_difference_exact against ground truth: the extracted model must equal
the victim (max_rel_error on held-out and Gaussian inputs, hidden units matched up to
permutation and scale), and defenses must turn into honest failures, never wrong models."""

import pytest
import torch
from attack_direct import run_direct
from conftest import REPO

from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict


def random_net(d, h, *, seed=0, task="regression", output="logits", attack="gradient_exact",
               params=None, interface="gradient", gradient_of="predicted", dtype="float64",
               defenses=None, activation="relu", bias=(True, False), attacker_seed=None):
    """A scenario with an untrained random d → h → K ReLU network behind the given API (the
    attacker's seed declared when given, else drawn by the runner)."""
    return scenario_from_dict({
        "name": "exact", "seed": seed, "device": "cpu",
        "victim": {"model": {"arch": "mlp", "hidden": [h], "bias": list(bias), "activation": activation},
                   "data": {"dataset": "gaussian", "dim": d, "labels": "victim", "task": task,
                            "n_train": 50, "n_test": 500, "attacker_pool": 20},
                   "training": {"dtype": dtype}},
        "interface": {"kind": interface, "output": output, "gradient_of": gradient_of},
        "defenses": defenses or {},
        "attacks": [{"name": attack, "params": params or {}}],
        "attacker": {"seed": attacker_seed},
        "tracking": {"enabled": False},
    })


def run_one(s, tmp_path):
    rep = run_scenario(s, out=tmp_path / "out")
    (entry,) = rep["attacks"]
    assert entry["status"] == "ok", entry.get("reason")
    return entry


@pytest.mark.parametrize("d,h", [(8, 4), (64, 16), (784, 64)])
def test_gradient_exact_recovers_random_two_layer_nets(d, h, tmp_path):
    seeds = range(3) if d < 784 else range(1)
    for seed in seeds:
        e = run_one(random_net(d, h, seed=seed), tmp_path / str(seed))
        m = e["metrics"]
        assert e["stopped_by"] is None, e["reason"]
        assert m["max_rel_error"] <= 1e-6, (seed, m)
        assert m["units_matched"] == m["units_true"] == h
        assert m["param_error"] < 1e-6
        assert e["risk"] == "high" and str(int(m["queries"])) in e["reason"]


def test_gradient_exact_queries_do_not_grow_with_dimension(tmp_path):
    q = {d: run_one(random_net(d, 16, seed=1), tmp_path / str(d))["metrics"]["queries"]
         for d in (8, 784)}
    assert q[784] < 2 * q[8], q


@pytest.mark.parametrize("output,gradient_of", [("logits", "predicted"),
                                                ("probabilities", "predicted"),
                                                ("probabilities", "sum"),
                                                ("logits", "class")])
def test_gradient_exact_multi_output_shares_the_hidden_layer(output, gradient_of, tmp_path):
    e = run_one(random_net(16, 8, task="multiclass", output=output, gradient_of=gradient_of),
                tmp_path)
    m = e["metrics"]
    assert m["max_rel_error"] <= 1e-6 and m["agreement"] == 1.0, m
    assert m["units_matched"] == 8


def test_gradient_exact_handles_biases_everywhere(tmp_path):
    e = run_one(random_net(12, 6, task="multiclass", bias=(True, True)), tmp_path)
    assert e["metrics"]["max_rel_error"] <= 1e-6


def test_gradient_exact_stops_on_randomized_explanations(tmp_path):
    r = run_direct(random_net(16, 8, defenses={"explanation_noise": {"sigma": 1e-3}},
                              params={"max_lines": 2}), tmp_path)
    assert r.stopped_by == "assumption" and "randomized" in r.reason
    # nothing was extracted to score: no risk, and not a pass either
    assert r.status == "incomplete" and r.risk is None and "output_error" not in r.metrics


@pytest.mark.parametrize("defenses,bar,attacker", [({"rounding": {"decimals": 2}}, 3e-2, None),
                                                   ({"rounding": {"decimals": 3}}, 3e-3, None),
                                                   ({"output_noise": {"sigma": 1e-3}}, 2e-3, None),
                                                   ({"output_noise": {"sigma": 1e-3}}, 2e-3, 9)])
def test_gradient_exact_behind_rounded_or_noisy_predictions(defenses, bar, attacker, tmp_path):
    """Exact gradients, coarse predictions: units and output layer from the gradients, only the
    output bias from predictions, so the model is recovered to the predictions' own error
    (attacker seed 9: 32 noisy check points once favoured the least-squares output layer)."""
    r = run_direct(random_net(16, 8, defenses=defenses, params={"max_lines": 2},
                              attacker_seed=attacker), tmp_path)
    m = r.metrics
    assert m["units_matched"] == m["units_true"] == 8 and m["param_error"] < 1e-9, m
    assert m["output_error"] <= bar, m
    assert r.risk == ("high" if m["output_error"] <= 1e-2 else "medium"), r.why


def test_gradient_exact_declines_non_relu_and_labels(tmp_path):
    r = run_direct(random_net(8, 4, activation="tanh", params={"max_lines": 1, "max_units": 64}),
                   tmp_path)
    # stopped on a broken assumption with nothing to score: incomplete, no risk, never a pass
    assert r.status == "incomplete" and r.stopped_by == "assumption" and r.risk is None, r
    s = random_net(8, 4, task="multiclass", output="label")
    rep = run_scenario(s, out=tmp_path / "lab")
    assert rep["attacks"][0]["status"] == "skipped" and "real-valued" in rep["attacks"][0]["reason"]


def test_gradient_exact_budget_keeps_what_it_has(tmp_path):
    r = run_direct(random_net(16, 8, defenses={"query_budget": 60}), tmp_path)
    assert r.stopped_by == "budget" and r.queries <= 60
    r = run_direct(random_net(16, 8, defenses={"query_budget": 400}), tmp_path / "b")
    assert r.stopped_by in (None, "budget") and r.queries <= 400
    if r.artifact.data["model"] is not None:  # the kept model is scored like any other
        assert "output_error" in r.metrics


@pytest.mark.parametrize("d,h,attacker", [(16, 8, None), (64, 16, None), (64, 16, 1)])
def test_gradient_exact_float32_victim(d, h, attacker, tmp_path):
    """float32 gradients: units to ≤ 1e-4 (attacker seed 1 finds a kink far out on its line,
    whose offset is re-measured at the plane's foot)."""
    r = run_direct(random_net(d, h, dtype="float32", attacker_seed=attacker), tmp_path)
    m = r.metrics
    assert r.stopped_by is None, r.reason
    assert m["param_error"] <= 1e-4 and m["units_matched"] == h, m
    assert m["output_error"] <= 1e-5 and r.risk == "high"


def test_no_attack_reads_the_victims_dtype():
    """Precision is learned from the answers (rule 1): no attack of these families reads
    `info.dtype`."""

    root = REPO / "harness" / "attacks"
    paths = [*root.glob("extraction/**/*.py"), *root.glob("span/*.py"),
             REPO / "harness" / "core" / "gradients.py"]
    assert len(paths) > 20
    for path in paths:
        assert "info.dtype" not in path.read_text(), path


@pytest.mark.parametrize("d,h", [(8, 4), (64, 16)])
def test_finite_difference_exact_matches_at_about_d_times_the_queries(d, h, tmp_path):
    for seed in range(3):
        g = run_one(random_net(d, h, seed=seed), tmp_path / f"g{seed}")
        # attacker seed 0 on victim 2 meets two close kinks (their positions are then checked)
        f = run_one(random_net(d, h, seed=seed, attack="finite_difference_exact",
                               interface="prediction", attacker_seed=0 if seed == 2 else None),
                    tmp_path / f"f{seed}")
        assert f["stopped_by"] is None and f["metrics"]["max_rel_error"] <= 1e-6, f["metrics"]
        assert f["metrics"]["units_matched"] == h
        if d >= 64:  # at d = 8 the noise probes of both attacks dominate the count
            assert f["queries"] > g["queries"] and f["queries"] > d * h


def _fd_784(h, seed, tmp_path):
    r = run_direct(random_net(784, h, seed=seed, attack="finite_difference_exact",
                              interface="prediction"), tmp_path / f"{h}-{seed}")
    return r.stopped_by, r.metrics["max_rel_error"], r.metrics["units_matched"]


@pytest.mark.parametrize("h,seed", [(64, 6), (128, 2)])
def test_finite_difference_exact_is_exact_on_d784_nets(h, seed, tmp_path):
    """Two float64 nets that once missed (1.7e-4 and 7.3e-6): on 64/6 a kink 2.7e-4 from its
    neighbour, whose chord through that neighbour passed the old one-point position check; on
    128/2 a kink at t ≈ 1200 whose offset carried the normal's error times |x| ≈ 34000."""
    stopped_by, err, matched = _fd_784(h, seed, tmp_path)
    assert stopped_by is None and err <= 1e-6 and matched == h, (stopped_by, err, matched)


@pytest.mark.slow
def test_finite_difference_exact_on_sixteen_d784_nets(tmp_path):
    """The issue's target, every net: exact (≤ 1e-6) on ≥ 15 of the 16 float64 nets d = 784,
    h = 64 and 128, seeds 0-7 (16 of 16 when written: the worst at 7.5e-8)."""
    got = {(h, s): _fd_784(h, s, tmp_path) for h in (64, 128) for s in range(8)}
    exact = [k for k, (stop, err, matched) in got.items() if err <= 1e-6 and matched == k[0]]
    assert len(exact) >= 15, got
    assert all(stop is None for stop, _, _ in got.values()), got


def test_finite_difference_exact_from_probabilities(tmp_path):
    e = run_one(random_net(16, 8, task="multiclass", output="probabilities",
                           attack="finite_difference_exact", interface="prediction"), tmp_path)
    assert e["metrics"]["max_rel_error"] <= 1e-6 and e["metrics"]["agreement"] == 1.0


@pytest.mark.parametrize("attacker", [None, 2])
def test_finite_difference_exact_under_rounding_is_judged_by_its_model(attacker, tmp_path):
    r = run_direct(random_net(8, 4, attack="finite_difference_exact", interface="prediction",
                              defenses={"rounding": {"decimals": 3}}, params={"max_lines": 2},
                              attacker_seed=attacker), tmp_path)
    assert r.stopped_by == "precision", r.reason
    if "output_error" in r.metrics:
        assert (r.risk == "high") == (r.metrics["output_error"] <= 1e-2), r.metrics
    else:  # no kink rose above the rounding on these lines: nothing to score, and not a pass
        assert r.status == "incomplete" and r.risk is None, r


@pytest.mark.parametrize("seed", [0, 1])
def test_finite_difference_exact_float32_victim(seed, tmp_path):
    """float32 answers: plane refinement brings every unit to ≤ 1e-2 (issue target, d ≤ 300)."""
    r = run_direct(random_net(40, 12, seed=seed, attack="finite_difference_exact",
                              interface="prediction", dtype="float32"), tmp_path)
    m = r.metrics
    assert m["param_error"] <= 1e-2 and m["units_matched"] >= 11, m
    assert m["output_error"] <= 1e-2 and r.risk == "high"


def test_extracted_model_artifact_is_a_torch_module(tmp_path):
    import numpy as np

    from defenses.output import OutputDefenses
    from harness.attacks import registry
    from harness.attacks.base import RunContext
    from harness.core.oracle import Oracle
    from victims.build import build_victim

    s = random_net(10, 5)
    v = build_victim(s)
    view = Oracle(v.backend, v.info, OutputDefenses(), None).view("gradient_exact")
    atk = registry()["gradient_exact"]()
    ctx = RunContext(0, np.random.default_rng(0), torch.Generator().manual_seed(0),
                     torch.device("cpu"), tmp_path)
    art = atk.run(view, atk.Params(), ctx)
    x = torch.randn(300, 10, dtype=torch.float64) * 3
    assert torch.allclose(art.data["model"](x), v.truth.model(x), rtol=0, atol=1e-10)


@pytest.mark.parametrize("classes", [[0, 1], [0, 1, 2], list(range(10))])
@pytest.mark.parametrize("attack,interface", [("gradient_exact", "gradient"),
                                              ("finite_difference_exact", "prediction")])
def test_k_output_softmax_models_are_scored_in_the_space_they_reveal(classes, attack, interface,
                                                                     tmp_path):
    """A K-output softmax behind probabilities (K = 2, the usual binary classifier, 3 and 10):
    the attack sees logits only up to a per-input constant (K = 2: the one difference l₁ − l₀),
    and the scorer compares exactly that, so an exact extraction scores as exact (once, K = 2
    scored an exact copy at output error 0.5 and agreement = the share of class 0)."""
    s = scenario_from_dict({
        "name": "k", "seed": 1, "device": "cpu",
        "victim": {"model": {"arch": "mlp", "hidden": [16]},
                   "data": ({"dataset": "breast_cancer", "n_train": 300, "task": "multiclass"}
                            if len(classes) == 2 else  # a 2-output softmax (digits [0, 1]: one logit)
                            {"dataset": "digits", "n_train": 250} if len(classes) == 10 else
                            {"dataset": "digits", "n_train": 250, "classes": classes}),
                   "training": {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "epochs": 20,
                                "dtype": "float64"}},
        "interface": {"kind": interface, "output": "probabilities"},
        "attacks": [{"name": attack}], "tracking": {"enabled": False}})
    e = run_one(s, tmp_path)
    m = e["metrics"]
    assert m["units_matched"] == m["units_true"] and m["param_error"] < 1e-5, m
    assert m["output_error"] < 1e-6 and m["agreement"] == 1.0 and m["kappa"] == 1.0, m
    assert e["risk"] == "high"
    # the scorer's comparison, recomputed here: the truth's probabilities against the copy's
    from harness.scoring.model import in_space

    expected_space = "difference" if len(classes) == 2 else "centered"
    assert in_space(torch.zeros(3, len(classes)), expected_space).shape[1] == (1 if len(classes) == 2
                                                                            else len(classes))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_smooth_activation_is_declined_quickly_not_fitted_with_thousands_of_planes(dtype, tmp_path):
    """A tanh net behind probabilities bends everywhere along a line: the bent intervals tile it
    (float32), or exceed max_units (float64). The attack says so after one line instead of
    fitting an output layer on ~1,400 spurious planes (once: 7.5 GB and many minutes)."""
    s = scenario_from_dict({
        "name": "tanh", "seed": 0, "device": "cpu",
        "victim": {"model": {"arch": "mlp", "hidden": [32], "activation": "tanh"},
                   "data": {"dataset": "digits", "n_train": 600},
                   "training": {"epochs": 10, "dtype": dtype}},
        "interface": {"kind": "prediction", "output": "probabilities"},
        "attacks": [{"name": "finite_difference_exact"}], "tracking": {"enabled": False}})
    r = run_direct(s, tmp_path)
    assert r.status == "incomplete" and r.stopped_by == "assumption", r.reason
    assert "piecewise" in r.reason and r.queries < 20_000
