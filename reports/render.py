"""Rendering a report (plain dict) as JSON and Markdown."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from reports.outputs import write_output
from reports.text import md_inline


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
    """Write the report JSON (reports/outputs.py: renamed over a regular file only)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    return write_output(p, to_json(report))


def write_text(path: str | Path, text: str) -> Path:
    """Write a report file the same way (renamed over a regular file only)."""
    return write_output(path, text)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _cell(v: Any) -> str:
    """A table cell: "—" for a missing value (never "None"), numbers to 4 significant digits."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return md_inline(_fmt(v))  # one line, Markdown escaped (a "|" no longer ends the cell)


def _flags(row: dict[str, Any]) -> str:
    """The bound's flags in words: tightest, approx. (not rigorous), vacuous, VIOLATED."""
    flags = [name for key, name in (("tightest", "tightest"), ("vacuous", "vacuous")) if row.get(key)]
    if row.get("rigorous") is False:
        flags.append("approx.")
    if row.get("violation"):
        flags.append("VIOLATED")
    return ", ".join(flags) or "—"


def to_markdown(report: dict[str, Any]) -> str:
    """A human-readable summary: verdict first, then victim, privacy, bounds and attacks."""
    v = str(report.get("verdict") or "error")
    lines = [
        f"# leakmeter report: {md_inline(report.get('scenario'))}",
        "",
        f"**Verdict: {v.upper()}** (worst scored risk: {report.get('risk') or 'none'}; "
        f"the policy fails at {(report.get('policy') or {}).get('fail_on', 'high')})",
        "",
    ]
    if report.get("verdict_reason"):
        lines += [md_inline(report["verdict_reason"]), ""]
    if report.get("interrupted"):
        lines += [f"**Interrupted by {report['interrupted']}:** the results below are partial.", ""]
    shown = (("leakmeter_version", "leakmeter"), ("started_at", "started"), ("duration_s", "took (s)"),
             ("device", "device"))
    run = [f"{label} {report[k]}" for k, label in shown if report.get(k) is not None]
    if run:
        lines += ["; ".join(run), ""]
    if report.get("error"):
        lines += [f"**The run crashed:** {md_inline(report['error'])}", ""]
    vic = report.get("victim") or {}
    lines += ["## Victim", ""]
    for k, val in vic.items():
        if not isinstance(val, dict | list):
            lines.append(f"- {md_inline(k)}: {md_inline(_fmt(val))}")
    ep = vic.get("endpoint")
    if isinstance(ep, dict):  # a remote victim: where, and which protocol answered
        found = " (found by protocol: auto)" if ep.get("protocol_requested") == "auto" else ""
        lines.append(f"- endpoint: {md_inline(ep.get('url'))}, protocol {md_inline(ep.get('protocol'))}"
                     f"{found}")
        meta = ep.get("metadata")
        if isinstance(meta, dict):
            lines.append("- model metadata: " + ", ".join(f"{md_inline(k)} {md_inline(_fmt(v))}"
                                                          for k, v in meta.items()))
    d = report.get("defenses") or []
    lines.append(f"- defenses: {', '.join(d) if d else 'none'}")
    priv = report.get("privacy")
    lines += ["", "## Privacy accounting", ""]
    if priv:
        lines.append(
            f"DP-SGD: ε = {_cell(priv.get('epsilon'))} at δ = {_cell(priv.get('delta'))} "
            f"({_cell(priv.get('accountant'))} accountant, σ = {_cell(priv.get('noise_multiplier'))}, "
            f"q = {_cell(priv.get('sample_rate'))}, {_cell(priv.get('steps'))} steps)"
        )
    else:
        lines.append("No DP-SGD: no formal guarantee bounds reconstruction (γ = 1).")
    if report.get("rero"):
        lines += ["", "## ReRo bounds", "",
                  "γ bounds any reconstruction attack's success; *tightest* marks the bound the report "
                  "quotes, *approx.* one that is not a rigorous upper bound.", "",
                  "| prior | η | κ | γ | bound | flags |", "|---|---|---|---|---|---|"]
        for r in report["rero"]:
            lines.append(f"| {_cell(r.get('prior_desc') or r.get('prior'))} | {_cell(r.get('eta'))} | "
                         f"{_cell(r.get('kappa'))} | {_cell(r.get('gamma'))} | {_cell(r.get('bound'))} | "
                         f"{_flags(r)} |")
    lines += ["", "## Attacks", "",
              "| attack | family | status | stopped by | risk | queries | wall s | why |",
              "|---|---|---|---|---|---|---|---|"]
    for a in report.get("attacks", []):
        lines.append(
            f"| {a.get('name')} | {a.get('family', '')} | {a.get('status') or '?'} | "
            f"{a.get('stopped_by') or '-'} | {a.get('risk') or '-'} | {a.get('queries', 0)} | "
            f"{_fmt(a.get('wall_s', 0.0))} | {md_inline(a.get('reason', ''))} |"
        )
    for a in report.get("attacks", []):
        if a.get("metrics"):
            lines += ["", f"### {a.get('name')}", ""]
            if a.get("progress"):
                lines.append(f"Progress: {md_inline(a['progress'])}.")
            lines += [f"- {k}: {_fmt(val)}" for k, val in sorted(a["metrics"].items())]
            lines += [f"- note: {md_inline(n)}" for n in a.get("notes", [])]
    if report.get("warnings"):
        lines += ["", "## Warnings raised during the run", ""]
        lines += [f"- {md_inline(w.get('category'))}: {md_inline(w.get('message'))} "
                  f"({md_inline(w.get('source'))}, ×{w.get('count')})"
                  for w in report["warnings"] if isinstance(w, dict)]
    return "\n".join(lines) + "\n"
