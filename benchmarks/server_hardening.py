"""`leakmeter serve` under hostile clients, measured in one run: prints a table.

    python benchmarks/server_hardening.py            # the server of this checkout
    PYTHONPATH=/path/to/other/checkout python benchmarks/server_hardening.py   # another version

Each row starts from a fresh server process on 127.0.0.1 (an open server, no API keys, no budget):
latency of a normal client while 2,000 idle connections are held (first request and the 20 after
them), server RSS growth while 4 clients send 200 MB bodies (and what they get back), the status
of a deeply nested JSON body, of a bad Content-Length and of a wrong auth scheme, how long a
half-sent request is held, and connection resets with 50 client threads.
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

SCENARIO = """name: bench-serve
seed: 0
device: cpu
victim:
  model: {arch: mlp, hidden: [8]}
  data: {dataset: digits, n_train: 100, attacker_pool: 10}
  training: {epochs: 1, dtype: float64}
interface: {kind: prediction, output: probabilities}
tracking: {enabled: false}
"""
ROW = [[0.0] * 64]


def start(folder: Path) -> tuple[subprocess.Popen, int]:
    path = folder / "serve.yaml"
    path.write_text(SCENARIO)
    env = {**os.environ, "LEAKMETER_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", "from harness.cli import main; main()", "serve", str(path),
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    line = proc.stdout.readline()
    port = int(line.split("127.0.0.1:")[1].split("/")[0])
    return proc, port


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
        s.sendall(b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"inp")
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


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        checks = [
            ("2,000 idle connections: a client's latency", lambda p, _: idle_connections(p)),
            ("4 bodies of 200 MB", lambda p, proc: big_bodies(proc, p)),
            ("deeply nested JSON (100k levels)", lambda p, _: raw_status(
                p, b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 200011\r\n\r\n{\"inputs\": " + b"[" * 100000 + b"]" * 100000 + b"}")),
            ("bad Content-Length", lambda p, _: raw_status(
                p, b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}")),
            ("wrong auth scheme (Basic)", lambda p, _: str(post(
                p, json={"inputs": ROW}, headers={"Authorization": "Basic dXNlcjpwYXNz"}).status_code)),
            ("half-sent request", lambda p, _: half_request(p)),
            ("50 client threads x 20 new connections", lambda p, _: resets(p)),
        ]
        for name, check in checks:
            proc, port = start(Path(tmp))
            try:
                rows.append((name, check(port, proc)))
            finally:
                stop(proc)
    width = max(len(r[0]) for r in rows)
    print(f"{'check':<{width}}  result")
    for name, result in rows:
        print(f"{name:<{width}}  {result}")


if __name__ == "__main__":
    main()
