"""Connection-level limits for the reference server: uvicorn's HTTP/1.1 protocol (h11) with a
deadline for every request and a cap on open connections.

uvicorn times out idle keep-alive connections, but not a client that connects and sends nothing,
nor one that sends half a request and stops (slowloris). Here every request — from the
connection's first byte, or the first byte after the previous answer — must arrive whole (headers
and body) within `request_timeout_s`, else the connection is closed. A body the server refused
early (413) is read and discarded under the same deadline, so the client still reads the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


@dataclass(frozen=True)
class ServerLimits:
    """The reference server's limits (all per server process)."""

    max_body: int = 8 * 1024 * 1024  # bytes of one request body (413 beyond)
    request_timeout_s: float = 15.0  # a whole request (headers + body) must arrive within this
    keep_alive_s: float = 5.0  # idle time allowed between requests on one connection
    max_connections: int = 4096  # open connections; more are closed at once
    max_readers: int = 8  # bodies of max_body buffered at once: the byte budget is their product
    max_inflight: int = 2  # requests parsed and answered at once (threads)
    queue_timeout_s: float = 10.0  # wait for buffer room (or an answering thread) before 503
    backlog: int = 2048  # listen backlog

    @property
    def body_bytes(self) -> int:
        """Bytes of request bodies buffered at once, all connections together."""
        return self.max_readers * self.max_body


class ByteBudget:
    """Request-body bytes buffered at once, shared by all connections (event-loop side only).
    A reader holds only the bytes it has received, so clients trickling bodies hold next to
    nothing and never keep a fast client waiting; fast large bodies wait for room (then 503)."""

    def __init__(self, total: int):
        self.total = total
        self.free = total
        self._room = asyncio.Condition()

    async def take(self, n: int, timeout_s: float) -> None:
        """Reserve n bytes, waiting at most timeout_s (TimeoutError)."""
        async with self._room:
            await asyncio.wait_for(self._room.wait_for(lambda: self.free >= n), timeout_s)
            self.free -= n

    async def give(self, n: int) -> None:
        if n:
            async with self._room:
                self.free += n
                self._room.notify_all()


def guarded_protocol(limits: ServerLimits) -> type[H11Protocol]:
    """An H11Protocol class enforcing `limits.request_timeout_s` and `limits.max_connections`."""

    class GuardedH11Protocol(H11Protocol):
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            self._deadline: asyncio.TimerHandle | None = None
            sock = transport.get_extra_info("socket")
            if sock is not None:  # small answers leave at once (no Nagle wait for a delayed ACK)
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                transport.close()
                return
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(limits.request_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
                self.transport.close()  # the request did not arrive in time

        def data_received(self, data: bytes) -> None:
            if self._deadline is None and self.conn.their_state is h11.IDLE:
                self._arm()  # the next request starts now
            super().data_received(data)
            if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
                self._disarm()  # the request is whole (or the connection is ending)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedH11Protocol


def host_allowed(host_header: str | None, names: frozenset[str]) -> bool:
    """Whether a request's Host header names this server: an IP address (v4 or [v6]), `localhost`,
    or one of `names` (the operator's --allow-host), with any port; a request without one (HTTP/1.0)
    too. Any other name is how a web page reaches a server on 127.0.0.1 through DNS rebinding."""
    import ipaddress

    if host_header is None:
        return True
    host = host_header.strip().lower()
    if host.startswith("["):  # [v6]:port
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return host.rstrip(".") in names | {"localhost"}


def json_content_type(value: str | None) -> bool:
    """Whether a Content-Type header says `application/json` (parameters such as charset allowed):
    the only body a browser cannot send cross-site without asking first (CORS preflight)."""
    return value is not None and value.partition(";")[0].strip().lower() == "application/json"
