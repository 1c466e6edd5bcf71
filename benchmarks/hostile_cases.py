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
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from hostile_ends import device_output, kill9, server_row, sweep_sigterm, symlink_output
from hostile_exits import (
    NPZ,
    exit_row,
    nan_weights,
    npz_with,
    plain_state,
    sigterm_build,
    tracking_dir,
    unwritable,
)
from hostile_runs import (
    DIGITS,
    GIB,
    all_text,
    base,
    endpoint_scenario,
    http_server,
    leakmeter,
    probs,
    rss_mb,
    scenario,
    send,
    serve_process,
    stop,
    trickled_run,
    url_of,
)


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
    return f"1 byte / 2 s: {trickled_run(checkout, tmp, 100, timeout_s=10).short()}"


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
