"""A secret cut in half is still a secret: an endpoint that echoes the token so that it straddles
the client's length limits (200 characters of an error excerpt or a 429 message, 40 of a JSON key
name) must not get any 8-character piece of it into any output, report or MLflow record."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml
from loopback import JsonHandler, LoopbackServer

from defenses.output import OutputDefenses
from harness.core.oracle import Oracle
from harness.scenario import scenario_from_dict
from victims.build import build_victim
from victims.http.client import EndpointError
from victims.http.secrets import Scrubber

TOKEN = "tok-Cq8w-4Lr2-straddle"  # 22 characters
ENV = "LEAKMETER_CUT_TOKEN"
FRAGMENT = 8  # pieces this long of a secret must never show (the bar)
D = 4


def pieces(secret: str, n: int = FRAGMENT) -> set[str]:
    return {secret[i : i + n] for i in range(len(secret) - n + 1)}


def leaked(text: str, secret: str = TOKEN) -> set[str]:
    return {p for p in pieces(secret) if p in text}


class CutServer(LoopbackServer):
    """Answers the start-up check, then `mode` forever: `excerpt` (401, the token at `at`
    characters into a plain-text body), `quota` (429 RESOURCE_EXHAUSTED whose message holds the
    token at `at`) or `key` (200 without predictions, a key name holding the token at `at`)."""

    def __init__(self, mode: str, at: int):
        outer = self
        self.requests = 0

        class Handler(JsonHandler):
            def do_POST(self):  # noqa: N802
                body = self.json_body()
                outer.requests += 1
                filler = "A" * at
                if outer.requests == 1:
                    status, raw = 200, json.dumps({"predictions": [[0.5, 0.5]] * len(body["inputs"])})
                elif mode == "excerpt":
                    status, raw = 401, filler + TOKEN + " and more text after it"
                elif mode == "quota":
                    status, raw = 429, json.dumps({"error_code": "RESOURCE_EXHAUSTED",
                                                   "message": filler + TOKEN + " tail"})
                else:
                    status, raw = 200, json.dumps({filler + TOKEN: 1, "other": 2})
                kind = "text/plain" if mode == "excerpt" else "application/json"
                self.reply(status, raw, content_type=kind)

        self._serve(Handler)


def test_the_scrubber_masks_every_long_enough_piece_and_cuts_after_scrubbing():
    s = Scrubber()
    s.add(TOKEN)
    for cut in range(FRAGMENT, len(TOKEN)):
        head, tail = TOKEN[:cut], TOKEN[-cut:]
        for text in (f"xx {head}", f"{tail} yy", f"a{head}|{tail}b"):
            assert not leaked(s.scrub(text)), (cut, s.scrub(text))
    assert s.scrub("a short piece tok-Cq8 stays") == "a short piece tok-Cq8 stays"  # 7 characters
    for at in range(180, 205):
        out = s.scrub("A" * at + TOKEN)[:200]
        assert len(out) <= 200 and not leaked(out), (at, out)


@pytest.mark.parametrize("mode, limit", [("excerpt", 200), ("quota", 200), ("key", 40)])
def test_an_echoed_token_straddling_the_cut_never_shows_in_part(mode, limit, monkeypatch):
    monkeypatch.setenv(ENV, TOKEN)
    for at in (limit - len(TOKEN) + 2, limit - 11, limit - 4):  # the cut falls inside the token
        with CutServer(mode, at) as srv:
            s = scenario_from_dict({
                "name": "t", "device": "cpu",
                "victim": {"endpoint": {"url": srv.url, "input_dim": D, "n_outputs": 2, "retries": 0,
                                        "auth_env": ENV}},
                "interface": {"kind": "prediction", "output": "probabilities"},
                "tracking": {"enabled": False}})
            victim = build_victim(s)
            oracle = Oracle(victim.backend, victim.info, OutputDefenses(), None)
            with pytest.raises(EndpointError) as err:
                oracle.view("t").predict(torch.zeros(2, D, dtype=torch.float64))
        text = str(err.value)
        assert "***" in text and not leaked(text), (mode, at, text)


# ~6 s CPU (a CLI process with MLflow). In the default suite: the cut itself by
# test_an_echoed_token_straddling_the_cut_never_shows_in_part (all three limits), and every output of
# a CLI run (SARIF and JUnit included) by test_secrets.py's token case
@pytest.mark.slow
def test_no_piece_of_a_cut_token_reaches_any_output_report_or_mlflow_record(tmp_path, tracking_uri):
    """The whole CLI: stdout, stderr, report.json/md/html, --json, SARIF, JUnit, the MLflow store
    and its artifacts, params and tags."""
    from mlflow.tracking import MlflowClient

    env = {**os.environ, "LEAKMETER_THREADS": "1", ENV: TOKEN}
    inputs = tmp_path.parent / f"{tmp_path.name}-input"
    inputs.mkdir()
    with CutServer("excerpt", 200 - 11) as srv:
        scen = inputs / "cut.yaml"
        scen.write_text(yaml.safe_dump({
            "name": "cut", "seed": 0, "device": "cpu",
            "victim": {"endpoint": {"url": srv.url, "input_dim": D, "n_outputs": 2, "retries": 0,
                                    "auth_env": ENV}},
            "interface": {"kind": "prediction", "output": "probabilities"},
            "attacks": [{"name": "span_nonadaptive"}], "tracking": {"experiment": "cut"}}))
        res = subprocess.run([sys.executable, "-c", "from harness.cli import main; main()", "run",
                              str(scen), "--tracking-uri", tracking_uri, "--out", "out", "--json", "r.json",
                              "--sarif", "r.sarif", "--junit", "r.xml"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    report = json.loads((tmp_path / "r.json").read_text())
    reason = report["attacks"][0]["reason"]
    assert "HTTP 401" in reason and "***" in reason, (reason, res.stderr[-2000:])
    texts = [("stdout", res.stdout), ("stderr", res.stderr)]
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert {"report.json", "report.md", "report.html", "r.json", "r.sarif", "r.xml", "mlflow.db"} <= \
        {f.name for f in files}
    texts += [(str(f), f.read_bytes().decode("latin-1")) for f in files]
    client = MlflowClient(tracking_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert runs
    texts += [(r.info.run_id, json.dumps([r.data.params, r.data.tags, r.info.run_name])) for r in runs]
    for where, text in texts:
        assert not leaked(text), (where, leaked(text))


def test_a_body_cut_at_the_read_limit_hides_a_straddling_token():
    """Error bodies are read up to 64 KiB: a token straddling that cut after a run of spaces (which
    the excerpt collapses) must not show its head."""
    from victims.http.client import RemoteBackend
    from victims.http.secrets import SECRETS
    from victims.http.transport import ERROR_BYTES, Reply

    SECRETS.add(TOKEN)
    body = (" " * (ERROR_BYTES - 5) + TOKEN).encode()
    reply = Reply(401, "Unauthorized", {}, body[:ERROR_BYTES], truncated=True)
    out = RemoteBackend._excerpt(reply)
    assert TOKEN[:5] not in out and not leaked(out)
