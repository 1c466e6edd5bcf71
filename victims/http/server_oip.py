"""The reference server's other protocols (`leakmeter serve --protocol kserve-v2 | kserve-v1`):
request parsing and answer shapes, so `leakmeter serve` can stand in for a KServe, Triton or
MLServer model (Open Inference Protocol, REST) or a KServe V1 / TF Serving one.

kserve-v2, for a model NAME (`--model-name`, default the scenario's name):

    GET  /v2/models/NAME                   → {"name", "versions", "platform", "inputs", "outputs"}
    GET  /v2/models/NAME/ready, /v2/health/ready, /v2/health/live → {"ready": true} / {"live": true}
    POST /v2/models/NAME[/versions/1]/infer {"inputs": [{"name": "input-0", "shape": [n, d],
         "datatype": "FP32"|"FP64", "data": [...]}], "outputs": [{"name": "predictions",
         "parameters": {"classification": k}}], "parameters": {"explain": "gradient"}}
         → {"model_name", "model_version", "outputs": [{"name", "shape", "datatype", "data"}]}

kserve-v1: GET /v1/models/NAME → {"name", "ready": true}; POST /v1/models/NAME:predict
{"instances": rows} → {"predictions": ...}; POST /v1/models/NAME:explain → {"explanations": ...}.

Errors are `{"error": message}` (both protocols' shape) with the server's `error_code` beside it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import Request  # at module level: FastAPI resolves the handlers' annotations here
from fastapi.responses import JSONResponse, Response

from victims.http.served import RequestError, ServedModel, parse_json

INPUT = "input-0"
PREDICTIONS = "predictions"
EXPLANATION = "explanation"


def metadata_v2(served: ServedModel, name: str) -> dict[str, Any]:
    """The model's V2 metadata: one input, the prediction output (and the explanation output of
    an explanation interface)."""
    meta = served.meta
    label = meta["output"] == "label"
    outputs = [{"name": PREDICTIONS, "datatype": "INT64" if label else "FP64",
                "shape": [-1] if label else [-1, int(meta["n_outputs"] or 1)]}]
    if served.explain_kinds:
        outputs.append({"name": EXPLANATION, "datatype": "FP64", "shape": [-1, int(meta["input_dim"])]})
    return {"name": name, "versions": ["1"], "platform": "leakmeter",
            "inputs": [{"name": INPUT, "datatype": "FP64", "shape": [-1, int(meta["input_dim"])]}],
            "outputs": outputs}


def parse_v2(raw: bytes, served: ServedModel) -> tuple[np.ndarray, str | None, dict[str, Any]]:
    """(rows, explain kind, what to answer) of a V2 infer request; RequestError(400) when malformed."""
    body = parse_json(raw)
    if not isinstance(body, dict) or not isinstance(body.get("inputs"), list) or len(body["inputs"]) != 1:
        raise RequestError(400, "BAD_REQUEST", 'expected {"inputs": [one tensor]}')
    t = body["inputs"][0]
    if not isinstance(t, dict) or t.get("name") != INPUT:
        raise RequestError(400, "BAD_REQUEST", f"unknown input; the model's input is {INPUT!r}")
    if t.get("datatype") not in ("FP32", "FP64"):
        raise RequestError(400, "BAD_REQUEST", "inputs[0].datatype must be FP32 or FP64")
    shape = t.get("shape")
    if not isinstance(shape, list) or len(shape) != 2 or \
            not all(isinstance(v, int) and v >= 0 for v in shape):
        raise RequestError(400, "BAD_REQUEST", "inputs[0].shape must be [n, d]")
    try:
        data = np.asarray(t.get("data"), dtype=np.float64).reshape(-1)
    except (TypeError, ValueError, RecursionError, OverflowError):
        raise RequestError(400, "BAD_REQUEST", "inputs[0].data must be numbers") from None
    if data.size != shape[0] * shape[1]:
        raise RequestError(400, "BAD_REQUEST", f"inputs[0].shape {shape} does not match its "
                           f"{data.size} data values")
    if t["datatype"] == "FP32":
        data = data.astype(np.float32).astype(np.float64)
    params = body.get("parameters") if isinstance(body.get("parameters"), dict) else {}
    explain = params.get("explain")
    if explain is not None and not isinstance(explain, str):
        raise RequestError(400, "INVALID_PARAMETER_VALUE", "parameters.explain must be a string")
    want: dict[str, Any] = {"classification": None}
    for out in body.get("outputs") or []:
        if not isinstance(out, dict) or out.get("name") not in (PREDICTIONS, EXPLANATION):
            raise RequestError(400, "BAD_REQUEST", f"unknown output; outputs: {PREDICTIONS}, {EXPLANATION}")
        k = (out.get("parameters") or {}).get("classification")
        if k is not None:
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise RequestError(400, "INVALID_PARAMETER_VALUE", "classification must be a positive "
                                   "integer")
            want["classification"] = k
    want["id"] = body.get("id")
    return served.parse_inputs(data.reshape(shape)), explain, want


def answer_v2(y: np.ndarray, explain: str | None, want: dict[str, Any], name: str, label: bool) -> dict:
    """The V2 response for answers `y` (labels (N,), values (N, K) or explanations (N, d))."""
    n = len(y)
    if explain:
        tensor = {"name": EXPLANATION, "datatype": "FP64", "shape": [n, int(y.shape[1])],
                  "data": y.reshape(-1).tolist()}
    elif want.get("classification") and not label:
        k = min(int(want["classification"]), y.shape[1])
        top = np.argsort(-y, axis=1, kind="stable")[:, :k]
        vals = np.take_along_axis(y, top, axis=1)
        strings = [f"{v!r}:{i}" for v, i in zip(vals.reshape(-1).tolist(), top.reshape(-1).tolist(),
                                                  strict=True)]
        tensor = {"name": PREDICTIONS, "datatype": "BYTES", "shape": [n, k], "data": strings}
    elif label:
        tensor = {"name": PREDICTIONS, "datatype": "INT64", "shape": [n], "data": y.astype(int).tolist()}
    else:
        tensor = {"name": PREDICTIONS, "datatype": "FP64", "shape": [n, int(y.shape[1])],
                  "data": y.reshape(-1).tolist()}
    out = {"model_name": name, "model_version": "1", "outputs": [tensor]}
    if want.get("id") is not None:
        out["id"] = want["id"]
    return out


def parse_v1(raw: bytes, served: ServedModel) -> tuple[np.ndarray, None, dict[str, Any]]:
    """Rows of a V1 / TF Serving request ({"instances": rows}; TF's {"inputs": rows} too)."""
    body = parse_json(raw)
    if not isinstance(body, dict) or not any(k in body for k in ("instances", "inputs")):
        raise RequestError(400, "BAD_REQUEST", 'expected {"instances": [[...], ...]}')
    try:
        x = served.parse_inputs(body.get("instances", body.get("inputs")))
    except RecursionError:
        raise RequestError(400, "BAD_REQUEST", "instances are nested too deeply") from None
    return x, None, {}


def explain_kind(served: ServedModel) -> str:
    """The explanation a V1 :explain request gets (the interface's), or RequestError(400)."""
    if not served.explain_kinds:
        raise RequestError(400, "INVALID_PARAMETER_VALUE", "this model offers no explanations "
                           "(prediction only)")
    return served.explain_kinds[0]


def add_routes(app: Any, protocol: str, served: ServedModel, name: str, for_model: Any, error: Any,
               access: Any) -> None:
    """Register the kserve-v2 or kserve-v1 routes on `app`. `for_model(model, request, parse,
    shape)` authenticates, reads, answers (404 for another model); `error` shapes a RequestError."""
    label = served.meta["output"] == "label"

    def model_or_404(model: str, request: Request) -> Response | None:
        if model == name:
            return None
        access(request, 404)
        return error(RequestError(404, "MODEL_NOT_FOUND", f"no model named {model[:64]!r}"))

    if protocol == "kserve-v2":
        def shape(y: np.ndarray, explain: str | None, want: dict[str, Any]) -> dict:
            return answer_v2(y, explain, want, name, label)

        @app.get("/v2/models/{model}")
        async def v2_metadata(model: str, request: Request) -> Response:
            return model_or_404(model, request) or JSONResponse(metadata_v2(served, name))

        @app.get("/v2/models/{model}/ready")
        async def v2_ready(model: str, request: Request) -> Response:
            return model_or_404(model, request) or JSONResponse({"name": name, "ready": True})

        @app.get("/v2/health/ready")
        @app.get("/v2/health/live")
        async def v2_health() -> Response:
            return JSONResponse({"ready": True, "live": True})

        @app.post("/v2/models/{model}/infer")
        @app.post("/v2/models/{model}/versions/{version}/infer")
        async def v2_infer(model: str, request: Request) -> Response:
            return await for_model(model, request, parse_v2, shape)
        return

    @app.get("/v1/models/{model}")
    async def v1_status(model: str, request: Request) -> Response:
        return model_or_404(model, request) or JSONResponse({"name": name, "ready": True})

    @app.post("/v1/models/{model}:predict")
    async def v1_predict(model: str, request: Request) -> Response:
        return await for_model(model, request, parse_v1,
                               lambda y, _e, _w: {"predictions": y.tolist()})

    @app.post("/v1/models/{model}:explain")
    async def v1_explain(model: str, request: Request) -> Response:
        def parse(raw: bytes, sv: ServedModel) -> tuple[np.ndarray, str, dict]:
            x, _, want = parse_v1(raw, sv)
            return x, explain_kind(sv), want

        return await for_model(model, request, parse, lambda y, _e, _w: {"explanations": y.tolist()})
