"""The reference endpoint: a victim served over HTTP with MLflow's scoring protocol.

    POST /invocations  {"inputs": [[...], ...], "params": {"explain": "gradient"}}
                       → {"predictions": [...]}
    GET  /ping, /health → 200;  GET /version → leakmeter version and the public facts

Defenses are applied server side (victims/http/served.py). A query budget is kept per API key (the
token of `Authorization: Bearer KEY` or `X-API-Key: KEY`; requests without one share the key
"anonymous"); a request that would overrun it is refused with 429 and error code
RESOURCE_EXHAUSTED, before anything is computed. With `keys`, only those keys are accepted (401).
Errors are MLflow-style JSON: {"error_code": ..., "message": ...}. Keys are never logged.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from victims.http.served import RequestError, ServedModel

MAX_BODY = 256 * 1024 * 1024  # bytes


class KeyBudgets:
    """Queries used per API key against one budget each (None = unlimited)."""

    def __init__(self, budget: int | None):
        self.budget = budget
        self.used: dict[str, int] = {}
        self._lock = threading.Lock()

    def charge(self, key: str, n: int) -> None:
        """Record n queries for `key`, or raise RequestError(429) without recording any."""
        with self._lock:
            used = self.used.get(key, 0)
            if self.budget is not None and used + n > self.budget:
                raise RequestError(429, "RESOURCE_EXHAUSTED",
                                   f"query budget exhausted for this API key: {n} requested, "
                                   f"{self.budget - used} of {self.budget} left")
            self.used[key] = used + n


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("leakmeter")
    except Exception:  # noqa: BLE001
        return "unknown"


def make_handler(served: ServedModel, budgets: KeyBudgets, keys: set[str] | None,
                 log: Any = None) -> type[BaseHTTPRequestHandler]:
    """The request handler class for one served victim."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # one small answer per request: no 40 ms delayed-ACK stall
        server_version = "leakmeter"

        def log_message(self, fmt: str, *args: Any) -> None:  # request line only, never headers
            if log is not None:
                log(f"{self.address_string()} {fmt % args}")

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = (json.dumps(body) if not isinstance(body, bytes) else body)
            raw = data.encode() if isinstance(data, str) else data
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        def _error(self, exc: RequestError) -> None:
            self._send(exc.status, {"error_code": exc.code, "message": exc.message})

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            if path in ("/ping", "/health"):
                self._send(200, b"\n")
            elif path == "/version":
                self._send(200, {"leakmeter": _version(), **served.meta,
                                 "defenses": served.defenses.active(),
                                 "query_budget_per_key": budgets.budget})
            else:
                self._send(404, {"error_code": "ENDPOINT_NOT_FOUND", "message": f"no route {path}"})

        def _api_key(self) -> str:
            auth = self.headers.get("Authorization", "")
            scheme, _, token = auth.partition(" ")
            key = token.strip() if token else auth.strip()
            return key or self.headers.get("X-API-Key", "").strip() or "anonymous"

        def do_POST(self) -> None:  # noqa: N802
            try:
                if self.path.split("?")[0] != "/invocations":
                    raise RequestError(404, "ENDPOINT_NOT_FOUND", f"no route {self.path}")
                key = self._api_key()
                if keys is not None and key not in keys:
                    raise RequestError(401, "UNAUTHENTICATED", "missing or unknown API key")
                length = int(self.headers.get("Content-Length") or 0)
                if length <= 0 or length > MAX_BODY:
                    raise RequestError(400, "BAD_REQUEST", "a JSON body is required")
                try:
                    body = json.loads(self.rfile.read(length))
                except (ValueError, UnicodeDecodeError):
                    raise RequestError(400, "MALFORMED_REQUEST", "the body is not valid JSON") from None
                if not isinstance(body, dict) or not any(k in body for k in ("inputs", "instances")):
                    raise RequestError(400, "BAD_REQUEST", 'expected {"inputs": [[...], ...]}')
                params = body.get("params") or {}
                explain = params.get("explain") if isinstance(params, dict) else None
                x = served.parse_inputs(body.get("inputs", body.get("instances")))
                budgets.charge(key, len(x))
                out = served.answer(x, explain)
                self._send(200, {"predictions": out.tolist()})
            except RequestError as exc:
                self._error(exc)
            except Exception as exc:  # noqa: BLE001 - a server bug answers 500, never a hang
                self._send(500, {"error_code": "INTERNAL_ERROR", "message": type(exc).__name__})

    return Handler


class VictimServer:
    """A running threaded HTTP server for one victim; `close()` stops it."""

    def __init__(self, served: ServedModel, host: str = "127.0.0.1", port: int = 0,
                 budget: int | None = None, keys: set[str] | None = None, log: Any = None):
        self.budgets = KeyBudgets(budget)
        self.httpd = ThreadingHTTPServer((host, port), make_handler(served, self.budgets, keys, log))
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self.httpd.server_address[0]
        return f"http://{host}:{self.port}/invocations"

    def start(self) -> VictimServer:
        """Serve in a background thread; returns self."""
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        if self.thread is not None:
            self.httpd.shutdown()
        self.httpd.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)
