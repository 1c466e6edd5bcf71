"""A real HTTP server on 127.0.0.1 for the endpoint tests: a handler class served on an ephemeral
port from a daemon thread, started and stopped as a context manager; `JsonHandler`, the handlers'
common base (HTTP/1.1, no access log, a JSON request read and an answer written whole)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler: `body()` / `json_body()` read the request, `reply()` answers
    with a Content-Length (JSON unless told otherwise) and any extra headers."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def json_body(self) -> Any:
        return json.loads(self.body())

    def reply(self, status: int, raw: bytes | str, extra: dict | None = None,
              content_type: str = "application/json") -> None:
        data = raw.encode() if isinstance(raw, str) else raw
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def reply_json(self, status: int, obj: Any, extra: dict | None = None) -> None:
        self.reply(status, json.dumps(obj), extra)


class LoopbackServer:
    """Subclasses build their handler class and call `_serve(handler)` in `__init__`."""

    def _serve(self, handler) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        # shutdown() waits for the loop's next poll: 50 ms instead of the default 0.5 s per server
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/invocations"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
