"""Runs that end early, in real subprocesses: SIGTERM / SIGINT mid-attack end the MLflow runs
KILLED, write the partial report and exit 143 / 130; many runs started together on one fresh
embedded store all succeed; a tracking server that does not answer is refused within 15 s."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import yaml
from conftest import make_scenario

LONG_KKT = {  # a white-box binary MLP and a kkt run far longer than the test waits
    "victim": {"model": {"arch": "mlp", "hidden": [8]},
               "data": {"dataset": "breast_cancer", "n_train": 60, "attacker_pool": 10},
               "training": {"epochs": 3, "dtype": "float64"}},
    "interface": {"kind": "whitebox", "output": "logits"},
    "attacks": [{"name": "kkt", "params": {"steps": 10_000_000, "max_seconds": 600}}],
}


def _env():
    return {**os.environ, "CI": "true", "LEAKMETER_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _leakmeter(*args):
    return [sys.executable, "-m", "harness.cli", *args]


class _Lines:
    """Collects a subprocess's stderr lines in a thread, so the test can wait for one."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._t.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)

    def wait_for(self, proc, text: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(text in ln for ln in self.lines):
                return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"never saw {text!r}: {''.join(self.lines)[-2000:]}")

    def text(self) -> str:
        self._t.join(timeout=10)
        return "".join(self.lines)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130),
                                       pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow)])
def test_signal_mid_attack_kills_the_run_and_writes_the_partial_report(tmp_path, tracking_uri,
                                                                        sig, code):
    from mlflow.tracking import MlflowClient

    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(make_scenario(**LONG_KKT, tracking={"experiment": "sig"})))
    proc = subprocess.Popen(_leakmeter("run", str(scen), "--tracking-uri", tracking_uri,
                                       "--json", str(tmp_path / "r.json"), "--out", str(tmp_path / "o")),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            cwd=tmp_path)
    errs = _Lines(proc.stderr)
    try:
        errs.wait_for(proc, "attack 1/1 kkt: running", timeout=240)
        time.sleep(0.5)  # inside the attack (it runs 600 s); each second here burns a CPU-second
        t0 = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=120)
        took = time.monotonic() - t0
        out, err = proc.stdout.read(), errs.text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err[-2000:]
    # the attack runs 600 s: a stop within 60 s (wall clock, on a loaded machine) is the interrupt's
    assert took < 60, f"stopping took {took:.1f} s"
    assert "Traceback" not in out + err
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["interrupted"] == signal.Signals(sig).name
    assert rep["verdict"] == "error" and "interrupted" in rep["verdict_reason"]
    (kkt,) = rep["attacks"]
    assert kkt["status"] == "incomplete" and kkt["stopped_by"] == "interrupt"
    assert "verdict: error" in out
    client = MlflowClient(tracking_uri)
    parent = client.get_run(rep["mlflow_run_id"])
    assert parent.info.status == "KILLED" and parent.data.tags["verdict"] == "error"
    assert parent.data.metrics["verdict_code"] == 2
    exp = client.get_experiment_by_name("sig")
    runs = client.search_runs([exp.experiment_id])
    assert runs and all(r.info.status == "KILLED" for r in runs)  # the nested kkt run too


@pytest.mark.slow  # n CLI processes on one new store: ~25 s for 2 on 2 cores
@pytest.mark.parametrize("n", [2, 8])
def test_many_runs_together_on_a_fresh_store_all_succeed(tmp_path, n):
    """n processes, one new embedded store none of them has seen: every run ends FINISHED."""
    from mlflow.tracking import MlflowClient

    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(make_scenario(
        attacks=[{"name": "span_nonadaptive"}], tracking={"experiment": "together"})))
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    procs = [subprocess.Popen(_leakmeter("run", str(scen), "--tracking-uri", uri, "--out",
                                         str(tmp_path / f"o{i}")),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                              cwd=tmp_path) for i in range(n)]
    results = [(p.wait(timeout=400), p.stderr.read()) for p in procs]
    for code, err in results:
        assert code == 1, err[-1500:]  # the gradient API leaks its span: fail, every time
        assert "INFO mlflow" not in err, err[-1500:]  # creating the fresh store's schema is quiet
    assert (tmp_path / "fresh.db.lock").exists()  # the cross-platform lock beside the store
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("together")
    parents = [r for r in client.search_runs([exp.experiment_id])
               if "leakmeter.attack" not in r.data.tags]
    assert len(parents) == n and all(r.info.status == "FINISHED" for r in parents)


def test_a_tracking_server_that_does_not_answer_is_refused_promptly(tmp_path):
    silent = socket.socket()  # accepts connections and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = silent.getsockname()[1]
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(make_scenario(attacks=[{"name": "span_nonadaptive"}],
                                                 tracking={"experiment": "x"})))
    try:
        t0 = time.monotonic()
        res = subprocess.run(_leakmeter("run", str(scen), "--tracking-uri", f"http://127.0.0.1:{port}",
                                        "--out", str(tmp_path / "o")),
                             capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=180)
        took = time.monotonic() - t0
    finally:
        silent.close()
    assert res.returncode == 2, res.stderr[-1500:]
    # MLflow alone retries a silent server for minutes; the probe gives up after 6 s (generous for load)
    assert took < 90, f"took {took:.1f} s"
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("leakmeter: error")]
    assert len(lines) == 1 and "tracking" in lines[0] and "Traceback" not in res.stderr
    assert not (tmp_path / "o").exists()  # nothing ran, no empty output folder
