"""What a run writes: the scenario and each attack's nested run in MLflow, the report files
(report.json, report.md, report.html, the `--json` copy) and the run's summary metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness.attacks.base import Artifact
from harness.core.output import ours
from harness.core.progress import busy
from harness.scenario import Scenario, flatten
from reports import render
from reports.html import write_html
from reports.tracking import Tracker
from reports.verdict import VERDICT_CODES
from victims.http.secrets import SECRETS


def log_scenario(tracker: Tracker, parent: str | None, s: Scenario, source: str | None) -> None:
    """The scenario's public settings as params, and its text (comments kept when nothing was
    redacted) as scenario.yaml."""
    public = s.public_dump()
    tracker.params(parent, flatten(public))
    if source and public == s.model_dump(mode="json"):  # nothing to redact: keep comments
        tracker.text(parent, source, "scenario.yaml")
    else:
        tracker.text(parent, yaml.safe_dump(public, sort_keys=False), "scenario.yaml")


def log_attack(tracker: Tracker, run_id: str | None, entry: dict[str, Any],
               art: Artifact | None) -> None:
    """Params, metrics, tags, files and curves of one attack's nested run."""
    tracker.params(run_id, {f"params.{k}": v for k, v in flatten(entry["params"]).items()})
    curves = art.data.get("curves", {}) if art else {}
    tracker.metrics(run_id, {k: v for k, v in {**entry["metrics"], "wall_s": entry["wall_s"]}.items()
                             if k not in curves})  # a curve's own points carry its final value
    tracker.tags(run_id, {"status": entry["status"], "stopped_by": entry.get("stopped_by") or "",
                          "risk": entry.get("risk") or "", "reason": entry.get("reason", "")})
    for f in (art.files.values() if art else []):
        tracker.artifact(run_id, f)
    for key, pts in (art.data.get("curves", {}) if art else {}).items():
        tracker.curve(run_id, key, pts)


def finish(report: dict[str, Any], s: Scenario, tracker: Tracker, parent: str | None,
            outdir: Path, json_path: str | Path | None, status: str,
            keep: frozenset[str] = frozenset(), since: float = 0.0) -> None:
    """Write the report files, log them and the summary to MLflow, and end the parent run. Figures
    and pages in `outdir` are uploaded only when this run wrote them (not in `keep`, the names there
    before the run, or rewritten since `since`)."""
    report["mlflow_run_id"] = parent
    report["tracking_uri"] = SECRETS.scrub(tracker.uri) if tracker.enabled else None  # after scrub_in_place
    try:
        with busy("writing report.json, report.md and report.html (with plots)"):
            render.write_json(report, outdir / "report.json")
            render.write_text(outdir / "report.md", render.to_markdown(report, s.public_dump()))
            write_html(report, outdir / "report.html", s.public_dump())
            if json_path:
                render.write_json(report, json_path)
        if tracker.enabled:
            with busy("logging the run to MLflow"):
                _log_parent(report, s, tracker, parent, outdir, keep, since)
    finally:
        tracker.end(parent, status)


def _log_parent(report: dict[str, Any], s: Scenario, tracker: Tracker, parent: str | None,
                outdir: Path, keep: frozenset[str] = frozenset(), since: float = 0.0) -> None:
    """The parent run's summary metrics, its verdict columns (tags `verdict`, `risk`, `scenario`,
    and a run name that says them: the runs page shows it without a column chosen) and the report
    files (report.html opens from the run's Artifacts tab); other figures and pages only when this run
    wrote them."""
    tracker.metrics(parent, summary_metrics(report))
    risk = report.get("risk") or "none"
    tracker.tags(parent, {"verdict": report["verdict"], "risk": risk, "scenario": s.name})
    tracker.rename(parent, f"{s.name}: {str(report['verdict']).upper()} (risk {risk})")
    for name in ("report.html", "report.md", "report.json"):
        tracker.artifact(parent, outdir / name)
    pages = [h for h in sorted(outdir.glob("*.html")) if h.name != "report.html"]
    for extra in ours(sorted(outdir.glob("*.png")) + pages, keep, since):  # only what this run wrote
        tracker.artifact(parent, extra)


def summary_metrics(report: dict[str, Any]) -> dict[str, float]:
    metrics = {f"victim_{k}": v for k, v in report["victim"].items()
               if isinstance(v, int | float) and not isinstance(v, bool)}
    metrics["queries_total"] = report.get("queries_total", 0)
    if report.get("verdict") in VERDICT_CODES:  # the tag as a number, for charts and comparisons
        metrics["verdict_code"] = VERDICT_CODES[report["verdict"]]
    if report.get("privacy"):
        metrics["dp_epsilon"] = report["privacy"]["epsilon"]
    for a in report["attacks"]:
        for k, v in a.get("metrics", {}).items():
            metrics[f"{a['name']}.{k}"] = v
    for r in report.get("rero", []):
        if "metric" in r:
            metrics[r["metric"]] = r["gamma"]
    return metrics
