"""Issue 24 items 10-12 for benchmarks/hostile_cases.py: the server under hostile clients (rows of
benchmarks/server_hardening.py), sweeps and runs that end early (SIGTERM, kill -9), and output
paths that are devices or symlinks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hostile_runs import base, init_store, leakmeter, runs_of, scenario


def server_row(name: str) -> Callable[[Path, Path], str]:
    def case(checkout: Path, tmp: Path) -> str:
        import server_hardening as sh

        proc, port = sh.start(tmp, checkout)
        try:
            return {
                "fuzz": lambda: sh.fuzz(port, tmp),
                "slow": lambda: sh.slow_bodies(port),
                "keepalive": lambda: sh.keepalive(port),
            }[name]()
        finally:
            sh.stop(proc)

    return case


LONG_KKT = {
    "victim": {
        "model": {"arch": "mlp", "hidden": [8]},
        "data": {"dataset": "breast_cancer", "n_train": 60},
        "training": {"epochs": 3, "dtype": "float64"},
    },
    "attacker": {"pool": 10},
    "interface": {"kind": "whitebox", "output": "logits"},
    "attacks": [{"name": "kkt", "params": {"steps": 10_000_000, "max_seconds": 600}}],
}


def sweep_sigterm(checkout: Path, tmp: Path) -> str:
    p = scenario(tmp, base(**LONG_KKT, tracking={"experiment": "sweeps"}))
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    init_store(uri)
    env = {**os.environ, "LEAKMETER_THREADS": "1", "PYTHONPATH": str(checkout), "CI": "true"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "sweep",
            str(p),
            "--grid",
            "victim.training.epochs=3,4,5",
            "--jobs",
            "2",
            "--tracking-uri",
            uri,
            "--sarif",
            "r.sarif",
            "--junit",
            "r.xml",
        ],
        cwd=tmp,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    end = time.monotonic() + 300
    while time.monotonic() < end:
        if sum(r.data.tags.get("leakmeter.attack") == "kkt" for r in runs_of(uri, "sweeps")) >= 2:
            break
        time.sleep(0.5)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=90)
    time.sleep(5.0)
    cells = [r for r in runs_of(uri, "sweeps") if r.data.tags.get("leakmeter.kind") == "cell"]
    ci = [n for n in ("r.sarif", "r.xml") if (tmp / n).exists()]
    return (
        f"exit {proc.returncode}; cells started: {len(cells)} of 3 (2 running at the signal); "
        f"written: {', '.join(ci) or 'no SARIF/JUnit'}"
    )


def kill9(checkout: Path, tmp: Path) -> str:
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    init_store(uri)
    env = {**os.environ, "LEAKMETER_THREADS": "1", "PYTHONPATH": str(checkout), "CI": "true"}
    p = scenario(tmp, base(**LONG_KKT, tracking={"experiment": "k9"}), "long.yaml")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "run",
            str(p),
            "--tracking-uri",
            uri,
            "--out",
            "o",
        ],
        cwd=tmp,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    end = time.monotonic() + 300
    while time.monotonic() < end and not any(
        r.data.tags.get("leakmeter.attack") == "kkt" for r in runs_of(uri, "k9")
    ):
        time.sleep(0.5)
    time.sleep(1.0)
    proc.kill()
    proc.wait()
    q = scenario(tmp, base(tracking={"experiment": "k9"}), "quick.yaml")
    leakmeter(checkout, ["run", str(q), "--tracking-uri", uri, "--out", "o2"], tmp)
    running = sum(r.info.status == "RUNNING" for r in runs_of(uri, "k9"))
    return f"after the next run: {running} run(s) still RUNNING"


def device_output(checkout: Path, tmp: Path) -> str:
    dev = tmp / "fake-null"
    try:
        os.mknod(dev, 0o020666, os.makedev(1, 3))  # a character device like /dev/null
    except PermissionError:
        return "(cannot create a device node here)"
    r = leakmeter(checkout, ["run", str(scenario(tmp, base())), "--out", "o", "--junit", str(dev)], tmp)
    kind = (
        "still a device" if os.path.exists(dev) and not os.path.isfile(dev) else "replaced by a regular file"
    )
    return f"{r.short()}; the device is {kind}"


def symlink_output(checkout: Path, tmp: Path) -> str:
    (tmp / "elsewhere").mkdir()
    precious = tmp / "elsewhere" / "precious.txt"
    precious.write_text("keep me")
    (tmp / "out").mkdir()
    (tmp / "out" / "r.sarif").symlink_to(precious)
    r = leakmeter(
        checkout,
        ["run", str(scenario(tmp, base())), "--out", "o", "--sarif", str(tmp / "out" / "r.sarif")],
        tmp,
    )
    link = tmp / "out" / "r.sarif"
    state = "link kept" if link.is_symlink() else "link replaced by a file"
    return (
        f"{r.short()}; {state}; target {'untouched' if precious.read_text() == 'keep me' else 'OVERWRITTEN'}"
    )
