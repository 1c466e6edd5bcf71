"""What a run prints while it works, and what it keeps off the terminal.

- `stage(...)`: one line per stage (victim built, each attack started and finished) on stderr
  when progress bars are off (stderr not a terminal, or CI): a cron log or a CI job shows what
  the run is doing instead of half a minute of silence.
- `WarningsCapture`: third-party warnings (Opacus' secure-RNG notice, PyTorch's backward-hook
  notes, ...) raised during a run are recorded, one entry per distinct message with a count, for
  the report's `warnings` list, instead of being printed between the run's own lines.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any


def lines_wanted() -> bool:
    """Stage lines replace the progress bars exactly where those are hidden."""
    from victims.models.training import progress_disabled

    return progress_disabled()


def stage(message: str, since: float | None = None) -> None:
    """Print `leakmeter: [  12.3 s] message` to stderr when progress bars are off."""
    if not lines_wanted():
        return
    clock = f"[{time.perf_counter() - since:7.1f} s] " if since is not None else ""
    print(f"leakmeter: {clock}{message}", file=sys.stderr, flush=True)


class WarningsCapture:
    """Record warnings between `start()` and `stop()` (once per message and place, as Python's
    default filter shows them); `stop()` returns them as plain dicts and restores the filters."""

    def __init__(self) -> None:
        self._ctx: warnings.catch_warnings | None = None
        self._log: list[warnings.WarningMessage] = []

    def start(self) -> WarningsCapture:
        self._ctx = warnings.catch_warnings(record=True)
        self._log = self._ctx.__enter__()
        warnings.simplefilter("default")
        return self

    def stop(self) -> list[dict[str, Any]]:
        if self._ctx is None:
            return []
        self._ctx.__exit__(None, None, None)
        self._ctx = None
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for w in self._log:
            text = " ".join(str(w.message).split())
            key = (w.category.__name__, text)
            if key in seen:
                seen[key]["count"] += 1
            else:
                seen[key] = {"category": w.category.__name__, "message": text[:500],
                             "source": f"{os.path.basename(w.filename)}:{w.lineno}", "count": 1}
        return list(seen.values())


def victim_line(victim) -> str:
    """The victim's held-out utility in words."""
    u = victim.utility
    parts = [f"{k.replace('_', ' ')} {v:.4g}" for k, v in u.items()
             if k.startswith("test_") and isinstance(v, float)]
    return ", ".join(parts) or "no held-out utility"


def attack_line(a: dict[str, Any]) -> str:
    """One finished attack in a line: status, risk, queries, time."""
    stop = f" (stopped by {a['stopped_by']})" if a.get("stopped_by") else ""
    return (f"attack {a['name']}: {a.get('status')}{stop}, risk {a.get('risk') or '-'}, "
            f"{a.get('queries', 0)} queries, {a.get('wall_s', 0.0):.1f} s")


def prune_empty(outdir: Path) -> None:
    """Remove the attack folders nothing was written to."""
    for sub in sorted(outdir.iterdir() if outdir.is_dir() else [], reverse=True):
        if sub.is_dir() and not any(sub.iterdir()):
            sub.rmdir()
