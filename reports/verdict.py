"""Risk levels and the overall verdict: plain functions over plain data."""

from __future__ import annotations

from typing import Any

LEVELS = ("low", "medium", "high")


def worst(risks: list[str]) -> str:
    """The highest of the given risk levels ("low" when none)."""
    return max(risks, key=LEVELS.index, default="low")


def verdict(attacks: list[dict[str, Any]], fail_on: str) -> tuple[str, str]:
    """(verdict, risk): fail when the worst risk of the attacks that ran reaches `fail_on`."""
    risk = worst([a["risk"] for a in attacks if a.get("status") == "ok" and a.get("risk")])
    if fail_on == "never":
        return "pass", risk
    return ("fail" if LEVELS.index(risk) >= LEVELS.index(fail_on) else "pass"), risk


def exit_code(report: dict[str, Any]) -> int:
    """CONTRACT exit codes: 3 if any attack or the run crashed, else 1 on fail, 0 on pass."""
    if report.get("error") or any(a.get("status") == "error" for a in report.get("attacks", [])):
        return 3
    return 1 if report.get("verdict") == "fail" else 0
