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

- TLS and what comes from the environment: only what the scenario names is used. The session
  never reads ~/.netrc / $NETRC (whose Basic credentials would replace the configured token and go
  to the scan's host), nor REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE (which would override
  `verify_tls: false`); `verify` and `cert` are passed with every request. Proxies from the
  environment (HTTP(S)_PROXY, NO_PROXY) are used without their user:password@ unless
  `victim.endpoint.trust_env: true` opts in to requests' defaults (netrc and proxy credentials
  included; the configured credential still wins: it is set on every request).

Nothing here scrubs or retries: victims/http/client.py owns that, in one place.
"""

from __future__ import annotations

import re
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


def _no_userinfo(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    p = urlsplit(url)
    if p.username is None and p.password is None:
        return url
    host = f"[{p.hostname}]" if p.hostname and ":" in p.hostname else (p.hostname or "")
    return urlunsplit((p.scheme, f"{host}:{p.port}" if p.port else host, p.path, p.query, p.fragment))


def tls_settings(spec: Any) -> tuple[bool | str, str | tuple[str, str] | None]:
    """(verify, cert) for requests from `verify_tls`, `ca_bundle`, `client_cert`, `client_key`."""
    verify: bool | str = bool(getattr(spec, "verify_tls", True))
    if verify and getattr(spec, "ca_bundle", None):
        verify = str(spec.ca_bundle)
    cert_file, key_file = getattr(spec, "client_cert", None), getattr(spec, "client_key", None)
    cert = (str(cert_file), str(key_file)) if cert_file and key_file else (str(cert_file) if cert_file
                                                                           else None)
    return verify, cert


def new_session(spec: Any, url: str | None = None) -> requests.Session:
    """A session for one endpoint (`spec`: its victim.endpoint, or a bool for verify_tls): small
    pool, no automatic retries, no compression asked, nothing taken from the environment unless
    `trust_env` (see the module docstring)."""
    if isinstance(spec, bool):
        spec = type("Spec", (), {"verify_tls": spec})()
    session = requests.Session()
    adapter = _WatchedAdapter(pool_connections=2, pool_maxsize=4, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.verify, session.cert = tls_settings(spec)
    session.trust_env = bool(getattr(spec, "trust_env", False))
    if not session.trust_env and url:  # the environment's proxies, never their credentials
        from requests.utils import get_environ_proxies

        session.proxies = {k: _no_userinfo(v) for k, v in get_environ_proxies(url).items() if v}
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
             max_bytes: int, auth: Any = None) -> Reply:
    """POST `data` (GET when None), return the whole answer. Raises DeadlineExceeded, TooLarge (a
    2xx answer over `max_bytes`) or requests' own exceptions (connection failures, per-operation
    timeouts)."""
    watch = _Watch(deadline_s).start()
    _current.watch = watch
    try:
        resp = session.request("GET" if data is None else "POST", url, data=data, auth=auth,
                               timeout=(timeout_s, timeout_s), allow_redirects=False, stream=True,
                               verify=session.verify, cert=session.cert)  # never the environment's
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


_SSL_REASON = re.compile(r"\[SSL: ([A-Z0-9_]+)\][^(')\"]*|(certificate verify failed[^(')\"]*)|"
                         r"(hostname '[^']{0,200}' doesn't match[^(')\"]*)|(tlsv13? alert [a-z ]+)")


def tls_hint(exc: BaseException, spec: Any) -> str:
    """One line: what failed in the TLS handshake and which key fixes it."""
    m = _SSL_REASON.search(str(exc)[:4000])
    reason = " ".join((m.group(0) if m else type(exc).__name__).split())[:160]
    if "alert" in reason.lower() or "CERTIFICATE_REQUIRED" in reason:
        fix = ("the server asks for a client certificate: give victim.endpoint.client_cert and "
               "client_key (mTLS)")
    elif getattr(spec, "ca_bundle", None):
        fix = ("the server's certificate is not signed by victim.endpoint.ca_bundle, or its name is not "
               "the URL's host")
    else:
        fix = ("the server's certificate is not trusted: give its CA with victim.endpoint.ca_bundle: PATH "
               "(verify_tls: false only for a test server)")
    return f"TLS handshake failed ({reason}); {fix}; not retried"
