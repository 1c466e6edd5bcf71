"""Rendering a report (plain dict) as JSON and Markdown."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def _clean(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    return v


def to_json(report: dict[str, Any]) -> str:
    """The report as JSON text (NaN → null, ±inf → strings)."""
    return json.dumps(_clean(report), indent=2, default=str)


def write_json(report: dict[str, Any], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(to_json(report))
    return p


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def to_markdown(report: dict[str, Any]) -> str:
    """A human-readable summary: verdict first, then victim, privacy, bounds and attacks."""
    v = str(report.get("verdict") or "error")
    lines = [
        f"# leakmeter report: {report.get('scenario')}",
        "",
        f"**Verdict: {v.upper()}** (worst scored risk: {report.get('risk') or 'none'}; "
        f"the policy fails at {report.get('policy', {}).get('fail_on', 'high')})",
        "",
    ]
    if report.get("verdict_reason"):
        lines += [str(report["verdict_reason"]), ""]
    if report.get("interrupted"):
        lines += [f"**Interrupted by {report['interrupted']}:** the results below are partial.", ""]
    if report.get("error"):
        lines += [f"**The run crashed:** {report['error']}", ""]
    vic = report.get("victim", {})
    lines += ["## Victim", ""]
    for k, val in vic.items():
        if not isinstance(val, dict | list):
            lines.append(f"- {k}: {_fmt(val)}")
    d = report.get("defenses") or []
    lines.append(f"- defenses: {', '.join(d) if d else 'none'}")
    priv = report.get("privacy")
    lines += ["", "## Privacy accounting", ""]
    if priv:
        lines.append(
            f"DP-SGD: ε = {_fmt(priv['epsilon'])} at δ = {priv['delta']} "
            f"({priv['accountant']} accountant, σ = {_fmt(priv['noise_multiplier'])}, "
            f"q = {_fmt(priv['sample_rate'])}, {priv['steps']} steps)"
        )
    else:
        lines.append("No DP-SGD: no formal guarantee bounds reconstruction (γ = 1).")
    if report.get("rero"):
        lines += ["", "## ReRo bounds", "", "| prior | η | κ | γ | bound |", "|---|---|---|---|---|"]
        for r in report["rero"]:
            lines.append(f"| {r.get('prior')} | {_fmt(r.get('eta'))} | {_fmt(r.get('kappa'))} | "
                         f"{_fmt(r.get('gamma'))} | {r.get('bound', '')} |")
    lines += ["", "## Attacks", "",
              "| attack | family | status | stopped by | risk | queries | wall s | why |",
              "|---|---|---|---|---|---|---|---|"]
    for a in report.get("attacks", []):
        lines.append(
            f"| {a['name']} | {a.get('family', '')} | {a['status']} | {a.get('stopped_by') or '-'} | "
            f"{a.get('risk') or '-'} | {a.get('queries', 0)} | {_fmt(a.get('wall_s', 0.0))} | "
            f"{a.get('reason', '')} |"
        )
    for a in report.get("attacks", []):
        if a.get("metrics"):
            lines += ["", f"### {a['name']}", ""]
            if a.get("progress"):
                lines.append(f"Progress: {a['progress']}.")
            lines += [f"- {k}: {_fmt(val)}" for k, val in sorted(a["metrics"].items())]
            lines += [f"- note: {n}" for n in a.get("notes", [])]
    return "\n".join(lines) + "\n"
