"""End to end: scenario → victim → oracle → span attack → verdict → report + MLflow."""

import json

import mlflow
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from conftest import REPO, make_scenario, message_lines

from harness.cli import main
from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict
from harness.scoring.subspace import row_basis

SPAN = [{"name": "span_nonadaptive"}]


def run(tmp_path, tracking_uri=None, **over):
    data = make_scenario(attacks=SPAN, **over)
    if tracking_uri:
        data["tracking"] = {"uri": tracking_uri, "experiment": "t"}
    return run_scenario(scenario_from_dict(data), out=tmp_path / "out")


def span_entry(report):
    (a,) = [a for a in report["attacks"] if a["name"] == "span_nonadaptive"]
    return a


def test_gradient_api_recovers_the_exact_span(tmp_path, tracking_uri):
    rep = run(tmp_path, tracking_uri)
    a = span_entry(rep)
    m = a["metrics"]
    assert a["status"] == "ok" and a["stopped_by"] is None
    assert m["recovered_rank"] == m["true_rank"] == 16
    assert m["max_principal_angle_deg"] < 0.01 and m["min_energy_in_span"] > 1 - 1e-9
    assert a["risk"] == "high" and rep["verdict"] == "fail" and rep["risk"] == "high"
    assert a["queries"] == m["samples"] + 16 and a["wall_s"] > 0  # + 8 points asked twice: the noise check
    # the report follows docs/contract.md
    for key in ("scenario", "verdict", "risk", "victim", "privacy", "rero", "attacks", "devices"):
        assert key in rep
    assert 0.8 < rep["victim"]["test_accuracy"] <= 1 and rep["victim"]["parameters"] == 64 * 16 + 16 + 170
    on_disk = json.loads((tmp_path / "out" / "report.json").read_text())
    assert on_disk["attacks"][0]["metrics"]["true_rank"] == 16
    assert "Verdict: FAIL" in (tmp_path / "out" / "report.md").read_text()
    # readable from MLflow: a finished parent with verdict tags and a nested attack run
    mlflow.set_tracking_uri(tracking_uri)
    runs = mlflow.search_runs(experiment_names=["t"], output_format="list")
    parent = [r for r in runs if r.info.run_id == rep["mlflow_run_id"]][0]
    assert parent.info.status == "FINISHED" and parent.data.tags["verdict"] == "fail"
    assert parent.data.metrics["verdict_code"] == 3  # pass 0 < inconclusive 1 < error 2 < fail 3
    assert parent.data.params["victim.model.hidden"] == "[16]"
    assert parent.data.metrics["span_nonadaptive.recovered_rank"] == 16
    child = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(child) == 1 and child[0].data.metrics["max_principal_angle_deg"] < 0.01
    arts = {f.path for f in mlflow.MlflowClient(tracking_uri).list_artifacts(parent.info.run_id)}
    assert {"scenario.yaml", "report.json", "report.md"} <= arts


def test_prediction_api_same_span_by_finite_differences(tmp_path):
    grad = span_entry(run(tmp_path / "g"))
    pred = span_entry(run(tmp_path / "p", interface={"kind": "prediction", "output": "probabilities"}))
    assert pred["metrics"]["recovered_rank"] == pred["metrics"]["true_rank"] == 16
    assert pred["metrics"]["max_principal_angle_deg"] < 0.01
    assert pred["metrics"]["queries_per_gradient"] == 65
    assert pred["queries"] > 10 * grad["queries"]
    assert "finite_differences" in pred["notes"][0]


def test_recovered_span_is_the_first_layer_row_space(tmp_path):
    """Independent check of the scorer: project the true weight rows onto the attack's basis."""
    from harness.attacks.span.nonadaptive import SpanNonAdaptive  # noqa: F401
    from victims.build import build_victim

    s = scenario_from_dict(make_scenario(attacks=SPAN))
    v = build_victim(s)
    rep = run_scenario(s, out=tmp_path / "o", victim=v)
    basis = np.asarray(span_entry(rep)["metrics"]["recovered_rank"])
    a = v.truth.model[0].weight.numpy()
    u = row_basis(v.truth.first_layer)
    assert basis == len(u) == np.linalg.matrix_rank(a)


def test_budget_is_respected_exactly_and_a_budget_stop_is_checked_by_a_surrogate(tmp_path):
    rep = run(tmp_path, interface={"kind": "prediction", "output": "probabilities"},
              defenses={"query_budget": 100})
    a = span_entry(rep)
    # 32 noise probes, then one point × (d + 1) queries: the attack's own budget, whole
    assert a["queries_sent"] <= 100 and a["queries"] == 32 + 65
    assert a["stopped_by"] == "budget" and "stopped by the query budget after 97 of 100" in a["reason"]
    assert a["metrics"]["recovered_rank"] < 16 and a["risk"] != "high"  # the partial span, scored
    # the runner added the cheapest attack under the same budget: the stop is a defense only if
    # that surrogate stayed below fail_on too
    sur = next(e for e in rep["attacks"] if e["name"] == "surrogate")
    assert sur["added_by"] == "budget check" and 0 < sur["queries_sent"] <= 100
    assert rep["queries_sent_total"] == a["queries_sent"] + sur["queries_sent"]
    held = sur["status"] == "ok" and sur["risk"] != "high"
    assert a["budget_held"] is (False if sur["risk"] == "high" else True if held else None)
    assert a["status"] == ("ok" if a["budget_held"] is not None else "incomplete")
    assert rep["verdict"] == ("fail" if sur["risk"] == "high" else
                              "pass" if held else "inconclusive")


def test_each_attack_faces_the_whole_budget_whatever_the_order(tmp_path):
    """Budget 97 (32 noise probes + one gradient point of d + 1 = 65): span_nonadaptive spends
    it all; the surrogate after it still has its own 97, and the order of the list changes
    nothing."""
    reps = []
    for order in (["span_nonadaptive", "surrogate"], ["surrogate", "span_nonadaptive"]):
        s = scenario_from_dict(make_scenario(
            interface={"kind": "prediction", "output": "probabilities"},
            defenses={"query_budget": 97},  # a short surrogate: what is checked is the budget
            attacks=[{"name": n, "params": {"steps": 60, "final_steps": 60} if n == "surrogate" else {}}
                     for n in order]))
        rep = run_scenario(s, out=tmp_path / order[0])
        reps.append({a["name"]: a for a in rep["attacks"]})
    for name in ("span_nonadaptive", "surrogate"):
        first, second = reps[0][name], reps[1][name]
        assert first["queries_sent"] == second["queries_sent"] <= 97
        assert (first["status"], first["risk"]) == (second["status"], second["risk"])
    assert reps[0]["span_nonadaptive"]["queries_sent"] == 97
    assert reps[0]["surrogate"]["queries_sent"] > 0


def test_label_only_api_skips_span_with_a_reason(tmp_path):
    rep = run_scenario(scenario_from_dict(make_scenario(
        attacks=[{"name": "span_nonadaptive"}], interface={"kind": "prediction", "output": "label"})),
        out=tmp_path / "o")
    a = span_entry(rep)
    assert a["status"] == "skipped" and "labels only" in a["reason"]


def test_dp_sgd_really_trains_with_opacus(tmp_path):
    rep = run(tmp_path, defenses={"dp_sgd": {"epsilon": 3.0, "delta": 1e-5}},
              victim={"model": {"hidden": [16]},
                      "data": {"dataset": "digits", "n_train": 400, "attacker_pool": 20},
                      "training": {"epochs": 3, "lr": 0.5, "batch_size": 64}})
    p = rep["privacy"]
    assert p["accountant"] == "rdp" and p["delta"] == 1e-5
    assert 0 < p["epsilon"] <= 3.0 and p["noise_multiplier"] > 0.5
    assert p["steps"] > 0 and abs(p["sample_rate"] - 1 / 7) < 1e-9  # Opacus: 1 / batches per epoch
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history = [(p["noise_multiplier"], p["sample_rate"], p["steps"])]
    assert abs(acc.get_epsilon(1e-5) - p["epsilon"]) < 1e-9


def _cli(args, tmp_path):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_cli_exit_codes_and_no_running_runs(tmp_path, tracking_uri):
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(make_scenario(attacks=SPAN,
                                                 tracking={"uri": tracking_uri, "experiment": "c"})))
    res = _cli(["run", str(good), "--json", str(tmp_path / "r.json"), "--out", str(tmp_path / "o")],
               tmp_path)
    assert res.exit_code == 1 and "verdict: fail" in res.output
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "fail"
    res = _cli(["run", str(good), "--set", "policy.fail_on=never", "--out", str(tmp_path / "o2")],
               tmp_path)
    assert res.exit_code == 0
    bad = [
        (["run", str(tmp_path / "missing.yaml")], "not found"),
        (["run", str(good), "--set", "victim.model.hiden=[3]"], "victim.model.hiden"),
        (["run", str(good), "--set", "victim.model.hidden=[3, x]"], "victim.model.hidden[1]"),
        (["run", str(good), "--set", "victim.data.dataset=mnist"], "victim.data.dataset"),
        (["run", str(good), "--set", "attacks=[{name: nope}]"], "attacks[0].name"),
        (["run", str(good), "--set", "victim.model.arch=file",
          "--set", f"victim.model.path={tmp_path / 'x.pt'}"], "victim.model.path"),
    ]
    for args, needle in bad:
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2, (args, res.output)
        assert needle in res.output and "Traceback" not in res.output
        assert len(message_lines(res.output)) == 1  # past `run`'s stage line saying what it loads
    mlflow.set_tracking_uri(tracking_uri)
    runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert runs and all(r.info.status == "FINISHED" for r in runs)


@pytest.mark.parametrize("fail_on, code", [("never", 3), ("high", 1)])
def test_attack_crash_gives_exit_3_failed_run_and_partial_report(tmp_path, tracking_uri, fail_on,
                                                                  code):
    """A crash is verdict `error` (exit 3), unless another attack's scored risk already reaches
    fail_on (`fail` takes precedence: exit 1); the parent run is FAILED either way."""
    from harness.attacks import _REGISTRY, register
    from harness.attacks.base import Attack

    class Boom(Attack):
        name, family, needs, paper = "boom_test", "span", frozenset({"gradient"}), "test"

        def run(self, oracle, params, ctx):
            oracle.explain(np.zeros((3, 64)))
            raise RuntimeError("kaboom")

    register(Boom)
    try:
        p = tmp_path / "s.yaml"
        p.write_text(yaml.safe_dump(make_scenario(
            attacks=[{"name": "boom_test"}, {"name": "span_nonadaptive"}],
            tracking={"uri": tracking_uri, "experiment": "x"}, policy={"fail_on": fail_on})))
        res = CliRunner().invoke(main, ["run", str(p), "--json", str(tmp_path / "r.json"),
                                        "--out", str(tmp_path / "o")])
    finally:
        _REGISTRY.pop("boom_test")
    assert res.exit_code == code
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["verdict"] == {3: "error", 1: "fail"}[code]
    boom, span = rep["attacks"]
    assert boom["status"] == "error" and "kaboom" in boom["reason"] and boom["queries"] == 3
    assert span["status"] == "ok" and span["metrics"]["recovered_rank"] == 16
    mlflow.set_tracking_uri(tracking_uri)
    parent = mlflow.get_run(rep["mlflow_run_id"])
    assert parent.info.status == "FAILED"


def test_validate_and_attacks_commands(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(make_scenario()))
    res = CliRunner().invoke(main, ["validate", str(p)])
    assert res.exit_code == 0 and "valid" in res.output
    res = CliRunner().invoke(main, ["attacks"])
    assert res.exit_code == 0 and "span_nonadaptive" in res.output
    assert "Jayaram et al. 2020, Sec. 3.1" in res.output  # the paper as readers know it


@pytest.mark.parametrize("path", ["scenarios/quickstart.yaml", "scenarios/gradient-api.yaml",
                                  "scenarios/prediction-api.yaml", "scenarios/smoothgrad-api.yaml",
                                  "scenarios/whitebox-release.yaml", "scenarios/dp-sgd.yaml",
                                  "scenarios/small-budget.yaml", "scenarios/fashion-mnist.yaml"])
def test_example_scenarios_validate(path):
    from victims.data.datasets import fashion_mnist_dir

    root = REPO
    res = CliRunner().invoke(main, ["validate", str(root / path)])
    if "fashion" in path and fashion_mnist_dir() is None:  # valid means runnable: not here
        assert res.exit_code == 2 and "fashion_mnist is not installed" in res.stderr, res.output
        return
    assert res.exit_code == 0, res.output
