"""The hostile cases of issue 24 as measurements, for benchmarks/safety_table.py: each case runs
real `leakmeter` processes (and servers) of one checkout, from a scratch folder with PYTHONPATH
set to that checkout, and returns one short cell of text. Nothing here asserts: the table shows
before → after side by side.

Memory is read with GNU time (`MAXRSS`); a process that would take far more than the machine can
spare runs under an address-space cap (RLIMIT_AS) and the cell says so.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import yaml

GIB = 1024**3
DIGITS = {
    "model": {"arch": "mlp", "hidden": [8]},
    "data": {"dataset": "digits", "n_train": 100},
    "training": {"epochs": 1, "dtype": "float64"},
}


# --------------------------------------------------------------------------- running leakmeter


class Result:
    def __init__(self, code, seconds: float, out: str, err: str, maxrss_mb: float | None):
        self.code, self.seconds, self.out, self.err, self.maxrss_mb = code, seconds, out, err, maxrss_mb

    def line(self) -> str:
        """The first `leakmeter:` line of stderr (or the last line), cut for a table cell."""
        lines = [ln for ln in self.err.splitlines()
                 if ln.strip() and not ln.startswith(("MAXRSS", "Command exited"))]
        first = next(
            (ln for ln in lines if ln.startswith("leakmeter: error")),
            next((ln for ln in lines if "crashed" in ln),
                 next((ln for ln in self.out.splitlines() if ln.startswith("verdict:")), "")),
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


# --------------------------------------------------------------------------- the cases


def longest_piece(secret: str, text: str) -> int:
    """The longest piece of `secret` (at least 6 characters) found in `text`."""
    for n in range(len(secret), 5, -1):
        if any(secret[i : i + n] in text for i in range(len(secret) - n + 1)):
            return n
    return 0


def cut_token(checkout: Path, tmp: Path) -> str:
    token = "tok-Cq8w-4Lr2-straddle!"  # 23 characters
    srv = http_server(
        lambda h, b, i: (
            send(h, 200, probs(len(b["inputs"])))
            if i == 0
            else send(h, 401, ("A" * 189 + token + " more").encode(), "text/plain")
        )
    )
    try:
        data = endpoint_scenario(url_of(srv), auth_env="LEAKMETER_CUT_TOKEN")
        data["tracking"] = {"experiment": "cut"}
        scen = scenario(tmp, data, "../cut-input.yaml")
        r = leakmeter(
            checkout,
            [
                "run",
                str(scen),
                "--tracking-uri",
                f"sqlite:///{tmp / 'mlflow.db'}",
                "--out",
                "out",
                "--json",
                "r.json",
                "--sarif",
                "r.sarif",
                "--junit",
                "r.xml",
            ],
            tmp,
            {"LEAKMETER_CUT_TOKEN": token},
        )
    finally:
        srv.shutdown()
    files = [f for f in tmp.rglob("*") if f.is_file()]
    hits = [f.name for f in files if longest_piece(token, f.read_bytes().decode("latin-1")) >= 8]
    texts = [r.out, r.err] + [f.read_bytes().decode("latin-1") for f in files]
    worst = max(longest_piece(token, t) for t in texts)
    return f"{worst} of 23 characters shown; {len(hits) + (longest_piece(token, r.out + r.err) >= 8)} outputs"


def tracking_password(checkout: Path, tmp: Path) -> str:
    import requests

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{tmp / 'server.db'}",
            "--artifacts-destination",
            str(tmp / "artifacts"),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp,
    )
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.5)
        password = "pw-Tr4ck-77x"
        data = base(tracking={"experiment": "pw"})
        scen = scenario(tmp, data, "../pw-input.yaml")
        r = leakmeter(
            checkout,
            [
                "run",
                str(scen),
                "--tracking-uri",
                f"http://alice:{password}@127.0.0.1:{port}",
                "--out",
                "out",
                "--json",
                "r.json",
            ],
            tmp,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    report = (tmp / "r.json").read_text() if (tmp / "r.json").exists() else ""
    where = [
        n
        for n, t in (
            (
                "report.json",
                (tmp / "out" / "report.json").read_text() if (tmp / "out" / "report.json").exists() else "",
            ),
            ("--json", report),
            ("stdout", r.out),
            ("stderr", r.err),
        )
        if password in t
    ]
    return f"password in: {', '.join(where) or 'nothing'} ({r.short()})"


def open_server(checkout: Path, tmp: Path) -> str:
    import requests

    proc, port = serve_process(checkout, tmp, base(), "--budget", "1000")
    url = f"http://127.0.0.1:{port}/invocations"
    try:
        rows, served = np.zeros((100, 64)).tolist(), 0
        with requests.Session() as s:
            for i in range(100):
                r = s.post(url, json={"inputs": rows}, headers={"X-API-Key": f"made-up-{i}"}, timeout=10)
                served += 100 * (r.status_code == 200)
            before = rss_mb(proc.pid)
            for i in range(4000):
                s.post(
                    url, json={"inputs": rows[:1]}, headers={"X-API-Key": f"{i}-" + "k" * 15_000}, timeout=10
                )
            grown = rss_mb(proc.pid) - before
    finally:
        stop(proc)
    return f"{served:,} rows served on a budget of 1,000; +{grown:.0f} MB after 4,000 more 15 KB keys"


def served_noise(checkout: Path, tmp: Path) -> str:
    import requests

    data = base(defenses={"output_noise": {"sigma": 0.05}})
    proc, port = serve_process(checkout, tmp, data)
    x = np.random.default_rng(3).uniform(-1, 1, (50, 64))
    try:
        noisy = np.asarray(
            requests.post(
                f"http://127.0.0.1:{port}/invocations", json={"inputs": x.tolist()}, timeout=10
            ).json()["predictions"]
        )
    finally:
        stop(proc)
    code = (
        "import sys, json, numpy as np, torch\n"
        "from harness.scenario import scenario_from_dict\n"
        "from victims.http.served import build_served, keyed_normal\n"
        "s = scenario_from_dict(json.loads(sys.argv[1]))\n"
        "served, v = build_served(s)\n"
        "x = np.asarray(json.loads(sys.argv[2]))\n"
        "clean = v.backend.predict(torch.as_tensor(x), 'probabilities').numpy()\n"
        "print(json.dumps((clean + 0.05 * keyed_normal(x, clean.shape[1], s.seed)).tolist()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(data), json.dumps(x.tolist())],
        capture_output=True,
        text=True,
        cwd=tmp,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(checkout), "LEAKMETER_THREADS": "1"},
    )
    guess = np.asarray(json.loads(out.stdout.strip().splitlines()[-1]))
    return f"noise computed from the public seed misses by {np.abs(noisy - guess).max():.1e}"


def npz_bomb(checkout: Path, tmp: Path) -> str:
    from bombs import npz_bomb as make

    make(tmp / "data.npz")  # x_train declares (400000, 1000) float64: 3.2 GB
    data = base(victim={**DIGITS, "data": {"dataset": "npz", "path": "data.npz", "n_train": 1000}})
    scen = scenario(tmp, data)
    v = leakmeter(checkout, ["validate", str(scen)], tmp, cap_bytes=8 * GIB)
    r = leakmeter(checkout, ["run", str(scen), "--out", "o"], tmp, cap_bytes=8 * GIB)
    mb = (tmp / "data.npz").stat().st_size / 2**20
    return f"{mb:.0f} MB file: validate {v.short()}; run {r.short()} under an 8 GiB cap: {r.line()[:60]}"


def pt_bomb(checkout: Path, tmp: Path) -> str:
    from bombs import pt_bomb as make

    make(tmp / "w.pt", numel=500_000_000)  # 2 GB declared
    data = base(victim={**DIGITS, "model": {"arch": "file", "path": "w.pt", "spec": {"arch": "mlp"}}})
    v = leakmeter(checkout, ["validate", str(scenario(tmp, data))], tmp)
    mb = (tmp / "w.pt").stat().st_size / 2**20
    return f"{mb:.1f} MB zip holding 2 GB: validate {v.short()}: {v.line()[:50]}"


def foreign_env(checkout: Path, tmp: Path) -> str:
    seen = []
    srv = http_server(
        lambda h, b, i: (seen.append(h.headers.get("Authorization")), send(h, 200, probs(len(b["inputs"]))))
    )
    try:
        data = endpoint_scenario(url_of(srv), auth_env="AWS_SECRET_ACCESS_KEY")
        r = leakmeter(
            checkout,
            ["run", str(scenario(tmp, data)), "--out", "o"],
            tmp,
            {"AWS_SECRET_ACCESS_KEY": "aws-9Kq2-secret"},
        )
    finally:
        srv.shutdown()
    sent = sum("aws-9Kq2" in (a or "") for a in seen)
    return f"{r.short()}; the AWS key sent in {sent} requests"


def trickle(checkout: Path, tmp: Path) -> str:
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
        data = endpoint_scenario(url_of(srv), timeout_s=10)
        r = leakmeter(checkout, ["run", str(scenario(tmp, data)), "--out", "o"], tmp, timeout=100)
    finally:
        srv.shutdown()
    return f"1 byte / 2 s: {r.short()}"


def big_answer(checkout: Path, tmp: Path) -> str:
    big = b'{"predictions": [' + b", ".join([b"[" + b"0.1, " * 9 + b"0.1]"] * 5_000_000) + b"]}"  # ~300 MB

    def respond(h, b, i):
        if i == 0:
            return send(h, 200, probs(len(b["inputs"])))
        try:
            send(h, 200, big)
        except OSError:
            pass

    srv = http_server(respond)
    try:
        r = leakmeter(
            checkout, ["run", str(scenario(tmp, endpoint_scenario(url_of(srv)))), "--out", "o"], tmp
        )
    finally:
        srv.shutdown()
    return f"{len(big) / 2**20:.0f} MB answer: {r.short()}"


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


def _kkt_runs(uri: str, exp: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    e = client.get_experiment_by_name(exp)
    return client.search_runs([e.experiment_id]) if e else []


def _store(uri: str) -> None:
    """Create the store's schema before any leakmeter process and this one race to create it."""
    from mlflow.tracking import MlflowClient

    MlflowClient(uri).search_experiments()


def sweep_sigterm(checkout: Path, tmp: Path) -> str:
    p = scenario(tmp, base(**LONG_KKT, tracking={"experiment": "sweeps"}))
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    _store(uri)
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
        if sum(r.data.tags.get("leakmeter.attack") == "kkt" for r in _kkt_runs(uri, "sweeps")) >= 2:
            break
        time.sleep(0.5)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=90)
    time.sleep(5.0)
    cells = [r for r in _kkt_runs(uri, "sweeps") if r.data.tags.get("leakmeter.kind") == "cell"]
    ci = [n for n in ("r.sarif", "r.xml") if (tmp / n).exists()]
    return (
        f"exit {proc.returncode}; cells started: {len(cells)} of 3 (2 running at the signal); "
        f"written: {', '.join(ci) or 'no SARIF/JUnit'}"
    )


def kill9(checkout: Path, tmp: Path) -> str:
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    _store(uri)
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
        r.data.tags.get("leakmeter.attack") == "kkt" for r in _kkt_runs(uri, "k9")
    ):
        time.sleep(0.5)
    time.sleep(1.0)
    proc.kill()
    proc.wait()
    q = scenario(tmp, base(tracking={"experiment": "k9"}), "quick.yaml")
    leakmeter(checkout, ["run", str(q), "--tracking-uri", uri, "--out", "o2"], tmp)
    running = sum(r.info.status == "RUNNING" for r in _kkt_runs(uri, "k9"))
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


def template_key(checkout: Path, tmp: Path) -> str:
    key = "sk-Tpl9x7Kq2-key"
    srv = http_server(
        lambda h, b, i: send(h, 200, json.dumps({"scores": [[0.1] * 10] * len(b["rows"])}).encode())
    )
    try:
        data = endpoint_scenario(
            url_of(srv),
            protocol="json",
            response_path="scores",
            request_template={"rows": "$inputs", "api_key": key},
        )
        data["tracking"] = {"experiment": "tpl"}
        r = leakmeter(
            checkout,
            [
                "run",
                str(scenario(tmp, data, "../tpl-input.yaml")),
                "--tracking-uri",
                f"sqlite:///{tmp / 'mlflow.db'}",
                "--out",
                "out",
            ],
            tmp,
        )
    finally:
        srv.shutdown()
    return f"{r.short()}; key in outputs/MLflow: {'yes' if key in all_text(tmp) + r.out + r.err else 'no'}"


def sweep_query_key(checkout: Path, tmp: Path) -> str:
    key = "sub7Kq2WvX9pL4"
    data = endpoint_scenario(f"http://127.0.0.1:9/x?subscription-key={key}")
    data["tracking"] = {"experiment": "sw"}
    r = leakmeter(
        checkout,
        [
            "sweep",
            str(scenario(tmp, data, "../sw-input.yaml")),
            "--grid",
            "defenses.query_budget=100,200",
            "--tracking-uri",
            f"sqlite:///{tmp / 'mlflow.db'}",
            "--out",
            "out",
            "--no-compare",
        ],
        tmp,
    )
    return f"{r.short()}; key in MLflow: {'yes' if key in all_text(tmp) else 'no'}"


def quota(checkout: Path, tmp: Path) -> str:
    def respond(h, b, i):
        if i < 3:  # the start-up check, then 2 x 10 rows
            return send(h, 200, probs(len(b["inputs"])))
        send(h, 429, b'{"error_code": "RESOURCE_EXHAUSTED", "message": "spent"}')

    srv = http_server(respond)
    try:
        data = endpoint_scenario(url_of(srv), max_batch=10)
        data["attacks"] = [{"name": "surrogate"}]
        r = leakmeter(checkout, ["run", str(scenario(tmp, data)), "--out", "o"], tmp)
    finally:
        srv.shutdown()
    status = re.search(r"surrogate\s+(\S+)", r.out)
    return f"{r.short()}: surrogate {status.group(1) if status else '?'}"


CASES: list[tuple[str, Callable[[Path, Path], str]]] = [
    ("1 token echoed across the 200-character cut", cut_token),
    ("2 --tracking-uri http://user:password@host", tracking_password),
    ("3 open serve, rotating X-API-Key values", open_server),
    ("4 served output noise vs the public seed", served_noise),
    ("5 .npz declaring 3.2 GB (3 MB file)", npz_bomb),
    ("5 .pt zip declaring 2 GB", pt_bomb),
    ("6 auth_env: AWS_SECRET_ACCESS_KEY", foreign_env),
    ("7 answer trickled 1 byte / 2 s", trickle),
    ("7 a 300 MB answer", big_answer),
    ("8 YAML seed: 2001-13-45", exit_row("name: t\nseed: 2001-13-45\n")),
    ("8 YAML !!float abc", exit_row("name: t\nseed: !!float abc\n")),
    ("8 YAML !!int abc", exit_row("name: t\nseed: !!int abc\n")),
    ("8 YAML integer of 4400 digits", exit_row("name: t\nseed: " + "9" * 4400 + "\n")),
    ("8 YAML NUL character", exit_row(b"name: t\x00\n")),
    ("8 YAML !!set key", exit_row("name: t\n? !!set {a, b}\n: 1\n")),
    ("8 --set seed=2001-13-45", exit_row(base(), ["--set", "seed=2001-13-45"])),
    ("8 .npz NaN inputs", exit_row(NPZ, files=npz_with(x_train=np.full((60, 6), np.nan)))),
    ("8 .npz inf inputs", exit_row(NPZ, files=npz_with(x_test=np.full((20, 6), np.inf)))),
    ("8 .npz string labels", exit_row(NPZ, files=npz_with(y_train=np.array(["a"] * 60)))),
    ("8 .npz 50 labels for 60 rows", exit_row(NPZ, files=npz_with(y_train=np.zeros(50, dtype=int)))),
    ("8 .npz test width 5, train 6", exit_row(NPZ, files=npz_with(x_test=np.zeros((20, 5))))),
    (
        "8 .npz empty x_train",
        exit_row(NPZ, files=npz_with(x_train=np.zeros((0, 6)), y_train=np.zeros(0, dtype=int))),
    ),
    ("8 .npz 0-d y_test", exit_row(NPZ, files=npz_with(y_test=np.array(3)))),
    ("8 .npz 2-D labels", exit_row(NPZ, files=npz_with(y_train=np.zeros((60, 3), dtype=int)))),
    ("8 .npz structured dtype", exit_row(NPZ, files=npz_with(x_test=np.zeros(20, dtype=[("a", "f8")])))),
    ("8 .npz negative labels", exit_row(NPZ, files=npz_with(y_train=np.full(60, -5)))),
    ("8 .npz label 1e9", exit_row(NPZ, files=npz_with(y_test=np.full(20, 10**9)))),
    (
        "8 NaN model weights",
        exit_row(
            base(
                victim={
                    **DIGITS,
                    "model": {"arch": "file", "path": "w.pt", "spec": {"arch": "mlp", "hidden": [8]}},
                }
            ),
            files=nan_weights,
        ),
    ),
    ("8 --out unwritable (/proc)", unwritable("--out")),
    ("8 --json unwritable (/proc)", unwritable("--json")),
    ("8 tracking URI that is a folder", tracking_dir),
    ("8 SIGTERM while the victim is built", sigterm_build),
    (
        "9 state_dict not matching spec",
        exit_row(
            base(
                victim={
                    **DIGITS,
                    "model": {"arch": "file", "path": "w.pt", "spec": {"arch": "mlp", "hidden": [5]}},
                }
            ),
            files=plain_state,
        ),
    ),
    (
        "9 classes not in the dataset",
        exit_row(base(victim={**DIGITS, "data": {"dataset": "digits", "n_train": 100, "classes": [3, 42]}})),
    ),
    (
        "9 gradient API, template without $explain",
        exit_row(
            {
                **endpoint_scenario(
                    "http://127.0.0.1:9/x", protocol="json", request_template={"rows": "$inputs"}
                ),
                "interface": {"kind": "gradient", "output": "probabilities"},
            }
        ),
    ),
    (
        "9 IDX folder without files",
        exit_row(
            base(victim={**DIGITS, "data": {"dataset": "idx", "path": "idx"}}),
            files=lambda tmp: (tmp / "idx").mkdir(),
        ),
    ),
    (
        "9 auth_env variable not set",
        exit_row(endpoint_scenario("http://127.0.0.1:9/x", auth_env="LEAKMETER_UNSET_X")),
    ),
    (
        "9 n_train 5000 > digits' 1797",
        exit_row(base(victim={**DIGITS, "data": {"dataset": "digits", "n_train": 5000}})),
    ),
    (
        "9 dataset not installed",
        exit_row(
            base(victim={**DIGITS, "data": {"dataset": "fashion_mnist"}}),
            ["--set", "victim.data.n_train=100"],
        ),
    ),
    ("10 220 fuzzed bodies up to ±1e308 (float32)", server_row("fuzz")),
    ("10 8 bodies at 1 byte/s: a client's 7 requests", server_row("slow")),
    ("10 keep-alive requests", server_row("keepalive")),
    ("11 SIGTERM to sweep --jobs 2 (3 cells)", sweep_sigterm),
    ("11 kill -9 of a run, then another run", kill9),
    ("12 --junit naming a device", device_output),
    ("12 --sarif symlink out of its folder", symlink_output),
    ("13 key written in a JSON request_template", template_key),
    ("13 sweep, URL with ?subscription-key=", sweep_query_key),
    ("14 endpoint: 20 rows, then 429 forever", quota),
]
