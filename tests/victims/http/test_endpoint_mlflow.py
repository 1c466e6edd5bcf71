"""The victim as an MLflow pyfunc behind the real `mlflow models serve --env-manager local`,
scanned like any endpoint: the same results as the in-process run. Slow: the server alone takes
~20-30 s to start here."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import requests
import torch

from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict
from victims.build import build_victim
from victims.http.pyfunc import export_pyfunc

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_scan_of_mlflow_models_serve_equals_the_in_process_run(tmp_path):
    base = {"name": "mlflow-pyfunc", "seed": 0, "device": "cpu",
            "victim": {"model": {"arch": "mlp", "hidden": [12]},
                       "data": {"dataset": "digits", "n_train": 300, "attacker_pool": 50},
                       "training": {"epochs": 5, "lr": 0.1, "dtype": "float64"}},
            "interface": {"kind": "gradient", "output": "probabilities"},
            "attacks": [{"name": "span_nonadaptive"}], "tracking": {"enabled": False}}
    trained = build_victim(scenario_from_dict(base))
    torch.save(trained.truth.model.state_dict(), tmp_path / "victim.pt")
    base["victim"]["model"] = {"arch": "file", "path": str(tmp_path / "victim.pt"),
                               "spec": {"arch": "mlp", "hidden": [12]}}
    s_grad = scenario_from_dict(base)
    export_pyfunc(s_grad, tmp_path / "model")  # serves predict and gradients
    base["interface"]["kind"] = "prediction"  # the scan uses predictions only (finite differences)
    s_local = scenario_from_dict(base)
    port = _free_port()
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "models", "serve", "-m", str(tmp_path / "model"),
         "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{port}/ping", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(1)
            assert proc.poll() is None, "mlflow models serve exited"
        remote = json.loads(json.dumps(base))
        remote["victim"]["endpoint"] = {"url": f"http://127.0.0.1:{port}/invocations",
                                        "max_batch": 256, "timeout_s": 60}
        r_http = run_scenario(scenario_from_dict(remote), out=tmp_path / "http")
        x = trained.info.x_pool[:3]
        grad = requests.post(f"http://127.0.0.1:{port}/invocations", timeout=30,
                             json={"inputs": x.tolist(), "params": {"explain": "gradient"}})
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert grad.status_code == 200, grad.text
    want = build_victim(s_grad).backend.gradient(x)  # as loaded from the file
    assert torch.allclose(torch.tensor(grad.json()["predictions"], dtype=torch.float64), want,
                          rtol=1e-9, atol=1e-12)
    r_local = run_scenario(s_local, out=tmp_path / "local")
    a, b = r_local["attacks"][0], r_http["attacks"][0]
    assert a["status"] == b["status"] == "ok" and a["risk"] == b["risk"] == "high", b
    assert a["queries"] == b["queries"]
    for m in ("recovered_rank", "true_rank", "samples"):
        assert a["metrics"][m] == b["metrics"][m]
    assert b["metrics"]["max_principal_angle_deg"] == pytest.approx(
        a["metrics"]["max_principal_angle_deg"], rel=1e-6, abs=1e-9)
    stats = r_http["victim"]["endpoint"]["stats"]
    assert 20 * stats["requests"] <= r_http["queries_total"]
