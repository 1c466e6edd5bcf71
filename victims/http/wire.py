"""Wire protocols: how a batch of rows becomes a request body, and where the answer sits in a
response. One small adapter per protocol, behind the endpoint client (victims/http/client.py),
which owns everything else — retries, deadlines, size limits, budget charging and scrubbing — so
an adapter only maps data and raises `AnswerError` when a response has no answer where the
protocol puts it.

- `mlflow`: {"inputs": rows, "params": {"explain": kind}} → {"predictions": ...} (MLflow's
  scoring protocol, also `leakmeter serve`).
- `json`: any request template with "$inputs" / "$explain" placeholders (and "$auth", filled
  with the token from the environment: a template never holds a secret itself), and a dotted
  response path such as "result.scores" or "outputs[0]".
- `kserve-v1` (KServe V1, TF Serving REST): POST {url}:predict {"instances": rows} →
  {"predictions": ...}; explanations from POST {url}:explain → {"explanations": ...}.
- `torchserve`: POST {host}/predictions/{model} and /explanations/{model}; the body a handler
  takes is a template (default {"data": "$inputs"}), the answer the whole body or response_path.
- `kserve-v2` (the Open Inference Protocol) lives in victims/http/wire_v2.py; `auto` is resolved
  at start-up by victims/http/discover.py.

Every adapter learns its URL (`bind`, credentials already removed) and may POST somewhere else
than it (`target`): the client only sends and reads.
"""

from __future__ import annotations

from typing import Any

from victims.http.protocol import AUTH, EXPLAIN, extract_path, fill, template_has
from victims.http.wire_base import AnswerError, WireProtocol, answer_field, error_text, path_suffix

__all__ = ["AnswerError", "WireProtocol", "error_text", "make_protocol"]


class MlflowProtocol(WireProtocol):
    """MLflow's scoring protocol: `{"inputs": rows}`, or `{"dataframe_split": {"columns",
    "data"}}` for a model whose signature names columns (`victim.endpoint.columns`)."""

    name = "mlflow"

    def __init__(self, columns: list[str] | None = None):
        self.columns = columns

    def body(self, rows: list, explain: str | None) -> Any:
        out: dict[str, Any] = ({"dataframe_split": {"columns": self.columns, "data": rows}}
                               if self.columns else {"inputs": rows})
        if explain:
            out["params"] = {"explain": explain}
        return out

    def answer(self, payload: Any, explain: str | None = None) -> Any:
        if isinstance(payload, dict):
            return answer_field(payload, "predictions", "MLflow scoring protocol")
        return payload


class JsonTemplateProtocol(WireProtocol):
    name = "json"

    def __init__(self, template: Any, response_path: str | None, token: str | None):
        self.template = template or {"inputs": "$inputs"}
        self.path = response_path or "predictions"
        self.token = token
        self.sends_token = template_has(self.template, AUTH)

    def body(self, rows: list, explain: str | None) -> Any:
        return fill(self.template, rows, explain, self.token)

    def answer(self, payload: Any, explain: str | None = None) -> Any:
        try:
            return extract_path(payload, self.path)
        except (KeyError, IndexError, ValueError, TypeError):
            err = error_text(payload)
            if err is not None:
                raise AnswerError(f"answered an error: {err}") from None
            raise AnswerError(f"the response has no field {self.path!r} "
                              "(victim.endpoint.response_path)") from None

    def offers_explain(self) -> bool:
        return template_has(self.template, EXPLAIN)


class KServeV1Protocol(WireProtocol):
    """KServe V1 / TF Serving REST (row format): {url}:predict and {url}:explain."""

    name = "kserve-v1"

    def target(self, explain: str | None) -> str:
        return path_suffix(self.url, ":explain" if explain else ":predict")

    def body(self, rows: list, explain: str | None) -> Any:
        return {"instances": rows}

    def answer(self, payload: Any, explain: str | None = None) -> Any:
        if explain and isinstance(payload, dict) and "explanations" in payload:
            return payload["explanations"]
        return answer_field(payload, "predictions", "KServe V1 / TF Serving")


class TorchServeProtocol(JsonTemplateProtocol):
    """TorchServe's inference API: POST {host}/predictions/{model}[/{version}], explanations at
    /explanations/; the handler's body is a template, the answer the whole body (a list) or
    the field at `response_path`."""

    name = "torchserve"

    def __init__(self, template: Any, response_path: str | None, token: str | None):
        super().__init__(template or {"data": "$inputs"}, response_path, token)
        self.path = response_path

    def target(self, explain: str | None) -> str:
        if not explain:
            return self.url
        head, sep, tail = self.url.rpartition("/predictions/")
        return f"{head}/explanations/{tail}" if sep else self.url

    def answer(self, payload: Any, explain: str | None = None) -> Any:
        if self.path:
            return super().answer(payload, explain)
        if isinstance(payload, list):
            return payload
        return answer_field(payload, "predictions", "TorchServe: the handler's answer is read whole when "
                            "it is a list; else set victim.endpoint.response_path")

    def offers_explain(self) -> bool:
        return True


def make_protocol(spec: Any, token: str | None) -> WireProtocol:
    """The adapter for `victim.endpoint.protocol` (`auto`: MLflow's until the start-up probe,
    victims/http/discover.py, names the one that answered)."""
    if spec.protocol == "json":
        return JsonTemplateProtocol(spec.request_template, spec.response_path, token)
    if spec.protocol == "torchserve":
        return TorchServeProtocol(spec.request_template, spec.response_path, token)
    if spec.protocol == "kserve-v1":
        return KServeV1Protocol()
    if spec.protocol == "openai":
        from victims.http.wire_openai import OpenAIProtocol

        return OpenAIProtocol(spec)
    if spec.protocol == "kserve-v2":
        from victims.http.wire_v2 import OpenInferenceProtocol

        return OpenInferenceProtocol(spec)
    from victims.http.answers import columns_of

    return MlflowProtocol(columns_of(spec))
