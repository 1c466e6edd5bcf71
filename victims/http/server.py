"""The reference endpoint: a victim served over HTTP with MLflow's scoring protocol (or, with
`protocol`, the Open Inference Protocol or KServe V1: victims/http/server_oip.py), on FastAPI and
uvicorn.

    POST /invocations  {"inputs": [[...], ...], "params": {"explain": "gradient"}}
                       → {"predictions": [...]}
    GET  /ping, /health → 200;  GET /version → leakmeter version and the public facts

Every answer carries `X-Leakmeter-Standardize: standard|none`, the input scaling the served model
was trained with (also in /version as `standardize`): a scan compares it with its own.

Defenses are applied server side (victims/http/served.py). Authentication: `Authorization: Bearer
KEY` or `X-API-Key: KEY`; any other Authorization scheme is refused (401). With `keys`, only those
keys are accepted (compared in constant time) and the query budget is kept per key. Without keys
(an open server), a key a client makes up proves nothing: every caller shares one budget, whatever
key it sends. Either way the table of budgets holds at most one entry per known key. A request
that would overrun its budget is refused with 429 and error code RESOURCE_EXHAUSTED before
anything is computed. Errors are MLflow-style JSON
{"error_code": ..., "message": ...}; they never echo headers or query strings. Keys are never
logged.

Hardening (victims/http/guard.py holds the numbers): bodies over `max_body` are refused with 413
(from Content-Length before reading, or while reading a chunked body); every request must arrive
whole within a deadline (slow or half-sent requests are dropped); open connections, body readers
and answering threads are bounded; malformed, non-UTF-8 or deeply nested JSON is a 400, a bad
Content-Length a 400 (from h11), never a 500.
"""

from __future__ import annotations

import hmac
import socket
import threading
from typing import Any

import numpy as np
from fastapi import Request  # at module level: FastAPI resolves the handlers' annotations here
from starlette.requests import ClientDisconnect

from victims.http.guard import ByteBudget, ServerLimits, guarded_protocol, host_allowed, json_content_type
from victims.http.protocol import INPUTS_HEADER
from victims.http.secrets import clip
from victims.http.served import RequestError, ServedModel, parse_json

__all__ = ["KeyBudgets", "ServerLimits", "VictimServer", "make_app"]


OPEN = "*"  # the one budget every caller of an open server (no API keys) shares


class KeyBudgets:
    """Queries used against one budget per known API key, or one budget for every caller of an
    open server (`keys` None: a made-up key must not buy a fresh budget). None = unlimited. The
    table holds at most one entry per known key (one on an open server)."""

    def __init__(self, budget: int | None, keys: set[str] | None = None):
        self.budget = budget
        self.keys = keys
        self.used: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def scope(self) -> str:
        return "per API key" if self.keys is not None else "shared by every caller (no API keys)"

    def charge(self, key: str, n: int) -> None:
        """Record n queries for `key` (an open server: for everyone), or raise RequestError(429)
        without recording any."""
        bucket = key if self.keys is not None and key in self.keys else OPEN
        with self._lock:
            used = self.used.get(bucket, 0)
            if self.budget is not None and used + n > self.budget:
                whose = "this API key" if bucket != OPEN else "this server (shared by every caller)"
                raise RequestError(429, "RESOURCE_EXHAUSTED",
                                   f"query budget exhausted for {whose}: {n} requested, "
                                   f"{self.budget - used} of {self.budget} left")
            self.used[bucket] = used + n


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("leakmeter")
    except Exception:  # noqa: BLE001
        return "unknown"


def api_key(headers: Any, keys: set[str] | None) -> str:
    """The request's API key ("anonymous" without one on an open server); RequestError(401) for a
    wrong scheme, an empty key, or (with `keys`) a key not on the list."""
    auth, header_key = headers.get("authorization"), headers.get("x-api-key")
    key: str | None = None
    if auth is not None:
        scheme, _, token = auth.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            raise RequestError(401, "UNAUTHENTICATED", "only 'Authorization: Bearer <key>' (or "
                               "'X-API-Key: <key>') is accepted")
        key = token
    elif header_key is not None:
        key = header_key.strip()
        if not key:
            raise RequestError(401, "UNAUTHENTICATED", "empty X-API-Key")
    if keys is not None:
        given = (key or "").encode()
        known = False
        for k in keys:  # compare with every key, in constant time: no early exit to time
            known |= hmac.compare_digest(given, k.encode())
        if key is None or not known:
            raise RequestError(401, "UNAUTHENTICATED", "missing or unknown API key")
    return key or "anonymous"


def parse_request(raw: bytes, served: ServedModel) -> tuple[np.ndarray, str | None]:
    """The rows and the explanation kind of a request body; RequestError(400) when malformed."""
    body = parse_json(raw)
    if not isinstance(body, dict) or not any(k in body for k in ("inputs", "instances")):
        raise RequestError(400, "BAD_REQUEST", 'expected {"inputs": [[...], ...]}')
    params = body.get("params") or {}
    explain = params.get("explain") if isinstance(params, dict) else None
    if explain is not None and not isinstance(explain, str):
        raise RequestError(400, "INVALID_PARAMETER_VALUE", "params.explain must be a string")
    try:
        x = served.parse_inputs(body.get("inputs", body.get("instances")))
    except RecursionError:
        raise RequestError(400, "BAD_REQUEST", "inputs are nested too deeply") from None
    return x, explain


PROTOCOLS = ("mlflow", "kserve-v2", "kserve-v1")


def make_app(served: ServedModel, budgets: KeyBudgets, keys: set[str] | None,
             limits: ServerLimits = ServerLimits(), log: Any = None, protocol: str = "mlflow",
             model_name: str = "model", allow_hosts: tuple[str, ...] = ()) -> Any:
    """The ASGI app (FastAPI) for one served victim, speaking `protocol` (victims/http/server_oip.py
    holds the kserve-v2 and kserve-v1 shapes) for the model `model_name`; requests whose Host is not
    an address, `localhost` or one of `allow_hosts`, and POSTs not declared JSON, are refused."""
    import anyio
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException

    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    hosts = frozenset(h.strip().lower().rstrip(".") for h in allow_hosts)
    buffered = ByteBudget(limits.body_bytes)
    workers = anyio.CapacityLimiter(limits.max_inflight)

    def error(exc: RequestError) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        if exc.status == 503:
            headers = {"Retry-After": "1"}
        body = ({"error_code": exc.code, "message": exc.message} if protocol == "mlflow"
                else {"error": exc.message, "error_code": exc.code})  # V1 / V2: {"error": ...}
        return JSONResponse(body, exc.status, headers)

    def access(request: Request, status: int) -> None:
        if log is not None:  # method, path and status only: never headers, keys or query strings
            host = request.client.host if request.client else "-"
            log(f"{host} {clip(request.method, 16)} {shown_path(request)} {status}")

    def refusal(request: Request) -> RequestError | None:
        """A request this server refuses before routing: a Host naming another server (DNS
        rebinding), a POST body that is not declared JSON (a cross-site form or text/plain POST)."""
        if not host_allowed(request.headers.get("host"), hosts):
            return RequestError(421, "MISDIRECTED_REQUEST", "the Host header names another server "
                                "(leakmeter serve --allow-host NAME adds a name)")
        if request.method == "POST" and not json_content_type(request.headers.get("content-type")):
            return RequestError(415, "UNSUPPORTED_MEDIA_TYPE", "Content-Type must be application/json")
        return None

    async def read_body(request: Request) -> bytes:
        """The body, buffered against the server's byte budget as it arrives (a slow sender holds
        only what it sent); 413 over max_body, 503 when no room frees within queue_timeout_s. The
        whole request is bounded in time by the connection's deadline (victims/http/guard.py)."""
        length = request.headers.get("content-length")
        if length is not None and int(length) > limits.max_body:  # h11 checked it is a number
            raise RequestError(413, "REQUEST_TOO_LARGE", f"the body is over {limits.max_body} bytes")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                if size + len(chunk) > limits.max_body:
                    raise RequestError(413, "REQUEST_TOO_LARGE", f"the body is over {limits.max_body} bytes")
                try:
                    await buffered.take(len(chunk), limits.queue_timeout_s)
                except TimeoutError:
                    raise RequestError(503, "TEMPORARILY_UNAVAILABLE", "too many request bodies in "
                                       "flight") from None
                size += len(chunk)
                chunks.append(chunk)
            return b"".join(chunks)
        except ClientDisconnect:  # the client went away mid-body: nobody to answer, and no server bug
            raise RequestError(499, "CLIENT_CLOSED_REQUEST", "the client closed the connection before "
                               "its body arrived") from None
        finally:
            await buffered.give(size)

    def compute(raw: bytes, key: str, parse: Any, shape: Any) -> Any:
        x, explain, want = parse(raw, served)
        budgets.charge(key, len(x))
        y = served.answer(x, explain)
        if isinstance(y, np.ndarray) and not np.isfinite(y).all():  # e.g. inputs of ±1e308 overflow the model
            raise RequestError(422, "UNPROCESSABLE_INPUT", "the answer for these inputs is not finite "
                               "(inputs too large for the model?)")
        return shape(y, explain, want)

    # every answer says which input scaling the served model expects (a scan compares it with its own)
    scaling = served.meta.get("standardize")
    inputs_header = {INPUTS_HEADER: str(scaling)} if scaling else None

    async def handle(request: Request, parse: Any, shape: Any) -> Response:
        """Authenticate, read the body, answer in a worker thread; errors in the protocol's shape."""
        try:
            key = api_key(request.headers, keys)
            raw = await read_body(request)
            if not raw:
                raise RequestError(400, "BAD_REQUEST", "a JSON body is required")
            out = await anyio.to_thread.run_sync(compute, raw, key, parse, shape, limiter=workers)
            response: Response = JSONResponse(out, headers=inputs_header)
        except RequestError as exc:
            response = error(exc)
        except Exception as exc:  # noqa: BLE001 - a server bug: one line, a 500, no traceback
            if log is not None:
                log(f"internal error: {type(exc).__name__}")
            response = error(RequestError(500, "INTERNAL_ERROR", type(exc).__name__))
        access(request, response.status_code)
        return response

    async def for_model(name: str, request: Request, parse: Any, shape: Any) -> Response:
        """`handle` for the served model's name; 404 in the protocol's shape for any other."""
        if name != model_name:
            access(request, 404)
            return error(RequestError(404, "MODEL_NOT_FOUND", f"no model named {name[:64]!r}"))
        return await handle(request, parse, shape)

    if protocol == "mlflow":
        @app.post("/invocations")
        async def invocations(request: Request) -> Response:
            return await handle(request, lambda raw, sv: (*parse_request(raw, sv), None),
                                lambda y, _e, _w: {"predictions": y.tolist()})
    elif protocol == "openai":  # an `arch: lm` victim's completions API
        from victims.http.server_openai import add_openai_routes

        add_openai_routes(app, served, model_name, handle)
    else:
        from victims.http.server_oip import add_routes

        add_routes(app, protocol, served, model_name, for_model, error, access)

    @app.get("/ping")
    @app.get("/health")
    async def ping() -> Response:
        return Response(b"\n", media_type="application/json")

    @app.get("/version")
    async def version() -> Response:
        return JSONResponse({"leakmeter": _version(), **served.meta, "defenses": served.defenses.active(),
                             "query_budget": budgets.budget, "query_budget_scope": budgets.scope})

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        code = {404: "ENDPOINT_NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(exc.status_code, "BAD_REQUEST")
        access(request, exc.status_code)
        return error(RequestError(exc.status_code, code, f"no route {clip(request.method, 16)} "
                                                         f"{shown_path(request)}"))

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> Response:  # a server bug: 500, never a hang
        access(request, 500)
        return error(RequestError(500, "INTERNAL_ERROR", type(exc).__name__))

    async def gated(scope: Any, receive: Any, send: Any) -> None:
        """The app behind the Host and Content-Type checks (`refusal`)."""
        if scope["type"] == "http":
            request = Request(scope)
            refused = refusal(request)
            if refused is not None:
                access(request, refused.status)
                await error(refused)(scope, receive, send)
                return
        await app(scope, receive, send)

    gated.app = app  # type: ignore[attr-defined]
    return gated


def shown_path(request: Request) -> str:
    """A request's path as the log and error messages show it: one line, control characters
    escaped (a client without a key could write escape sequences to the operator's terminal)."""
    return clip(request.url.path, 200)


class VictimServer:
    """A running server for one victim; `start()` serves in a background thread, `serve_forever()`
    in this one (stopping cleanly on SIGINT/SIGTERM), `close()` stops it."""

    def __init__(self, served: ServedModel, host: str = "127.0.0.1", port: int = 0,
                 budget: int | None = None, keys: set[str] | None = None, log: Any = None,
                 limits: ServerLimits | None = None, protocol: str = "mlflow", model_name: str = "model",
                 allow_hosts: tuple[str, ...] = ()):
        import uvicorn

        self.protocol, self.model_name = protocol, model_name

        self.limits = limits or ServerLimits()
        self.budgets = KeyBudgets(budget, keys)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # proto IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say they are TCP; with
        # proto 0 a keep-alive answer waited ~40 ms for the client's delayed ACK (Nagle)
        self.sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))  # OSError here: the caller says which port
            self.sock.listen(self.limits.backlog)
        except OSError:
            self.sock.close()
            raise
        app = make_app(served, self.budgets, keys, self.limits, log, protocol, model_name, allow_hosts)
        config = uvicorn.Config(app, http=guarded_protocol(self.limits), ws="none", lifespan="off",
                                log_config=None, log_level="error", access_log=False,
                                timeout_keep_alive=int(self.limits.keep_alive_s),
                                backlog=self.limits.backlog, server_header=False, date_header=False)
        self.server = uvicorn.Server(config)
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    @property
    def url(self) -> str:
        host = self.sock.getsockname()[0]
        host = f"[{host}]" if ":" in host else host
        path = {"kserve-v2": f"/v2/models/{self.model_name}", "kserve-v1": f"/v1/models/{self.model_name}",
                "openai": "/v1"}
        return f"http://{host}:{self.port}{path.get(self.protocol, '/invocations')}"

    def start(self, timeout_s: float = 30.0) -> VictimServer:
        """Serve in a background thread; returns self once the server accepts connections."""
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)
        self.thread.start()
        waited = 0.0
        while not self.server.started and self.thread.is_alive() and waited < timeout_s:
            threading.Event().wait(0.02)
            waited += 0.02
        if not self.server.started:
            raise RuntimeError("the server did not start")
        return self

    def serve_forever(self) -> None:
        self.server.run(sockets=[self.sock])

    def close(self) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=10)
        self.sock.close()
