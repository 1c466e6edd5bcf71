"""obfuscation (paper 003 Sec. 5): noise orthogonal to the recovered span keeps the truth
model's predictions; the same noise unprojected does not; an incomplete span is not oversold."""

import pytest
from conftest import make_scenario

from harness.run.runner import run_scenario
from harness.scenario import Scenario
from victims.data.datasets import fashion_mnist_dir

DIGITS = {
    "model": {"arch": "mlp", "hidden": [32]},
    "data": {"dataset": "digits", "n_train": 800, "attacker_pool": 300},
    "training": {"epochs": 20, "lr": 0.1, "momentum": 0.9, "dtype": "float64"},
}


def run(tmp_path, params=None, status=("ok", "skipped"), **over):
    s = Scenario.model_validate(make_scenario(
        victim=over.pop("victim", DIGITS),
        attacks=[{"name": "obfuscation", "params": params or {}}], **over))
    rep = run_scenario(s, out=tmp_path / "out")
    a = rep["attacks"][0]  # a budget stop adds the runner's surrogate check after it
    assert a["status"] in status, a.get("traceback", a.get("reason"))
    return rep, a


def test_trained_digits_net_keeps_predictions_under_large_noise(tmp_path):
    rep, a = run(tmp_path)
    m = a["metrics"]
    assert rep["victim"]["test_accuracy"] > 0.9
    assert m["noise_to_signal"] >= 1.0 and m["prediction_kept"] >= 0.99
    # the truth model agrees, and the noise really avoids the true first-layer span
    assert m["truth_prediction_kept"] >= 0.99
    assert m["noise_in_span"] < 1e-9
    # the unprojected baseline at the same ratio is far worse
    assert m["random_noise_kept"] < 0.9
    assert a["risk"] == "high" and "unrecognisable" in a["reason"]
    # judged on 300 inputs at noise as large as the input, against the unprojected control
    assert m["images"] == 300 and m["kept_low_at_1"] >= 0.99 and m["control_p_at_1"] < 0.05
    assert abs(m["noise_added"] - m["noise_to_signal"]) < 1e-6  # the noise really added
    png = a["artifacts"]["obfuscation.png"]
    with open(png, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_label_only_api_uses_threshold_recovery(tmp_path):
    victim = {
        "model": {"arch": "mlp", "hidden": [4], "activation": "tanh"},
        "data": {"dataset": "gaussian", "dim": 24, "labels": "victim", "task": "binary",
                 "n_train": 100, "n_test": 100, "attacker_pool": 64},
        "training": {"dtype": "float64"},
    }
    _, a = run(tmp_path, {"images": 64}, victim=victim,
               interface={"kind": "prediction", "output": "label"})
    m = a["metrics"]
    assert any("span_threshold" in n for n in a["notes"])
    assert m["recovered_rank"] == 4
    assert m["prediction_kept"] >= 0.99 and m["truth_prediction_kept"] >= 0.99
    assert m["noise_to_signal"] >= 1.0
    assert "obfuscation.png" not in a["artifacts"]  # Gaussian inputs are not images


def test_too_few_inputs_cannot_show_the_bar(tmp_path):
    """100 inputs, all kept: the one-sided 95% lower bound is 0.971 < 0.99, so no high; the
    reason says why (and 300 inputs would do)."""
    victim = {**DIGITS, "data": {**DIGITS["data"], "attacker_pool": 100}}
    _, a = run(tmp_path, victim=victim)
    m = a["metrics"]
    assert m["images"] == 100 and m["kept_at_1"] == 1.0 and m["kept_low_at_1"] < 0.99
    assert a["risk"] == "medium" or (a["risk"] == "low" and "cannot show" in a["reason"]), a["reason"]


def test_a_first_layer_as_wide_as_the_input_hides_nothing(tmp_path):
    """digits (64 inputs) into 96 units: the span is the whole input space, the projected noise
    would be zero, so there is nothing to obfuscate: skipped with the reason, never high."""
    victim = {**DIGITS, "model": {"arch": "mlp", "hidden": [96]}}
    _, a = run(tmp_path, victim=victim)
    assert a["status"] == "skipped" and "whole input space" in a["reason"], a


def test_incomplete_span_is_not_oversold(tmp_path):
    """Two gradients of a width-32 layer: most noise hits the true span and predictions move."""
    _, a = run(tmp_path, {"recovery_params": {"max_samples": 2, "batch": 2}}, status=("incomplete",))
    m = a["metrics"]
    assert a["stopped_by"] == "cap"  # the span was still growing at its own max_samples
    assert m["recovered_rank"] == 2 and m["noise_in_span"] > 0.1
    # large projected noise changes predictions; where it does not, plain noise does not either
    assert m["noise_to_signal"] < 8.0 and m["kept_at_8"] < 0.9
    assert m["random_noise_kept"] > m["prediction_kept"] - 0.1
    assert a["risk"] != "high"
    # the oracle's view and the truth agree (no output defenses here)
    assert abs(m["prediction_kept"] - m["truth_prediction_kept"]) < 1e-12


def test_budget_too_small_is_an_honest_failure(tmp_path):
    """The budget (the defense under test) stops the attack before it has anything to score:
    stopped by the budget, risk low, and ok only as far as a surrogate under the same budget
    shows the budget holds (docs/contract.md, Outcomes)."""
    rep, a = run(tmp_path, defenses={"query_budget": 50})
    assert a["stopped_by"] == "budget" and a["risk"] == "low", a
    assert a["queries"] <= 50
    sur = rep["attacks"][1]
    assert sur["name"] == "surrogate" and sur["added_by"] == "budget check" and sur["queries"] <= 50
    assert a["budget_held"] == (sur["risk"] != "high")


def test_regression_victims_are_skipped(tmp_path):
    victim = {"model": {"arch": "mlp", "hidden": [8]},
              "data": {"dataset": "diabetes", "n_train": 300}, "training": {"epochs": 2}}
    _, a = run(tmp_path, victim=victim, interface={"kind": "gradient", "output": "logits"})
    assert a["status"] == "skipped" and "classifier" in a["reason"]


@pytest.mark.slow
@pytest.mark.skipif(fashion_mnist_dir() is None, reason="Debian's dataset-fashion-mnist is not installed")
def test_fashion_mnist_obfuscation(tmp_path):
    victim = {"model": {"arch": "mlp", "hidden": [80, 40]},
              "data": {"dataset": "fashion_mnist", "n_train": 5000, "n_test": 1000,
                       "attacker_pool": 200},
              "training": {"epochs": 8, "lr": 0.05, "momentum": 0.9, "dtype": "float64"}}
    rep, a = run(tmp_path, victim=victim)
    m = a["metrics"]
    assert rep["victim"]["test_accuracy"] > 0.75
    assert m["recovered_rank"] == 80 and m["noise_to_signal"] >= 1.0
    assert m["prediction_kept"] >= 0.99 and m["truth_prediction_kept"] >= 0.99
