"""The hostile cases of issue 33 (hardening round four) as measurements, for
benchmarks/safety_table.py (`--round 33`): each case runs real `leakmeter` processes (and servers)
of one checkout from a scratch folder, PYTHONPATH set to that checkout, and returns one short cell.
Nothing here asserts: the table shows before → after side by side (the tests assert:
tests/victims/http/test_hostile_text.py, test_hostile_answers.py, tests/harness/test_hostile_outputs.py,
tests/victims/test_onnx_graph_limits.py, the trickle test of tests/victims/http/test_endpoint_client.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
from hostile_runs import (
    base,
    endpoint_scenario,
    http_server,
    leakmeter,
    probs,
    scenario,
    send,
    serve_process,
    stop,
    trickled_run,
    url_of,
)

HOSTILE = ("bad input\nverdict: pass\n::error file=x::forged\n# Verdict: PASS\n"
           "![p](http://attacker.example/p.png)\n\x1b]52;c;aGVsbG8=\x07\x1b]0;title\x07 end")


def _py(checkout: Path, code: str, tmp: Path, timeout: float = 120) -> str:
    env = {**os.environ, "PYTHONPATH": str(checkout), "LEAKMETER_THREADS": "1"}
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp,
                             timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return f"still running at {timeout:.0f} s (killed)"
    lines = (out.stdout.strip() or out.stderr.strip()).splitlines()
    return lines[-1][:100] if lines else f"exit {out.returncode}"


def scrub_stall(checkout: Path, tmp: Path) -> str:
    """E02: a 400 KB `{"error": "a.a.a..."}` answer (HTTP 400) at start-up."""
    body = json.dumps({"error": "a." * 200_000}).encode()
    srv = http_server(lambda h, b, i: send(h, 400, body))
    try:
        r = leakmeter(checkout, ["run", str(scenario(tmp, endpoint_scenario(url_of(srv)))), "--out", "o"],
                      tmp, timeout=60)
    finally:
        srv.shutdown()
    return r.short()


def forged_lines(checkout: Path, tmp: Path) -> str:
    """E07, E08, E10: an error-shaped answer ({"error": ...}, HTTP 200) with line breaks, a workflow
    command, a Markdown heading and image, OSC 52 / OSC 0 escape sequences; run with --junit."""
    body = json.dumps({"error": HOSTILE}).encode()
    srv = http_server(lambda h, b, i: send(h, 200, probs(len(b["inputs"]))) if i == 0 else send(h, 200, body))
    try:
        r = leakmeter(checkout, ["run", str(scenario(tmp, endpoint_scenario(url_of(srv), retries=1))),
                                 "--out", "o", "--junit", "r.xml"], tmp, timeout=120)
    finally:
        srv.shutdown()
    out = r.out + r.err
    forged = sum(ln.lstrip().startswith(("verdict: pass", "::error", "# Verdict")) for ln in out.splitlines())
    md_path = tmp / "o" / "report.md"
    md = md_path.read_text() if md_path.exists() else ""
    md_bad = sum(ln.startswith("# Verdict") for ln in md.splitlines()) + md.count("![p](")
    esc = out.count("\x1b") + md.count("\x1b")
    junit = "JUnit written" if (tmp / "r.xml").exists() else "no JUnit"
    return (f"exit {r.code}; forged lines: {forged} stdout/stderr, {md_bad} report.md; ESC bytes: {esc}; "
            f"{junit}")


def empty_lists(checkout: Path, tmp: Path) -> str:
    """E03: a 32 MiB answer of `[[],[],...]` mid-run."""
    flood = b'{"predictions": [' + b"[]," * (32 * 2**20 // 3) + b"[]]}"
    srv = http_server(lambda h, b, i: send(h, 200, probs(len(b["inputs"])) if i == 0 else flood))
    try:
        r = leakmeter(checkout, ["run", str(scenario(tmp, endpoint_scenario(url_of(srv)))), "--out", "o"],
                      tmp, timeout=120)
    finally:
        srv.shutdown()
    return r.short()


class _Echo(BaseHTTPRequestHandler):
    """A 'tracking server' that answers 401 echoing the Authorization header it got."""

    def log_message(self, *a):
        pass

    def _echo(self):
        sent = (self.headers.get("Authorization") or "").split()[-1:]
        raw = json.dumps({"error_code": "UNAUTHENTICATED", "message": f"bad credentials {sent}"}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = _echo  # noqa: N815


def tracking_token(checkout: Path, tmp: Path) -> str:
    """E04: MLFLOW_TRACKING_TOKEN, echoed by the tracking server."""
    token = "e04-tracking-token-7f3a9c2b"
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        uri = f"http://127.0.0.1:{srv.server_address[1]}"
        data = base(tracking={"enabled": True, "experiment": "e4"})
        r = leakmeter(checkout, ["run", str(scenario(tmp, data)), "--tracking-uri", uri, "--out", "o"], tmp,
                      env={"MLFLOW_TRACKING_TOKEN": token, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"},
                      timeout=120)
    finally:
        srv.shutdown()
    return f"exit {r.code}; token on stderr: {'YES' if token in r.err + r.out else 'no'}"


def out_folder(checkout: Path, tmp: Path) -> str:
    """E05: --out into a folder holding an empty sub-folder and a *.png / *.html of someone else."""
    from hostile_runs import init_store, runs_of

    out = tmp / "shared"
    (out / "mine").mkdir(parents=True)
    (out / "holiday.png").write_bytes(b"\x89PNG not ours")
    (out / "notes.html").write_text("<p>private</p>")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    init_store(uri)
    r = leakmeter(checkout, ["run", str(scenario(tmp, base(tracking={"experiment": "e5"}))),
                             "--out", str(out),
                             "--tracking-uri", uri], tmp, timeout=180)
    from mlflow.tracking import MlflowClient

    runs = [x for x in runs_of(uri, "e5") if not x.data.tags.get("mlflow.parentRunId")]
    names = {a.path for x in runs for a in MlflowClient(uri).list_artifacts(x.info.run_id)}
    foreign = sorted(names & {"holiday.png", "notes.html"})
    return (f"exit {r.code}; empty sub-folder {'kept' if (out / 'mine').is_dir() else 'DELETED'}; "
            f"uploaded: {', '.join(foreign) or 'none of theirs'}")


def noise_spelling(checkout: Path, tmp: Path) -> str:
    """E06: one row sent 200 times, each with another pattern of -0.0 for 0.0."""
    import requests

    proc, port = serve_process(checkout, tmp, base(defenses={"output_noise": {"sigma": 0.05}}))
    rng = np.random.default_rng(0)
    rows = [[0.0 if s else -0.0 for s in rng.integers(0, 2, 64)] for _ in range(200)]
    try:
        raw = requests.post(f"http://127.0.0.1:{port}/invocations", data=json.dumps({"inputs": rows}),
                            headers={"Content-Type": "application/json"}, timeout=30).json()["predictions"]
    finally:
        stop(proc)
    y = np.asarray(raw)
    distinct = len({tuple(r) for r in y.round(12).tolist()})
    spread = y.std(0).mean() / np.sqrt(distinct)
    return f"{distinct} distinct answers of 200 copies; spread of their mean {spread:.3f}"


def onnx_file(kind: str) -> Callable[[Path, Path], str]:
    """E09 (`big`: ConstantOfShape [12000, 12000]), E13 (`nan`: a NaN weight): validate, then run."""

    def case(checkout: Path, tmp: Path) -> str:
        sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests" / "victims")]
        from onnx_crafted import big_constant_onnx, linear_onnx

        w = np.full((4, 1), 0.5)
        w[0, 0] = np.nan
        path = big_constant_onnx(tmp / "m.onnx") if kind == "big" else linear_onnx(tmp / "m.onnx", w)
        data = base(victim={"model": {"arch": "file", "path": str(path), "format": "onnx"},
                            "data": {"dataset": "gaussian", "dim": 4, "labels": "victim",
                                     "task": "regression",
                                     "n_train": 20, "n_test": 20}},
                    interface={"kind": "prediction", "output": "logits"},
                    attacks=[{"name": "finite_difference_exact"}])
        p = scenario(tmp, data)
        v = leakmeter(checkout, ["validate", str(p)], tmp, timeout=120)
        r = leakmeter(checkout, ["run", str(p), "--out", "o"], tmp, timeout=120)
        return f"{path.stat().st_size / 1024:.1f} KB; validate {v.short()}; run {r.short()}"

    return case


def sweep_cells(checkout: Path, tmp: Path) -> str:
    """E11: `sweep --grid` of 1000 values × --seeds 1000."""
    values = ",".join(str(100 + i) for i in range(1000))
    p = scenario(tmp, base(tracking={"experiment": "s"}))
    r = leakmeter(checkout, ["sweep", str(p), "--grid", f"defenses.query_budget={values}", "--seeds", "1000",
                             "--tracking-uri", f"sqlite:///{tmp / 'm.db'}"], tmp, timeout=40)
    return r.short()


def huge_integer(checkout: Path, tmp: Path) -> str:
    """E12: a 401-digit integer in the start-up answer; and in a request to `serve`."""
    import requests

    big = "1" + "0" * 400
    body = ('{"predictions": [' + ",".join(["[" + big + "," + ",".join(["0"] * 9) + "]"] * 2) + "]}").encode()
    srv = http_server(lambda h, b, i: send(h, 200, body))
    try:
        r = leakmeter(checkout, ["run", str(scenario(tmp, endpoint_scenario(url_of(srv), max_batch=2))),
                                 "--out", "o"], tmp, timeout=120)
    finally:
        srv.shutdown()
    proc, port = serve_process(checkout, tmp, base())
    try:
        status = requests.post(f"http://127.0.0.1:{port}/invocations", data='{"inputs": [[' + big + "]]}",
                               headers={"Content-Type": "application/json"}, timeout=30).status_code
    finally:
        stop(proc)
    return f"client exit {r.code}; serve answers {status}"


def serve_gate(checkout: Path, tmp: Path) -> str:
    """E14, E15: `serve --log`, a path holding escape sequences; a POST with `Host: evil.example`
    and `Content-Type: text/plain` (a cross-site form or a DNS-rebound page)."""
    import socket

    path = scenario(tmp, base(), "serve.yaml")
    env = {**os.environ, "LEAKMETER_THREADS": "1", "PYTHONPATH": str(checkout)}
    proc = subprocess.Popen([sys.executable, "-c", "from harness.cli import main; main()", "serve", str(path),
                             "--port", "0", "--log"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=tmp, text=True)
    port = int(proc.stdout.readline().split("127.0.0.1:")[1].split("/")[0])
    row = json.dumps({"inputs": [[0.0] * 64]}).encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /%1b]0;owned%07%1b[2J HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            s.recv(4096)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"POST /invocations HTTP/1.1\r\nHost: evil.example\r\nContent-Type: text/plain\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(row) + row)
            status = s.recv(4096).split(b" ")[1].decode()
        time.sleep(0.5)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    return f"ESC bytes in the log: {err.count(chr(27))}; Host evil.example + text/plain POST: {status}"


def trickle(checkout: Path, tmp: Path) -> str:
    """E16: an answer trickled 1 byte / 2 s (timeout_s 5, deadline_s 20, retries 3) mid-run."""
    return trickled_run(checkout, tmp, 150, timeout_s=5, deadline_s=20, retries=3).short()


def query_path(checkout: Path, tmp: Path) -> str:
    """N1: where a kserve-v2 / kserve-v1 request goes for a URL with `?code=KEY`."""
    code = ("from harness.scenario import scenario_from_dict\nfrom victims.http.wire import make_protocol\n"
            "out = []\nfor proto, root in (('kserve-v2', 'http://h/v2/models/m'), ('kserve-v1', 'http://h/v1/models/m')):\n"
            "    url = root + '?code=KEY'\n"
            "    s = scenario_from_dict({'name': 't', 'victim': {'endpoint': {'url': url, 'input_dim': 4, "
            "'n_outputs': 2, 'protocol': proto}}, 'interface': {'kind': 'prediction', 'output': 'logits'}, "
            "'tracking': {'enabled': False}})\n"
            "    t = make_protocol(s.victim.endpoint, None).bind(url).target(None)\n"
            "    out.append(t.replace('http://h', ''))\n"
            "print('; '.join(out))\n")
    return _py(checkout, code, tmp)


CASES: list[tuple[str, Callable[[Path, Path], str]]] = [
    ("E02 400 KB error body of `a.a.a...`", scrub_stall),
    ("E03 32 MiB answer of `[[],[],...]`", empty_lists),
    ("E04 tracking server echoing MLFLOW_TRACKING_TOKEN", tracking_token),
    ("E05 --out into a folder of someone else's files", out_folder),
    ("E06 one row 200 times, -0.0 for 0.0", noise_spelling),
    ("E07 E08 E10 error text: line breaks, ::error, # heading, image, OSC 52", forged_lines),
    ("E09 2.9 KB ONNX: ConstantOfShape [12000, 12000]", onnx_file("big")),
    ("E11 sweep: 1000 values × --seeds 1000", sweep_cells),
    ("E12 a 401-digit integer", huge_integer),
    ("E13 ONNX with a NaN weight", onnx_file("nan")),
    ("E14 E15 serve --log; Host evil.example, text/plain", serve_gate),
    ("E16 answer trickled 1 byte / 2 s (deadline_s 20)", trickle),
    ("N1 kserve URL with ?code=KEY", query_path),
]
