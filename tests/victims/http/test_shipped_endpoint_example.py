"""The shipped serve/scan pair (scenarios/endpoint-digits.yaml) as the README runs it: `leakmeter
serve` in a process of its own, then `leakmeter scan` twice. The scan decides (it used to be
inconclusive every night: output noise defeats finite differences), and the second scan finds the
first as its `last-pass` baseline. The same victim served with `--protocol kserve-v2` and scanned
with `protocol: auto` decides alike and says which protocol answered."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from conftest import REPO

from harness.cli import main

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "scenarios" / "endpoint-digits.yaml"


def serve(*args: str, env: dict) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", "from harness.cli import main; main()", "serve",
                             str(EXAMPLE), "--port", "0", "--budget", "1000000", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    deadline, line = time.time() + 180, ""
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith("serving") or proc.poll() is not None:
            break
    m = re.search(r"at (http://127\.0\.0\.1:\d+/\S+) ", line)
    if not m:
        proc.kill()
        raise AssertionError(f"serve did not start: {line!r} {proc.stderr.read()[-2000:]}")
    return proc, m.group(1)


def scan(tmp_path, name: str, uri: str, *args: str) -> tuple[int, dict, str]:
    out = tmp_path / f"{name}.json"
    res = CliRunner().invoke(main, ["scan", str(EXAMPLE), "--tracking-uri", uri,
                                    "--out", str(tmp_path / name), "--json", str(out), *args])
    return res.exit_code, json.loads(out.read_text()), res.output


def test_the_shipped_scan_decides_and_last_pass_finds_its_baseline(tmp_path, monkeypatch, tracking_uri):
    monkeypatch.chdir(tmp_path)
    token = "example-token-7Fq2"
    monkeypatch.setenv("LEAKMETER_TOKEN", token)
    env = {**os.environ, "LEAKMETER_THREADS": "1"}
    proc, url = serve("--keys-env", "LEAKMETER_TOKEN", env=env)
    try:
        where = f"victim.endpoint.url={url}"
        code1, first, out1 = scan(tmp_path, "night1", tracking_uri, "--set", where)
        code2, second, out2 = scan(tmp_path, "night2", tracking_uri, "--set", where)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    att = first["attacks"][0]
    assert code1 == 0 and first["verdict"] == "pass", (first["verdict"], att["reason"], out1[-2000:])
    assert att["name"] == "surrogate" and att["status"] == "ok" and att["risk"] == "medium"
    assert att["metrics"]["blackbox_probes"] == 256 and 0.8 <= att["metrics"]["blackbox_agreement"] < 0.95
    assert first["scan"]["baseline_found"] is False
    assert code2 == 0 and second["verdict"] == "pass", out2[-2000:]
    assert second["scan"]["baseline"] == first["mlflow_run_id"]  # --baseline last-pass (the default)
    assert not second["scan"]["regressed"]
    assert token not in out1 + out2


def test_the_example_served_over_kserve_v2_is_found_by_auto(tmp_path, monkeypatch, tracking_uri):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LEAKMETER_TOKEN", "example-token-7Fq2")
    proc, url = serve("--keys-env", "LEAKMETER_TOKEN", "--protocol", "kserve-v2", "--model-name", "digits",
                      env={**os.environ, "LEAKMETER_THREADS": "1"})
    try:
        assert url.endswith("/v2/models/digits")
        code, report, out = scan(tmp_path, "v2", tracking_uri, "--baseline", "none", "--set",
                                 f"victim.endpoint.url={url}", "--set", "victim.endpoint.protocol=auto")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert code == 0 and report["verdict"] == "pass", out[-2000:]
    ep = report["victim"]["endpoint"]
    assert ep["protocol"] == "kserve-v2" and ep["protocol_requested"] == "auto"
    assert ep["metadata"]["model"] == "digits"
