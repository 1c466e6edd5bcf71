"""`leakmeter serve` under hostile clients, measured in one run: prints a table.

    python benchmarks/server_hardening.py                          # the server of this checkout
    python benchmarks/server_hardening.py --before /work/before    # and another, side by side
    python benchmarks/server_hardening.py --only keepalive,slow,fuzz   # some rows

Each cell starts from a fresh server process on 127.0.0.1 (an open server, no API keys, no
budget), run from a scratch folder with PYTHONPATH set to the checkout measured: latency of a
normal client while 2,000 idle connections are held (first request and the 20 after them),
server RSS growth while 4 clients send 200 MB bodies (and what they get back), the status of a
deeply nested JSON body, of a bad Content-Length and of a wrong auth scheme, how long a half-sent
request is held, connection resets with 50 client threads, requests per second on one keep-alive
connection against fresh connections, what a client gets while 8 connections send bodies at 1
byte/s, and 220 fuzzed bodies with inputs up to ±1e308 to a float32 victim (5xx answers and
traceback lines on the server's stderr).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
from hostile_runs import rss_mb, stop

HERE = Path(__file__).resolve().parents[1]
SCENARIO = """name: bench-serve
seed: 0
device: cpu
victim:
  model: {arch: mlp, hidden: [8]}
  data: {dataset: digits, n_train: 100, attacker_pool: 10}
  training: {epochs: 1, dtype: float32}
interface: {kind: prediction, output: probabilities}
tracking: {enabled: false}
"""
ROW = [[0.0] * 64]


def start(folder: Path, checkout: Path) -> tuple[subprocess.Popen, int]:
    path = folder / "serve.yaml"
    path.write_text(SCENARIO)
    env = {**os.environ, "LEAKMETER_THREADS": "1", "PYTHONPATH": str(checkout)}
    err = open(folder / "stderr.txt", "w")  # noqa: SIM115 - read back by the fuzz row
    proc = subprocess.Popen([sys.executable, "-c", "from harness.cli import main; main()", "serve", str(path),
                             "--port", "0"], stdout=subprocess.PIPE, stderr=err, text=True,
                            env=env, cwd=folder)  # cwd: not a checkout, so PYTHONPATH decides
    line = proc.stdout.readline()
    port = int(line.split("127.0.0.1:")[1].split("/")[0])
    return proc, port


def post(port: int, **kw) -> requests.Response:
    return requests.post(f"http://127.0.0.1:{port}/invocations", timeout=60, **kw)


def idle_connections(port: int) -> str:
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2000)]
    try:
        t0 = time.perf_counter()
        post(port, json={"inputs": ROW})
        first = time.perf_counter() - t0
        lat = []
        for _ in range(20):
            t0 = time.perf_counter()
            ok = post(port, json={"inputs": ROW}).status_code == 200
            lat.append(time.perf_counter() - t0 if ok else float("inf"))
        return f"first {first * 1000:.0f} ms, then max {max(lat) * 1000:.0f} ms"
    except requests.RequestException as exc:
        return f"client failed ({type(exc).__name__})"
    finally:
        for s in idle:
            s.close()


def big_bodies(proc: subprocess.Popen, port: int) -> str:
    post(port, json={"inputs": ROW})
    base = rss_mb(proc.pid)
    peak = [base]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_mb(proc.pid))
            time.sleep(0.02)

    body = b"0" * (200 * 1024 * 1024)
    codes: list = []

    def send():
        try:
            codes.append(post(port, data=body, headers={"Content-Type": "application/json"}).status_code)
        except requests.RequestException as exc:
            codes.append(type(exc).__name__)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    senders = [threading.Thread(target=send) for _ in range(4)]
    for t in senders:
        t.start()
    for t in senders:
        t.join(timeout=120)
    time.sleep(0.5)
    done.set()
    return f"{sorted(map(str, codes))}; RSS +{peak[0] - base:.0f} MB (peak {peak[0]:.0f} MB)"


def raw_status(port: int, payload: bytes) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(payload)
            head = s.recv(64)
    except OSError as exc:
        return type(exc).__name__
    return head.split(b"\r\n")[0].decode(errors="replace") or "closed"


def half_request(port: int, cap_s: float = 40.0) -> str:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"inp")
        s.settimeout(cap_s)
        t0 = time.monotonic()
        try:
            got = s.recv(64)
        except TimeoutError:
            return f"still held after {cap_s:.0f} s"
        return f"dropped after {time.monotonic() - t0:.1f} s" if not got else f"answered {got[:12]!r}"


def resets(port: int, threads: int = 50, each: int = 20) -> str:
    def one(_):
        bad = 0
        for _ in range(each):
            try:
                s = requests.Session()
                s.post(f"http://127.0.0.1:{port}/invocations", json={"inputs": ROW}, timeout=30)
                s.close()
            except requests.RequestException:
                bad += 1
        return bad

    with ThreadPoolExecutor(threads) as pool:
        bad = sum(pool.map(one, range(threads)))
    return f"{bad} of {threads * each} failed ({100 * bad / (threads * each):.1f}%)"


def keepalive(port: int, n: int = 60) -> str:
    url = f"http://127.0.0.1:{port}/invocations"
    with requests.Session() as s:
        s.post(url, json={"inputs": ROW}, timeout=10)
        t0 = time.perf_counter()
        for _ in range(n):
            s.post(url, json={"inputs": ROW}, timeout=10)
        kept = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(n):
        requests.post(url, json={"inputs": ROW}, timeout=10)
    fresh = (time.perf_counter() - t0) / n
    return (f"keep-alive {1 / kept:.0f} req/s ({kept * 1000:.1f} ms each); fresh connections "
            f"{fresh * 1000:.1f} ms each")


def slow_bodies(port: int, n_slow: int = 8, n_requests: int = 7) -> str:
    slow = []
    for _ in range(n_slow):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 5000\r\n\r\n{")
        slow.append(s)
    stop = threading.Event()

    def drip():
        while not stop.wait(1.0):
            for s in slow:
                try:
                    s.sendall(b" ")
                except OSError:
                    pass

    th = threading.Thread(target=drip, daemon=True)
    th.start()
    time.sleep(1.5)
    got = []
    try:
        with requests.Session() as sess:
            for _ in range(n_requests):
                t0 = time.perf_counter()
                try:
                    code = sess.post(f"http://127.0.0.1:{port}/invocations", json={"inputs": ROW},
                                     timeout=30).status_code
                except requests.RequestException as exc:
                    code = type(exc).__name__
                got.append((code, time.perf_counter() - t0))
    finally:
        stop.set()
        th.join()
        for s in slow:
            s.close()
    bad = sum(c != 200 for c, _ in got)
    return (f"{n_requests - bad} of {n_requests} answered 200 ({bad} refused); longest wait "
            f"{max(t for _, t in got):.1f} s")


def fuzz(port: int, folder: Path) -> str:
    import json

    import numpy as np

    rng = np.random.default_rng(0)
    codes = []
    with requests.Session() as s:
        for i in range(220):
            scale = [1e308, -1e308, 1e300, 1e-308, 5e-324, 1.0][i % 6]
            with np.errstate(over="ignore"):
                rows = (rng.standard_normal((1 + i % 3, 64)) * scale).tolist()  # inf rows: 400
            if i % 11 == 0:
                rows = [[1e308] * 64]
            try:
                codes.append(s.post(f"http://127.0.0.1:{port}/invocations", data=json.dumps({"inputs": rows}),
                                    headers={"Content-Type": "application/json"}, timeout=10).status_code)
            except requests.RequestException as exc:
                codes.append(type(exc).__name__)
    time.sleep(0.5)
    err = (folder / "stderr.txt").read_text(errors="replace")
    counts = {c: codes.count(c) for c in sorted(set(codes), key=str)}
    bad = sum(not isinstance(c, int) or c >= 500 for c in codes)
    return (f"statuses {counts}; 5xx or no answer: {bad}; server stderr: "
            f"{err.count('Traceback')} tracebacks, {len(err.splitlines())} lines")


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--before", help="another checkout to measure beside this one")
    ap.add_argument("--only", help="comma-separated row keys (idle,big,nested,length,auth,half,resets,"
                                   "keepalive,slow,fuzz)")
    args = ap.parse_args()
    checkouts = ([("before", Path(args.before))] if args.before else []) + [("this checkout", HERE)]
    only = set(args.only.split(",")) if args.only else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        checks = [
            ("2,000 idle connections: a client's latency", lambda p, _: idle_connections(p)),
            ("4 bodies of 200 MB", lambda p, proc: big_bodies(proc, p)),
            ("deeply nested JSON (100k levels)", lambda p, _: raw_status(
                p, b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 200011\r\n\r\n{\"inputs\": " + b"[" * 100000 + b"]" * 100000 + b"}")),
            ("bad Content-Length", lambda p, _: raw_status(
                p, b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n{}")),
            ("wrong auth scheme (Basic)", lambda p, _: str(post(
                p, json={"inputs": ROW}, headers={"Authorization": "Basic dXNlcjpwYXNz"}).status_code)),
            ("half-sent request", lambda p, _: half_request(p)),
            ("50 client threads x 20 new connections", lambda p, _: resets(p)),
            ("one keep-alive connection vs fresh ones", lambda p, _: keepalive(p)),
            ("8 bodies sent at 1 byte/s: a client's 7 requests", lambda p, _: slow_bodies(p)),
            ("220 fuzzed bodies, inputs up to ±1e308 (float32)", lambda p, _: fuzz(p, Path(tmp))),
        ]
        keys = ["idle", "big", "nested", "length", "auth", "half", "resets", "keepalive", "slow", "fuzz"]
        for key, (name, check) in zip(keys, checks, strict=True):
            if only and key not in only:
                continue
            cells = []
            for _, checkout in checkouts:
                proc, port = start(Path(tmp), checkout)
                try:
                    cells.append(check(port, proc))
                finally:
                    stop(proc)
            rows.append((name, cells))
    print("| check | " + " | ".join(label for label, _ in checkouts) + " |")
    print("|---|" + "---|" * len(checkouts))
    for name, cells in rows:
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
