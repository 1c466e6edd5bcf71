"""A victim behind an HTTP endpoint (`victim.endpoint` in a scenario).

`RemoteBackend` answers `predict(x, kind)` / `explain(x, kind, gen)` like victims/local.py, by
POSTing batches of at most `max_batch` rows over one pooled `requests.Session`, with timeouts and
retries (exponential backoff on connection errors, timeouts, 5xx, 429 — honouring Retry-After;
invalid JSON bodies are retried too). Answers are validated (shape, finiteness, class count, labels
in range); a bad one raises `EndpointError` naming the endpoint and what was wrong.

Queries are charged for what is *sent*: the oracle charges each batch's first try, this client
charges every re-send to the run's budget before sending it (`bind_budget`), and the start-up
check is charged too (capped by the budget before anything is sent), so neither the scenario's
budget nor a server-side quota is ever exceeded. Per caller (the attack the oracle bills as) it
counts rows sent, re-sent requests and faults (`stats_for`).

How a stop is told apart (the runner reads `stopped_by`): transport faults that outlast the retries,
or re-sends that ate the budget, raise `EndpointFaults` (`faults`); an endpoint that refuses — 401,
403, a spent per-key quota, 429 without recovery — raises `EndpointRefused` (`endpoint`). Anything
else unusable is a plain `EndpointError`.

Credentials: the token comes from the environment variable `auth_env` names; `user:password@` in
the URL is sent as Basic auth (never both: that is bad input). Both, and credential-like query
values, are registered with the scrubber (victims/http/secrets.py) and never shown.

Protocols: `mlflow` ({"inputs": rows, "params": {"explain": kind}} → {"predictions": ...}) and
`json` (any request template with "$inputs" / "$explain" placeholders, and a dotted response path
such as "result.scores" or "outputs[0]").
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import numpy as np
import torch

from defenses.budget import STARTUP
from defenses.errors import BudgetExhausted, RowCapReached
from victims.errors import BadInput, InterfaceError
from victims.http.protocol import display_url, extract_path, fill, retry_after, template_has
from victims.http.secrets import SECRETS, valid_header_value

__all__ = ["EndpointError", "EndpointFaults", "EndpointRefused", "EndpointQuotaExhausted",
           "RemoteBackend", "display_url", "template_has", "split_credentials"]

MAX_RETRY_AFTER_S = 60.0  # a longer Retry-After is a refusal, not a transient fault
MAX_BACKOFF_S = 30.0


class EndpointError(Exception):
    """The endpoint failed or answered something unusable; the message names it."""


class EndpointFaults(EndpointError):
    """Transport faults outlasted the retries, or re-sends after faults used up the budget."""

    stopped_by = "faults"


class EndpointRefused(EndpointError):
    """The endpoint refuses this client: 401, 403, or 429 without recovery."""

    stopped_by = "endpoint"


class EndpointQuotaExhausted(EndpointRefused):
    """The endpoint's per-key query budget is spent (429 RESOURCE_EXHAUSTED)."""


class _Transient(Exception):
    """A failure worth retrying; `kind` names the fault, `wait` overrides the backoff."""

    def __init__(self, message: str, kind: str, wait: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.wait = wait


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """The URL without `user:password@`, and the (percent-decoded) credentials it carried."""
    p = urlsplit(url)
    if p.username is None and p.password is None:
        return url, None
    host = p.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{p.port}" if p.port else host
    creds = (unquote(p.username or ""), unquote(p.password or ""))
    return urlunsplit((p.scheme, netloc, p.path, p.query, p.fragment)), creds


@dataclass
class EndpointStats:
    """What the client sent (live; the report's victim.endpoint section). `by_caller` holds,
    per attack the oracle billed as, rows sent (first tries and re-sends), re-sent requests and
    failed attempts."""

    requests: int = 0
    retries: int = 0
    rows_sent: int = 0
    rows_resent: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    by_caller: dict[str, dict[str, int]] = field(default_factory=dict)

    def caller(self, who: str) -> dict[str, int]:
        return self.by_caller.setdefault(who, {"queries_sent": 0, "retries": 0, "faults": 0,
                                               "rows_resent": 0})

    def sent(self, who: str, rows: int, retry: bool) -> None:
        self.requests += 1
        self.rows_sent += rows
        c = self.caller(who)
        c["queries_sent"] += rows
        if retry:
            self.retries += 1
            self.rows_resent += rows
            c["retries"] += 1
            c["rows_resent"] += rows

    def fault(self, kind: str, who: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1
        self.caller(who)["faults"] += 1


class RemoteBackend:
    """Answers queries by HTTP; see the module docstring."""

    remote = True

    def __init__(self, spec: Any, *, dim: int, task: str, n_classes: int, n_outputs: int,
                 token: str | None = None, sleep: Callable[[float], None] = time.sleep,
                 budget: int | None = None):
        import requests
        from requests.adapters import HTTPAdapter

        self.spec = spec
        self.where = display_url(spec.url)
        SECRETS.add_url(spec.url)
        SECRETS.add(token)
        self._url, creds = split_credentials(spec.url)
        if token and creds:
            raise BadInput("victim.endpoint: the URL carries user:password@ credentials and auth_env "
                           "names a token; give one of them (URL credentials would replace the token)")
        self.dim, self.task, self.n_classes, self.n_outputs = dim, task, n_classes, n_outputs
        self._sleep = sleep
        self._charge: Callable[..., None] | None = None
        self._who: Callable[[], str] = lambda: STARTUP
        self.startup_budget = budget  # the row cap (max_rows) before the oracle's ledger exists
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
            if not valid_header_value(value):
                raise BadInput(f"victim.endpoint.auth_env: the token in ${spec.auth_env} cannot be sent "
                               "in an HTTP header (control characters, a line break, non-ASCII or "
                               "spaces at the ends); value not shown")
            self.session.headers[spec.auth_header] = value
        if creds:
            self.session.auth = creds
        self.unbilled = 0  # rows sent before a ledger was bound (the start-up check)
        self.billing_as: str | None = None  # caller for queries outside the oracle

    def __repr__(self) -> str:
        return f"RemoteBackend({self.where})"

    # ------------------------------------------------------------------ budget
    def bind_budget(self, charge: Callable[..., None], who: Callable[[], str] | None = None) -> None:
        """Charge re-sends to the run's ledger from now on (and the start-up check now); `who`
        tells which attack is asking."""
        self._charge = charge
        if who is not None:
            self._who = who
        if self.unbilled:
            n, self.unbilled = self.unbilled, 0
            try:
                charge(n, STARTUP)
            except BudgetExhausted:
                raise BadInput(f"victim.endpoint.max_rows: too small even for the {n} queries that "
                               f"checked the endpoint {self.where}") from None

    def caller(self) -> str:
        return self.billing_as or self._who() or "-"

    def bill(self, n: int) -> None:
        """Charge n rows about to be sent outside an oracle call (re-sends, the start-up check,
        scoring probes); raises BudgetExhausted before anything is sent."""
        if self._charge is not None:
            self._charge(n, self.caller())
            return
        cap = self.startup_budget
        if cap is not None and self.unbilled + n > cap:
            raise BudgetExhausted(n, cap - self.unbilled, cap)
        self.unbilled += n

    def stats_for(self, who: str) -> dict[str, int]:
        """Rows sent (first tries and re-sends), re-sent requests and faults for one caller."""
        return dict(self.stats.by_caller.get(who, {"queries_sent": 0, "retries": 0, "faults": 0}))

    def starved(self, exc: BudgetExhausted, who: str | None = None) -> Exception:
        """What a budget refusal means: EndpointFaults when the rows re-sent after faults are what
        used it up (without them this batch would have been answered), else the refusal itself.
        `who`: the attacker whose own budget refused (None: the run's row cap)."""
        resent = (self.stats.rows_resent if who is None or isinstance(exc, RowCapReached)
                  else self.stats.caller(who)["rows_resent"])
        if resent and exc.requested <= exc.remaining + resent:
            return EndpointFaults(f"{self.where}: faults used up the query budget ({resent} rows re-sent "
                                  f"after faults; without them these {exc.requested} rows would have "
                                  "been asked)")
        return exc

    def scrub(self, text: str) -> str:
        """`text` with every secret replaced by ***."""
        return SECRETS.scrub(text)

    # ------------------------------------------------------------------ HTTP
    def _body(self, rows: list, explain: str | None) -> dict[str, Any]:
        if self.spec.protocol == "json":
            template = self.spec.request_template or {"inputs": "$inputs"}
            return fill(template, rows, explain)
        body: dict[str, Any] = {"inputs": rows}
        if explain:
            body["params"] = {"explain": explain}
        return body

    def _parse(self, resp: Any) -> Any:
        """The answer field of a 2xx response; _Transient when the body is not usable JSON."""
        ctype = resp.headers.get("Content-Type", "")
        try:
            body = resp.json()
        except (ValueError, RecursionError):
            kind = "an HTML page" if "html" in ctype or resp.text.lstrip()[:1] == "<" else "invalid JSON"
            raise _Transient(f"answered {kind} (HTTP {resp.status_code})", "malformed") from None
        if self.spec.protocol == "json":
            path = self.spec.response_path or "predictions"
            try:
                return extract_path(body, path)
            except (KeyError, IndexError, ValueError, TypeError):
                raise EndpointError(f"{self.where}: the response has no field {path!r} "
                                    "(victim.endpoint.response_path)") from None
        if isinstance(body, dict):
            if "predictions" not in body:
                keys = ", ".join(str(k)[:40] for k in list(body)[:5])
                raise EndpointError(self.scrub(f"{self.where}: the response has no 'predictions' "
                                               f"field (keys: {keys})"))
            return body["predictions"]
        return body

    def _attempt(self, body: str) -> Any:
        """One POST; the answer field, or _Transient / an EndpointError subclass."""
        import requests

        try:
            resp = self.session.post(self._url, data=body, timeout=self.spec.timeout_s,
                                     allow_redirects=False)
        except requests.Timeout:
            raise _Transient(f"timed out after {self.spec.timeout_s} s", "timeout") from None
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError,
                requests.exceptions.ContentDecodingError) as exc:
            raise _Transient(f"connection failed ({type(exc).__name__})", "connection") from None
        except requests.RequestException as exc:  # its text may hold the URL: name the type only
            raise EndpointError(f"{self.where}: request failed ({type(exc).__name__})") from None
        status = resp.status_code
        if status == 429:
            raise _Transient("answered 429 Too Many Requests", "429", self._on_429(resp))
        if status >= 500:
            raise _Transient(f"answered HTTP {status}", str(status))
        if status in (401, 403):
            raise EndpointRefused(self.scrub(f"{self.where}: answered HTTP {status}: "
                                             f"{self._excerpt(resp)} (the endpoint refuses this client)"))
        if status >= 300:
            raise EndpointError(self.scrub(f"{self.where}: answered HTTP {status}: {self._excerpt(resp)}"))
        return self._parse(resp)

    def _post(self, rows: list, explain: str | None) -> Any:
        """One request for a chunk, with retries; returns the answer field."""
        body = json.dumps(self._body(rows, explain))
        attempts = self.spec.retries + 1
        last, last_kind = "", ""
        who = self.caller()
        for attempt in range(attempts):
            if attempt:
                try:
                    self.bill(len(rows))
                except BudgetExhausted:
                    raise EndpointFaults(self.scrub(
                        f"{self.where}: the query budget ran out re-sending rows after faults "
                        f"({self.stats.rows_resent} rows re-sent; last fault: {last})")) from None
            self.stats.sent(who, len(rows), retry=attempt > 0)
            try:
                return self._attempt(body)
            except _Transient as exc:
                self.stats.fault(exc.kind, who)
                last, last_kind, wait = str(exc), exc.kind, exc.wait
            except EndpointError:
                self.stats.fault("refused", who)
                raise
            if attempt + 1 < attempts:
                backoff = self.spec.backoff_s * (2**attempt) * (1 + 0.25 * random.random())
                self._sleep(min(MAX_BACKOFF_S, wait if wait is not None else backoff))
        msg = self.scrub(f"{self.where}: {last} (gave up after {attempts} attempts)")
        if last_kind == "429":
            raise EndpointRefused(f"{msg}: rate limited without recovery")
        raise EndpointFaults(msg)

    def _on_429(self, resp: Any) -> float | None:
        try:
            info = resp.json()
        except (ValueError, RecursionError):
            info = {}
        if isinstance(info, dict) and info.get("error_code") == "RESOURCE_EXHAUSTED":
            msg = str(info.get("message", ""))[:200]
            raise EndpointQuotaExhausted(self.scrub(f"{self.where}: the endpoint's query budget for "
                                                    f"this API key is spent ({msg})"))
        wait = retry_after(resp.headers.get("Retry-After"))
        if wait is not None and wait > MAX_RETRY_AFTER_S:
            raise EndpointRefused(f"{self.where}: answered 429 with Retry-After {wait:.0f} s "
                                  f"(more than {MAX_RETRY_AFTER_S:.0f} s): rate limited")
        return wait

    def _excerpt(self, resp: Any) -> str:
        text = " ".join(resp.text[:2000].split())[:200]
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
        except (TypeError, ValueError, RecursionError):
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
