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
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import torch

from harness.errors import BadInput, BudgetExhausted, InterfaceError
from victims.build import Truth

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


def _has(template: Any, token: str) -> bool:
    if template == token:
        return True
    if isinstance(template, dict):
        return any(_has(v, token) for v in template.values())
    if isinstance(template, list):
        return any(_has(v, token) for v in template)
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
        if self.spec.protocol == "json" and not _has(self.spec.request_template, "$explain"):
            raise InterfaceError(f"{self.where}: the json request_template has no \"$explain\" "
                                 "placeholder, so explanations cannot be requested")
        return torch.as_tensor(self._ask(x, kind))

    def weights(self) -> dict[str, torch.Tensor]:
        raise InterfaceError(f"{self.where}: an HTTP endpoint releases no weights")

    def close(self) -> None:
        self.session.close()


# ---------------------------------------------------------------------------- building


@dataclass
class BlackBoxTruth(Truth):
    """No model, no data: only the endpoint itself, which black-box scorers may probe
    (harness/scoring/blackbox.py; every probe is charged to the run's budget)."""

    endpoint: RemoteBackend | None = None
    info: Any = None
    seed: int = 0

    def probe_predict(self, x: torch.Tensor) -> torch.Tensor:
        """The endpoint's predictions for held-out probes, charged to the budget first."""
        self.endpoint.billing_as = "blackbox_scoring"
        try:
            self.endpoint.bill(len(x))
            return self.endpoint.predict(x, self.info.output)
        finally:
            self.endpoint.billing_as = None

    def probe_explain(self, x: torch.Tensor) -> torch.Tensor:
        self.endpoint.billing_as = "blackbox_scoring"
        try:
            self.endpoint.bill(len(x))
            return self.endpoint.explain(x, self.info.interface, torch.Generator())
        finally:
            self.endpoint.billing_as = None


def read_token(spec: Any) -> str | None:
    """The auth token from the environment variable `auth_env` names (None without auth)."""
    if not spec.auth_env:
        return None
    token = os.environ.get(spec.auth_env, "")
    if not token.strip():
        raise BadInput(f"victim.endpoint.auth_env: the environment variable {spec.auth_env} is not "
                       "set or empty (it must hold the endpoint's token)")
    return token.strip()


def _public_shape(s: Any) -> dict[str, Any]:
    """dim, task, classes, pool and input range from the scenario's dataset (when it names one)
    and the endpoint spec; BadInput when they disagree or the dimension is unknown."""
    ep = s.victim.endpoint
    out: dict[str, Any] = {"pool": None, "low": None, "high": None, "shape": None, "data": None}
    if "dataset" in s.victim.data.model_fields_set:
        from victims.datasets import load_dataset

        data = load_dataset(s.victim.data, s.seed)
        out.update(dim=data.dim, task=data.task, n_classes=data.n_classes, n_outputs=data.n_outputs,
                   pool=data.x_pool, shape=tuple(data.input_shape), data=data)
        both = np.concatenate([data.x_train, data.x_pool]) if len(data.x_pool) else data.x_train
        out["low"], out["high"] = float(both.min()), float(both.max())
        if ep.input_dim is not None and ep.input_dim != data.dim:
            raise BadInput(f"victim.endpoint.input_dim: {ep.input_dim} disagrees with the dataset's "
                           f"dimension {data.dim}")
        return out
    if ep.input_dim is None:
        raise BadInput("victim.endpoint.input_dim: required when victim.data names no dataset "
                       "(the number of input features the endpoint takes)")
    task = s.victim.data.task
    out.update(dim=ep.input_dim, task=task, n_outputs=ep.n_outputs, n_classes=None,
               shape=(ep.input_dim,))
    return out


def build_remote_victim(s: Any) -> Any:
    """A Victim answered by the scenario's endpoint. Truth is the named model file when there is
    one (full scoring), else absent (black-box scoring). BadInput when the endpoint is unusable."""
    from victims.build import PublicInfo, Victim, resolve_device

    ep = s.victim.endpoint
    where = display_url(ep.url)
    if urlsplit(ep.url).scheme not in ("http", "https") or not urlsplit(ep.url).hostname:
        raise BadInput(f"victim.endpoint.url: {where!r} is not an http(s) URL")
    if s.interface.kind == "whitebox":
        raise BadInput("interface.kind: whitebox is a weight release; an endpoint offers prediction, "
                       "gradient or smoothgrad")
    if ep.protocol == "json" and s.interface.kind != "prediction" and not _has(
            ep.request_template, "$explain"):
        raise BadInput(f"victim.endpoint.request_template: the {s.interface.kind} interface needs a "
                       '"$explain" placeholder in the template')
    device = resolve_device(s.device)
    token = read_token(ep)
    pub = _public_shape(s)
    task = pub["task"]
    n_out = pub["n_outputs"]
    backend = RemoteBackend(ep, dim=pub["dim"], task=task or "multiclass",
                            n_classes=pub["n_classes"] or 0, n_outputs=n_out or 0, token=token)
    probe = _probe(backend, s, pub)
    task, n_classes, n_out = probe["task"], probe["n_classes"], probe["n_outputs"]
    backend.task, backend.n_classes, backend.n_outputs = task, n_classes, n_out
    pool = pub["pool"] if pub["pool"] is not None else np.zeros((0, pub["dim"]))
    info = PublicInfo(
        input_shape=pub["shape"], dim=pub["dim"], n_outputs=n_out, n_classes=n_classes, task=task,
        interface=s.interface.kind, output=s.interface.output, gradient_of=s.interface.gradient_of,
        x_pool=torch.as_tensor(pool, dtype=torch.float64, device=device),
        input_low=pub["low"] if pub["low"] is not None else -3.0,
        input_high=pub["high"] if pub["high"] is not None else 3.0,
        device=device, dtype=torch.float64,
    )
    record: dict[str, Any] = {
        "endpoint": {"url": where, "protocol": ep.protocol, "max_batch": ep.max_batch,
                     "verify_tls": ep.verify_tls, "auth": bool(token), "stats": backend.stats.__dict__},
        "notes": [f"remote endpoint {where}: defenses are applied by the endpoint, not by leakmeter"],
        "device": str(device), "dtype": "float64",
    }
    if not ep.verify_tls:
        record["notes"].append("TLS verification is OFF for this endpoint")
    utility: dict[str, float] = {}
    truth: Any = Truth(None, None, None, None)
    if s.victim.model.arch == "file":
        truth, utility = _file_truth(s)
        record["notes"].append("truth: the named model file (full scoring)")
    else:
        truth = BlackBoxTruth(None, None, None, None, endpoint=backend, info=info, seed=s.seed)
        record["notes"].append("truth unavailable: black-box scoring only")
    return Victim(backend, truth, info, utility, record)


def _probe(backend: RemoteBackend, s: Any, pub: dict[str, Any]) -> dict[str, Any]:
    """Ask the endpoint once (and once more for explanations) to check it is usable; returns
    task, n_classes, n_outputs. BadInput (exit 2) naming the endpoint when it is not."""
    d = pub["dim"]
    x = torch.zeros(1, d, dtype=torch.float64)
    if pub["pool"] is not None and len(pub["pool"]):
        x = torch.as_tensor(pub["pool"][:1], dtype=torch.float64)
    kind = s.interface.output
    try:
        raw = backend._ask(x, None)
        backend.unbilled += 1
        task, n_classes, n_out = pub["task"], pub["n_classes"], pub["n_outputs"]
        cols = raw.reshape(1, -1).shape[1]
        if n_classes is None:  # no dataset named: learn the class count from the answer
            if kind == "label":
                n_out = n_out or backend.spec.n_outputs
                if not n_out:
                    raise BadInput("victim.endpoint.n_outputs: required for a label-only endpoint "
                                   "when victim.data names no dataset (the number of classes)")
            else:
                n_out = n_out or cols
            if task is None:
                task = "binary" if (n_out == 2 and kind == "probabilities") or (
                    n_out == 1 and kind != "logits") else ("regression" if n_out == 1 else "multiclass")
            n_classes = 0 if task == "regression" else (2 if task == "binary" else n_out)
            if task == "binary":
                n_out = 1
        backend.task, backend.n_classes, backend.n_outputs = task, n_classes, n_out
        backend._shape_predictions(raw, kind)
        if s.interface.kind in ("gradient", "smoothgrad"):
            backend.explain(x, s.interface.kind, torch.Generator())
            backend.unbilled += 1
    except EndpointQuotaExhausted as exc:
        raise BadInput(f"victim.endpoint: {exc}") from None
    except (EndpointError, InterfaceError) as exc:
        raise BadInput(f"victim.endpoint: {backend.scrub(str(exc))}") from None
    return {"task": task, "n_classes": n_classes, "n_outputs": n_out}


def _file_truth(s: Any) -> tuple[Any, dict[str, float]]:
    """The truth (and utility) of the named model file, built locally without retraining."""
    from victims.build import build_victim

    local_s = s.model_copy(deep=True)
    local_s.victim.endpoint = None
    local = build_victim(local_s)
    return local.truth, local.utility
