"""Hostile inputs fed to `leakmeter` as real processes: prints tables.

    python benchmarks/safety_table.py                         # this checkout
    LEAKMETER_CHECKOUT=/path/to/other python benchmarks/safety_table.py   # another version
    python benchmarks/safety_table.py --before /work/before   # issue 24's cases, before → after
    python benchmarks/safety_table.py --before /work/before --cases 1,7,14   # some of them
    python benchmarks/safety_table.py --before /work/before --round 33      # issue 33's cases
    python benchmarks/safety_table.py --before /work/before --round 33 --cases E02,N1

First table (one checkout): the validation table of tests/harness/scenario/test_validation_table.py, a
crafted TorchScript file and a crafted pickle that create a marker file if any of their code runs
(format auto and torchscript), and `defenses.query_budget: 0` against a listening socket (rows
sent): exit codes, seconds, tracebacks and the first error line.

Second table (`--before`): one row per hostile case of issue 24 (benchmarks/hostile_cases.py,
numbered by the issue's items), measured on the other checkout and on this one in the same run:
secrets that leak, memory, exit codes, what a server answers. Some rows take a minute (an MLflow
server, a sweep stopped by SIGTERM, an answer trickled until a deadline). `--round 33`: issue 33's
cases instead (benchmarks/hostile_round4.py: endpoint text that forges output or stalls the
scrubber, JSON floods, ONNX graphs, sweep caps, serve's Host gate, ...), numbered E02–E16, N1.
"""

from __future__ import annotations

import copy
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parents[1]
# this checkout first (it builds the crafted files, whatever is tested; tests/victims/ has no
# __init__ and must not shadow the victims package), then the test helpers
sys.path[:0] = [str(HERE), str(HERE / "tests"), str(HERE / "tests" / "victims"),
                str(HERE / "tests" / "harness" / "scenario")]

from test_validation_table import BASE, ENDPOINT, ROWS, _write  # noqa: E402

LIMIT_S = 60


def leakmeter(args: list[str], cwd: Path) -> tuple[int | str, float, str]:
    env = {**os.environ, "LEAKMETER_THREADS": "1",
           "PYTHONPATH": os.environ.get("LEAKMETER_CHECKOUT", str(HERE))}
    t0 = time.perf_counter()
    try:
        res = subprocess.run([sys.executable, "-c", "from harness.cli import main; main()", *args], cwd=cwd,
                             env=env, capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - t0, ""
    err = res.stderr
    first = next((ln for ln in err.splitlines() if ln.startswith("leakmeter:")), err.strip()[-120:])
    flag = " [traceback]" if "Traceback" in err else ""
    return res.returncode, time.perf_counter() - t0, first[:110] + flag


def row(name: str, path: Path, cwd: Path) -> str:
    v = leakmeter(["validate", str(path)], cwd)
    r = leakmeter(["run", str(path), "--no-tracking", "--out", str(cwd / "out")], cwd)
    return f"| {name} | {v[0]} ({v[1]:.1f} s) | {r[0]} ({r[1]:.1f} s) | {r[2] or v[2]} |"


def crafted_rows(folder: Path) -> list[str]:
    from test_model_files import WritesMarker, crafted_torchscript

    out = []
    marker = folder / "MARKER"
    ts, pk = folder / "payload.pt", folder / "payload.pth"
    crafted_torchscript(ts, marker)
    pk.write_bytes(pickle.dumps({"w": WritesMarker(marker)}))
    for name, path, fmt in (("crafted TorchScript, format auto", ts, "auto"),
                            ("crafted TorchScript, format torchscript (no flag)", ts, "torchscript"),
                            ("crafted pickle, format auto", pk, "auto")):
        data = copy.deepcopy(BASE)
        data["victim"]["model"] = {"arch": "file", "path": str(path), "format": fmt,
                                   "spec": {"arch": "mlp", "hidden": [12]}}
        data["interface"]["kind"] = "prediction"
        p = folder / "s.yaml"
        p.write_text(yaml.safe_dump(data))
        if marker.exists():
            marker.unlink()
        line = row(name, p, folder)
        out.append(line.replace(" |\n", "") + (" code RAN (marker written) |" if marker.exists() else
                                                 " no code ran |"))
    return out


def budget_zero_row(folder: Path) -> str:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    received = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            received[0] += 1
            conn.close()

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    data = copy.deepcopy(BASE)
    data["victim"]["endpoint"] = {**ENDPOINT, "url": f"http://127.0.0.1:{srv.getsockname()[1]}/x",
                                  "retries": 2, "backoff_s": 0.01}
    data["interface"]["kind"] = "prediction"
    data["defenses"] = {"query_budget": 0}
    p = folder / "b0.yaml"
    p.write_text(yaml.safe_dump(data))
    line = row("query_budget: 0 against an endpoint", p, folder)
    stop.set()
    th.join()
    srv.close()
    return f"{line} connections received: {received[0]} |"


def before_after(before: Path, cases: set[str] | None, issue: str = "24") -> None:
    """Issue 24's cases (or issue 33's, `--round 33`: benchmarks/hostile_round4.py):
    | case | before | after |, each measured on both checkouts now."""
    if issue == "33":
        from hostile_round4 import CASES
    else:
        from hostile_cases import CASES

    print(f"| case (issue {issue} item) | before | after |\n|---|---|---|")
    for name, case in CASES:
        if cases and name.split()[0] not in cases:
            continue
        cells = []
        for checkout in (before, HERE):
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp) / "work"
                work.mkdir()
                try:
                    cells.append(case(checkout, work))
                except Exception as exc:  # noqa: BLE001 - a case that cannot be measured says so
                    cells.append(f"(not measured: {type(exc).__name__}: {str(exc)[:80]})")
        print(f"| {name} | {cells[0]} | {cells[1]} |", flush=True)


def main() -> None:
    if "--before" in sys.argv:
        i = sys.argv.index("--before")
        chosen = sys.argv[sys.argv.index("--cases") + 1].split(",") if "--cases" in sys.argv else None
        issue = sys.argv[sys.argv.index("--round") + 1] if "--round" in sys.argv else "24"
        before_after(Path(sys.argv[i + 1]).resolve(), set(chosen) if chosen else None, issue)
        return
    print("| input | validate | run | first error line |\n|---|---|---|---|")
    for name, (mutation, _words) in ([] if "--files-only" in sys.argv else ROWS.items()):
        with tempfile.TemporaryDirectory() as tmp:
            print(row(name, _write(Path(tmp), mutation), Path(tmp)), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for line in crafted_rows(Path(tmp)):
            print(line, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        print(budget_zero_row(Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
