"""The wire protocols (victims/http/wire.py, wire_v2.py, discover.py) against `leakmeter serve`
speaking each of them on 127.0.0.1: answers equal the victim's own (ground truth), `auto` names
the protocol that answered, Triton's classification extension, explanations, and the start-up
checks of the model's metadata. Real servers (MLServer, KServe) are in test_real_servers.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import requests
import torch

from harness.core.errors import BadInput
from harness.scenario import scenario_from_dict
from victims.build import build_victim
from victims.http.served import build_served
from victims.http.server import VictimServer


def digits(**over) -> dict:
    base = {
        "name": "proto-test", "seed": 0, "device": "cpu",
        "victim": {"model": {"arch": "mlp", "hidden": [16]},
                   "data": {"dataset": "digits", "n_train": 200},
                   "training": {"epochs": 2, "lr": 0.1, "batch_size": 64, "dtype": "float64"}},
        "attacker": {"pool": 20},
        "interface": {"kind": "gradient", "output": "probabilities"},
        "defenses": {"query_budget": 5000},
        "attacks": [{"name": "span_nonadaptive"}],
        "tracking": {"enabled": False},
    }
    base.update(over)
    return base


def remote(url: str, data: dict | None = None, **ep) -> object:
    d = json.loads(json.dumps(data or digits()))
    d["victim"]["endpoint"] = {"url": url, "retries": 0, "timeout_s": 5, **ep}
    return build_victim(scenario_from_dict(d))


@pytest.fixture(scope="module")
def servers():
    """The same victim behind three servers: mlflow, kserve-v2, kserve-v1."""
    served, victim = build_served(scenario_from_dict(digits()))
    out = {p: VictimServer(served, protocol=p, model_name="digits").start()
           for p in ("mlflow", "kserve-v2", "kserve-v1")}
    yield out, victim
    for srv in out.values():
        srv.close()


@pytest.mark.parametrize("protocol", ["mlflow", "kserve-v2", "kserve-v1"])
def test_each_protocol_answers_what_the_victim_answers(servers, protocol):
    srv, victim = servers
    rv = remote(srv[protocol].url, protocol=protocol)
    x = victim.info.x_pool[:7]
    want = victim.backend.predict(x, "probabilities")
    got = rv.backend.predict(x, "probabilities")
    assert got.shape == want.shape == (7, 10)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    g_want = victim.backend.explain(x, "gradient", torch.Generator())
    g_got = rv.backend.explain(x, "gradient", torch.Generator())
    assert torch.allclose(g_got, g_want, rtol=0, atol=1e-12)
    assert rv.record["endpoint"]["protocol"] == protocol


def test_v2_reads_the_metadata_and_sends_fp32_values(servers):
    srv, victim = servers
    rv = remote(srv["kserve-v2"].url, protocol="kserve-v2")
    meta = rv.record["endpoint"]["metadata"]
    assert meta == {"model": "digits", "input": "input-0", "datatype": "FP64", "output": "predictions",
                    "outputs": ["predictions", "explanation"]}
    # a scenario that asks FP32 of an FP64 model disagrees with its metadata: exit 2 naming the key
    with pytest.raises(BadInput, match=r"victim.endpoint.datatype: FP32 disagrees .*FP64"):
        remote(srv["kserve-v2"].url, protocol="kserve-v2", datatype="FP32")
    from victims.http.wire_v2 import OpenInferenceProtocol

    proto = OpenInferenceProtocol(SimpleNamespace(input_name=None, output_name=None, datatype="FP32",
                                                  classification=None))
    body = proto.body([[0.1, 1 / 3]], None)
    sent = body["inputs"][0]
    assert sent["shape"] == [1, 2] and sent["datatype"] == "FP32"
    assert sent["data"] == [float(np.float32(0.1)), float(np.float32(1 / 3))]  # exact float32 values


def test_v2_reads_only_the_output_the_metadata_names():
    """An answer whose tensor is not the metadata's output (a fallback model, a renamed head) is an
    error, never another tensor read as the predictions; an explanation answer with no
    explanation output is an error, never the predictions read as gradients."""
    from victims.http.wire_base import AnswerError
    from victims.http.wire_v2 import OpenInferenceProtocol

    proto = OpenInferenceProtocol(SimpleNamespace(input_name=None, output_name=None, datatype="FP64",
                                                  classification=None))
    proto.read_metadata({"name": "m", "inputs": [{"name": "x", "datatype": "FP64", "shape": [-1, 2]}],
                         "outputs": [{"name": "probs", "datatype": "FP64", "shape": [-1, 2]}]}, 2,
                        SimpleNamespace(datatype=None, input_name=None, output_name=None))

    def tensor(name, data):
        return {"name": name, "datatype": "FP64", "shape": [1, 2], "data": data}

    both = {"outputs": [tensor("other", [9, 9]), tensor("probs", [0.3, 0.7])]}
    assert proto.answer(both).tolist() == [[0.3, 0.7]]
    with pytest.raises(AnswerError, match="no output 'probs'"):
        proto.answer({"outputs": [tensor("fallback", [0.5, 0.5])]})
    with pytest.raises(AnswerError, match="no explanation output"):
        proto.answer({"outputs": [tensor("probs", [0.3, 0.7])]}, explain="gradient")
    grads = proto.answer({"outputs": [tensor("probs", [0.3, 0.7]), tensor("explanation", [1, 2])]},
                         explain="gradient")
    assert grads.tolist() == [[1, 2]]


@pytest.mark.parametrize("protocol", ["mlflow", "kserve-v2", "kserve-v1"])
def test_auto_names_the_protocol_that_answered(servers, protocol):
    srv, victim = servers
    rv = remote(srv[protocol].url, protocol="auto")
    ep = rv.record["endpoint"]
    assert ep["protocol"] == protocol and ep["protocol_requested"] == "auto"
    x = victim.info.x_pool[:3]
    assert torch.allclose(rv.backend.predict(x, "probabilities"), victim.backend.predict(x, "probabilities"),
                          atol=1e-12)
    assert ep["stats"]["requests"] <= 5  # the probe is a handful of requests


def test_auto_with_no_protocol_is_exit_2_and_counts_its_probes(servers):
    srv, _ = servers
    base = srv["kserve-v2"].url.split("/v2/")[0]
    with pytest.raises(BadInput, match="auto found no protocol"):
        remote(f"{base}/nothing/here", protocol="auto")
    # the probes are charged to the scan's cap before they are sent
    with pytest.raises(BadInput, match="max_rows: 3 is too small"):  # 2 GETs + 2 rows > 3
        remote(srv["kserve-v2"].url, protocol="auto", max_rows=3)


def test_v2_classification_extension_gives_the_top_k_rows(servers):
    srv, victim = servers
    data = digits(interface={"kind": "prediction", "output": "probabilities"})
    rv = remote(srv["kserve-v2"].url, data, protocol="kserve-v2", classification=3,
                output_name="predictions")
    x = victim.info.x_pool[:6]
    p = victim.backend.predict(x, "probabilities")
    got = rv.backend.predict(x, "probabilities")
    top = torch.topk(p, 3, dim=1)
    want = torch.zeros_like(p).scatter_(1, top.indices, top.values)
    assert torch.allclose(got, want, atol=1e-12)
    assert int((got > 0).sum()) == 18
    # label-only reading of the same extension: the top-1 index
    lab = remote(srv["kserve-v2"].url, digits(interface={"kind": "prediction", "output": "label"}),
                 protocol="kserve-v2", classification=1, output_name="predictions")
    assert torch.equal(lab.backend.predict(x, "label"), p.argmax(1))


def test_v2_metadata_that_does_not_fit_the_scenario_is_exit_2(servers):
    srv, _ = servers
    url = srv["kserve-v2"].url
    wide = digits(victim={**digits()["victim"], "data": {"dataset": "breast_cancer", "n_train": 200}})
    with pytest.raises(BadInput, match=r"input 'input-0' has shape \[-1, 64\] .* inputs have 30"):
        remote(url, wide, protocol="kserve-v2")
    with pytest.raises(BadInput, match=r"output_name: 'proba' is not an output .*predictions, explanation"):
        remote(url, protocol="kserve-v2", output_name="proba")
    with pytest.raises(BadInput, match=r"input_name: 'x' is not an input"):
        remote(url, protocol="kserve-v2", input_name="x")
    other = url.rsplit("/", 1)[0] + "/other"
    with pytest.raises(BadInput, match=r"HTTP 404.*no model named 'other'"):
        remote(other, protocol="kserve-v2")


def test_reference_server_v2_and_v1_error_shapes(servers):
    srv, _ = servers
    v2 = srv["kserve-v2"].url
    tensor = {"name": "input-0", "shape": [2, 64], "datatype": "FP32", "data": [0.0] * 100}
    r = requests.post(f"{v2}/infer", json={"inputs": [tensor]}, timeout=5)
    assert r.status_code == 400 and "does not match" in r.json()["error"]
    tensor = {"name": "input-0", "shape": [1, 64], "datatype": "BYTES", "data": ["a"] * 64}
    r = requests.post(f"{v2}/infer", json={"inputs": [tensor]}, timeout=5)
    assert r.status_code == 400 and "FP32 or FP64" in r.json()["error"]
    assert requests.get(v2.rsplit("/", 1)[0] + "/nope", timeout=5).json()["error"].startswith("no model")
    assert requests.get(f"{v2}/ready", timeout=5).json()["ready"] is True
    v1 = srv["kserve-v1"].url
    assert requests.get(v1, timeout=5).json() == {"name": "digits", "ready": True}
    r = requests.post(f"{v1}:predict", json={"rows": []}, timeout=5)
    assert r.status_code == 400 and "instances" in r.json()["error"]


@pytest.mark.parametrize("args, words", [
    (["--model-name", "digits"], "--model-name: only the kserve-v2 and kserve-v1"),
    (["--protocol", "kserve-v2", "--model-name", "a/b"], "--model-name: letters, digits"),
])
def test_serve_refuses_a_model_name_it_cannot_use(args, words, tmp_path):
    from click.testing import CliRunner

    from harness.cli import main

    res = CliRunner().invoke(main, ["serve", str(tmp_path / "never-read.yaml"), *args])
    assert res.exit_code == 2 and words in res.stderr, res.output
