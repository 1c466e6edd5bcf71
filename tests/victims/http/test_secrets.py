"""Secrets never leave the process: a server that echoes the request URL and every header in its
error bodies, a token from the environment, a query-string key and URL userinfo. The test greps
stdout, stderr, every file written (reports, SARIF, JUnit, the MLflow store and its artifacts) and
the MLflow params and tags for every form of the three values."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from loopback import JsonHandler, LoopbackServer

TOKEN = "tok-Ux81-env-secret-value"
QUERY_KEY = "qk-55Gh-query-secret"
USER, PASSWORD = "alice-x9", "pw-Zr44-userinfo/secret"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = [TOKEN, QUERY_KEY, PASSWORD, BASIC, PASSWORD.replace("/", "%2F"), "pw-Zr44"]
W = np.random.default_rng(0).standard_normal((64, 10))


class EchoServer(LoopbackServer):
    """Answers the first `good` requests with softmax(xW); then echoes the request line (URL
    with its query) and every header in a 400 (or 401) error body."""

    def __init__(self, good: int = 3, status: int = 400):
        outer = self
        self.requests = 0
        self.seen_auth: list[str] = []

        class Handler(JsonHandler):
            def do_POST(self):  # noqa: N802
                body = self.json_body()
                outer.requests += 1
                outer.seen_auth.append(self.headers.get("Authorization", ""))
                if outer.requests <= good:
                    z = np.asarray(body["inputs"]) @ W
                    p = np.exp(z - z.max(1, keepdims=True))
                    out = {"predictions": (p / p.sum(1, keepdims=True)).tolist()}
                    code = 200
                else:
                    echoed = {k: v for k, v in self.headers.items()}
                    out = {"message": f"cannot serve {self.command} {self.path}", "headers": echoed,
                           "raw": f"{self.path} {self.headers}"}
                    code = status
                self.reply_json(code, out)

        self._serve(Handler)


def _scenario(tmp_path: Path, url: str, **endpoint) -> Path:
    data = {"name": "secrets", "seed": 0, "device": "cpu",
            "victim": {"endpoint": {"url": url, "input_dim": 64, "n_outputs": 10, "retries": 1,
                                    "backoff_s": 0.01, "max_batch": 64, **endpoint}},
            "interface": {"kind": "prediction", "output": "probabilities"},
            "attacks": [{"name": "span_nonadaptive"}], "tracking": {"experiment": "secrets"}}
    p = tmp_path.parent / f"{tmp_path.name}-input" / "scan.yaml"  # the input holds them: kept apart
    p.parent.mkdir(exist_ok=True)
    p.write_text(yaml.safe_dump(data))
    return p


def _leakmeter(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from harness.cli import main; main()", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def _everything(tmp_path: Path, uri: str, outputs: list[str]) -> list[tuple[str, str]]:
    """(where, text) for every output, file and MLflow record."""
    from mlflow.tracking import MlflowClient

    texts = [(f"output {i}", t) for i, t in enumerate(outputs)]
    for f in tmp_path.rglob("*"):
        if f.is_file():
            texts.append((str(f), f.read_bytes().decode("latin-1")))
    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    for r in runs:
        texts.append((f"run {r.info.run_id}", json.dumps([r.data.params, r.data.tags, r.info.run_name])))
    assert runs, "nothing was logged: the test would grep nothing"
    return texts


@pytest.mark.parametrize("credential, command", [
    ("token", "run"),
    # each ~6 s of a fresh process; scan's own masking of the token is in the default suite too
    # (test_endpoint_serve.py: test_cli_serve_and_scan_never_reveal_the_token)
    pytest.param("token", "scan", marks=pytest.mark.slow),
    pytest.param("userinfo", "run", marks=pytest.mark.slow),
    pytest.param("userinfo", "scan", marks=pytest.mark.slow)])
def test_no_secret_reaches_any_output_report_or_mlflow_record(credential, command, tmp_path, tracking_uri):
    """One fresh leakmeter process per case: secrets registered by one command must not be what
    masks them in another, so run and scan are never checked in one process."""
    env = {**os.environ, "LEAKMETER_THREADS": "1", "LEAKMETER_SECRET_TOKEN": TOKEN}
    with EchoServer(good=4) as srv:
        base = f"127.0.0.1:{srv.port}/invocations?api_key={QUERY_KEY}&v=1"
        if credential == "token":
            scen = _scenario(tmp_path, f"http://{base}", auth_env="LEAKMETER_SECRET_TOKEN")
        else:
            scen = _scenario(tmp_path, f"http://{USER}:{PASSWORD.replace('/', '%2F')}@{base}")
        if command == "run":
            res = _leakmeter(["run", str(scen), "--tracking-uri", tracking_uri, "--out", "out", "--json",
                              "r.json", "--sarif", "r.sarif", "--junit", "r.xml"], tmp_path, env)
        else:
            res = _leakmeter(["scan", str(scen), "--tracking-uri", tracking_uri, "--out", "out",
                              "--baseline", "none", "--json", "r.json"], tmp_path, env)
    sent = srv.seen_auth[0]
    assert sent == (f"Bearer {TOKEN}" if credential == "token" else f"Basic {BASIC}")  # it was used
    assert srv.requests > 4  # the server did echo the request into errors
    report = json.loads((tmp_path / "r.json").read_text())
    if command == "run":
        assert (tmp_path / "r.sarif").is_file() and (tmp_path / "r.xml").is_file()  # grepped below too
    reason = report["attacks"][0].get("reason", "")
    assert "HTTP 400" in reason and "***" in reason, reason  # the echo reached the report, masked
    for where, text in _everything(tmp_path, tracking_uri, [res.stdout, res.stderr]):
        for secret in SECRETS:
            assert secret not in text, (secret, where)


def test_token_and_userinfo_together_is_exit_2_and_nothing_is_sent(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from harness.cli import main

    monkeypatch.setenv("LEAKMETER_SECRET_TOKEN", TOKEN)
    with EchoServer() as srv:
        scen = _scenario(tmp_path, f"http://{USER}:pw-Zr44-x@127.0.0.1:{srv.port}/invocations",
                         auth_env="LEAKMETER_SECRET_TOKEN")
        res = CliRunner().invoke(main, ["validate", str(scen)])  # in this process: no run, no store
    assert res.exit_code == 2 and "one of them" in res.stderr
    assert srv.requests == 0
    assert all(s not in res.stdout + res.stderr for s in (TOKEN, "pw-Zr44"))


def test_the_scrubber_masks_every_form():
    from victims.http.secrets import Scrubber

    s = Scrubber()
    s.add_url(f"https://{USER}:{PASSWORD.replace('/', '%2F')}@h.example/x?api_key={QUERY_KEY}&v=1")
    s.add(TOKEN)
    forms = [TOKEN, json.dumps(TOKEN), QUERY_KEY, PASSWORD, PASSWORD.replace("/", "%2F"), BASIC,
             f"Authorization: Basic {BASIC}", f"https://{USER}:x@other.host/", "?token=abcdef123",
             f"Bearer {TOKEN[::-1]}9"]
    for text in forms:
        out = s.scrub(f"<{text}>")
        assert "***" in out and all(v not in out for v in (TOKEN, QUERY_KEY, PASSWORD, BASIC)), out
    assert s.scrub("report.json v=1 basic statistics") == "report.json v=1 basic statistics"
