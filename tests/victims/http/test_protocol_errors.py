"""Answers of each protocol that leakmeter must refuse, and TorchServe and the `headers` map,
against a scripted server on 127.0.0.1 that answers the shapes the servers' own documentation
gives (V2 `{"error": ...}` with 400/404/503, a model that is not ready, a shape that does not
match its data, BYTES, TorchServe's `{"code", "type", "message"}` and `/ping` status). The same
paths against the real MLServer and KServe servers: test_real_servers.py (-m slow)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from loopback import JsonHandler, LoopbackServer

from harness.core.errors import BadInput
from harness.scenario import ScenarioError, scenario_from_dict
from victims.build import build_victim
from victims.http.secrets import SECRETS

D, C = 4, 3
W = np.random.default_rng(1).standard_normal((D, C))


def probs(x: np.ndarray) -> np.ndarray:
    z = x @ W
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


class Scripted(LoopbackServer):
    """GET/POST answered by `routes[(method, path)](body, headers) -> (status, json)`; records
    every request's path and headers."""

    def __init__(self, routes):
        self.seen: list[tuple[str, str, dict]] = []
        outer = self

        class Handler(JsonHandler):
            def _go(self, method):
                raw = self.body()
                body = json.loads(raw) if raw else None
                outer.seen.append((method, self.path, dict(self.headers)))
                fn = routes.get((method, self.path))
                status, payload = fn(body, self.headers) if fn else (404, {"error": "not found"})
                self.reply_json(status, payload)

            def do_GET(self):
                self._go("GET")

            def do_POST(self):
                self._go("POST")

        self._serve(Handler)


META = {"name": "m", "versions": ["1"], "platform": "onnxruntime_onnx",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, D]}],
        "outputs": [{"name": "probs", "datatype": "FP32", "shape": [-1, C]}]}


def v2_infer(body, _h):
    t = body["inputs"][0]
    x = np.asarray(t["data"], dtype=np.float64).reshape(t["shape"])
    p = probs(x)
    return 200, {"model_name": "m", "outputs": [{"name": "probs", "datatype": "FP32", "shape": list(p.shape),
                                                 "data": p.reshape(-1).tolist()}]}


def v2_routes(over=None):
    routes = {("GET", "/v2/models/m"): lambda b, h: (200, META),
              ("GET", "/v2/models/m/ready"): lambda b, h: (200, {"name": "m", "ready": True}),
              ("POST", "/v2/models/m/infer"): v2_infer}
    routes.update(over or {})
    return routes


def scenario(url: str, **ep) -> dict:
    return {"name": "proto-errors", "seed": 0, "device": "cpu",
            "victim": {"endpoint": {"url": url, "retries": 1, "backoff_s": 0, "timeout_s": 5, "input_dim": D,
                                    "n_outputs": C, **ep}},
            "interface": {"kind": "prediction", "output": "probabilities"},
            "attacks": [{"name": "span_nonadaptive"}], "tracking": {"enabled": False}}


def build(url: str, **ep):
    return build_victim(scenario_from_dict(scenario(url, **ep)))


def test_v2_against_a_triton_shaped_server_answers_the_model():
    with Scripted(v2_routes()) as srv:
        v = build(f"http://127.0.0.1:{srv.port}/v2/models/m", protocol="kserve-v2")
        x = torch.randn(5, D, dtype=torch.float64)
        got = v.backend.predict(x, "probabilities").numpy()
        assert np.allclose(got, probs(x.numpy().astype(np.float32).astype(np.float64)), atol=1e-12)
        sent = [json.loads(json.dumps(s)) for s in srv.seen]
    assert v.record["endpoint"]["metadata"]["input"] == "x"
    assert [s[:2] for s in sent[:2]] == [["GET", "/v2/models/m"], ["GET", "/v2/models/m/ready"]]


@pytest.mark.parametrize("case, routes, words", [
    ("not ready (503, KServe's ModelNotReady)", {("GET", "/v2/models/m/ready"): lambda b, h: (
        503, {"error": "Model with name m is not ready."})}, ["not ready", "503", "is not ready"]),
    ("not ready (ready: false)", {("GET", "/v2/models/m/ready"): lambda b, h: (
        200, {"name": "m", "ready": False})}, ["not ready"]),
    ("model not found (404)", {("GET", "/v2/models/m"): lambda b, h: (
        404, {"error": "Model with name m does not exist."})}, ["HTTP 404", "does not exist"]),
    ("400 on infer", {("POST", "/v2/models/m/infer"): lambda b, h: (
        400, {"error": "unexpected shape for input 'x'"})}, ["HTTP 400", "unexpected shape"]),
    ("error in a 200", {("POST", "/v2/models/m/infer"): lambda b, h: (200, {"error": "boom"})},
     ["answered an error", "boom"]),
    ("shape does not match data", {("POST", "/v2/models/m/infer"): lambda b, h: (200, {"outputs": [
        {"name": "probs", "datatype": "FP32", "shape": [1, C], "data": [0.5, 0.5]}]})},
     ["has shape [1, 3] (3 values) but 2 data values"]),
    ("BYTES output", {("POST", "/v2/models/m/infer"): lambda b, h: (200, {"outputs": [
        {"name": "probs", "datatype": "BYTES", "shape": [1, 1], "data": ["cat"]}]})},
     ["datatype BYTES", "does not read"]),
    ("BYTES in the metadata", {("GET", "/v2/models/m"): lambda b, h: (200, {**META, "outputs": [
        {"name": "probs", "datatype": "BYTES", "shape": [-1, 1]}]})}, ["output_name", "BYTES"]),
    ("input width", {("GET", "/v2/models/m"): lambda b, h: (200, {**META, "inputs": [
        {"name": "x", "datatype": "FP32", "shape": [-1, 7]}]})}, ["shape [-1, 7]", "have 4"]),
    ("output count", {("GET", "/v2/models/m"): lambda b, h: (200, {**META, "outputs": [
        {"name": "probs", "datatype": "FP32", "shape": [-1, 5]}]})}, ["output has 5 columns", "expects 3"]),
    ("input datatype", {("GET", "/v2/models/m"): lambda b, h: (200, {**META, "inputs": [
        {"name": "x", "datatype": "INT64", "shape": [-1, D]}]})}, ["datatype INT64", "FP32 or FP64"]),
])
def test_v2_errors_are_exit_2_at_start_up_naming_what_is_wrong(case, routes, words):
    with Scripted(v2_routes(routes)) as srv:
        with pytest.raises(BadInput) as err:
            build(f"http://127.0.0.1:{srv.port}/v2/models/m", protocol="kserve-v2")
        posts = sum(1 for s in srv.seen if s[0] == "POST")
    msg = str(err.value)
    for w in words:
        assert w in msg, (case, msg)
    if "metadata" in case or case in ("input width", "input datatype") or "ready" in case or "404" in case:
        assert posts == 0  # refused before a single row was sent


def test_v1_not_ready_and_tf_serving_status():
    tf = {"model_version_status": [{"version": "1", "state": "LOADING", "status": {"error_code": "OK"}}]}
    with Scripted({("GET", "/v1/models/m"): lambda b, h: (200, tf)}) as srv:
        with pytest.raises(BadInput, match="is not ready"):
            build(f"http://127.0.0.1:{srv.port}/v1/models/m", protocol="kserve-v1")
    ok = {"model_version_status": [{"version": "1", "state": "AVAILABLE"}]}
    routes = {("GET", "/v1/models/m"): lambda b, h: (200, ok),
              ("POST", "/v1/models/m:predict"): lambda b, h: (
                  200, {"predictions": probs(np.asarray(b["instances"])).tolist()})}
    with Scripted(routes) as srv:
        v = build(f"http://127.0.0.1:{srv.port}/v1/models/m", protocol="auto")
        x = torch.randn(3, D, dtype=torch.float64)
        assert np.allclose(v.backend.predict(x, "probabilities").numpy(), probs(x.numpy()))
    assert v.record["endpoint"]["protocol"] == "kserve-v1"
    with Scripted(routes) as srv:  # a key only kserve-v2 reads, on what auto found to be V1
        with pytest.raises(BadInput, match=r"endpoint.output_name: only the kserve-v2 .*found kserve-v1"):
            build(f"http://127.0.0.1:{srv.port}/v1/models/m", protocol="auto", output_name="probs")


def torchserve_routes():
    """TorchServe's inference API: /ping, /predictions/NAME, /explanations/NAME; a custom
    handler that takes {"data": rows} and answers a list; errors {"code", "type", "message"}."""
    return {("GET", "/ping"): lambda b, h: (200, {"status": "Healthy"}),
            ("POST", "/predictions/m"): lambda b, h: (200, probs(np.asarray(b["data"])).tolist()),
            ("POST", "/explanations/m"): lambda b, h: (200, [list(W[:, 0]) for _ in b["data"]]),
            ("POST", "/predictions/custom/2.0"): lambda b, h: (
                200, {"result": {"p": probs(np.asarray(b["batch"]["rows"])).tolist()}}),
            ("POST", "/predictions/busy"): lambda b, h: (
                503, {"code": 503, "type": "ServiceUnavailableException",
                      "message": "Model \"busy\" has no worker to serve inference request."})}


def test_torchserve_predictions_explanations_auto_and_its_error_shape():
    with Scripted(torchserve_routes()) as srv:
        base = f"http://127.0.0.1:{srv.port}"
        data = scenario(f"{base}/predictions/m", protocol="torchserve")
        data["interface"]["kind"] = "gradient"
        v = build_victim(scenario_from_dict(data))
        x = torch.randn(4, D, dtype=torch.float64)
        assert np.allclose(v.backend.predict(x, "probabilities").numpy(), probs(x.numpy()))
        g = v.backend.explain(x, "gradient", torch.Generator()).numpy()
        assert np.allclose(g, np.tile(W[:, 0], (4, 1)))
        custom = build(f"{base}/predictions/custom/2.0", protocol="torchserve",
                       request_template={"batch": {"rows": "$inputs"}}, response_path="result.p")
        assert np.allclose(custom.backend.predict(x, "probabilities").numpy(), probs(x.numpy()))
        auto = build(f"{base}/predictions/m", protocol="auto")
        assert auto.record["endpoint"]["protocol"] == "torchserve"
        with pytest.raises(BadInput, match="HTTP 503.*no worker to serve"):
            build(f"{base}/predictions/busy", protocol="torchserve")
        paths = [s[1] for s in srv.seen]
    assert "/explanations/m" in paths and "/ping" in paths


def test_headers_come_from_the_environment_and_are_scrubbed(monkeypatch):
    secret = "org-7Yv3-tenant-secret-value"
    monkeypatch.setenv("LEAKMETER_ORG", secret)
    routes = v2_routes({("POST", "/v2/models/m/infer"): lambda b, h: (
        400, {"error": f"tenant {h.get('X-Org')} is not allowed"})})
    with Scripted(routes) as srv:
        url = f"http://127.0.0.1:{srv.port}/v2/models/m"
        with pytest.raises(BadInput) as err:
            build(url, protocol="kserve-v2", headers={"X-Org": "$env:LEAKMETER_ORG"})
        sent = srv.seen[0][2]
    assert sent.get("X-Org") == secret  # it travelled ...
    assert secret not in str(err.value) and "tenant *** is not allowed" in str(err.value)  # ... and is masked
    assert SECRETS.scrub(secret[:12] + "...") != secret[:12] + "..."
    # a literal value, a variable a scenario may not name, a header leakmeter sets itself
    with pytest.raises(ScenarioError, match=r"headers: X-Org: a header value must be \"\$env:NAME\""):
        scenario_from_dict(scenario(url, headers={"X-Org": secret}))
    assert secret not in str(pytest.raises(ScenarioError, scenario_from_dict,
                                           scenario(url, headers={"X-Org": secret})).value)
    with pytest.raises(ScenarioError, match="set by leakmeter itself"):
        scenario_from_dict(scenario(url, headers={"Content-Type": "$env:LEAKMETER_ORG"}))
    monkeypatch.setenv("HOME_SECRET", "x" * 20)
    with pytest.raises(BadInput, match=r"headers.X-Org: \$HOME_SECRET is not a variable a scenario may send"):
        build(url, protocol="kserve-v2", headers={"X-Org": "$env:HOME_SECRET"})
    assert os.environ["LEAKMETER_ORG"] == secret


def test_keys_only_some_protocols_read_are_refused():
    with pytest.raises(ScenarioError, match="only the kserve-v2 protocol"):
        scenario_from_dict(scenario("http://127.0.0.1:9/invocations", classification=3))
    with pytest.raises(ScenarioError, match="only the json and torchserve protocols"):
        scenario_from_dict(scenario("http://127.0.0.1:9/v2/models/m", protocol="kserve-v2",
                                    request_template={"inputs": "$inputs"}))
    with pytest.raises(ScenarioError, match="/predictions/MODEL"):
        scenario_from_dict(scenario("http://127.0.0.1:9/m", protocol="torchserve"))


def test_validate_checks_the_header_variables(tmp_path, monkeypatch):
    import yaml
    from click.testing import CliRunner

    from harness.cli import main

    monkeypatch.delenv("LEAKMETER_UNSET_TENANT", raising=False)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario("http://127.0.0.1:9/v2/models/m", protocol="kserve-v2",
                                            headers={"X-Tenant": "$env:LEAKMETER_UNSET_TENANT"})))
    res = CliRunner().invoke(main, ["validate", str(path)])
    assert res.exit_code == 2 and "headers.X-Tenant" in res.output and "not set" in res.output
    monkeypatch.setenv("LEAKMETER_UNSET_TENANT", "t-1")
    assert CliRunner().invoke(main, ["validate", str(path)]).exit_code == 0


def _meta(**over):
    return lambda b, h: (200, {**META, **over})


def _answer(tensor):
    return lambda b, h: (200, {"outputs": [tensor]})


@pytest.mark.parametrize("case, routes, words", [
    ("input width", {("GET", "/v2/models/m"): _meta(inputs=[{"name": "x", "datatype": "FP32",
                                                             "shape": [-1, 7]}])},
     ["victim.endpoint", "shape [-1, 7]", "inputs have 4"]),
    ("output count", {("GET", "/v2/models/m"): _meta(outputs=[{"name": "probs", "datatype": "FP32",
                                                               "shape": [-1, 5]}])},
     ["victim.endpoint.output_name", "5 columns", "expects 3"]),
    ("datatype in the metadata", {("GET", "/v2/models/m"): _meta(outputs=[
        {"name": "probs", "datatype": "BYTES", "shape": [-1, 1]}])},
     ["victim.endpoint.output_name", "datatype BYTES", "does not read"]),
    ("shape vs data", {("POST", "/v2/models/m/infer"): _answer(
        {"name": "probs", "datatype": "FP32", "shape": [1, C], "data": [0.5, 0.5]})},
     ["victim.endpoint", "output 'probs' has shape [1, 3] (3 values) but 2 data values"]),
    ("datatype in the answer", {("POST", "/v2/models/m/infer"): _answer(
        {"name": "probs", "datatype": "BYTES", "shape": [1, 1], "data": ["cat"]})},
     ["victim.endpoint", "datatype BYTES", "does not read"]),
])
def test_bad_endpoint_input_is_one_line_exit_2_before_any_attack(case, routes, words, tmp_path):
    """`leakmeter run`: exit 2, one error line naming the field, no attack started; a metadata that
    does not fit is refused before a single row is sent."""
    import yaml
    from click.testing import CliRunner
    from conftest import message_lines

    from harness.cli import main

    with Scripted(v2_routes(routes)) as srv:
        path = tmp_path / "s.yaml"
        url = f"http://127.0.0.1:{srv.port}/v2/models/m"
        path.write_text(yaml.safe_dump(scenario(url, protocol="kserve-v2")))
        res = CliRunner().invoke(main, ["run", str(path), "--no-tracking", "--out", str(tmp_path / "o")])
        posts = [s[1] for s in srv.seen if s[0] == "POST"]
    lines = message_lines(res.stderr)
    assert res.exit_code == 2, res.output[-1500:]
    assert len(lines) == 1 and lines[0].startswith("leakmeter: error: "), res.stderr
    assert all(w in lines[0] for w in words), (words, lines[0])
    assert "attack" not in res.stderr and "Traceback" not in res.output
    assert len(posts) <= 1 and not (tmp_path / "o").exists()  # at most the start-up row; no report
    if "metadata" in case or case in ("input width", "output count"):
        assert posts == []


def test_bad_endpoint_input_in_a_scan_leaves_no_mlflow_run(tmp_path, tracking_uri):
    import mlflow
    import yaml
    from click.testing import CliRunner

    from harness.cli import main

    routes = {("POST", "/v2/models/m/infer"): _answer(
        {"name": "probs", "datatype": "FP32", "shape": [1, C], "data": [0.5, 0.5]})}
    with Scripted(v2_routes(routes)) as srv:
        data = scenario(f"http://127.0.0.1:{srv.port}/v2/models/m", protocol="kserve-v2")
        data["tracking"] = {"experiment": "scans"}
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump(data))
        res = CliRunner().invoke(main, ["scan", str(path), "--tracking-uri", tracking_uri,
                                        "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "but 2 data values" in res.stderr, res.output[-1500:]
    client = mlflow.MlflowClient(tracking_uri)
    assert [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])] == []


def test_v2_url_with_a_version_suffix_reads_that_versions_metadata_and_infers_there():
    pre = "/v2/models/m/versions/2"
    routes = {("GET", pre): lambda b, h: (200, {**META, "versions": ["1", "2"]}),
              ("GET", f"{pre}/ready"): lambda b, h: (200, {"name": "m", "ready": True}),
              ("POST", f"{pre}/infer"): v2_infer}
    with Scripted(routes) as srv:
        v = build(f"http://127.0.0.1:{srv.port}{pre}", protocol="kserve-v2")
        x = torch.randn(3, D, dtype=torch.float64)
        got = v.backend.predict(x, "probabilities").numpy()
        paths = [s[:2] for s in srv.seen]
    assert np.allclose(got, probs(x.numpy().astype(np.float32).astype(np.float64)), atol=1e-12)
    assert paths[:2] == [("GET", pre), ("GET", f"{pre}/ready")]
    assert {p for m, p in paths if m == "POST"} == {f"{pre}/infer"}


@pytest.mark.parametrize("routes, words", [
    ({("GET", "/v1/models/m"): lambda b, h: (404, {"error": "Model with name m does not exist."})},
     ["HTTP 404", "does not exist"]),
    ({("GET", "/v1/models/m"): lambda b, h: (200, {"name": "m", "ready": False})}, ["is not ready"]),
    ({("GET", "/v1/models/m"): lambda b, h: (200, {"name": "m", "ready": True}),
      ("POST", "/v1/models/m:predict"): lambda b, h: (400, {"error": "Failed to process instances"})},
     ["HTTP 400", "Failed to process instances"]),
    ({("GET", "/v1/models/m"): lambda b, h: (200, {"name": "m", "ready": True}),
      ("POST", "/v1/models/m:predict"): lambda b, h: (200, {"error": "Input tensor shape mismatch"})},
     ["answered an error", "shape mismatch"]),
    ({("GET", "/v1/models/m"): lambda b, h: (200, {"name": "m", "ready": True}),
      ("POST", "/v1/models/m:predict"): lambda b, h: (503, {"error": "Model m is not ready"})},
     ["HTTP 503", "not ready"]),
])
def test_v1_error_shapes_are_exit_2_at_start_up(routes, words):
    """KServe V1 / TF Serving errors ({"error": ...} with 400/404/503, in a 200 too; a status
    that is not ready) at start-up: BadInput naming what the server said."""
    with Scripted(routes) as srv:
        with pytest.raises(BadInput) as err:
            build(f"http://127.0.0.1:{srv.port}/v1/models/m", protocol="kserve-v1", retries=0)
    assert all(w in str(err.value) for w in words), str(err.value)
