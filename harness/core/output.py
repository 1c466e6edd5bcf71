"""What a run keeps off the terminal, and what it leaves behind.

- `WarningsCapture`: third-party warnings (Opacus' secure-RNG notice, PyTorch's backward-hook
  notes, ...) raised during a run are recorded, one entry per distinct message with a count, for
  the report's `warnings` list, instead of being printed between the run's own lines.
- `prune_empty`, `ours`: attack folders nothing was written to are removed after a run, and only
  what the run wrote is uploaded: never what was in `--out` before it (`existing`).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from victims.http.secrets import scrub


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
            text = " ".join(str(scrub(str(w.message))).split())  # scrubbed before it is cut
            key = (w.category.__name__, text)
            if key in seen:
                seen[key]["count"] += 1
            else:
                seen[key] = {"category": w.category.__name__, "message": text[:500],
                             "source": f"{os.path.basename(w.filename)}:{w.lineno}", "count": 1}
        return list(seen.values())


def existing(outdir: Path) -> frozenset[str]:
    """The names already in `outdir` before a run writes there (none when it does not exist):
    what leakmeter did not write, and must neither delete nor upload."""
    return frozenset(p.name for p in outdir.iterdir()) if outdir.is_dir() else frozenset()


def prune_empty(outdir: Path, keep: frozenset[str] = frozenset()) -> None:
    """Remove the attack folders nothing was written to, never one in `keep` (there before the run:
    `--out` into an existing folder used to delete every empty sub-folder in it)."""
    for sub in sorted(outdir.iterdir() if outdir.is_dir() else [], reverse=True):
        if sub.name not in keep and sub.is_dir() and not any(sub.iterdir()):
            sub.rmdir()


def ours(paths: list[Path], keep: frozenset[str], since: float) -> list[Path]:
    """The files of `paths` this run wrote: absent before it (`keep`), or rewritten since `since`
    (a wall-clock time)."""
    out = []
    for p in paths:
        try:
            if p.name not in keep or p.stat().st_mtime >= since:
                out.append(p)
        except OSError:
            continue
    return out
