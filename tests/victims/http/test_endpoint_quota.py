"""An endpoint quota is not an error: an endpoint that answers some rows and then refuses with 429
RESOURCE_EXHAUSTED forever ends the attack `incomplete`, `stopped_by: endpoint`, its partial
artifact scored where a scorer can (the truth is a model file), and the run `inconclusive` (exit
4) — never `error` (exit 3). It used to crash: the black-box scorer's probes met the same 429."""

from __future__ import annotations

import pytest
import torch
import yaml
from click.testing import CliRunner

from harness.cli import main
from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict
from victims.http.served import build_served
from victims.http.server import VictimServer

VICTIM = {"model": {"arch": "mlp", "hidden": [8]},
          "data": {"dataset": "digits", "n_train": 200},
          "training": {"epochs": 2, "dtype": "float64"}}


def _scenario(url: str, victim: dict, attack: str) -> dict:
    return {"name": "quota", "seed": 0, "device": "cpu",
            "victim": {**victim, "endpoint": {"url": url, "retries": 1, "backoff_s": 0.01, "max_batch": 16}},
            "interface": {"kind": "prediction", "output": "probabilities"}, "attacker": {"pool": 50},
            "attacks": [{"name": attack}], "tracking": {"enabled": False}}


@pytest.fixture(scope="module")
def quota_server(tmp_path_factory):
    """`leakmeter serve`'s server with a quota of 40 rows (then 429 RESOURCE_EXHAUSTED), and the
    served model saved as a file (the truth of the second case)."""
    s = scenario_from_dict({"name": "quota", "device": "cpu", "victim": VICTIM,
                            "interface": {"kind": "prediction", "output": "probabilities"}})
    served, victim = build_served(s)
    path = tmp_path_factory.mktemp("quota") / "victim.pt"
    torch.save(victim.truth.model.state_dict(), str(path))
    yield served, path


@pytest.mark.parametrize("attack", ["surrogate", "span_nonadaptive"])
def test_a_spent_quota_ends_incomplete_by_endpoint_never_error(attack, quota_server, tmp_path):
    served, _ = quota_server
    server = VictimServer(served, budget=40).start()
    try:
        report = run_scenario(scenario_from_dict(_scenario(server.url, VICTIM, attack)), out=tmp_path / "o")
    finally:
        server.close()
    a = report["attacks"][0]
    assert a["status"] == "incomplete" and a["stopped_by"] == "endpoint", (a["status"], a["reason"])
    assert "spent" in a["reason"] and report["verdict"] == "inconclusive"
    assert report["victim"]["truth_available"] is False


def test_with_the_model_file_as_truth_the_partial_artifact_is_scored(quota_server, tmp_path):
    served, path = quota_server
    victim = {**VICTIM, "model": {"arch": "file", "path": str(path), "spec": {"arch": "mlp", "hidden": [8]}}}
    server = VictimServer(served, budget=40).start()
    try:
        report = run_scenario(scenario_from_dict(_scenario(server.url, victim, "surrogate")),
                              out=tmp_path / "o")
    finally:
        server.close()
    a = report["attacks"][0]
    assert a["status"] == "incomplete" and a["stopped_by"] == "endpoint", a["reason"]
    assert a["risk"] in ("low", "medium", "high") and "fidelity" in " ".join(a["metrics"])
    assert report["verdict"] in ("inconclusive", "fail")


def test_the_cli_exits_4_not_3(quota_server, tmp_path, monkeypatch):
    served, _ = quota_server
    monkeypatch.chdir(tmp_path)
    server = VictimServer(served, budget=40).start()
    try:
        p = tmp_path / "s.yaml"
        p.write_text(yaml.safe_dump(_scenario(server.url, VICTIM, "surrogate")))
        res = CliRunner().invoke(main, ["run", str(p), "--no-tracking", "--out", "o"])
    finally:
        server.close()
    assert res.exit_code == 4, res.output[-2000:]
    assert "incomplete/endpoint" in res.stdout


def test_an_endpoint_alone_20_rows_then_quota_forever(tmp_path):
    """No dataset named (no attacker pool, black-box scoring): 20 rows answered, then 429
    RESOURCE_EXHAUSTED on every request."""
    from test_endpoint_client import C, D, FaultServer

    with FaultServer(lambda i: "ok" if i < 3 else "quota") as srv:  # the check, then 2 x 10 rows
        s = scenario_from_dict({"name": "t", "device": "cpu",
                                "victim": {"endpoint": {"url": srv.url, "input_dim": D, "n_outputs": C,
                                                        "max_batch": 10}},
                                "interface": {"kind": "prediction", "output": "probabilities"},
                                "attacks": [{"name": "surrogate"}, {"name": "span_nonadaptive"}],
                                "tracking": {"enabled": False}})
        report = run_scenario(s, out=tmp_path / "o")
    for a in report["attacks"]:
        assert a["status"] == "incomplete" and a["stopped_by"] == "endpoint", (a["name"], a["reason"])
    assert report["verdict"] == "inconclusive"
