"""Sweeps end cleanly: SIGTERM stops the worker processes with their sweep, starts no queued cell,
leaves no MLflow run RUNNING and still writes SARIF and JUnit for the cells that ran; an
unreachable Ray address is an error within 15 s, before anything is recorded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from conftest import make_scenario

LONG = {  # two cells whose kkt attack runs far longer than the test waits
    "victim": {"model": {"arch": "mlp", "hidden": [8]},
               "data": {"dataset": "breast_cancer", "n_train": 60, "attacker_pool": 10},
               "training": {"epochs": 3, "dtype": "float64"}},
    "interface": {"kind": "whitebox", "output": "logits"},
    "attacks": [{"name": "kkt", "params": {"steps": 10_000_000, "max_seconds": 600}}],
    "tracking": {"experiment": "sweeps"},
}


def _env():
    return {**os.environ, "CI": "true", "LEAKMETER_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _alive(marker: str) -> list[str]:
    """Command lines of live processes that mention `marker` (the sweep's private folder)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
            env = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
        except OSError:
            continue
        if marker in cmd or marker in env:
            out.append(f"{pid}: {cmd[:120]}")
    return out


@pytest.mark.slow  # a real 2-cell sweep with worker processes, stopped by SIGTERM: ~25 s
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc to look for stray workers")
def test_sigterm_stops_a_local_sweep_its_workers_and_its_runs(tmp_path, tracking_uri):
    from mlflow.tracking import MlflowClient

    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(make_scenario(**LONG)))
    marker = f"LEAKMETER_TEST_MARK={tmp_path.name}"
    env = _env() | {"LEAKMETER_TEST_MARK": tmp_path.name}
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "sweep", str(scen),
                             "--grid", "victim.training.epochs=3,4,5", "--jobs", "2",  # one cell queued
                             "--tracking-uri", tracking_uri, "--out", str(tmp_path / "o"),
                             "--sarif", str(tmp_path / "r.sarif"), "--junit", str(tmp_path / "r.xml")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=tmp_path)
    client = MlflowClient(tracking_uri)
    try:
        end = time.monotonic() + 300
        while time.monotonic() < end:  # wait until both cells' attacks run
            exp = client.get_experiment_by_name("sweeps")
            running = [r for r in client.search_runs([exp.experiment_id])
                       if r.data.tags.get("leakmeter.attack") == "kkt"] if exp else []
            if len(running) == 2:
                break
            assert proc.poll() is None, proc.stdout.read()[-2000:]
            time.sleep(0.5)
        else:
            pytest.fail("the cells never started")
        time.sleep(1.0)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=180)[0]
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out[-2000:]
    assert took < 90, f"the sweep took {took:.1f} s to stop"  # its cells run far longer; generous for load
    assert "Traceback" not in out
    time.sleep(3.0)  # time for a queued cell to start, if anything still could start one
    assert [p for p in _alive(marker) if str(os.getpid()) not in p.split(":")[0]] == []
    runs = client.search_runs([client.get_experiment_by_name("sweeps").experiment_id])
    assert runs and not [r.info.run_name for r in runs if r.info.status == "RUNNING"]
    sweep = [r for r in runs if r.data.tags.get("leakmeter.kind") == "sweep"]
    assert len(sweep) == 1 and sweep[0].info.status == "KILLED"
    cells = [r for r in runs if r.data.tags.get("leakmeter.kind") == "cell"]
    assert len(cells) == 2 and all(r.info.status == "KILLED" for r in cells)  # the third never started
    sarif = json.loads((tmp_path / "r.sarif").read_text())  # CI still hears about the cells that ran
    assert sarif["runs"][0]["properties"]["verdict"] in ("error", "fail", "inconclusive")
    assert (tmp_path / "r.xml").read_text().count("<testsuite ") == 2


def test_an_unreachable_ray_address_is_refused_quickly_and_records_nothing(tmp_path, tracking_uri):
    from mlflow.tracking import MlflowClient

    pytest.importorskip("ray")
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(make_scenario(**LONG)))
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "harness.cli", "sweep", str(scen), "--grid",
                          "victim.training.epochs=3,4", "--executor", "ray", "--ray-address",
                          "127.0.0.1:1", "--tracking-uri", tracking_uri],
                         capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=180)
    took = time.monotonic() - t0
    assert res.returncode == 2 and took < 90, (took, res.stderr[-1500:])  # generous: a loaded machine
    assert "--ray-address 127.0.0.1:1" in res.stderr and "Traceback" not in res.stderr
    assert MlflowClient(tracking_uri).get_experiment_by_name("sweeps") is None  # nothing recorded
