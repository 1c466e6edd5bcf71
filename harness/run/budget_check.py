"""Budgets in the runner: the scan's own row cap, and the check that a budget stop is a defense.

`defenses.query_budget` is one attacker's quota and every attack faces it whole; a budget stop
shows the defense holding only if the cheapest black-box attack — a surrogate under the same
budget — also stays below `fail_on` (docs/contract.md, "Query budgets are per attacker").
"""

from __future__ import annotations

from typing import Any

from harness.attacks import registry
from harness.attacks.base import Attack
from harness.scenario import Scenario
from reports.verdict import reaches


def max_rows(s: Scenario) -> int | None:
    """The scan's own cost cap: rows the run may send in total (endpoints only; None = none)."""
    ep = s.victim.endpoint
    return ep.max_rows if ep is not None else None


# --------------------------------------------------------------------------- the budget check


def budget_stops(attacks: list[dict[str, Any]], fail_on: str) -> list[dict[str, Any]]:
    """Attacks the query budget stopped below `fail_on` (the surrogate is its own control)."""
    return [a for a in attacks if a["status"] == "ok" and a["stopped_by"] == "budget"
            and a["name"] != "surrogate" and not reaches(a.get("risk"), fail_on)]


def budget_check(attacks: list[dict[str, Any]], s: Scenario) -> type[Attack] | None:
    """The attack the runner adds (a surrogate, with its default parameters) when a budget
    stopped an attack below `fail_on` and the run has no surrogate of its own: a budget holds
    only if the cheapest attack under it also fails to reach `fail_on` (docs/contract.md). None
    when no check is needed or possible."""
    if not budget_stops(attacks, s.policy.fail_on) or any(a["name"] == "surrogate" for a in attacks):
        return None
    return registry().get("surrogate")


def settle_budget_stops(attacks: list[dict[str, Any]], fail_on: str, budget: int | None) -> None:
    """Say for each budget stop whether the budget was shown to hold: it held when a surrogate
    under the same budget finished below `fail_on`; it did not when that surrogate reached it;
    otherwise nothing was shown and the stop is `incomplete`."""
    stops = budget_stops(attacks, fail_on)
    if not stops:
        return
    sur = next((a for a in attacks if a["name"] == "surrogate"), None)
    for a in stops:
        if sur is not None and reaches(sur.get("risk"), fail_on):
            a["budget_held"] = False
            a["reason"] += (f"; the budget did not hold: a surrogate under the same budget reached "
                            f"risk {sur['risk']} in {sur['queries']} queries")
        elif sur is not None and sur["status"] == "ok":
            a["budget_held"] = True
            a["reason"] += (f"; the budget held: a surrogate under the same budget reached only "
                            f"risk {sur['risk']} ({sur['queries']} queries)")
        else:
            why = ("none could run" if sur is None else
                   f"it ended {sur['status']}: {sur.get('reason', '')[:160]}")
            a["budget_held"] = None
            a["status"] = "incomplete"
            a["reason"] += (f"; whether the budget of {budget} holds is not shown: the cheapest "
                            f"attack under the same budget (a surrogate) did not finish ({why})")
