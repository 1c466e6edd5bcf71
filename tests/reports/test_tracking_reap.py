"""A run whose process was killed outright (kill -9) stays RUNNING in MLflow forever unless someone
ends it: the next Tracker on the same store marks KILLED the RUNNING runs of processes that are
gone (this host and PID namespace), and leaves the runs of live processes alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import yaml
from conftest import make_scenario

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/pid"), reason="reaping needs Linux /proc")

DIES = """
import os, signal, sys
from reports.tracking import Tracker
t = Tracker(sys.argv[1], "reap")
parent = t.start("killed-run")
t.start("killed-attack", parent=parent)
print(parent, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_runs_of_a_killed_process_are_marked_killed_by_the_next_tracker(tracking_uri):
    from mlflow.tracking import MlflowClient

    from reports.tracking import Tracker

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run([sys.executable, "-c", DIES, tracking_uri], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == -signal.SIGKILL, res.stderr[-2000:]
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name("reap").experiment_id
    assert {r.info.status for r in client.search_runs([exp])} == {"RUNNING"}  # left behind

    mine = Tracker(tracking_uri, "reap")  # a live process's run: never reaped
    live = mine.start("live-run")
    again = Tracker(tracking_uri, "reap")
    runs = {r.info.run_name: r for r in client.search_runs([exp])}
    assert runs["killed-run"].info.status == runs["killed-attack"].info.status == "KILLED"
    assert "killed outright" in runs["killed-run"].data.tags["leakmeter.reaped"]
    assert runs["live-run"].info.status == "RUNNING" and live not in again.reaped
    assert len(mine.reaped) == 2
    mine.end(live)


@pytest.mark.slow  # a real run killed mid-attack, then a second run on the same store (~30 s)
def test_a_kill_9_run_is_ended_by_the_next_run(tmp_path, tracking_uri):
    import time

    from mlflow.tracking import MlflowClient

    long_kkt = make_scenario(
        victim={"model": {"arch": "mlp", "hidden": [8]},
                "data": {"dataset": "breast_cancer", "n_train": 60, "attacker_pool": 10},
                "training": {"epochs": 3, "dtype": "float64"}},
        interface={"kind": "whitebox", "output": "logits"},
        attacks=[{"name": "kkt", "params": {"steps": 10_000_000, "max_seconds": 600}}],
        tracking={"experiment": "k9"})
    scen = tmp_path / "long.yaml"
    scen.write_text(yaml.safe_dump(long_kkt))
    env = {**os.environ, "CI": "true", "LEAKMETER_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", "from harness.cli import main; main()", "run", str(scen),
                             "--tracking-uri", tracking_uri, "--out", str(tmp_path / "o")],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = MlflowClient(tracking_uri)
    try:
        end = time.monotonic() + 240
        while time.monotonic() < end:
            exp = client.get_experiment_by_name("k9")
            runs = client.search_runs([exp.experiment_id]) if exp else []
            if any(r.data.tags.get("leakmeter.attack") == "kkt" for r in runs):
                break
            time.sleep(0.5)
        time.sleep(1.0)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    exp = client.get_experiment_by_name("k9").experiment_id
    assert {r.info.status for r in client.search_runs([exp])} == {"RUNNING"}
    quick = make_scenario(attacks=[{"name": "span_nonadaptive"}], tracking={"experiment": "k9"})
    scen2 = tmp_path / "quick.yaml"
    scen2.write_text(yaml.safe_dump(quick))
    res = subprocess.run([sys.executable, "-c", "from harness.cli import main; main()", "run", str(scen2),
                          "--tracking-uri", tracking_uri, "--out", str(tmp_path / "o2")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stderr[-2000:]
    runs = client.search_runs([exp])
    assert not [r.info.run_name for r in runs if r.info.status == "RUNNING"]
    killed = [r for r in runs if r.info.status == "KILLED"]
    assert len(killed) == 2 and all("leakmeter.reaped" in r.data.tags for r in killed)
