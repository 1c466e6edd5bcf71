"""A victim behind an HTTP endpoint (`victim.endpoint` in a scenario).

`RemoteBackend` answers `predict(x, kind)` / `explain(x, kind, gen)` like victims/local.py, by
POSTing batches of at most `max_batch` rows over one pooled `requests.Session`, with timeouts and
retries (exponential backoff on connection errors, timeouts, 5xx, 429 — honouring Retry-After;
invalid JSON bodies are retried too). Every retry is charged to the run's query budget *before* it
is sent (`bind_budget`, called by the Oracle), so faults can never push a scan past its budget.
Answers are validated (shape, finiteness, class count, labels in range); a bad one raises
`EndpointError` naming the endpoint and what was wrong.

The auth token is read from the environment variable `auth_env` names. It lives only in the
session's headers: it is scrubbed from every message, never logged, reported or raised.

Protocols: `mlflow` ({"inputs": rows, "params": {"explain": kind}} → {"predictions": ...}) and
`json` (any request template with "$inputs" / "$explain" placeholders, and a dotted response path
such as "result.scores" or "outputs[0]").
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import torch

from defenses.errors import BudgetExhausted
from victims.errors import BadInput, InterfaceError

MAX_RETRY_AFTER_S = 60.0  # a longer Retry-After is a permanent refusal, not a transient one
MAX_BACKOFF_S = 30.0


class EndpointError(Exception):
    """The endpoint failed or answered something unusable; the message names it."""


class EndpointQuotaExhausted(BudgetExhausted):
    """The endpoint refused the API key's queries (429 RESOURCE_EXHAUSTED): its budget is spent."""

    def __init__(self, message: str):
        Exception.__init__(self, message)
        self.requested, self.remaining, self.budget = 0, 0, 0


class _Transient(Exception):
    """A failure worth retrying; `wait` overrides the backoff (Retry-After)."""

    def __init__(self, message: str, wait: float | None = None):
        super().__init__(message)
        self.wait = wait


def display_url(url: str) -> str:
    """The endpoint as shown in messages: scheme, host, port and path (no userinfo, no query)."""
    p = urlsplit(url)
    host = p.hostname or ""
    port = f":{p.port}" if p.port else ""
    return f"{p.scheme}://{host}{port}{p.path}"


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _fill(template: Any, inputs: list, explain: str | None) -> Any:
    """The request template with "$inputs" / "$explain" replaced (recursively)."""
    if template == "$inputs":
        return inputs
    if template == "$explain":
        return explain
    if isinstance(template, dict):
        return {k: _fill(v, inputs, explain) for k, v in template.items()}
    if isinstance(template, list):
        return [_fill(v, inputs, explain) for v in template]
    return template


def template_has(template: Any, token: str) -> bool:
    if template == token:
        return True
    if isinstance(template, dict):
        return any(template_has(v, token) for v in template.values())
    if isinstance(template, list):
        return any(template_has(v, token) for v in template)
    return False


def extract_path(body: Any, path: str) -> Any:
    """The value at a dotted path with [i] indices ("result.scores", "outputs[0]")."""
    node = body
    for part in path.replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("[") and part.endswith("]"):
            if not isinstance(node, list):
                raise KeyError(path)
            node = node[int(part[1:-1])]
        else:
            if not isinstance(node, dict) or part not in node:
                raise KeyError(path)
            node = node[part]
    return node


@dataclass
class EndpointStats:
    """What the client sent (live; the report's victim.endpoint section)."""

    requests: int = 0
    retries: int = 0
    rows_sent: int = 0
    faults: dict[str, int] = field(default_factory=dict)

    def fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1


class RemoteBackend:
    """Answers queries by HTTP; see the module docstring."""

    remote = True

    def __init__(self, spec: Any, *, dim: int, task: str, n_classes: int, n_outputs: int,
                 token: str | None = None, sleep: Callable[[float], None] = time.sleep):
        import requests
        from requests.adapters import HTTPAdapter

        self.spec = spec
        self.where = display_url(spec.url)
        self.dim, self.task, self.n_classes, self.n_outputs = dim, task, n_classes, n_outputs
        self._sleep = sleep
        self._charge: Callable[[int], None] | None = None
        self._secrets = [token] if token else []
        self.stats = EndpointStats()
        self.record: dict[str, Any] = {}
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=2, pool_maxsize=4, max_retries=0)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.verify = spec.verify_tls
        self.session.headers.update({"Content-Type": "application/json", "Accept": "application/json"})
        if token:
            value = f"{spec.auth_scheme} {token}" if spec.auth_scheme else token
            self.session.headers[spec.auth_header] = value
        self.unbilled = 0  # queries sent before a ledger was bound (the start-up probe)
        self.billing_as: str | None = None  # ledger bucket for queries outside the oracle

    def __repr__(self) -> str:
        return f"RemoteBackend({self.where})"

    # ------------------------------------------------------------------ budget
    def bind_budget(self, charge: Callable[[int], None]) -> None:
        """Charge retries (and the start-up probe) to the run's ledger from now on."""
        self._charge = charge
        if self.unbilled:
            n, self.unbilled = self.unbilled, 0
            try:
                charge(n)
            except BudgetExhausted:
                raise BadInput(f"defenses.query_budget: too small even for the {n} queries that "
                               f"checked the endpoint {self.where}") from None

    def bill(self, n: int) -> None:
        """Charge n queries about to be sent outside an oracle call (retries, scoring probes)."""
        if self._charge is not None:
            if self.billing_as:
                self._charge(n, self.billing_as)  # raises BudgetExhausted before anything is sent
            else:
                self._charge(n)
        else:
            self.unbilled += n

    def scrub(self, text: str) -> str:
        """`text` with every secret replaced by ***."""
        for s in self._secrets:
            text = text.replace(s, "***")
        return text

    # ------------------------------------------------------------------ HTTP
    def _body(self, rows: list, explain: str | None) -> dict[str, Any]:
        if self.spec.protocol == "json":
            template = self.spec.request_template or {"inputs": "$inputs"}
            return _fill(template, rows, explain)
        body: dict[str, Any] = {"inputs": rows}
        if explain:
            body["params"] = {"explain": explain}
        return body

    def _parse(self, resp: Any) -> Any:
        """The answer field of a 2xx response; _Transient when the body is not usable JSON."""
        ctype = resp.headers.get("Content-Type", "")
        try:
            body = resp.json()
        except ValueError:
            kind = "an HTML page" if "html" in ctype or resp.text.lstrip()[:1] == "<" else "invalid JSON"
            raise _Transient(f"answered {kind} (HTTP {resp.status_code})") from None
        if self.spec.protocol == "json":
            path = self.spec.response_path or "predictions"
            try:
                return extract_path(body, path)
            except (KeyError, IndexError, ValueError, TypeError):
                raise EndpointError(self.scrub(
                    f"{self.where}: the response has no field {path!r} "
                    f"(victim.endpoint.response_path)")) from None
        if isinstance(body, dict):
            if "predictions" not in body:
                keys = ", ".join(list(body)[:5])
                raise EndpointError(self.scrub(f"{self.where}: the response has no 'predictions' "
                                               f"field (keys: {keys})"))
            return body["predictions"]
        return body

    def _post(self, rows: list, explain: str | None) -> Any:
        """One request for a chunk, with retries; returns the answer field."""
        import requests

        body = json.dumps(self._body(rows, explain))
        attempts = self.spec.retries + 1
        last = ""
        for attempt in range(attempts):
            if attempt:
                self.bill(len(rows))
                self.stats.retries += 1
            self.stats.requests += 1
            self.stats.rows_sent += len(rows)
            wait: float | None = None
            try:
                resp = self.session.post(self.spec.url, data=body, timeout=self.spec.timeout_s)
                status = resp.status_code
                if status == 429:
                    wait = self._on_429(resp)
                    raise _Transient("answered 429 Too Many Requests", wait)
                if status >= 500:
                    self.stats.fault(str(status))
                    raise _Transient(f"answered HTTP {status}")
                if status >= 400:
                    raise EndpointError(self.scrub(
                        f"{self.where}: answered HTTP {status}: {self._excerpt(resp)}"))
                return self._parse(resp)
            except requests.Timeout:
                self.stats.fault("timeout")
                last = f"timed out after {self.spec.timeout_s} s"
            except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
                self.stats.fault("connection")
                last = f"connection failed ({type(exc).__name__})"
            except _Transient as exc:
                if "JSON" in str(exc) or "HTML" in str(exc):
                    self.stats.fault("malformed")
                last, wait = str(exc), exc.wait
            if attempt + 1 < attempts:
                backoff = self.spec.backoff_s * (2**attempt) * (1 + 0.25 * random.random())
                self._sleep(min(MAX_BACKOFF_S, wait if wait is not None else backoff))
        raise EndpointError(self.scrub(f"{self.where}: {last} (gave up after {attempts} attempts)"))

    def _on_429(self, resp: Any) -> float | None:
        self.stats.fault("429")
        try:
            info = resp.json()
        except ValueError:
            info = {}
        if isinstance(info, dict) and info.get("error_code") == "RESOURCE_EXHAUSTED":
            msg = str(info.get("message", ""))[:200]
            raise EndpointQuotaExhausted(self.scrub(f"{self.where}: the endpoint's query budget for "
                                                    f"this API key is spent ({msg})"))
        wait = _retry_after(resp.headers.get("Retry-After"))
        if wait is not None and wait > MAX_RETRY_AFTER_S:
            raise EndpointError(self.scrub(f"{self.where}: answered 429 with Retry-After {wait:.0f} s "
                                           f"(more than {MAX_RETRY_AFTER_S:.0f} s): rate limited"))
        return wait

    def _excerpt(self, resp: Any) -> str:
        text = " ".join(resp.text.split())[:200]
        return self.scrub(text) or resp.reason or ""

    # ------------------------------------------------------------------ answers
    def _ask(self, x: torch.Tensor, explain: str | None) -> np.ndarray:
        """Answers for a flat batch, one request per `max_batch` rows; float64 (N, ...)."""
        xs = x.detach().cpu().to(torch.float64).numpy()
        parts = []
        step = self.spec.max_batch
        for i in range(0, len(xs), step):
            chunk = xs[i : i + step]
            answer = self._post(chunk.tolist(), explain)
            parts.append(self._validate(answer, len(chunk), explain))
        if not parts:
            return np.zeros((0, self.dim if explain else max(1, self.n_outputs)))
        return np.concatenate(parts)

    def _validate(self, answer: Any, n: int, explain: str | None) -> np.ndarray:
        """The answer as an array of the documented shape, or EndpointError saying what is wrong."""
        what = "explanations" if explain else "predictions"
        try:
            y = np.asarray(answer, dtype=np.float64)
        except (TypeError, ValueError):
            raise EndpointError(f"{self.where}: {what} are not a numeric array (ragged or "
                                f"non-numeric)") from None
        if y.ndim == 0 or len(y) != n:
            got = list(y.shape)
            raise EndpointError(f"{self.where}: sent {n} rows, got {what} of shape {got}")
        if not np.isfinite(y).all():
            raise EndpointError(f"{self.where}: {what} contain NaN or infinite values")
        if explain:
            y = y.reshape(n, -1)
            if y.shape[1] != self.dim:
                raise EndpointError(f"{self.where}: explanations have {y.shape[1]} columns, "
                                    f"expected the input dimension {self.dim}")
            return y
        return y

    def _shape_predictions(self, y: np.ndarray, kind: str) -> torch.Tensor:
        n = len(y)
        if kind == "label":
            y = y.reshape(n, -1)
            if y.shape[1] != 1:
                raise EndpointError(f"{self.where}: label output expected one label per row, "
                                    f"got {y.shape[1]} columns")
            y = y[:, 0]
            if n and (np.any(y != np.round(y)) or y.min() < 0 or
                      (self.n_classes and y.max() >= max(self.n_classes, 2))):
                raise EndpointError(f"{self.where}: labels must be integers in [0, "
                                    f"{max(self.n_classes, 2)}), got values in [{y.min()}, {y.max()}]")
            return torch.as_tensor(y.astype(np.int64))
        y = y.reshape(n, -1)
        want = self.n_outputs
        if kind == "probabilities" and self.task == "binary":
            want = 2
            if y.shape[1] == 1:  # p(class 1) only
                y = np.concatenate([1 - y, y], axis=1)
        elif kind == "probabilities" and self.task == "multiclass":
            want = self.n_classes
        if y.shape[1] != want:
            raise EndpointError(f"{self.where}: {kind} have {y.shape[1]} columns, expected {want} "
                                f"(class count)")
        return torch.as_tensor(y)

    def predict(self, x: torch.Tensor, kind: str) -> torch.Tensor:
        """Predictions of `kind` as the endpoint returns them: labels (N,) or (N, K) values."""
        return self._shape_predictions(self._ask(x, None), kind)

    def explain(self, x: torch.Tensor, kind: str, gen: torch.Generator) -> torch.Tensor:
        """Explanations (N, d) of `kind` (gradient | smoothgrad), computed by the endpoint."""
        if self.spec.protocol == "json" and not template_has(self.spec.request_template, "$explain"):
            raise InterfaceError(f"{self.where}: the json request_template has no \"$explain\" "
                                 "placeholder, so explanations cannot be requested")
        return torch.as_tensor(self._ask(x, kind))

    def weights(self) -> dict[str, torch.Tensor]:
        raise InterfaceError(f"{self.where}: an HTTP endpoint releases no weights")

    def close(self) -> None:
        self.session.close()
