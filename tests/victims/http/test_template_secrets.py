"""Secrets in request templates and sweeps. A key written into a JSON `request_template` used to
land in MLflow params, scenario.yaml and report.html: templates now take a secret only through
the "$auth" placeholder, filled from the environment. A sweep logged its raw scenario file, so a
query key under a non-standard name (`?subscription-key=`) reached MLflow: it logs the scrubbed
scenario, as `run` does."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner
from loopback import JsonHandler, LoopbackServer

from harness.cli import main

TOKEN = "tpl-5Rr8-body-secret"
SUBKEY = "sub7Kq2WvX9pL4"


class BodyRecorder(LoopbackServer):
    """Answers {"result": {"scores": ...}} and records every request body and Authorization."""

    def __init__(self):
        outer = self
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []

        class Handler(JsonHandler):
            def do_POST(self):  # noqa: N802
                body = self.json_body()
                outer.bodies.append(body)
                outer.auth.append(self.headers.get("Authorization"))
                rows = body["instances"]
                self.reply_json(200, {"result": {"scores": [[0.3, 0.7]] * len(rows)}})

        self._serve(Handler)


def _scenario(tmp_path, url: str, template: dict, **endpoint) -> str:
    data = {"name": "tpl", "seed": 0, "device": "cpu",
            "victim": {"endpoint": {"url": url, "protocol": "json", "input_dim": 4, "n_outputs": 2,
                                    "request_template": template, "response_path": "result.scores",
                                    "retries": 0, **endpoint}},
            "interface": {"kind": "prediction", "output": "probabilities"},
            "attacks": [{"name": "span_nonadaptive"}], "tracking": {"experiment": "tpl"}}
    p = tmp_path.parent / f"{tmp_path.name}-input.yaml"  # the input may hold secrets: kept apart
    p.write_text(yaml.safe_dump(data))
    return str(p)


def test_a_key_written_into_a_template_is_refused_and_never_shown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for template in ({"instances": "$inputs", "api_key": TOKEN},
                     {"instances": "$inputs", "meta": {"Ocp-Apim-Subscription-Key": TOKEN}},
                     {"instances": "$inputs", "auth": [{"token": TOKEN}]}):
        scen = _scenario(tmp_path, "http://127.0.0.1:9/x", template)
        for command in (["validate", scen], ["run", scen, "--no-tracking", "--out", "o"]):
            res = CliRunner().invoke(main, command)
            assert res.exit_code == 2, res.output
            assert "victim.endpoint.request_template" in res.stderr and '"$auth"' in res.stderr
            assert TOKEN not in res.output


def test_auth_placeholder_sends_the_token_in_the_body_and_nowhere_else(tmp_path, monkeypatch,
                                                                         tracking_uri):
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LEAKMETER_TPL_TOKEN", TOKEN)
    with BodyRecorder() as srv:
        scen = _scenario(tmp_path, srv.url, {"instances": "$inputs", "auth": {"api_key": "$auth"}},
                         auth_env="LEAKMETER_TPL_TOKEN")
        res = CliRunner().invoke(main, ["run", scen, "--tracking-uri", tracking_uri, "--out", "o",
                                        "--json", "r.json"])
    assert res.exit_code in (0, 1, 4), res.output[-2000:]
    assert srv.bodies and all(b["auth"]["api_key"] == TOKEN for b in srv.bodies)
    assert set(srv.auth) == {None}  # the template carries it: no header as well
    texts = [res.output] + [f.read_bytes().decode("latin-1") for f in tmp_path.rglob("*") if f.is_file()]
    client = MlflowClient(tracking_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert runs
    texts += [json.dumps([r.data.params, r.data.tags]) for r in runs]
    assert all(TOKEN not in t for t in texts)
    assert any('"$auth"' in t or "$auth" in t for t in texts)  # the template itself is logged


def test_a_sweep_logs_the_scrubbed_scenario_not_the_raw_file(tmp_path, tracking_uri):
    """The sweep's scenario.yaml in MLflow holds no query key, whatever the parameter's name."""
    from harness.scenario import read_raw
    from harness.sweep.grid import log_sweep_scenario, plan_sweep
    from reports.tracking import Tracker

    scen = _scenario(tmp_path, f"http://127.0.0.1:9/x?subscription-key={SUBKEY}&v=2",
                     {"instances": "$inputs"})
    uri = tracking_uri
    plan = plan_sweep(read_raw(scen), scen, ["defenses.query_budget=100,200"], 1)
    tracker = Tracker(uri, "sweep-secrets", True)
    run_id = tracker.start("sweep")
    log_sweep_scenario(tracker, run_id, plan)
    tracker.end(run_id)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    local = client.download_artifacts(run_id, "scenario.yaml", str(tmp_path))
    text = open(local).read()
    assert "http://127.0.0.1:9/x" in text and SUBKEY not in text
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert SUBKEY not in f.read_bytes().decode("latin-1"), f
