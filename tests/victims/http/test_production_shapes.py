"""Answer shapes of production servers (docs/endpoints.md "Answer shapes"): the Open Inference
Protocol output chosen and named in every request (MLServer's scikit-learn runtime answers labels
unless asked for predict_proba), a label-only answer read as labels; MLflow DataFrame answers
(records), `dataframe_split` requests with the signature's columns, string class labels. Real
stdlib servers on 127.0.0.1."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from loopback import JsonHandler, LoopbackServer
from test_production_endpoint import C, D, remote, softmax_rows

from harness.core.errors import BadInput
from harness.scenario import scenario_from_dict
from victims.build import build_victim

# ------------------------------------------------------------------ V2 output choice


class V2Server(LoopbackServer):
    """An Open Inference Protocol model like MLServer's scikit-learn runtime: the metadata lists
    `outputs` (default: predict_proba only); a request that names no output is answered with the
    labels (`predict`, INT64), one that names predict_proba with the probabilities."""

    def __init__(self, outputs=("predict_proba",), label_only=False):
        self.asked: list = []
        outer = self

        class Handler(JsonHandler):
            def do_GET(self):  # noqa: N802
                if self.path.endswith("/ready"):
                    return self.reply_json(200, {"name": "m", "ready": True})
                meta = {"name": "m", "platform": "sklearn",
                        "inputs": [{"name": "x", "datatype": "FP64", "shape": [-1, D]}],
                        "outputs": [{"name": n, "datatype": "FP64", "shape": [-1, C]} for n in outputs]}
                self.reply_json(200, meta)

            def do_POST(self):  # noqa: N802
                body = self.json_body()
                x = np.asarray(body["inputs"][0]["data"], dtype=np.float64).reshape(-1, D)
                names = [o["name"] for o in body.get("outputs") or []]
                outer.asked.append(names)
                p = softmax_rows(x)
                if names == ["predict_proba"] and not label_only:
                    out = {"name": "predict_proba", "datatype": "FP64", "shape": list(p.shape),
                           "data": p.reshape(-1).tolist()}
                else:
                    lab = p.argmax(axis=1)
                    out = {"name": "predict", "datatype": "INT64", "shape": [len(lab)], "data": lab.tolist()}
                self.reply_json(200, {"model_name": "m", "outputs": [out]})

        self._serve(Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v2/models/m"


def _v2(url: str, output: str, **ep):
    s = scenario_from_dict({"name": "t", "device": "cpu", "tracking": {"enabled": False},
                            "victim": {"endpoint": {"url": url, "input_dim": D, "n_outputs": C,
                                                    "protocol": "auto", **ep}},
                            "interface": {"kind": "prediction", "output": output}})
    return build_victim(s)


def test_v2_output_choice_names_the_probabilities_and_reads_a_label_only_answer_as_labels():
    x = torch.as_tensor(np.random.default_rng(0).standard_normal((4, D)))
    with V2Server(outputs=("predict", "predict_proba")) as srv:
        v = _v2(srv.url, "probabilities")  # no output_name: the probabilities, named in the request
        assert v.record["endpoint"]["metadata"]["output"] == "predict_proba"
        np.testing.assert_allclose(v.backend.predict(x, "probabilities").numpy(), softmax_rows(x.numpy()))
        assert srv.asked[-1] == ["predict_proba"]
        v = _v2(srv.url, "label")  # a label interface asks for the labels
        labels = v.backend.predict(x, "label").numpy()
        np.testing.assert_array_equal(labels, softmax_rows(x.numpy()).argmax(1))
        assert srv.asked[-1] == ["predict"]
    with V2Server(label_only=True) as srv:  # the server answers labels whatever is asked
        v = _v2(srv.url, "label")
        labels = v.backend.predict(x, "label").numpy()
        np.testing.assert_array_equal(labels, softmax_rows(x.numpy()).argmax(1))
        with pytest.raises(BadInput) as err:
            _v2(srv.url, "probabilities")
        msg = str(err.value)
        assert "interface.output: label" in msg and "predict_proba" in msg and "output_name picks" not in msg


# ------------------------------------------------------------------ answer shapes (MLflow DataFrames)

NAMES = ["setosa", "versicolor", "virginica"]


class FrameServer(LoopbackServer):
    """Like `mlflow models serve` for a pyfunc with a column-based signature returning a
    DataFrame: takes only `dataframe_split` with the signature's columns, answers records —
    class-named probability columns (in another order than the classes), or a string label."""

    def __init__(self, columns: list[str], labels: bool):
        self.bodies: list = []
        outer = self

        class Handler(JsonHandler):
            def do_POST(self):  # noqa: N802
                body = self.json_body()
                outer.bodies.append(body)
                split = body.get("dataframe_split") or {}
                if split.get("columns") != columns:
                    status, out = 400, {"error_code": "BAD_REQUEST", "message": "schema mismatch"}
                else:
                    p = softmax_rows(np.asarray(split["data"], dtype=np.float64))
                    status = 200
                    out = {"predictions": [{"label": NAMES[int(i)]} for i in p.argmax(1)] if labels else
                           [{n: float(r[NAMES.index(n)]) for n in reversed(NAMES)} for r in p]}
                self.reply_json(status, out)

        self._serve(Handler)


def test_mlflow_dataframe_answers_columns_from_the_signature_and_string_labels(tmp_path):
    cols = [f"f{i}" for i in range(D)]
    mlmodel = tmp_path / "MLmodel"
    mlmodel.write_text("flavors: {python_function: {}}\nsignature:\n  inputs: '"
                       + json.dumps([{"name": c, "type": "double"} for c in cols]) + "'\n")
    x = torch.as_tensor(np.random.default_rng(3).standard_normal((6, D)))
    with FrameServer(cols, labels=False) as srv:
        oracle, _ = remote(srv.url, columns=str(mlmodel), classes=NAMES)
        got = oracle.view("a").predict(x).numpy()
        np.testing.assert_allclose(got, softmax_rows(x.numpy()))  # columns put back in class order
        with pytest.raises(BadInput, match="schema mismatch"):
            remote(srv.url)  # without the columns the server refuses the request: exit 2
    with FrameServer(cols, labels=True) as srv:
        s = scenario_from_dict({"name": "t", "device": "cpu", "tracking": {"enabled": False},
                                "victim": {"endpoint": {"url": srv.url, "input_dim": D, "n_outputs": C,
                                                        "columns": cols, "classes": NAMES}},
                                "interface": {"kind": "prediction", "output": "label"}})
        labels = build_victim(s).backend.predict(x, "label").numpy()
        np.testing.assert_array_equal(labels, softmax_rows(x.numpy()).argmax(1))
        s.victim.endpoint.classes = None
        with pytest.raises(BadInput, match="string labels .*victim.endpoint.classes"):
            build_victim(s)
    with pytest.raises(BadInput, match="columns: 2 columns"):
        remote("http://127.0.0.1:9/invocations", columns=["a", "b"])
