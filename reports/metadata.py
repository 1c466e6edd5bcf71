"""What a report says about the run itself: which leakmeter, when, how long, on which device, and
which scenario (a hash of its text), so two reports can be told apart and matched to their input."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from importlib import metadata
from typing import Any


def leakmeter_version() -> str:
    """The installed package's version ("unknown" when run from a bare checkout)."""
    try:
        return metadata.version("leakmeter")
    except metadata.PackageNotFoundError:
        return "unknown"


def scenario_sha256(text: str) -> str:
    """SHA-256 of the scenario text as run (hex)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def iso_utc(t: datetime) -> str:
    """An aware or naive (taken as UTC) datetime as 2026-11-23T12:00:00Z."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_metadata(started_at: datetime, device: Any, scenario_text: str,
                 ended_at: datetime | None = None) -> dict[str, Any]:
    """The report's run fields: `leakmeter_version`, `started_at` (ISO 8601, UTC), `duration_s`,
    `device` (e.g. "cpu", "cuda:0") and `scenario_sha256` (of `scenario_text`)."""
    end = ended_at or datetime.now(UTC)
    start = started_at if started_at.tzinfo else started_at.replace(tzinfo=UTC)
    end = end if end.tzinfo else end.replace(tzinfo=UTC)
    return {
        "leakmeter_version": leakmeter_version(),
        "started_at": iso_utc(start),
        "duration_s": round(max(0.0, (end - start).total_seconds()), 3),
        "device": str(device),
        "scenario_sha256": scenario_sha256(scenario_text),
    }
