"""report.md: the ReRo table keeps each bound's flags and never prints None; old reports render."""

from reports.render import to_markdown


def test_rero_table_shows_flags_and_a_dash_for_missing_eta():
    rows = [{"prior": "empirical", "eta": None, "kappa": 0.01, "gamma": 0.3, "bound": "rdp",
             "tightest": True, "rigorous": True, "vacuous": False},
            {"prior": "gaussian", "eta": 2.0, "kappa": 0.01, "gamma": 0.2, "bound": "gdp", "rigorous": False},
            {"prior": "uniform_ball", "eta": 1.0, "kappa": 0.5, "gamma": 1.0, "bound": "eps_dp",
             "vacuous": True},
            {"prior": "empirical", "eta": 0.5, "kappa": 0.1, "gamma": 0.05, "bound": "check:reconn",
             "violation": True}]
    md = to_markdown({"scenario": "x", "verdict": "fail", "risk": "high", "policy": {"fail_on": "high"},
                      "rero": rows, "attacks": []})
    rero = md.split("## ReRo bounds")[1]
    table = [ln for ln in rero.splitlines() if ln.startswith("| ") and "| γ |" not in ln][:4]
    assert table == ["| empirical | — | 0.01 | 0.3 | rdp | tightest |",
                     "| gaussian | 2 | 0.01 | 0.2 | gdp | approx. |",
                     "| uniform_ball | 1 | 0.5 | 1 | eps_dp | vacuous |",
                     "| empirical | 0.5 | 0.1 | 0.05 | check:reconn | VIOLATED |"]
    assert "None" not in md


def test_old_or_partial_reports_render():
    md = to_markdown({"scenario": "x", "verdict": None, "attacks": [{"name": "a"}],
                      "privacy": {"epsilon": 2.0}})
    assert "**Verdict: ERROR**" in md and "| a |  | ? | - | - | - |" in md and "None" not in md
    md = to_markdown({"scenario": "x", "verdict": "inconclusive", "policy": {"fail_on": "high"},
                      "leakmeter_version": "0.2.0", "started_at": "2026-01-01T00:00:00Z", "duration_s": 4.5,
                      "attacks": [{"name": "b", "status": "incomplete", "stopped_by": "faults",
                                   "risk": "low"}]})
    assert "leakmeter 0.2.0; started 2026-01-01T00:00:00Z; took (s) 4.5" in md
    assert "| b |  | incomplete | faults | low |" in md


def test_warnings_caught_during_the_run_are_listed():
    w = {"category": "UserWarning", "message": "Secure RNG turned off.", "source": "privacy_engine.py:98",
         "count": 2}
    md = to_markdown({"scenario": "x", "verdict": "pass", "attacks": [], "warnings": [w]})
    assert "- UserWarning: Secure RNG turned off. (privacy_engine.py:98, ×2)" in md
