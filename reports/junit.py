"""JUnit XML for CI test reports (Jenkins, GitLab, CircleCI, GitHub test reporters), via junitparser.

One test suite per run (a sweep: one per cell), one test case per attack, keyed by
`classname` = `leakmeter.<scenario>.<family>` and `name` = the attack:
- risk at or above the policy's `fail_on` → <failure> (whatever the status: a shown risk is a fact);
- status `error` → <error> with the crash;
- status `skipped` or `incomplete` → <skipped> with the reason (it showed nothing either way);
- otherwise the case passes.
The measured metrics go to the case's system-out. A run-level crash, or a measured reconstruction
above its DP bound, adds a case named `run`. Works on plain report dicts.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

from reports.outputs import write_output
from reports.text import xml_text

LEVELS = ("low", "medium", "high")


def _reaches(risk: str | None, fail_on: str) -> bool:
    return risk in LEVELS and fail_on in LEVELS and LEVELS.index(risk) >= LEVELS.index(fail_on)


def _metrics_text(a: dict[str, Any]) -> str:
    shown = {k: a.get(k) for k in ("status", "stopped_by", "risk", "queries", "queries_sent", "retries",
                                   "faults", "wall_s") if a.get(k) is not None}
    metrics = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
               for k, v in (a.get("metrics") or {}).items()}
    return json.dumps({**shown, "metrics": metrics}, indent=1, sort_keys=True, default=str)


def attack_case(a: dict[str, Any], scenario: str, fail_on: str) -> TestCase:
    """One attack entry as a test case."""
    family = a.get("family") or "attack"
    case = TestCase(name=a.get("name", "?"), classname=f"leakmeter.{scenario}.{family}",
                    time=float(a.get("wall_s") or 0.0))
    reason = xml_text(a.get("reason") or "")  # an endpoint's ESC/BEL broke the XML writer
    status = a.get("status")
    if _reaches(a.get("risk"), fail_on):
        res = Failure(f"risk {a['risk']} (fails at {fail_on}): {reason}", f"risk.{a['risk']}")
        res.text = reason
        case.result = [res]
    elif status == "error":
        res = Error(reason or "the attack crashed", "attack.error")
        res.text = xml_text(a.get("traceback") or reason)
        case.result = [res]
    elif status in ("skipped", "incomplete"):
        why = reason if status == "skipped" else (
            f"incomplete (stopped by {a.get('stopped_by') or 'unknown'}; "
            f"risk {a.get('risk') or '-'}): {reason}")
        case.result = [Skipped(why)]
    case.system_out = xml_text(_metrics_text(a))
    return case


def report_suite(report: dict[str, Any], name: str | None = None) -> TestSuite:
    """One report (a run, or one cell of a sweep) as a test suite."""
    scenario = xml_text(report.get("scenario") or "scenario")
    fail_on = (report.get("policy") or {}).get("fail_on", "high")
    suite = TestSuite(name or f"leakmeter {scenario}")
    if report.get("started_at"):
        suite.timestamp = str(report["started_at"])
    for key in ("verdict", "risk", "leakmeter_version", "scenario_sha256", "device", "mlflow_run_id"):
        if report.get(key) is not None:
            suite.add_property(key, xml_text(report[key]))
    for a in report.get("attacks") or []:
        suite.add_testcase(attack_case(a, scenario, fail_on))
    problems = []
    if report.get("error"):
        problems.append(Error(xml_text(f"the run crashed: {report['error']}"), "run.error"))
    if report.get("rero_violations"):
        problems.append(Failure("measured reconstruction above its DP bound: "
                                + xml_text("; ".join(report["rero_violations"])), "rero.violation"))
    if problems:
        case = TestCase(name="run", classname=f"leakmeter.{scenario}", time=0.0)
        case.result = problems[:1]
        suite.add_testcase(case)
    suite.update_statistics()
    return suite


def crashed_suite(label: str, scenario: str, error: str) -> TestSuite:
    """A sweep cell that crashed before it produced a report."""
    suite = TestSuite(f"leakmeter {scenario} [{label}]")
    case = TestCase(name="run", classname=f"leakmeter.{scenario}", time=0.0)
    case.result = [Error(xml_text(error), "run.error")]
    suite.add_testcase(case)
    suite.update_statistics()
    return suite


def to_junit(reports: list[tuple[str | None, dict[str, Any]]]) -> JUnitXml:
    """A <testsuites> document: one suite per (cell label or None, report)."""
    xml = JUnitXml("leakmeter")
    for label, rep, *_ in reports:
        scen = rep.get("scenario") or "scenario"
        xml.add_testsuite(report_suite(rep, f"leakmeter {scen}" + (f" [{label}]" if label else "")))
    xml.update_statistics()
    return xml


def write_junit(path: str | Path, reports: list[tuple[str | None, dict[str, Any]]],
                extra: list[TestSuite] | None = None) -> Path:
    """Write the JUnit XML; `extra` suites (e.g. crashed sweep cells) are appended. Returns the path."""
    xml = to_junit(reports)
    for suite in extra or []:
        xml.add_testsuite(suite)
    xml.update_statistics()
    buf = io.BytesIO()
    xml.write(buf, pretty=True)
    # a temporary file renamed over a regular file only: never a device, never through a link
    return write_output(path, buf.getvalue())
