"""`leakmeter serve` (victims/http/server.py) scanned over real HTTP on 127.0.0.1, compared with the
in-process run of the same scenario; per-key budgets, auth, and the token's secrecy."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import torch
import yaml
from click.testing import CliRunner

from harness.cli import main
from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict
from victims.build import build_victim
from victims.http.served import build_served
from victims.http.server import VictimServer

TOKEN = "lm-7Hq2-token-that-must-never-leak"


def digits(**over) -> dict:
    base = {
        "name": "endpoint-test", "seed": 0, "device": "cpu",
        "victim": {"model": {"arch": "mlp", "hidden": [16]},
                   "data": {"dataset": "digits", "n_train": 300, "attacker_pool": 50},
                   "training": {"epochs": 5, "lr": 0.1, "batch_size": 64, "dtype": "float64"}},
        "interface": {"kind": "prediction", "output": "probabilities"},
        "defenses": {"query_budget": 20000},
        "attacks": [{"name": "span_nonadaptive"}],
        "tracking": {"enabled": False},
    }
    base.update(over)
    return base


def with_endpoint(d: dict, url: str, **ep) -> dict:
    d = json.loads(json.dumps(d))
    d["victim"]["endpoint"] = {"url": url, "max_batch": 512, **ep}
    return d


def test_scan_of_serve_equals_the_in_process_run_with_20x_fewer_requests(tmp_path):
    # the served model is a file the scan scenario also names: full scoring on both sides
    trained = build_victim(scenario_from_dict(digits()))
    path = tmp_path / "victim.pt"
    torch.save(trained.truth.model.state_dict(), str(path))
    model = {"arch": "file", "path": str(path), "spec": {"arch": "mlp", "hidden": [16]}}
    local = digits(victim={**digits()["victim"], "model": model})
    s_local = scenario_from_dict(local)
    served, _ = build_served(s_local)
    server = VictimServer(served).start()
    try:
        r_local = run_scenario(s_local, out=tmp_path / "local")
        r_http = run_scenario(scenario_from_dict(with_endpoint(local, server.url)),
                              out=tmp_path / "http")
    finally:
        server.close()
    a, b = r_local["attacks"][0], r_http["attacks"][0]
    assert a["status"] == b["status"] == "ok" and a["risk"] == b["risk"] == "high"
    assert r_http["victim"]["truth_available"] is True
    assert a["queries"] == b["queries"] > 1000
    for m in ("recovered_rank", "true_rank", "samples"):
        assert a["metrics"][m] == b["metrics"][m]
    for m in ("max_principal_angle_deg", "spectral_gap", "min_energy_in_span"):
        assert b["metrics"][m] == pytest.approx(a["metrics"][m], rel=1e-6, abs=1e-9)
    stats = r_http["victim"]["endpoint"]["stats"]
    assert stats["retries"] == 0
    assert 20 * stats["requests"] <= r_http["queries_total"]


def test_served_scaling_is_declared_and_a_matching_scan_is_not_warned(tmp_path):
    """A leakmeter server says which input scaling its model expects (/version, a header on every
    answer); a scan whose `standardize` agrees gets no warning, one that differs gets one line."""
    spec = digits(victim={**digits()["victim"], "training": {"epochs": 1, "dtype": "float64"}})
    served, _ = build_served(scenario_from_dict(spec))
    server = VictimServer(served).start()
    try:
        root = server.url.rsplit("/", 1)[0]
        assert requests.get(f"{root}/version", timeout=10).json()["standardize"] == "standard"
        reply = requests.post(server.url, json={"inputs": [[0.0] * 64]}, timeout=10)
        assert reply.headers["X-Leakmeter-Standardize"] == "standard"
        notes = {}
        for scaling in ("standard", "none"):
            d = with_endpoint(spec, server.url)
            d["victim"]["data"]["standardize"] = scaling
            notes[scaling] = build_victim(scenario_from_dict(d)).record["notes"]
    finally:
        server.close()
    assert not any("input scaling" in n for n in notes["standard"])
    (line,) = [n for n in notes["none"] if n.startswith("input scaling")]
    assert "standardize: standard" in line and "sends them with standardize: none" in line


def test_server_budget_per_key_auth_keyed_noise_and_routes():
    s = scenario_from_dict(digits(defenses={"output_noise": {"sigma": 0.05}}))
    served, victim = build_served(s)
    server = VictimServer(served, budget=10, keys={"key-a", "key-b"}).start()
    x = victim.info.x_pool[:4].tolist()
    post = lambda key, rows, **kw: requests.post(  # noqa: E731
        server.url, json={"inputs": rows, **kw}, timeout=5,
        headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        assert post(None, x).status_code == 401
        assert post("nope", x).status_code == 401
        r1, r2 = post("key-a", x), post("key-a", x)
        assert r1.status_code == r2.status_code == 200
        assert r1.json() == r2.json()  # keyed noise: the same query, the same answer
        r3 = post("key-a", x)  # 4 + 4 + 4 > 10
        assert r3.status_code == 429 and r3.json()["error_code"] == "RESOURCE_EXHAUSTED"
        assert post("key-b", x[:2]).status_code == 200  # another key, another budget
        bad = post("key-b", x[:1], params={"explain": "gradient"})
        assert bad.status_code == 400 and "not offered" in bad.json()["message"]
        assert post("key-b", [[1.0, 2.0]]).status_code == 400
        base = server.url.removesuffix("/invocations")
        assert requests.get(f"{base}/ping", timeout=5).status_code == 200
        assert requests.get(f"{base}/health", timeout=5).status_code == 200
        assert requests.get(f"{base}/version", timeout=5).json()["input_dim"] == 64
    finally:
        server.close()
    clean = victim.backend.predict(torch.as_tensor(np.asarray(x)), "probabilities").numpy()
    noisy = np.asarray(r1.json()["predictions"])
    assert 0.01 < np.abs(noisy - clean).std() < 0.1  # the noise is applied server side


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_regression_scan_exits_1_when_noise_is_removed_and_never_passes_a_stopped_scan(
        tmp_path, tracking_uri):
    """Output noise stops the span attack (it cannot tell the rank): the scan is inconclusive
    (exit 4), never a pass; compared with the last scan it is unchanged; once the noise is gone
    the span leaks and the scan reports a regression (exit 1)."""
    from harness.scan.baseline import Tolerance, run_scan

    noisy = digits(defenses={"query_budget": 20000, "output_noise": {"sigma": 0.001}},
                   tracking={"experiment": "scans"})
    s_serve = scenario_from_dict(noisy)
    served, _ = build_served(s_serve)
    server = VictimServer(served).start()
    port = server.port
    scan_s = lambda: scenario_from_dict(with_endpoint(noisy, server.url))  # noqa: E731
    try:
        first = run_scan(scan_s(), baseline="last", tracking_uri=tracking_uri, out=tmp_path / "1")
        second = run_scan(scan_s(), baseline="last", tracking_uri=tracking_uri, out=tmp_path / "2",
                          tolerance=Tolerance(rel=0.0, floor=0.0))
    finally:
        server.close()
    assert first["baseline_found"] is False and first["exit"] == 4
    assert first["report"]["verdict"] == "inconclusive"
    span = first["report"]["attacks"][0]
    assert span["status"] == "incomplete" and span["stopped_by"] == "precision"
    assert first["report"]["victim"]["truth_available"] is False
    assert "blackbox_span_rank" in span["metrics"]
    assert second["baseline_id"] == first["report"]["mlflow_run_id"]
    assert second["exit"] == 4 and not second["regressed"]  # unchanged, even at zero tolerance
    # the endpoint is redeployed without its output noise; the scan scenario is unchanged
    s_weak = scenario_from_dict(digits(defenses={"query_budget": 20000}))
    served_weak, _ = build_served(s_weak)
    server = VictimServer(served_weak, port=port).start()
    try:
        third = run_scan(scan_s(), baseline="last", tracking_uri=tracking_uri, out=tmp_path / "3")
    finally:
        server.close()
    assert third["baseline_id"] == second["report"]["mlflow_run_id"]
    assert third["regressed"] and third["exit"] == 1
    rows = {(r["attack"], r["metric"]): r for r in third["diff"]}
    assert rows[("(overall)", "risk")]["status"] == "regressed"
    assert rows[("(overall)", "verdict")]["baseline"] == "inconclusive"
    assert rows[("span_nonadaptive", "risk")]["baseline"] != "high"
    assert rows[("span_nonadaptive", "risk")]["scan"] == "high"
    from mlflow.tracking import MlflowClient

    tags = MlflowClient(tracking_uri).get_run(third["report"]["mlflow_run_id"]).data.tags
    assert tags["leakmeter.scan"] == "true" and tags["leakmeter.regression"] == "true"
    assert tags["leakmeter.baseline"] == second["report"]["mlflow_run_id"]


def _start_serve(args: list[str], env: dict) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", "from harness.cli import main; main()", "serve",
                             *args, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 180
    line = ""
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith("serving") or proc.poll() is not None:
            break
    m = re.search(r"127\.0\.0\.1:(\d+)/invocations", line)
    if not m:
        proc.kill()
        raise AssertionError(f"serve did not start: {line!r} {proc.stderr.read()[-2000:]}")
    proc.first_line = line  # type: ignore[attr-defined]
    return proc, int(m.group(1))


def test_cli_serve_and_scan_never_reveal_the_token(tmp_path, monkeypatch, tracking_uri):
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "LM_SERVE_KEYS": f"{TOKEN},other", "LEAKMETER_THREADS": "1"}
    spec = digits(tracking={"experiment": "scans"})
    serve_file = _write(tmp_path / "serve.yaml", spec)
    proc, port = _start_serve([str(serve_file), "--keys-env", "LM_SERVE_KEYS", "--log"], env)
    uri = tracking_uri
    try:
        scan_file = _write(tmp_path / "scan.yaml", with_endpoint(
            spec, f"http://127.0.0.1:{port}/invocations", auth_env="LEAKMETER_T_TOKEN"))
        monkeypatch.setenv("LEAKMETER_T_TOKEN", TOKEN)
        ok = CliRunner().invoke(main, ["scan", str(scan_file), "--tracking-uri", uri,
                                       "--out", str(tmp_path / "out"), "--json", "r.json"])
        monkeypatch.setenv("LEAKMETER_T_TOKEN", TOKEN[::-1])  # a wrong token: 401 at start → exit 2
        bad = CliRunner().invoke(main, ["scan", str(scan_file), "--tracking-uri", uri])
    finally:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert ok.exit_code == 1 and "verdict: fail" in ok.output, ok.output  # risk high: the scan fails
    assert "can be the next baseline" not in ok.output  # a failing run is never offered as one
    assert "baseline: none found" in ok.output and "HTTP requests" in ok.output
    assert bad.exit_code == 2 and "HTTP 401" in bad.output and "127.0.0.1" in bad.output
    assert "POST /invocations" in err  # the server's access log ran
    # the served model trained on z-scored inputs and says so; the scan (standardize: none, the
    # endpoint default) is told on the terminal and in the report
    assert "inputs: standardize: standard" in proc.first_line, proc.first_line
    assert "leakmeter: warning: input scaling" in ok.output and "standardize: standard" in ok.output
    report = json.loads(Path("r.json").read_text())
    assert any(n.startswith("input scaling") for n in report["victim"]["notes"])
    assert report["attacks"][0]["status"] == "ok" and report["victim"]["endpoint"]["auth"] is True
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert runs
    texts = [ok.output, bad.output, out, err, str(ok.exception), str(bad.exception)]
    texts += [json.dumps([r.data.params, r.data.tags]) for r in runs]
    for secret in (TOKEN, TOKEN[::-1]):
        assert all(secret not in t for t in texts)
        for f in tmp_path.rglob("*"):  # reports, MLflow store and artifacts, everything written
            if f.is_file():
                assert secret.encode() not in f.read_bytes(), f


def test_the_start_up_check_and_verification_probes_are_the_scans_not_an_attackers(tmp_path):
    """Behind an endpoint the start-up check and the black-box verification probes are the scan's
    own rows: they count in the run's total, never against an attacker's budget. The attack the
    budget stops sent its whole budget; the surrogate the runner adds to check that stop faces
    the whole budget too."""
    s = digits(defenses={"query_budget": 150})
    served, _ = build_served(scenario_from_dict(s))
    server = VictimServer(served).start()
    try:
        rep = run_scenario(scenario_from_dict(with_endpoint(s, server.url)), out=tmp_path / "o")
    finally:
        server.close()
    a, sur = rep["attacks"]
    assert a["stopped_by"] == "budget" and 0 < a["queries_sent"] <= 150, a["reason"]
    assert sur["added_by"] == "budget check" and 0 < sur["queries_sent"] <= 150
    probes = int(sur["metrics"].get("blackbox_probes", 0))
    startup = rep["queries_sent_total"] - a["queries_sent"] - sur["queries_sent"] - probes
    assert startup > 0 and probes > 0  # the start-up check and the probes were sent and counted
    assert a["budget_held"] is (None if sur["status"] != "ok" else sur["risk"] != "high")
