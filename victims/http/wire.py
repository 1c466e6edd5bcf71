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
"""

from __future__ import annotations

from typing import Any

from victims.http.protocol import AUTH, EXPLAIN, extract_path, fill, template_has
from victims.http.secrets import clip


class AnswerError(Exception):
    """The response holds no answer where the protocol puts it; the message says what it holds."""


class WireProtocol:
    """One protocol: `body(rows, explain)` → JSON-able request; `answer(payload)` → the answer
    field of a parsed response."""

    name = "?"
    sends_token = False  # True: the token travels in the body, not in a header

    def body(self, rows: list, explain: str | None) -> Any:
        raise NotImplementedError

    def answer(self, payload: Any) -> Any:
        raise NotImplementedError

    def offers_explain(self) -> bool:
        return True


class MlflowProtocol(WireProtocol):
    name = "mlflow"

    def body(self, rows: list, explain: str | None) -> Any:
        out: dict[str, Any] = {"inputs": rows}
        if explain:
            out["params"] = {"explain": explain}
        return out

    def answer(self, payload: Any) -> Any:
        if isinstance(payload, dict):
            if "predictions" not in payload:
                keys = ", ".join(clip(k, 40) for k in list(payload)[:5])  # scrubbed, then cut
                raise AnswerError(f"the response has no 'predictions' field (keys: {keys})")
            return payload["predictions"]
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

    def answer(self, payload: Any) -> Any:
        try:
            return extract_path(payload, self.path)
        except (KeyError, IndexError, ValueError, TypeError):
            raise AnswerError(f"the response has no field {self.path!r} "
                              "(victim.endpoint.response_path)") from None

    def offers_explain(self) -> bool:
        return template_has(self.template, EXPLAIN)


def make_protocol(spec: Any, token: str | None) -> WireProtocol:
    """The adapter for `victim.endpoint.protocol`."""
    if spec.protocol == "json":
        return JsonTemplateProtocol(spec.request_template, spec.response_path, token)
    return MlflowProtocol()
