"""Running leakmeter processes for the hostile-case benchmark (benchmarks/hostile_cases.py): each
runs one checkout's code, from a scratch folder with PYTHONPATH set to that checkout, and reports
exit code, seconds and peak memory (GNU time's `MAXRSS`); plus small HTTP servers and scenario
builders. A process that would take far more memory than the machine can spare runs under an
address-space cap (RLIMIT_AS)."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

GIB = 1024**3


DIGITS = {
    "model": {"arch": "mlp", "hidden": [8]},
    "data": {"dataset": "digits", "n_train": 100},
    "training": {"epochs": 1, "dtype": "float64"},
}


class Result:
    def __init__(self, code, seconds: float, out: str, err: str, maxrss_mb: float | None):
        self.code, self.seconds, self.out, self.err, self.maxrss_mb = code, seconds, out, err, maxrss_mb

    def line(self) -> str:
        """The first `leakmeter:` line of stderr (or the last line), cut for a table cell."""
        lines = [
            ln
            for ln in self.err.splitlines()
            if ln.strip() and not ln.startswith(("MAXRSS", "Command exited"))
        ]
        first = next(
            (ln for ln in lines if ln.startswith("leakmeter: error")),
            next(
                (ln for ln in lines if "crashed" in ln),
                next((ln for ln in self.out.splitlines() if ln.startswith("verdict:")), ""),
            ),
        )
        first = re.sub(r"/tmp/\S*?/work/", "", first)  # the scratch folder says nothing
        return first.removeprefix("leakmeter: ")[:90].replace("|", "/")

    def short(self) -> str:
        mem = f", {self.maxrss_mb:,.0f} MB" if self.maxrss_mb is not None else ""
        return f"exit {self.code} ({self.seconds:.1f} s{mem})"


def leakmeter(
    checkout: Path,
    args: list[str],
    cwd: Path,
    env: dict | None = None,
    timeout: float = 300,
    cap_bytes: int | None = None,
) -> Result:
    """Run `leakmeter ARGS` of `checkout` in `cwd`; peak RSS via GNU time; `cap_bytes` caps the
    address space."""
    full = {**os.environ, "LEAKMETER_THREADS": "1", "PYTHONPATH": str(checkout), "CI": "true", **(env or {})}
    cmd = [sys.executable, "-c", "from harness.cli import main; main()", *args]
    timer = shutil.which("time") or "/usr/bin/time"
    if os.path.exists(timer):
        cmd = [timer, "-f", "MAXRSS %M", *cmd]

    def limit():
        if cap_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))

    t0 = time.perf_counter()
    try:
        res = subprocess.run(
            cmd, cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout, preexec_fn=limit
        )
        code, out, err = res.returncode, res.stdout, res.stderr
    except subprocess.TimeoutExpired as exc:
        code = f"still running at {timeout:.0f} s (killed)"
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    took = time.perf_counter() - t0
    m = re.search(r"MAXRSS (\d+)", err)
    return Result(code, took, out, err, int(m.group(1)) / 1024 if m else None)


def scenario(folder: Path, data: dict, name: str = "s.yaml") -> Path:
    p = folder / name
    p.write_text(yaml.safe_dump(data))
    return p


def base(**over) -> dict:
    data = {
        "name": "hostile",
        "seed": 0,
        "device": "cpu",
        "victim": json.loads(json.dumps(DIGITS)),
        "interface": {"kind": "prediction", "output": "probabilities"},
        "attacker": {"pool": 20},
        "attacks": [{"name": "span_nonadaptive"}],
        "tracking": {"enabled": False},
    }
    data.update(over)
    return data


def endpoint_scenario(url: str, **endpoint) -> dict:
    return base(
        victim={
            "endpoint": {
                "url": url,
                "input_dim": 64,
                "n_outputs": 10,
                "retries": 0,
                "backoff_s": 0.01,
                **endpoint,
            }
        }
    )


def all_text(folder: Path) -> str:
    return "\n".join(f.read_bytes().decode("latin-1") for f in folder.rglob("*") if f.is_file())


def serve_process(checkout: Path, folder: Path, data: dict, *args: str) -> tuple[subprocess.Popen, int]:
    path = scenario(folder, data, "serve.yaml")
    env = {**os.environ, "LEAKMETER_THREADS": "1", "PYTHONPATH": str(checkout)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "serve",
            str(path),
            "--port",
            "0",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=folder,
    )
    line = proc.stdout.readline()
    return proc, int(line.split("127.0.0.1:")[1].split("/")[0])


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass


def http_server(respond: Callable[[BaseHTTPRequestHandler, dict, int], None]) -> ThreadingHTTPServer:
    """A threaded server on 127.0.0.1 calling respond(handler, body, request index)."""
    count = [0]

    class H(Handler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            count[0] += 1
            respond(self, body, count[0] - 1)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    srv.requests = count
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def send(h: BaseHTTPRequestHandler, status: int, raw: bytes, ctype: str = "application/json") -> None:
    h.send_response(status)
    h.send_header("Content-Type", ctype)
    h.send_header("Content-Length", str(len(raw)))
    h.end_headers()
    h.wfile.write(raw)


def probs(n: int) -> bytes:
    return json.dumps({"predictions": [[0.1] * 10] * n}).encode()


def url_of(srv: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}/invocations"


def trickled_run(checkout: Path, tmp: Path, run_timeout: float, **endpoint) -> Result:
    """A run against an endpoint that answers the start-up check, then trickles every answer at
    1 byte / 2 s; `endpoint`: the client's timeout_s, deadline_s, retries."""

    def respond(h, b, i):
        body = probs(len(b["inputs"]))
        if i == 0:
            return send(h, 200, body)
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        for k in range(len(body)):
            time.sleep(2.0)
            try:
                h.wfile.write(body[k : k + 1])
                h.wfile.flush()
            except OSError:
                return

    srv = http_server(respond)
    try:
        data = endpoint_scenario(url_of(srv), **endpoint)
        return leakmeter(checkout, ["run", str(scenario(tmp, data)), "--out", "o"], tmp, timeout=run_timeout)
    finally:
        srv.shutdown()


def runs_of(uri: str, exp: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    e = client.get_experiment_by_name(exp)
    return client.search_runs([e.experiment_id]) if e else []


def init_store(uri: str) -> None:
    """Create the store's schema before any leakmeter process and this one race to create it."""
    from mlflow.tracking import MlflowClient

    MlflowClient(uri).search_experiments()
