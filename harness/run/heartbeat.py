"""Off a terminal (cron, CI, `2> log`) a run draws no live bar, so an attack that works for long
would leave its log silent: every few seconds it says that it still runs, with the queries it has
sent so far (`attack 17/17 surrogate: still running (8 s, 1400 queries so far)`). On a terminal the
live bar says that, and nothing is added."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any

from harness.core.progress import alongside

EVERY_S = 4.0  # below the 5 s a reader takes for a hang


@contextmanager
def heartbeat(live: Any, every: float = EVERY_S):
    """While the body runs the attack `live` (a RunProgress) has started: if its bar is hidden, a
    stage line every `every` seconds; nothing when a live bar is drawn."""
    bar = live.bar
    if bar is None or not bar.hidden:
        yield
        return
    t0 = time.perf_counter()

    def beat(done: threading.Event) -> None:
        while not done.wait(every):
            if live.bar is not bar:  # the attack has ended: its closing line is printed
                return
            live.stage(f"still running ({time.perf_counter() - t0:.0f} s, {bar.queries} queries so far)")

    with alongside(beat):
        yield
