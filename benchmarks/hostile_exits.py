"""Issue 24 item 8 and 9 cases for benchmarks/hostile_cases.py: inputs that used to crash (exit 3)
or pass `validate` and then fail at `run`, measured as exit codes of both commands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml
from hostile_runs import DIGITS, base, leakmeter, scenario


def exit_row(data: dict | str | bytes, extra: list[str] | None = None, files: Callable | None = None):
    """A case measured as `validate` and `run` exit codes."""

    def case(checkout: Path, tmp: Path) -> str:
        if files:
            files(tmp)
        p = tmp / "s.yaml"
        if isinstance(data, bytes):
            p.write_bytes(data)
        elif isinstance(data, str):
            p.write_text(data)
        else:
            p.write_text(yaml.safe_dump(data))
        v = leakmeter(checkout, ["validate", str(p), *(extra or [])], tmp)
        r = leakmeter(checkout, ["run", str(p), "--out", "o", *(extra or [])], tmp)
        return f"validate {v.code}, run {r.code}: {r.line()[:70]}"

    return case


def npz_with(**change) -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        rng = np.random.default_rng(0)
        arrays = {
            "x_train": rng.standard_normal((60, 6)),
            "y_train": rng.integers(0, 3, 60),
            "x_test": rng.standard_normal((20, 6)),
            "y_test": rng.integers(0, 3, 20),
        }
        arrays.update(change)
        np.savez(tmp / "data.npz", **arrays)

    return write


NPZ = base(
    victim={**DIGITS, "data": {"dataset": "npz", "path": "data.npz", "n_train": 40}}, attacker={"pool": 5}
)


def nan_weights(tmp: Path) -> None:
    import torch

    state = {
        "0.weight": torch.randn(8, 64, dtype=torch.float64),
        "0.bias": torch.zeros(8, dtype=torch.float64),
        "2.weight": torch.full((10, 8), float("nan"), dtype=torch.float64),
        "2.bias": torch.zeros(10, dtype=torch.float64),
    }
    torch.save(state, tmp / "w.pt")


def plain_state(tmp: Path) -> None:
    """A state_dict of an MLP with 8 hidden units (a spec asking for 5 does not match it)."""
    import torch

    torch.save(
        {
            "0.weight": torch.zeros(8, 64),
            "0.bias": torch.zeros(8),
            "2.weight": torch.zeros(10, 8),
            "2.bias": torch.zeros(10),
        },
        tmp / "w.pt",
    )


def unwritable(flag: str) -> Callable[[Path, Path], str]:
    def case(checkout: Path, tmp: Path) -> str:
        p = scenario(tmp, base())
        r = leakmeter(
            checkout,
            [
                "run",
                str(p),
                "--out" if flag == "--out" else flag,
                "/proc/leakmeter-x" if flag == "--out" else "/proc/leakmeter-x.json",
            ],
            tmp,
        )
        return f"{r.short()}: {r.line()[:60]}"

    return case


def tracking_dir(checkout: Path, tmp: Path) -> str:
    (tmp / "store").mkdir()
    p = scenario(tmp, base(tracking={"experiment": "x"}))
    r = leakmeter(
        checkout, ["run", str(p), "--tracking-uri", f"sqlite:///{tmp / 'store'}", "--out", "o"], tmp
    )
    return f"{r.short()}: {r.line()[:60]}"


def sigterm_build(checkout: Path, tmp: Path) -> str:
    data = base(
        victim={
            **DIGITS,
            "data": {"dataset": "digits", "n_train": 1000},
            "training": {"epochs": 100_000, "dtype": "float64"},
        },
        tracking={"experiment": "sig"},
    )
    p = scenario(tmp, data)
    env = {**os.environ, "LEAKMETER_THREADS": "1", "PYTHONPATH": str(checkout), "CI": "true"}
    db = tmp / "mlflow.db"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "run",
            str(p),
            "--tracking-uri",
            f"sqlite:///{db}",
            "--out",
            "o",
        ],
        cwd=tmp,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = tmp / "mlflow.db.lock"
    end = time.monotonic() + 180
    while not lock.exists() and time.monotonic() < end and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(3.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    last = [ln for ln in err.splitlines() if ln.startswith("leakmeter:")][-1:]
    return f"exit {proc.returncode}: {(last[0] if last else '').removeprefix('leakmeter: ')[:60]}"
