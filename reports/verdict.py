"""Risk levels, attack statuses and the overall verdict: plain functions over plain data.

The verdict says what was shown (docs/contract.md, "Outcomes"), with precedence
fail > error > inconclusive > pass:

- `fail`: some attack's *scored* risk reaches `policy.fail_on`, whatever else happened (a
  demonstrated risk is a fact, even from a partial artifact or an attack that later crashed);
- `error`: else, an attack or the run crashed, or the run was interrupted;
- `inconclusive`: else, some requested attack is `incomplete`, or none ran at all (every attack
  skipped for this interface);
- `pass`: every requested attack is `ok` (it ran to the end, or the scenario's own query budget
  stopped it and a surrogate under the same budget showed the budget holds) and its scored risk
  is below `fail_on`.
"""

from __future__ import annotations

import signal
from typing import Any

LEVELS = ("low", "medium", "high")
STATUSES = ("ok", "incomplete", "skipped", "error")
VERDICTS = ("pass", "fail", "inconclusive", "error")
EXIT_CODES = {"pass": 0, "fail": 1, "error": 3, "inconclusive": 4}
# the verdict as a number that orders runs by the contract's precedence (MLflow metric verdict_code)
VERDICT_CODES = {"pass": 0, "inconclusive": 1, "error": 2, "fail": 3}


def worst(risks: list[str | None]) -> str | None:
    """The highest of the given risk levels; None when no risk was scored."""
    scored = [r for r in risks if r in LEVELS]
    return max(scored, key=LEVELS.index) if scored else None


def reaches(risk: str | None, fail_on: str) -> bool:
    """True when `risk` is at or above the policy's `fail_on` level (never for `never`)."""
    return fail_on in LEVELS and risk in LEVELS and LEVELS.index(risk) >= LEVELS.index(fail_on)


def status_of(stopped_by: str | None, crashed: bool = False) -> str:
    """An attack's status from why it stopped: `ok` when it ran to the end or the scenario's own
    budget stopped it (the runner then checks the budget with a surrogate); `incomplete` for any
    other stop (its own cap included); `error` when it crashed."""
    if crashed:
        return "error"
    return "ok" if stopped_by in (None, "budget") else "incomplete"


def verdict(attacks: list[dict[str, Any]], fail_on: str, run_error: str | None = None,
            interrupted: bool = False) -> tuple[str, str | None, str]:
    """(verdict, worst scored risk or None, a one-line reason) for the attacks of a run."""
    risk = worst([a.get("risk") for a in attacks])
    shown = [a["name"] for a in attacks if reaches(a.get("risk"), fail_on)]
    if shown:
        return "fail", risk, f"risk {risk} reaches fail_on ({fail_on}): {', '.join(shown)}"
    if interrupted:
        return "error", risk, "interrupted before the attacks finished"
    crashed = [a["name"] for a in attacks if a.get("status") == "error"]
    if run_error or crashed:
        return "error", risk, (f"crashed: {', '.join(crashed)}" if crashed else f"run crashed: {run_error}")
    unfinished = [a["name"] for a in attacks if a.get("status") == "incomplete"]
    if unfinished:
        return "inconclusive", risk, f"did not finish: {', '.join(unfinished)}"
    if not any(a.get("status") == "ok" for a in attacks):
        return "inconclusive", risk, "no attack ran: every requested attack was skipped"
    held = [a["name"] for a in attacks if a.get("status") == "ok" and a.get("stopped_by") == "budget"]
    skipped = [a["name"] for a in attacks if a.get("status") == "skipped"]
    how = ("every requested attack that applies ran" if skipped else "every requested attack ran") + (
        f" ({', '.join(held)} stopped by the query budget, which held against a surrogate)" if held else "")
    if skipped:
        how += f"; skipped as not applicable: {', '.join(skipped[:4])}" + (
            f" and {len(skipped) - 4} more" if len(skipped) > 4 else "")
    return "pass", risk, f"{how}; worst risk {risk} is below fail_on ({fail_on})"


def exit_code(report: dict[str, Any]) -> int:
    """Exit code for a finished report (docs/contract.md): 0 pass, 1 fail, 3 error, 4 inconclusive
    (0 with `policy.on_inconclusive: pass`), 128 + the signal number when interrupted."""
    sig = report.get("interrupted")
    if sig:
        return 128 + int(getattr(signal.Signals, sig, signal.SIGINT))
    v = report.get("verdict") or "error"
    if v == "inconclusive" and (report.get("policy") or {}).get("on_inconclusive") == "pass":
        return 0
    return EXIT_CODES.get(v, 3)
