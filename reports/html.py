"""A self-contained `report.html`: one file, images embedded as base64, no scripts, no links out.

Written for someone who never saw leakmeter: the verdict in plain words first, then each
finding with what to change (reports/advice/, filled from the measured numbers), the deployment,
what the risk levels mean, each attack (what was tried, how many queries, what it measured, the
risk and why, its images and curves), the ReRo bounds and the scenario. The page is rendered from
the Jinja2 templates in reports/templates/ with autoescaping on; this module only prepares plain
values. Works on the plain report dict (docs/contract.md); never imports the harness.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jinja2 import Environment, FileSystemLoader
from markupsafe import Markup, escape

from reports import mitigation
from reports.outputs import write_output
from reports.plots import curve_x

IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".svg": "image/svg+xml", ".webp": "image/webp"}
MAX_IMAGE_BYTES = 8 * 1024 * 1024  # larger files are listed, not embedded
TEMPLATES = Path(__file__).parent / "templates"
FAMILY_ORDER = ("extraction", "span", "reconstruction", "membership")


def code_spans(text: Any) -> Markup:
    """Escape `text`, then show its `backticked` parts as <code> (advice names keys and commands)."""
    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text))))


def fmt(v: Any) -> str:
    """A value as the page shows it (4 significant digits, "—" for none, "n/a" for NaN)."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return "n/a" if math.isnan(v) else f"{v:.4g}"
    if v is None:
        return "—"
    return str(v)


@cache
def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, trim_blocks=True,
                      lstrip_blocks=True)
    env.filters["fmt"] = fmt
    env.filters["code"] = code_spans
    return env


def _data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def embed_file(path: str | Path, caption: str) -> dict[str, str] | None:
    """An image file as {"src": data URI, "caption"}, or {"note"} when it cannot be embedded;
    None for files that are not images."""
    p = Path(path)
    mime = IMAGE_TYPES.get(p.suffix.lower())
    if mime is None:
        return None
    try:
        data = p.read_bytes()
    except OSError:
        return {"note": f"image {p.name} is missing"}
    if len(data) > MAX_IMAGE_BYTES:
        return {"note": f"image {p.name} is too large to embed ({len(data)} bytes): {p}"}
    return {"src": _data_uri(data, mime), "caption": caption}


def _curve_png(key: str, points: list) -> bytes | None:
    """A small PNG of one curve [(step, value), ...], or None when it has no points."""
    pts = [(float(s), float(v)) for s, v in points if v is not None]
    if not pts:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.2), dpi=90)
    xs, ys = zip(*pts, strict=True)
    ax.plot(xs, ys, marker="o", ms=3)
    if min(xs) > 0 and max(xs) / max(min(xs), 1e-12) > 50:
        ax.set_xscale("log")
    ax.set_xlabel(curve_x(key))
    ax.set_ylabel(key)
    ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.17, right=0.97, bottom=0.16, top=0.95)  # fixed size: no tight_layout
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _names(attacks: list[dict[str, Any]]) -> str:
    return ", ".join(a.get("name", "?") for a in attacks)


def verdict_sentence(report: dict[str, Any]) -> tuple[str, str]:
    """(css class, plain-words verdict starting with the verdict word) for the top of the page."""
    cls, word, text = verdict_parts(report)
    return cls, f"{word} — {text}"


def _more(items: list[Any], shown: int = 3) -> str:
    """"; and N more (see the table below)" when a quote shows only the first `shown` items."""
    n = len(items) - shown
    return f"; and {n} more (see the table below)" if n > 0 else ""


def verdict_parts(report: dict[str, Any]) -> tuple[str, str, str]:
    """(css class, VERDICT WORD, what it means here) per the contract's outcomes."""
    fail_on = (report.get("policy") or {}).get("fail_on", "high")
    attacks = report.get("attacks") or []
    v = report.get("verdict")
    crashed = [a for a in attacks if a.get("status") == "error"]
    unfinished = [a for a in attacks if a.get("status") == "incomplete"]
    if v == "fail":
        levels = ("low", "medium", "high")
        bar = levels.index(fail_on) if fail_on in levels else len(levels)
        worst = [a for a in attacks if a.get("risk") in levels and levels.index(a["risk"]) >= bar]
        why = "; ".join(f"{a['name']}: {a.get('reason', '')}" for a in worst[:3]) + _more(worst)
        text = (f"this deployment leaks. {len(worst)} attack(s) reached {fail_on} risk or above "
                f"(the policy fails at {fail_on}). {why}").strip()
        if report.get("rero_violations"):
            text += " A measured reconstruction exceeded its DP bound: " + "; ".join(
                report["rero_violations"])
        return "fail", "FAIL", text
    reason = str(report.get("verdict_reason") or "").rstrip(".")
    if v == "error" or (v is None and report.get("error")):
        if report.get("interrupted"):
            what = f"the run was interrupted ({report['interrupted']})"
        elif report.get("error"):
            what = f"the run crashed ({report['error']})"
        else:
            what = reason or f"{len(crashed)} attack(s) crashed: {_names(crashed)}"
        return "error", "ERROR", f"{what}. The results below are partial; nothing here is a pass."
    if v == "inconclusive":
        if reason:
            text = f"no risk was shown, but that is not evidence of safety, so this is not a pass: {reason}."
        elif unfinished:
            how = "; ".join(f"{a['name']} ({a.get('stopped_by') or 'stopped'}: {a.get('reason', '')})"
                            for a in unfinished[:3]) + _more(unfinished)
            text = (f"no attack showed {fail_on} risk, but {len(unfinished)} requested attack(s) could "
                    f"not finish, so this is not a pass. {how}")
        else:
            text = "no requested attack could run against this deployment, so nothing was shown either way."
        return "inconclusive", "INCONCLUSIVE", text
    if v == "pass":
        ran = [a for a in attacks if a.get("status") == "ok"]
        held = [a for a in ran if a.get("stopped_by") == "budget"]
        n_skip = sum(a.get("status") == "skipped" for a in attacks)
        every = (f"every requested attack that applies ran to the end ({n_skip} did not apply to this "
                 "deployment; the table says why)" if n_skip else "every requested attack ran to the end")
        how = (every if not held else
               f"{len(ran) - len(held)} attack(s) ran to the end and {len(held)} were stopped by the "
               f"query budget ({_names(held)}), which a surrogate under the same budget showed to hold")
        return "pass", "PASS", (f"{how}; none reached the policy's failure level ({fail_on}); the "
                                f"worst risk found was {report.get('risk')}. {len(ran)} attack(s) ran.")
    return "error", "NO VERDICT", "the run ended before a verdict was reached; the results below are partial."


def _is_finding(a: dict[str, Any]) -> bool:
    return a.get("risk") in ("medium", "high") or a.get("status") in ("incomplete", "error")


def _attack_view(a: dict[str, Any], report: dict[str, Any],
                 scenario: dict[str, Any] | None) -> dict[str, Any]:
    name = a.get("name", "?")
    fam = mitigation.families().get(a.get("family") or "", {})
    images = []
    for fname, path in (a.get("artifacts") or {}).items():
        img = embed_file(path, f"{name}: {fname}")
        images.append(img or {"note": f"file: {fname} ({Path(str(path)).name})"})
    for key, pts in (a.get("curves") or {}).items():
        try:
            png = _curve_png(key, list(pts))
        except (TypeError, ValueError):
            png = None
        if png:
            images.append({"src": _data_uri(png, "image/png"), "caption": f"{name}: {key}"})
    finding = _is_finding(a)
    advice = mitigation.render_advice(a, report, scenario) if finding else []
    progress = a.get("progress")
    if isinstance(progress, dict):
        progress = progress.get("text") or ", ".join(f"{k} {v}" for k, v in progress.items())
    return {
        **{k: a.get(k) for k in ("name", "family", "status", "stopped_by", "risk", "reason", "queries",
                                 "queries_sent", "retries", "faults", "wall_s",
                                 "paper")},
        "goal": fam.get("goal", "take something from the deployment."),
        "cites": mitigation.paper_citations(a.get("paper")),
        "title": mitigation.advice_for(name, a.get("family"))["title"],
        "metrics": sorted((a.get("metrics") or {}).items()),
        "notes": a.get("notes") or [], "images": images, "finding": finding, "advice": advice,
        "progress": progress,
        "params": json.dumps(a["params"], indent=1, default=str) if a.get("params") else "",
    }


def _deployment(report: dict[str, Any]) -> list[tuple[str, Any]]:
    vic = report.get("victim") or {}
    rows = [(k, v) for k, v in vic.items() if not isinstance(v, dict | list)]
    iface = report.get("interface") or {}
    rows.append(("interface", f"{iface.get('kind', '?')} (answers: {iface.get('output', '?')})"))
    rows.append(("defenses", ", ".join(report.get("defenses") or []) or "none"))
    qb = report.get("query_budget")
    budget = qb if qb is not None else "∞"
    rows.append(("queries used (all attacks) / budget per attacker",
                 f"{report.get('queries_total', 0)} / {budget}"))
    return rows


def _meta(report: dict[str, Any]) -> list[tuple[str, Any]]:
    meta = [("run started", report.get("started_at") or report.get("started") or "?")]
    if report.get("duration_s") is not None:
        meta.append(("took", f"{fmt(float(report['duration_s']))} s"))
    for key, label in (("device", "on"), ("leakmeter_version", "leakmeter"), ("seed", "seed")):
        if report.get(key) is not None:
            meta.append((label, report[key]))
    if report.get("scenario_sha256"):
        meta.append(("scenario sha256", str(report["scenario_sha256"])[:12]))
    meta.append(("MLflow run", report.get("mlflow_run_id") or "not tracked"))
    return meta


def _families(attacks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    data = mitigation.families()
    present = [f for f in FAMILY_ORDER if any(a.get("family") == f for a in attacks)]
    present += sorted({a.get("family") for a in attacks if a.get("family") and a["family"] not in present})
    return [{"name": f, "goal": data[f]["goal"],
             "levels": [(lvl, " ".join(str(data[f]["levels"][lvl]).split()))
                        for lvl in ("high", "medium", "low")]}
            for f in present if f in data]


def _rero(report: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    rows = report.get("rero") or []
    keys = [k for k in ("prior_desc", "prior", "eta", "kappa", "bound", "gamma", "tightest", "rigorous",
                        "vacuous", "violation", "note") if any(k in r for r in rows)]
    return keys, [[r.get(k) for k in keys] for r in rows]


def to_html(report: dict[str, Any], scenario: dict[str, Any] | None = None,
            figures: list[str | Path] | None = None) -> str:
    """The report as one self-contained HTML page (str)."""
    cls, word, text = verdict_parts(report)
    attacks = [_attack_view(a, report, scenario) for a in report.get("attacks") or []]
    priv = report.get("privacy")
    keys, rero_rows = _rero(report)
    figs = [f for f in (embed_file(p, Path(p).stem.replace("_", " ")) for p in figures or []) if f]
    statuses = mitigation.families().get("statuses", {})
    return _env().get_template("report.html.j2").render(
        title=f"leakmeter report: {report.get('scenario', '?')}", meta=_meta(report),
        verdict={"cls": cls, "word": word, "text": text},
        fail_on=(report.get("policy") or {}).get("fail_on", "high"),
        attacks=attacks, findings=[a for a in attacks if a["finding"]],
        deployment=_deployment(report), victim_notes=(report.get("victim") or {}).get("notes") or [],
        privacy=priv, privacy_rows=sorted(priv.items()) if priv else [],
        families=_families(report.get("attacks") or []),
        statuses=[(s, " ".join(str(t).split())) for s, t in statuses.items()],
        rero_keys=keys, rero_rows=rero_rows, figures=figs,
        warnings=[w for w in report.get("warnings") or [] if isinstance(w, dict)],
        scenario_yaml=None if scenario is None else yaml.safe_dump(scenario, sort_keys=False,
                                                                    allow_unicode=True),
    )


def write_html(report: dict[str, Any], path: str | Path, scenario: dict[str, Any] | None = None) -> Path:
    """Write report.html; figures are the PNGs found next to it. Returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    figures = sorted(p.parent.glob("*.png"))
    write_output(p, to_html(report, scenario, figures))  # renamed over a regular file only
    return p
