"""The verdict's precedence rules as a table: every combination of attack statuses and scored
risks → verdict and exit code, checked against the rules written out independently below."""

from __future__ import annotations

import itertools

import pytest

from reports.verdict import LEVELS, exit_code, reaches, status_of, verdict

STATUSES = ("ok", "incomplete", "skipped", "error")
RISKS = (None, "low", "medium", "high")


def _expected(attacks, fail_on, run_error=False, interrupted=False):
    """The contract, spelled out case by case (docs/contract.md, Outcomes)."""
    order = {"low": 0, "medium": 1, "high": 2}
    if fail_on != "never" and any(a["risk"] is not None and order[a["risk"]] >= order[fail_on]
                                  for a in attacks):
        return "fail"
    if run_error or interrupted or any(a["status"] == "error" for a in attacks):
        return "error"
    if any(a["status"] == "incomplete" for a in attacks):
        return "inconclusive"
    if all(a["status"] == "skipped" for a in attacks):
        return "inconclusive"
    return "pass"


def _attack(i, status, risk):
    return {"name": f"a{i}", "status": status, "risk": None if status == "skipped" else risk}


PAIRS = [(st, r) for st in STATUSES for r in RISKS if not (st == "skipped" and r is not None)]


@pytest.mark.parametrize("fail_on", ["low", "medium", "high", "never"])
def test_every_combination_of_two_attacks(fail_on):
    seen = set()
    for (s1, r1), (s2, r2) in itertools.product(PAIRS, PAIRS):
        attacks = [_attack(0, s1, r1), _attack(1, s2, r2)]
        v, risk, why = verdict(attacks, fail_on)
        assert v == _expected(attacks, fail_on), (attacks, fail_on)
        assert why, "every verdict says why"
        scored = [a["risk"] for a in attacks if a["risk"]]
        assert risk == (max(scored, key=LEVELS.index) if scored else None)
        code = exit_code({"verdict": v, "policy": {"on_inconclusive": "fail"}})
        assert code == {"pass": 0, "fail": 1, "error": 3, "inconclusive": 4}[v]
        seen.add(v)
    assert seen == ({"pass", "error", "inconclusive"} if fail_on == "never"
                    else {"pass", "fail", "error", "inconclusive"})


@pytest.mark.parametrize("run_error, interrupted", [(True, False), (False, True)])
def test_run_crash_or_interrupt_is_error_unless_a_risk_was_shown(run_error, interrupted):
    ok_low = [_attack(0, "ok", "low")]
    err = "RuntimeError: x" if run_error else None
    assert verdict(ok_low, "high", err, interrupted)[0] == "error"
    shown = [_attack(0, "incomplete", "high")]
    assert verdict(shown, "high", err, interrupted)[0] == "fail"


def test_nothing_ran_is_inconclusive_not_pass():
    assert verdict([_attack(0, "skipped", None), _attack(1, "skipped", None)], "high")[0] == \
        "inconclusive"


@pytest.mark.parametrize("verdict_word, on_inconclusive, code", [
    ("inconclusive", "fail", 4), ("inconclusive", "pass", 0), ("pass", "pass", 0),
    ("fail", "pass", 1), ("error", "pass", 3)])
def test_on_inconclusive_only_changes_the_inconclusive_exit(verdict_word, on_inconclusive, code):
    assert exit_code({"verdict": verdict_word, "policy": {"on_inconclusive": on_inconclusive}}) == code


@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_interrupted_runs_exit_with_the_signal(sig, code):
    assert exit_code({"verdict": "fail", "interrupted": sig}) == code


@pytest.mark.parametrize("stopped_by, crashed, status", [
    (None, False, "ok"), ("budget", False, "ok"), ("faults", False, "incomplete"),
    ("endpoint", False, "incomplete"), ("time", False, "incomplete"),
    ("precision", False, "incomplete"), ("assumption", False, "incomplete"),
    ("interrupt", False, "incomplete"), (None, True, "error"), ("budget", True, "error")])
def test_status_from_why_the_attack_stopped(stopped_by, crashed, status):
    assert status_of(stopped_by, crashed) == status


def test_reaches_respects_never():
    assert reaches("high", "high") and reaches("high", "low") and not reaches("low", "medium")
    assert not reaches("high", "never") and not reaches(None, "low")
