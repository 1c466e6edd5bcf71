"""A victim behind an HTTP endpoint (`victim.endpoint` in a scenario).

`RemoteBackend` answers `predict(x, kind)` / `explain(x, kind, gen)` like victims/local.py, by
POSTing batches of at most `max_batch` rows over one pooled session (victims/http/transport.py:
a timeout per socket operation, a total deadline per request, a cap on the answer's size), with
retries (exponential backoff on connection errors, timeouts, missed deadlines, 5xx, 429 —
honouring Retry-After; invalid JSON bodies are retried too). Answers are validated (shape,
finiteness, class count, labels in range); a bad one raises `EndpointError` naming the endpoint
and what was wrong. The request body and where the answer sits are the wire protocol's
(victims/http/wire.py); this class is the one place that owns retries, size limits, deadlines,
budget charging and scrubbing, whatever the protocol.

Queries are charged for what is *sent*: the oracle charges each batch's first try, this client
charges every re-send to the run's budget before sending it (`bind_budget`), and the start-up
check is charged too (capped by the budget before anything is sent), so neither the scenario's
budget nor a server-side quota is ever exceeded. Rows the endpoint refused are not answers: the
re-send after a 429 (or after a 401 that renewed an OAuth2 token) is not billed again, and when a
batch fails its unsent tail — and the refused chunk — is refunded (`refund`), so the ledger holds
what the server answered plus re-sends after faults. `defenses.request_budget` counts requests
per attacker before each is sent. Per caller (the attack the oracle bills as) it
counts rows sent, re-sent requests and faults (`stats_for`).

How a stop is told apart (the runner reads `stopped_by`): transport faults that outlast the retries,
or re-sends that ate the budget, raise `EndpointFaults` (`faults`); an endpoint that refuses — 401,
403, a spent per-key quota, 429 without recovery — raises `EndpointRefused` (`endpoint`). Anything
else unusable is a plain `EndpointError`.

Credentials: the token comes from the environment variable `auth_env` names; `user:password@` in
the URL is sent as Basic auth (never both: that is bad input). Both, and credential-like query
values, are registered with the scrubber (victims/http/secrets.py) and never shown.

Every message built from what an endpoint sent is scrubbed before it is cut (`clip`), so a secret
an endpoint echoes is never shown in part.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import numpy as np
import torch

from defenses.budget import SCORING, STARTUP, RequestBudget
from defenses.errors import BudgetExhausted, RowCapReached
from victims.errors import BadInput, InterfaceError
from victims.http.answers import decode
from victims.http.auth import HeaderCredential, build_credential
from victims.http.jsonlimits import JSONNumberTooLarge, JSONTooLarge
from victims.http.protocol import INPUTS_HEADER, display_url, retry_after, template_has
from victims.http.secrets import SECRETS, clip, valid_header_value
from victims.http.stats import EndpointStats
from victims.http.transport import DeadlineExceeded, Reply, TooLarge, exchange, new_session, tls_hint
from victims.http.wire import AnswerError, make_protocol

__all__ = ["EndpointError", "EndpointFaults", "EndpointRefused", "EndpointQuotaExhausted",
           "RemoteBackend", "display_url", "template_has", "split_credentials"]

MAX_RETRY_AFTER_S = 60.0  # a longer Retry-After is a refusal, not a transient fault
MAX_BACKOFF_S = 30.0
DEADLINE_FLOOR_S = 60.0  # the default deadline per request: max(60 s, 3 × timeout_s)


def deadline_of(spec: Any) -> float:
    """Seconds a whole request may take (connect to last byte): `deadline_s`, else
    max(DEADLINE_FLOOR_S, 3 × timeout_s)."""
    given = getattr(spec, "deadline_s", None)
    return float(given) if given is not None else max(DEADLINE_FLOOR_S, 3.0 * spec.timeout_s)


class EndpointError(Exception):
    """The endpoint failed or answered something unusable; the message names it (`status`: the
    HTTP status when it answered one)."""

    def __init__(self, message: str = "", status: int | None = None):
        super().__init__(message)
        self.status = status


class EndpointFaults(EndpointError):
    """Transport faults outlasted the retries, or re-sends after faults used up the budget."""

    stopped_by = "faults"


class EndpointRefused(EndpointError):
    """The endpoint refuses this client: 401, 403, or 429 without recovery."""

    stopped_by = "endpoint"


class EndpointQuotaExhausted(EndpointRefused):
    """The endpoint's per-key query budget is spent (429 RESOURCE_EXHAUSTED)."""


class EndpointTLSError(EndpointError):
    """The TLS handshake failed (certificate not trusted, name mismatch, client certificate
    required): not a transient fault, never retried."""


REFUSED = "429"  # the fault kind whose rows the endpoint did not answer: a re-send is not billed
# a 400 that says the key is bad (TorchServe's InvalidKeyException, gateways' "invalid api key")
INVALID_KEY = ("invalidkey", "invalid key", "invalid api key", "invalid token", "token expired",
               "expired token", "invalid_token", "unauthorized", "unauthenticated")


class _Transient(Exception):
    """A failure worth retrying; `kind` names the fault, `wait` overrides the backoff."""

    def __init__(self, message: str, kind: str, wait: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.wait = wait


def _no_vars(key: str, name: str) -> str:
    raise BadInput(f"victim.endpoint.{key}: no variables can be read here")


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


class RemoteBackend:
    """Answers queries by HTTP; see the module docstring."""

    remote = True

    def __init__(self, spec: Any, *, dim: int, task: str, n_classes: int, n_outputs: int,
                 token: str | None = None, sleep: Callable[[float], None] = time.sleep,
                 budget: int | None = None, headers: dict[str, str] | None = None,
                 read_var: Callable[[str, str], str] | None = None, request_budget: int | None = None):
        self.spec, self.where, self.declared_standardize = spec, display_url(spec.url), None
        SECRETS.add_url(spec.url)
        SECRETS.add(token)
        self._url, creds = split_credentials(spec.url)
        self.keyed = bool(token or creds or headers)  # the answers' quota is some key's
        if token and creds:
            raise BadInput("victim.endpoint: the URL carries user:password@ credentials and auth_env "
                           "names a token; give one of them (URL credentials would replace the token)")
        self.dim, self.task, self.n_classes, self.n_outputs = dim, task, n_classes, n_outputs
        self._sleep = sleep
        self._charge: Callable[..., None] | None = None
        self._refund: Callable[[int, str], None] | None = None
        self._who: Callable[[], str] = lambda: STARTUP
        self.startup_budget = budget  # the row cap (max_rows) before the oracle's ledger exists
        self.stats = EndpointStats()
        self.record: dict[str, Any] = {}
        self.session = new_session(spec, self._url)
        self.deadline_s = deadline_of(spec)
        self.max_bytes = int(spec.max_response_mb * 2**20)
        self.protocol = make_protocol(spec, token).bind(self._url)
        self.classes: list[str] | None = getattr(spec, "classes", None)  # string labels' order
        self.refusal_statuses = set(getattr(spec, "refusal_statuses", None) or (401, 403))
        for name, value in (headers or {}).items():  # values from the environment, already scrubbed
            self.session.headers[name] = value
        read = read_var or _no_vars
        # the configured credential goes on every request ("$auth" in a template carries a token instead)
        self.auth = build_credential(spec, None if self.protocol.sends_token else token, read, self.session)
        self.keyed = self.keyed or self.auth is not None
        self.probe_auth: HeaderCredential | None = None
        probe_env = getattr(spec, "probe_auth_env", None)
        if probe_env:
            value = read("probe_auth_env", probe_env)
            value = f"{spec.auth_scheme} {value}" if spec.auth_scheme else value
            if not valid_header_value(value):
                raise BadInput(f"victim.endpoint.probe_auth_env: the token in ${probe_env} cannot be sent "
                               "in an HTTP header; value not shown")
            self.probe_auth = HeaderCredential(spec.auth_header, value)
        if creds:
            self.session.auth = creds
        self.requests = RequestBudget(request_budget)  # defenses.request_budget, per attacker
        self.unbilled = 0  # rows sent before a ledger was bound (the start-up check)
        self.billing_as: str | None = None  # caller for queries outside the oracle

    def __repr__(self) -> str:
        return f"RemoteBackend({self.where})"

    # ------------------------------------------------------------------ budget
    def bind_budget(self, charge: Callable[..., None], who: Callable[[], str] | None = None,
                    refund: Callable[[int, str], None] | None = None) -> None:
        """Charge re-sends to the run's ledger from now on (and the start-up check now); `who`
        tells which attack is asking; `refund` takes back rows charged but never answered."""
        self._charge = charge
        self._refund = refund
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

    def credential(self) -> HeaderCredential | None:
        """The credential the current caller's requests carry: the scan's own requests (start-up
        check, verification probes) go on `probe_auth_env`'s key when there is one, so the
        attacker's key pays exactly the attacks' rows; everything else on the scenario's."""
        if self.probe_auth is not None and self.caller() in (SCORING, STARTUP):
            return self.probe_auth
        return self.auth

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
    def _attempt(self, url: str, data: bytes | None, explain: str | None = None) -> Any:
        """One POST (a GET when `data` is None: its parsed JSON body); the answer field, or
        _Transient / an EndpointError subclass. Every message is scrubbed before it is cut
        (`clip`), never after."""
        import requests

        try:
            reply = exchange(self.session, url, data, self.spec.timeout_s, self.deadline_s,
                             self.max_bytes, auth=self.credential())
        except DeadlineExceeded:
            raise _Transient(f"no whole answer within {self.deadline_s:g} s (the deadline per request, "
                             "victim.endpoint.deadline_s)", "deadline") from None
        except TooLarge:
            raise EndpointError(f"{self.where}: answered more than {self.max_bytes / 2**20:g} MiB "
                                "(victim.endpoint.max_response_mb; or send fewer rows per request "
                                "with victim.endpoint.max_batch)") from None
        except requests.exceptions.SSLError as exc:
            raise EndpointTLSError(self.scrub(f"{self.where}: {tls_hint(exc, self.spec)}")) from None
        except requests.Timeout:
            raise _Transient(f"timed out after {self.spec.timeout_s} s", "timeout") from None
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError,
                requests.exceptions.ContentDecodingError) as exc:
            raise _Transient(f"connection failed ({type(exc).__name__})", "connection") from None
        except requests.RequestException as exc:  # its text may hold the URL: name the type only
            raise EndpointError(f"{self.where}: request failed ({type(exc).__name__})") from None
        except OSError as exc:  # a socket error requests did not wrap
            raise _Transient(f"connection failed ({type(exc).__name__})", "connection") from None
        except BadInput as exc:  # no OAuth2 token: bad input at start-up, a refusal mid-scan
            if self._charge is None:
                raise
            raise EndpointRefused(self.scrub(f"{self.where}: {exc}")) from None
        status = reply.status
        if status == 429:
            raise _Transient("answered 429 Too Many Requests", "429", self._on_429(reply))
        if status >= 500:
            raise _Transient(self.scrub(f"answered HTTP {status}: {self._excerpt(reply)}"), str(status))
        cred = self.credential()
        if status == 401 and cred is not None and cred.renew():  # an OAuth2 token, fetched again once
            raise _Transient("answered HTTP 401: the token was renewed", "401", 0.0)
        if status in self.refusal_statuses or (status == 400 and self._says_bad_key(reply)):
            raise EndpointRefused(self.scrub(f"{self.where}: answered HTTP {status}: {self._excerpt(reply)} "
                                             "(the endpoint refuses this client: a key that expired or "
                                             "was revoked, or a spent quota)"), status)
        if status >= 300 or status < 200:
            raise EndpointError(self.scrub(f"{self.where}: answered HTTP {status}: {self._excerpt(reply)}"),
                                status)
        said = clip(str((reply.headers or {}).get(INPUTS_HEADER) or ""), 32)  # a leakmeter server's
        self.declared_standardize = said or self.declared_standardize
        return self._answer(reply, explain, raw=data is None)

    @staticmethod
    def _says_bad_key(reply: Reply) -> bool:
        text = reply.body[:4096].decode("utf-8", errors="replace").lower()
        return any(k in text for k in INVALID_KEY)

    def _answer(self, reply: Reply, explain: str | None = None, raw: bool = False) -> Any:
        """The answer field of a 2xx response; _Transient when the body is not usable JSON."""
        try:
            payload = reply.json()
        except (JSONTooLarge, JSONNumberTooLarge) as exc:  # bad data, not a fault: not re-sent
            raise EndpointError(f"{self.where}: answered JSON leakmeter does not parse: {exc}") from None
        except (ValueError, RecursionError):
            if raw:  # a GET's answer (a ping, a readiness check) need not be JSON
                return None
            ctype = reply.headers.get("Content-Type", "")
            html = "html" in ctype or reply.body.lstrip()[:1] == b"<"
            raise _Transient(f"answered {'an HTML page' if html else 'invalid JSON'} (HTTP {reply.status})",
                             "malformed") from None
        if raw:
            return payload
        try:
            return self.protocol.answer(payload, explain)
        except AnswerError as exc:
            raise EndpointError(self.scrub(f"{self.where}: {exc}")) from None

    def _post(self, rows: list, explain: str | None) -> Any:
        """One request for a chunk, with retries; returns the answer field."""
        data = json.dumps(self.protocol.body(rows, explain)).encode()
        return self._send(self.protocol.target(explain), data, len(rows), explain)

    def get_json(self, url: str, retry: bool = True) -> Any:
        """GET `url` (start-up: model metadata, status, ping) with the same retries (none with
        `retry=False`: discovery); its JSON body. Each attempt is charged as one row to the scan's
        cap before it is sent."""
        self.bill(1)
        return self._send(url, None, 1, None, retry)

    def _send(self, url: str, data: bytes | None, rows: int, explain: str | None, retry: bool = True) -> Any:
        """One request (its first try already charged), with retries charged before re-sending."""
        attempts = self.spec.retries + 1 if retry else 1
        last, last_kind = "", ""
        who = self.caller()
        for attempt in range(attempts):
            billed = not (attempt and last_kind in (REFUSED, "401"))  # refused rows were never answered
            self.requests.charge(who, rows)  # a gateway counts requests: before each is sent
            if attempt and billed:
                try:
                    self.bill(rows)
                except BudgetExhausted:
                    raise EndpointFaults(self.scrub(
                        f"{self.where}: the query budget ran out re-sending rows after faults "
                        f"({self.stats.rows_resent} rows re-sent; last fault: {last})")) from None
            self.stats.sent(who, rows, retry=attempt > 0, billed=billed)
            key = "probe_auth" if self.credential() is not None and self.credential() is self.probe_auth \
                else ("auth" if self.keyed else "none")
            self.stats.rows_by_key[key] = self.stats.rows_by_key.get(key, 0) + rows
            try:
                return self._attempt(url, data, explain)
            except _Transient as exc:
                self.stats.fault(exc.kind, who)
                last, last_kind, wait = str(exc), exc.kind, exc.wait
                if exc.kind == "deadline":  # a server that trickled a whole deadline away does it
                    attempts = attempt + 1  # again: not re-sent (4 tries held a scan 4 × deadline_s)
                    break
                if exc.kind in (REFUSED, "401"):
                    self.stats.refused(rows, who)
            except EndpointError as exc:
                self.stats.fault("refused", who)
                if isinstance(exc, EndpointRefused):
                    self.stats.refused(rows, who)
                raise
            if attempt + 1 < attempts:
                backoff = self.spec.backoff_s * (2**attempt) * (1 + 0.25 * random.random())
                self._sleep(min(MAX_BACKOFF_S, wait if wait is not None else backoff))
        msg = self.scrub(f"{self.where}: {last} (" + ("not re-sent: an endpoint that held one answer past "
                                                      "its deadline holds the next" if last_kind == "deadline"
                                                      else f"gave up after {attempts} attempts") + ")")
        if last_kind == "429":
            raise EndpointRefused(f"{msg}: rate limited without recovery")
        if last_kind == "401":
            raise EndpointRefused(f"{msg}: refused after the token was renewed")
        raise EndpointFaults(msg)

    def _on_429(self, reply: Reply) -> float | None:
        try:
            info = reply.json()
        except (ValueError, RecursionError):
            info = {}
        if isinstance(info, dict) and info.get("error_code") == "RESOURCE_EXHAUSTED":
            msg = clip(info.get("message", ""), 200)  # scrubbed, then cut
            who = "this API key" if self.keyed else "this client (no API key sent)"
            raise EndpointQuotaExhausted(self.scrub(f"{self.where}: the endpoint's query budget for "
                                                    f"{who} is spent" + (f" ({msg})" if msg else "")))
        wait = retry_after(reply.headers.get("Retry-After"))
        if wait is not None and wait > MAX_RETRY_AFTER_S:
            raise EndpointRefused(f"{self.where}: answered 429 with Retry-After {wait:.0f} s "
                                  f"(more than {MAX_RETRY_AFTER_S:.0f} s): rate limited")
        return wait

    @staticmethod
    def _excerpt(reply: Reply) -> str:
        """The first 200 characters of an error answer, scrubbed before they are cut. A body
        cut at the read limit loses its last (longest secret) characters first, so a secret
        straddling that cut can never be shown in part."""
        text = reply.text()
        if reply.truncated:
            text = text[: max(0, len(text) - SECRETS.longest)]
        return clip(text, 200) or clip(reply.reason, 200)  # one line, escaped, scrubbed, cut

    # ------------------------------------------------------------------ answers
    def _ask(self, x: torch.Tensor, explain: str | None) -> np.ndarray:
        """Answers for a flat batch, one request per `max_batch` rows; float64 (N, ...)."""
        xs = x.detach().cpu().to(torch.float64).numpy()
        parts = []
        step = self.spec.max_batch
        for i in range(0, len(xs), step):
            chunk = xs[i : i + step]
            try:
                answer = self._post(chunk.tolist(), explain)
            except (EndpointError, BudgetExhausted) as exc:  # the unsent tail, refused rows: unanswered
                sent = isinstance(exc, EndpointError) and not isinstance(exc, EndpointRefused)
                back = len(xs) - i - (len(chunk) if sent else 0)
                if back and self._refund is not None:
                    self._refund(back, self.caller())
                raise
            parts.append(self._validate(answer, len(chunk), explain))
        if not parts:
            return np.zeros((0, self.dim if explain else max(1, self.n_outputs)))
        return np.concatenate(parts)

    def _validate(self, answer: Any, n: int, explain: str | None) -> np.ndarray:
        """The answer as an array of the documented shape, or EndpointError saying what is wrong."""
        what = "explanations" if explain else "predictions"
        try:
            y = np.asarray(answer, dtype=np.float64)
        except (TypeError, ValueError, RecursionError, OverflowError):  # records (a DataFrame), string labels
            try:
                y = np.asarray(decode(answer, self.classes), dtype=np.float64)
            except AnswerError as exc:
                raise EndpointError(self.scrub(f"{self.where}: {exc}")) from None
            except (TypeError, ValueError, RecursionError, OverflowError):
                raise EndpointError(f"{self.where}: {what} are not a numeric array (ragged or "
                                    f"non-numeric; records and string labels are read too)") from None
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
        if not self.protocol.offers_explain():
            raise InterfaceError(f"{self.where}: the {self.protocol.name} request_template has no "
                                 "\"$explain\" placeholder, so explanations cannot be requested")
        return torch.as_tensor(self._ask(x, kind))

    def weights(self) -> dict[str, torch.Tensor]:
        raise InterfaceError(f"{self.where}: an HTTP endpoint releases no weights")

    def close(self) -> None:
        self.session.close()
