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


def _why(a: dict[str, Any]) -> str:
    """An attack's reason as report.md prints it: the one place its text (from the attack, perhaps
    echoing an endpoint) is formatted for Markdown."""
    return md_inline(a.get("reason", ""))  # outside text: one line, no markup


def _findings(report: dict[str, Any], scenario: dict[str, Any] | None) -> list[str]:
    """"What to change": for each attack that showed medium or high risk or did not finish (worst
    first), its advice (reports/advice), filled from its numbers; a line said once."""
    from reports.mitigation import advice_for, render_advice

    order = {"high": 0, "medium": 1}
    found = [a for a in report.get("attacks", [])
             if a.get("risk") in order or a.get("status") in ("incomplete", "error")]
    if not found:
        return []
    lines, said = ["## What to change", ""], set()
    for a in sorted(found, key=lambda a: order.get(a.get("risk"), 2)):
        try:
            title = advice_for(str(a.get("name", "")), a.get("family"))["title"]
            advice = render_advice(a, report, scenario)
        except (OSError, ValueError, KeyError):
            title, advice = str(a.get("name")), []
        what = a.get("risk") or a.get("status")
        lines += [f"### {title} ({a.get('name')}: {what})", ""]
        new = [t for t in advice if t not in said]
        said.update(new)
        lines += [f"- {t}" for t in new] or ["- (see above)"]
        lines.append("")
    return lines


def to_markdown(report: dict[str, Any], scenario: dict[str, Any] | None = None) -> str:
    """A human-readable summary: the verdict, what to change, one line per attack; then the
    victim, privacy, bounds, and each attack's metrics (collapsed)."""
    from reports.summary import headline, status_text

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
    if report.get("error"):
        lines += [f"**The run crashed:** {md_inline(report['error'])}", ""]
    lines += _findings(report, scenario)
    lines += ["## Attacks", "",
              "| attack | family | status | stopped by | risk | figure | queries | wall s | why |",
              "|---|---|---|---|---|---|---|---|---|"]
    for a in report.get("attacks", []):
        lines.append(
            f"| {a.get('name')} | {a.get('family', '')} | {a.get('status') or '?'} | "
            f"{a.get('stopped_by') or '-'} | {a.get('risk') or '-'} | {headline(a) or '-'} | "
            f"{a.get('queries', 0)} | {_fmt(a.get('wall_s', 0.0))} | {_why(a)} |"
        )
    shown = (("leakmeter_version", "leakmeter"), ("started_at", "started"), ("duration_s", "took (s)"),
             ("device", "device"))
    run = [f"{label} {report[k]}" for k, label in shown if report.get(k) is not None]
    if run:
        lines += ["", "; ".join(run)]
    vic = report.get("victim") or {}
    lines += ["", "## Victim", ""]
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
    detailed = [a for a in report.get("attacks", []) if a.get("metrics")]
    if detailed:
        lines += ["", "## Each attack's measurements", ""]
    for a in detailed:
        lines += [f"### {a.get('name')} ({status_text(a)}, risk {a.get('risk') or '-'})", ""]
        if a.get("progress"):
            lines += [f"Progress: {md_inline(a['progress'])}.", ""]
        lines += [f"- note: {md_inline(n)}" for n in a.get("notes", [])]
        lines += ["", f"<details><summary>{len(a['metrics'])} metrics</summary>", ""]
        lines += [f"- {k}: {_fmt(val)}" for k, val in sorted(a["metrics"].items())]
        lines += ["", "</details>", ""]
    if report.get("warnings"):
        lines += ["", "## Warnings raised during the run", ""]
        lines += [f"- {md_inline(w.get('category'))}: {md_inline(w.get('message'))} "
                  f"({md_inline(w.get('source'))}, ×{w.get('count')})"
                  for w in report["warnings"] if isinstance(w, dict)]
    return "\n".join(lines) + "\n"
