"""HTTP for the endpoint client: one pooled `requests.Session` in which every request has a total
deadline and every answer a size limit.

- Deadline: `timeout_s` bounds each socket operation, and restarts on every byte, so a server that
  trickles its answer one byte at a time would hold a run forever. A watchdog timer per request
  closes the request's socket when the deadline passes (connect to last byte, headers included):
  the blocked read ends and the request fails as `DeadlineExceeded`. The connection classes of the
  session's pools register their socket with the watchdog of the request in progress.
- Size: answers are read as a stream, at most `max_bytes` (a larger `Content-Length` is refused
  before reading); error answers (not 2xx) are read only up to `ERROR_BYTES`, which is all a
  message needs. Compressed answers are not asked for (`Accept-Encoding: identity`), and what a
  server compresses anyway is counted after decompression.

Nothing here scrubs or retries: victims/http/client.py owns that, in one place.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from victims.http.jsonlimits import loads

ERROR_BYTES = 64 * 1024  # of an error answer's body: enough for any message
CHUNK = 16 * 1024


class DeadlineExceeded(Exception):
    """The request did not finish (connect to last byte) within its deadline."""


class TooLarge(Exception):
    """The answer is larger than the limit; `size` is what was declared or read so far."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


@dataclass
class Reply:
    """A whole HTTP answer: status, reason, headers, body bytes (cut at ERROR_BYTES for error
    answers: `truncated` says so)."""

    status: int
    reason: str
    headers: Any
    body: bytes
    truncated: bool = False

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON, within bounds on what it becomes (victims/http/jsonlimits.py:
        JSONTooLarge, JSONNumberTooLarge); ValueError (or RecursionError) when it is not JSON."""
        return loads(self.body)


class _Watch:
    """The deadline of one request: at expiry, shuts down the socket the request uses."""

    def __init__(self, seconds: float):
        self.fired = False
        self._sock: Any = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def start(self) -> _Watch:
        self._timer.start()
        return self

    def track(self, sock: Any) -> None:
        with self._lock:
            self._sock = sock
            if self.fired:
                _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            if self._sock is not None:
                _shut(self._sock)

    def stop(self) -> bool:
        """Cancel the timer; True when the deadline had already passed (the socket was shut)."""
        self._timer.cancel()
        with self._lock:
            return self.fired


def _shut(sock: Any) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


_current = threading.local()


def _register(conn: Any) -> None:
    watch = getattr(_current, "watch", None)
    if watch is not None and conn.sock is not None:
        watch.track(conn.sock)


class _WatchedHTTPConnection(HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _register(self)

    def request(self, *args: Any, **kwargs: Any) -> None:  # a reused keep-alive connection
        _register(self)
        super().request(*args, **kwargs)


class _WatchedHTTPSConnection(HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _register(self)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _register(self)
        super().request(*args, **kwargs)


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class _WatchedAdapter(HTTPAdapter):
    """requests' adapter with pools whose connections report their socket to the watchdog."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, *args: Any, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(*args, **kwargs)
        manager.pool_classes_by_scheme = _POOLS
        return manager


def new_session(verify_tls: bool) -> requests.Session:
    """A session for one endpoint: small pool, no automatic retries, no compression asked."""
    session = requests.Session()
    adapter = _WatchedAdapter(pool_connections=2, pool_maxsize=4, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.verify = verify_tls
    session.headers.update({"Content-Type": "application/json", "Accept": "application/json",
                            "Accept-Encoding": "identity"})
    return session


def _read(resp: requests.Response, limit: int) -> tuple[bytes, bool]:
    """The body, at most `limit` bytes: (body, whether more was left unread)."""
    buf = bytearray()
    for chunk in resp.iter_content(CHUNK):
        buf += chunk
        if len(buf) > limit:
            return bytes(buf[:limit]), True
    return bytes(buf), False


def exchange(session: requests.Session, url: str, data: bytes | None, timeout_s: float, deadline_s: float,
             max_bytes: int) -> Reply:
    """POST `data` (GET when None), return the whole answer. Raises DeadlineExceeded, TooLarge (a
    2xx answer over `max_bytes`) or requests' own exceptions (connection failures, per-operation
    timeouts)."""
    watch = _Watch(deadline_s).start()
    _current.watch = watch
    try:
        resp = session.request("GET" if data is None else "POST", url, data=data,
                               timeout=(timeout_s, timeout_s), allow_redirects=False, stream=True)
        try:
            ok = 200 <= resp.status_code < 300
            declared = resp.headers.get("Content-Length", "")
            if ok and declared.isdigit() and int(declared) > max_bytes:
                raise TooLarge(int(declared))
            body, more = _read(resp, max_bytes if ok else ERROR_BYTES)
            if ok and more:
                raise TooLarge(len(body) + 1)
        finally:
            resp.close()
    except OSError:  # requests' exceptions too (they derive from OSError)
        if watch.stop():
            raise DeadlineExceeded from None
        raise
    finally:
        _current.watch = None
        fired = watch.stop()
    if fired:  # the answer may be cut short: never use it
        raise DeadlineExceeded
    return Reply(resp.status_code, resp.reason or "", resp.headers, body, truncated=more)
