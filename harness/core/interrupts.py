"""SIGINT and SIGTERM as an orderly stop: the first signal raises `Interrupted` in the main thread
(the attack stops, the partial report is written, the MLflow run is marked KILLED); a second one
exits at once. Code that must not be cut in half (writing the report, ending MLflow runs) runs
inside `deferred()`: a first signal arriving there is raised when the block ends."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt, not an error
    """The run was asked to stop by a signal; `signum` says which."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class _State:
    received: int | None = None  # the first signal seen
    critical = 0  # depth of deferred() blocks
    pending: int | None = None  # a first signal that arrived inside deferred()


_state = _State()


def _handler(signum: int, frame) -> None:  # noqa: ANN001 - signal handler signature
    if _state.received is not None:  # the second signal: stop now, no cleanup
        os._exit(128 + signum)
    _state.received = signum
    if _state.critical:
        _state.pending = signum
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def handle_signals() -> Iterator[None]:
    """Install the handlers for the duration of a command (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in HANDLED}
    _state.received = _state.pending = None
    for s in HANDLED:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Run a block that a first signal must not cut in half; the signal is raised after it."""
    _state.critical += 1
    try:
        yield
    finally:
        _state.critical -= 1
    if not _state.critical and _state.pending is not None:
        signum, _state.pending = _state.pending, None
        raise Interrupted(signum)


def received() -> int | None:
    """The signal that asked this process to stop, if any."""
    return _state.received
