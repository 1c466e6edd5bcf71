"""The shipped serve/scan pair (scenarios/endpoint-digits.yaml) as the README runs it: `leakmeter
serve` in a process of its own, then `leakmeter scan --baseline last-pass` night after night (the
README's cron line). The scan decides (it used to be inconclusive every night: output noise
defeats finite differences); the second night finds the first as its `last-pass` baseline and
sees nothing move; the third night, the deployment at the same URL has lost its output noise, and
the scan reports the regression (exit 1). The same victim served with `--protocol kserve-v2` and
scanned with `protocol: auto` decides alike and says which protocol answered."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from conftest import REPO

from harness.cli import main

pytestmark = pytest.mark.slow
EXAMPLE = REPO / "scenarios" / "endpoint-digits.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(*args: str, env: dict, port: int = 0) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", "from harness.cli import main; main()", "serve",
                             str(EXAMPLE), "--port", str(port), "--budget", "1000000", *args],
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


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=20)


def test_the_shipped_scan_decides_and_last_pass_finds_its_baseline(tmp_path, monkeypatch, tracking_uri):
    monkeypatch.chdir(tmp_path)
    token = "example-token-7Fq2"
    monkeypatch.setenv("LEAKMETER_TOKEN", token)
    env = {**os.environ, "LEAKMETER_THREADS": "1"}
    port = free_port()  # one URL night after night: the baseline is the same scenario's (its fingerprint)
    cron = ("--baseline", "last-pass")  # as the README's cron line asks
    proc, url = serve("--keys-env", "LEAKMETER_TOKEN", env=env, port=port)
    try:
        where = f"victim.endpoint.url={url}"
        code1, first, out1 = scan(tmp_path, "night1", tracking_uri, *cron, "--set", where)
        code2, second, out2 = scan(tmp_path, "night2", tracking_uri, *cron, "--set", where)
    finally:
        stop(proc)
    att = first["attacks"][0]
    assert code1 == 0 and first["verdict"] == "pass", (first["verdict"], att["reason"], out1[-2000:])
    assert att["name"] == "surrogate" and att["status"] == "ok" and att["risk"] == "medium"
    assert att["metrics"]["blackbox_probes"] == 256 and 0.8 <= att["metrics"]["blackbox_agreement"] < 0.95
    assert first["scan"]["baseline_found"] is False and "baseline: none found (last-pass)" in out1
    assert f"endpoint: {url} speaks mlflow;" in out1
    assert code2 == 0 and second["verdict"] == "pass", out2[-2000:]
    assert second["scan"]["baseline"] == first["mlflow_run_id"]
    assert not second["scan"]["regressed"] and "no regression" in out2
    assert second["attacks"][0]["metrics"]["blackbox_agreement"] == att["metrics"]["blackbox_agreement"]
    # night 3: the same URL now answers without its output noise; the same 300 queries copy more
    proc, url3 = serve("--keys-env", "LEAKMETER_TOKEN", "--set", "defenses.output_noise=null", env=env,
                       port=port)
    try:
        assert url3 == url
        code3, third, out3 = scan(tmp_path, "night3", tracking_uri, *cron, "--set", where)
    finally:
        stop(proc)
    att3 = third["attacks"][0]
    assert third["scan"]["baseline"] == second["mlflow_run_id"]  # the last passing night
    assert code3 == 1 and third["scan"]["regressed"] and "REGRESSION" in out3, out3[-2000:]
    # the judge decides on the one-sided 95% lower bounds (issue 30): high only when they clear it
    m3 = att3["metrics"]
    high = m3["agreement_lower"] >= 0.95 and m3["kappa_lower"] >= 0.9
    assert att3["risk"] == ("high" if high else "medium") and m3["n_probes"] >= 256
    assert third["verdict"] == ("fail" if high else "pass")
    assert att3["metrics"]["blackbox_agreement"] >= 0.95 > att["metrics"]["blackbox_agreement"]
    assert token not in out1 + out2 + out3


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
    assert f"endpoint: {url} speaks kserve-v2 (found by auto);" in out
    md = (tmp_path / "v2" / "report.md").read_text()
    assert f"- endpoint: {url}, protocol kserve-v2 (found by protocol: auto)" in md
