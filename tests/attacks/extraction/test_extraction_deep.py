"""cryptanalytic against ground truth: random deep ReLU networks extracted exactly (max relative
error on held-out and Gaussian inputs, every hidden unit matched up to permutation and scale),
and the deployments outside its assumptions reported as what they are (skipped, stopped)."""

import math

import pytest
from attack_direct import rounded_victim, run_direct

from harness.scenario import scenario_from_dict


def deep_net(d, hidden, *, seed=0, interface="gradient", output="logits", task="regression",
             dtype="float64", defenses=None, params=None, activation="relu", knows=False,
             gradient_of="predicted", attacker_seed=None):
    """A scenario with an untrained random d → hidden… → K network behind the given API."""
    return scenario_from_dict({
        "name": "deep", "seed": seed, "device": "cpu",
        "victim": {"model": {"arch": "mlp", "hidden": list(hidden), "bias": True, "activation": activation},
                   "data": {"dataset": "gaussian", "dim": d, "labels": "victim", "task": task,
                            "n_train": 50, "n_test": 500, "attacker_pool": 20},
                   "training": {"dtype": dtype}},
        "interface": {"kind": interface, "output": output, "gradient_of": gradient_of},
        "defenses": defenses or {},
        "attacker": {"knows_architecture": knows, "seed": attacker_seed},
        "attacks": [{"name": "cryptanalytic", "params": {"measure_bits": False, **(params or {})}}],
        "tracking": {"enabled": False},
    })


def assert_exact(r, units):
    m = r.metrics
    assert r.status == "ok" and r.stopped_by is None, r.reason
    assert m["max_rel_error"] <= 1e-6, m
    assert m["units_matched"] == m["units_true"] == units, m
    assert m["param_error"] < 1e-6, m
    assert r.risk == "high" and str(int(m["queries"])) in r.why


def test_two_hidden_layers_from_gradients_and_from_values(tmp_path):
    """10-10-10-1 (Carlini et al.'s smallest net, 2^16 queries there): exact through both
    interfaces, and the gradient jumps (2 queries each) cost fewer queries than finite
    differences (2(d + 1) values each)."""
    g = run_direct(deep_net(10, [10, 10]), tmp_path / "g")
    p = run_direct(deep_net(10, [10, 10], interface="prediction"), tmp_path / "p")
    for r in (g, p):
        assert_exact(r, 20)
        assert r.metrics["layers_found"] == 2 and r.queries < 2**16
    assert g.queries < p.queries


@pytest.mark.slow
def test_three_hidden_layers(tmp_path):
    """A 16-10-8-6-1 net (seed 0; narrow deep nets are not all extracted: the README's table)."""
    r = run_direct(deep_net(16, [10, 8, 6]), tmp_path)
    m = r.metrics
    assert r.status == "ok" and m["max_rel_error"] <= 1e-6, (r.reason, m)
    assert m["layers_found"] == 3 and m["depth_found"] == m["depth_true"] == 3
    assert m["units_matched"] == m["units_true"] and m["param_error"] < 1e-6, m


def test_multiclass_probabilities_are_centred_logits(tmp_path):
    r = run_direct(deep_net(8, [8, 8], task="multiclass", output="probabilities"), tmp_path)
    m = r.metrics
    assert r.status == "ok" and m["max_rel_error"] <= 1e-6 and m["agreement"] == 1.0, m


def test_one_hidden_layer_is_extracted_quickly(tmp_path):
    r = run_direct(deep_net(16, [8]), tmp_path)
    assert_exact(r, 8)
    assert r.metrics["layers_found"] == 1 and r.queries < 5000


def test_stops_on_smooth_activations_and_declines_declared_ones(tmp_path):
    # measured, not declared: a guess about the deployment stops the attack (incomplete), it is
    # never a skip a verdict could pass over
    r = run_direct(deep_net(8, [6, 6], activation="tanh"), tmp_path)
    assert r.status == "incomplete" and r.stopped_by == "assumption" and "look curved" in r.reason
    # declared up front: no query spent
    r = run_direct(deep_net(8, [6, 6], activation="tanh", knows=True), tmp_path / "k")
    assert r.status == "skipped" and "tanh" in r.reason and r.queries == 0


def test_declines_a_declared_convolutional_network(tmp_path):
    s = scenario_from_dict({
        "name": "deep-cnn", "seed": 0, "device": "cpu",
        "victim": {"model": {"arch": "cnn", "channels": [3], "hidden": [8]},
                   "data": {"dataset": "digits", "n_train": 100, "attacker_pool": 10},
                   "training": {"epochs": 1, "dtype": "float64"}},
        "interface": {"kind": "gradient", "output": "logits"}, "attacker": {"knows_architecture": True},
        "attacks": [{"name": "cryptanalytic"}], "tracking": {"enabled": False}})
    r = run_direct(s, tmp_path)
    assert r.status == "skipped" and "not a fully connected network" in r.reason and r.queries == 0


@pytest.mark.parametrize("kw", [{"dtype": "float32"}, {"defenses": {"rounding": {"decimals": 4}}},
                                {"defenses": {"output_noise": {"sigma": 1e-5}}}])
def test_coarse_answers_stop_on_precision_with_a_scored_partial_network(kw, tmp_path):
    """Float32, rounded or noisy answers: no exact deep extraction; the partial network (its
    first layer, a least-squares output) is scored, and the run is never a pass."""
    r = run_direct(deep_net(10, [10, 10], **kw), tmp_path)
    assert r.stopped_by == "precision" and r.status == "incomplete", (r.status, r.reason)
    assert "float64-clean" in r.reason and "output_error" in r.metrics
    assert r.risk in ("low", "medium")


def test_float32_one_hidden_layer_is_a_working_copy(tmp_path):
    r = run_direct(deep_net(16, [8], dtype="float32"), tmp_path)
    assert r.status == "ok" and r.stopped_by is None and r.risk == "high", r.reason
    assert r.metrics["output_error"] <= 1e-4


def test_budget_stop_keeps_what_it_has(tmp_path):
    r = run_direct(deep_net(10, [10, 10], defenses={"query_budget": 3000}), tmp_path)
    assert r.stopped_by == "budget" and r.queries <= 3000
    assert r.status == "ok"  # the scenario's own budget: the defense under test


def bits_match_the_real_victim(d, hidden, interface, tmp_path):
    """The output bits the attack reports (replayed on its own copy, no query) against ground
    truth: the real victim behind answers rounded to that many significant bits is extracted
    exactly, one bit fewer stops the attack."""
    r = run_direct(deep_net(d, hidden, interface=interface, params={"measure_bits": True}), tmp_path)
    m = r.metrics
    assert r.status == "ok" and m["max_rel_error"] <= 1e-6, r.reason
    assert math.isclose(m["log2_queries"], math.log2(r.queries), abs_tol=0.01)
    bits = int(m["output_bits_needed"])
    assert 12 < bits <= 53 and f"{bits} bits" in " ".join(r.artifact.notes)
    assert f"≥ {bits} significant bits" in r.why  # in the report's reason line
    s = deep_net(d, hidden, interface=interface)
    at = run_direct(s, tmp_path / "at", victim=rounded_victim(r.victim, bits))
    assert at.status == "ok" and at.stopped_by is None and at.metrics["max_rel_error"] <= 1e-6, at.reason
    below = run_direct(s, tmp_path / "below", victim=rounded_victim(r.victim, bits - 1))
    assert below.stopped_by == "precision" or below.metrics["max_rel_error"] > 1e-6, below.reason
    assert below.risk != "high" or below.stopped_by is None  # never a pass on a stopped attack
    return bits


def test_output_bits_needed_are_where_the_real_victim_stops_it(tmp_path):
    bits_match_the_real_victim(16, [8], "gradient", tmp_path)


@pytest.mark.slow
def test_output_bits_needed_by_a_deep_extraction(tmp_path):
    """10-10-10-1 through predict: ~45 bits (float64 carries 53, float32 24)."""
    assert bits_match_the_real_victim(10, [10, 10], "prediction", tmp_path) > 24


def test_own_limits_stop_as_cap_with_a_scored_partial_network(tmp_path):
    """max_depth = 1 against a two-hidden-layer net: the attack's own limit, not the answers'
    precision nor the defense: incomplete, `stopped_by: cap`, the one-layer network scored."""
    r = run_direct(deep_net(10, [10, 10], params={"max_depth": 1}), tmp_path)
    assert r.status == "incomplete" and r.stopped_by == "cap", (r.status, r.reason)
    assert "max_depth = 1" in r.reason and r.metrics["layers_found"] == 1
    assert "output_error" in r.metrics and r.risk in ("low", "medium")


@pytest.mark.slow
@pytest.mark.parametrize("interface,sizes,paper_bits,at_least", [
    ("prediction", (10, [20, 20]), 17.1, 5), ("gradient", (10, [20, 20]), 17.1, 5),
    ("prediction", (40, [20, 10, 10]), 17.8, 3), ("gradient", (40, [20, 10, 10]), 17.8, 5),
    ("prediction", (80, [40, 20]), 18.5, 5), ("gradient", (80, [40, 20]), 18.5, 5)])
def test_paper_sizes(interface, sizes, paper_bits, at_least, tmp_path):
    """Carlini et al. Table 1's nets, float64, seeds 0-4: max relative error ≤ 1e-6 within their
    query counts. The issue's target is 5 of 5 everywhere; `at_least` is what this code reaches
    (README table): a seed it misses must still say so (never ok at low risk)."""
    d, hidden = sizes
    exact = 0
    for seed in range(5):
        r = run_direct(deep_net(d, hidden, seed=seed, interface=interface), tmp_path / str(seed))
        m = r.metrics
        assert r.queries <= 2**paper_bits, (seed, r.queries)
        if r.status == "ok" and m.get("max_rel_error", 1) <= 1e-6:
            exact += 1
        else:
            assert r.stopped_by in ("precision", "cap") or r.risk == "high", (seed, r.status, r.reason)
    assert exact >= at_least, exact


@pytest.mark.slow  # ~1M float32 queries on a 64-64-64-64 net (a few seconds alone)
def test_a_coarse_stop_on_a_later_line_is_never_a_normal_end(tmp_path):
    """float32 answers of a deep net: the one-layer search raises on its second line (too many
    hyperplanes for one hidden layer) after keeping the first line's artifact; that artifact is
    not a normal end: the attack stops on precision, never `ok` after a failed self-check."""
    r = run_direct(deep_net(64, [64, 64, 64], dtype="float32", interface="prediction"), tmp_path)
    assert r.status == "incomplete" and r.stopped_by == "precision", (r.status, r.reason)
    assert r.metrics["self_check_error"] > r.metrics["self_check_tolerance"]
