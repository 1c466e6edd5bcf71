"""`--executor ray` on a real local Ray gives the same numbers per cell as the local process pool."""

import json

import pytest
from conftest import REPO

from harness.scenario import apply_overrides, read_raw
from harness.sweep.grid import plan_sweep, run_sweep

SCENARIO = REPO / "scenarios" / "sweep-digits.yaml"
SMALL = ["victim.data.n_train=300", "victim.training.epochs=5"]


@pytest.fixture(autouse=True)
def _needs_ray():
    """Ray is imported when a test here runs, not when the module is collected (all are slow)."""
    pytest.importorskip("ray")


def _numbers(report):
    """Everything a cell measured (no timings, ids or paths)."""
    return {"victim": {k: v for k, v in report["victim"].items() if k not in ("train_seconds",)},
            "privacy": report["privacy"], "verdict": report["verdict"], "risk": report["risk"],
            "rero": [{k: v for k, v in r.items() if not str(k).endswith(("path", "plot", "file"))}
                     for r in report["rero"]],
            "attacks": [(a["name"], a["status"], a.get("risk"), a["queries"], a["metrics"])
                        for a in report["attacks"]]}


def _sweep(tmp_path, grid, executor):
    raw = apply_overrides(read_raw(SCENARIO), SMALL)
    plan = plan_sweep(raw, str(SCENARIO), grid, 1)
    res = run_sweep(plan, scenario_path=str(SCENARIO), tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                    out=tmp_path / executor, jobs=2, executor=executor, fresh=True, echo=lambda m: None)
    assert not res["errors"] and len(res["results"]) == len(plan.cells)
    return res, {r["cell_key"]: _numbers(r["report"]) for r in res["results"]}


def _same(tmp_path, grid):
    local_res, local = _sweep(tmp_path, grid, "local")
    ray_res, ray = _sweep(tmp_path, grid, "ray")
    assert local_res["sweep_run_id"] != ray_res["sweep_run_id"]  # two sweeps, one store
    assert local.keys() == ray.keys()
    for key in local:
        assert json.dumps(local[key], sort_keys=True) == json.dumps(ray[key], sort_keys=True), key
    return local


@pytest.mark.slow  # 41 s on a quiet 2-core machine, 150 s under load (Ray start-up, cold workers)
def test_ray_matches_local_executor(tmp_path):
    local = _same(tmp_path, ["defenses.dp_sgd.epsilon=1,none"])
    accs = {json.loads(k)["settings"]["defenses.dp_sgd.epsilon"]: v["victim"]["test_accuracy"]
            for k, v in local.items()}
    assert accs[None] > accs[1]  # the two cells really differ: the match is not trivial


@pytest.mark.slow
def test_ray_matches_local_on_the_2x2_sweep(tmp_path):
    _same(tmp_path, ["defenses.dp_sgd.epsilon=1,none", "defenses.query_budget=8,200"])


@pytest.mark.slow
def test_a_local_ray_sweep_starts_beside_a_ray_address_in_the_environment(tmp_path, monkeypatch):
    """RAY_ADDRESS names a cluster that is not there: the sweep still starts its own local Ray."""
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    res, cells = _sweep(tmp_path, ["defenses.query_budget=8"], "ray")
    assert len(cells) == 1 and not res["errors"]
