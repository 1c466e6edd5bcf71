"""A self-contained `report.html`: one file, images embedded as base64, no scripts, no links out.

Written for someone who never saw leakmeter: the verdict in plain words first, then the
deployment, each attack (what was tried, how many queries, what it measured, the risk and why,
its images and curves), the ReRo bounds and the scenario. Works on the plain report dict
(docs/contract.md); never imports the harness.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from pathlib import Path
from typing import Any

import yaml

IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".svg": "image/svg+xml", ".webp": "image/webp"}
MAX_IMAGE_BYTES = 8 * 1024 * 1024  # larger files are listed, not embedded

FAMILY_TEXT = {
    "extraction": "tries to steal the model itself: to build a copy that answers like the deployed "
                  "model, using only the API's answers.",
    "span": "tries to recover the span of the model's first layer (which input directions it "
            "looks at); with it, inputs can be disguised while keeping the model's answer.",
    "reconstruction": "tries to rebuild records of the training data from what is released.",
}
RISK_TEXT = {"low": "low", "medium": "medium", "high": "high", None: "not judged"}

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;max-width:1000px;margin:2em auto;
padding:0 1em;color:#1d1d1f;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
.verdict{padding:1em 1.2em;border-radius:8px;font-size:1.1em;margin:1em 0}
.pass{background:#e6f4ea;border-left:6px solid #1e8e3e}.fail{background:#fce8e6;border-left:6px solid #d93025}
.error{background:#fef7e0;border-left:6px solid #f9ab00}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}th{background:#f5f5f7}
.risk{display:inline-block;padding:0 .5em;border-radius:4px;font-weight:600}
.r-low{background:#e6f4ea;color:#137333}.r-medium{background:#fef7e0;color:#b06000}
.r-high{background:#fce8e6;color:#c5221f}.r-none{background:#eee;color:#555}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{color:#555;font-size:.9em}
pre{background:#f5f5f7;padding:.8em;overflow-x:auto;font-size:.85em}.muted{color:#666}
"""


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        if math.isnan(v):
            return "n/a"
        return f"{v:.4g}"
    if v is None:
        return "—"
    return str(v)


def _risk_badge(risk: str | None) -> str:
    cls = f"r-{risk}" if risk in ("low", "medium", "high") else "r-none"
    return f'<span class="risk {cls}">{_e(RISK_TEXT.get(risk, risk))}</span>'


def _img_tag(data: bytes, mime: str, alt: str) -> str:
    b64 = base64.b64encode(data).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:{mime};base64,{b64}">'


def embed_file(path: str | Path, caption: str) -> str:
    """A <figure> with the image file embedded, or a line naming the file when it cannot be."""
    p = Path(path)
    mime = IMAGE_TYPES.get(p.suffix.lower())
    if mime is None:
        return ""
    try:
        data = p.read_bytes()
    except OSError:
        return f'<p class="muted">image {_e(p.name)} is missing</p>'
    if len(data) > MAX_IMAGE_BYTES:
        return f'<p class="muted">image {_e(p.name)} is too large to embed ({len(data)} bytes): {_e(p)}</p>'
    return f"<figure>{_img_tag(data, mime, caption)}<figcaption>{_e(caption)}</figcaption></figure>"


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
    ax.set_xlabel("step (queries for query curves)")
    ax.set_ylabel(key)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def verdict_sentence(report: dict[str, Any]) -> tuple[str, str]:
    """(css class, plain-words verdict) for the top of the page."""
    fail_on = (report.get("policy") or {}).get("fail_on", "high")
    attacks = report.get("attacks", [])
    ran = [a for a in attacks if a.get("status") == "ok"]
    errors = [a for a in attacks if a.get("status") == "error"]
    if report.get("error"):
        return "error", (f"The run crashed before it finished ({report['error']}). "
                         "The results below are partial.")
    v = report.get("verdict")
    if v == "fail":
        worst = [a for a in ran if a.get("risk") == report.get("risk")]
        why = "; ".join(f"{a['name']}: {a.get('reason', '')}" for a in worst[:3])
        text = (f"FAIL — this deployment leaks. {len(worst)} attack(s) reached {report.get('risk')} risk, "
                f"and the policy fails at {fail_on}. {why}")
        cls = "fail"
    elif v == "pass":
        text = (f"PASS — no attack reached the policy's failure level ({fail_on}); the worst risk found was "
                f"{report.get('risk')}. {len(ran)} attack(s) ran.")
        cls = "pass"
    elif v == "inconclusive":
        text = ("INCONCLUSIVE — no risk was shown, but that is not evidence of safety: "
                f"{report.get('verdict_reason', '')}.")
        cls = "error"
    elif v == "error":
        text, cls = f"ERROR — {report.get('verdict_reason', 'the run did not finish')}.", "error"
    else:
        text, cls = "No verdict was reached.", "error"
    if errors:
        text += (f" {len(errors)} attack(s) crashed and were not judged: "
                 + ", ".join(a["name"] for a in errors))
        cls = "error" if cls == "pass" else cls
    return cls, text


def _kv_table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(_fmt(v))}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _deployment(report: dict[str, Any]) -> str:
    vic = report.get("victim") or {}
    rows = [(k, v) for k, v in vic.items() if not isinstance(v, dict | list)]
    iface = report.get("interface") or {}
    rows.append(("interface", f"{iface.get('kind', '?')} (answers: {iface.get('output', '?')})"))
    rows.append(("defenses", ", ".join(report.get("defenses") or []) or "none"))
    qb = report.get("query_budget")
    used = report.get("queries_total", 0)
    rows.append(("queries used / budget", f"{used} / {qb if qb is not None else '∞'}"))
    out = ["<h2>The deployment</h2>", _kv_table(rows)]
    notes = vic.get("notes") or []
    if notes:
        out.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    priv = report.get("privacy")
    out.append("<h3>Privacy accounting</h3>")
    if priv:
        out.append(f"<p>Trained with DP-SGD: ε = {_e(_fmt(priv.get('epsilon')))} at "
                   f"δ = {_e(_fmt(priv.get('delta')))} ({_e(priv.get('accountant'))} accountant).</p>")
        out.append(_kv_table(sorted(priv.items())))
    else:
        out.append("<p>No differential privacy: nothing formally limits what an attacker can reconstruct "
                   "(the ReRo bound is γ = 1).</p>")
    return "\n".join(out)


def _summary(report: dict[str, Any]) -> str:
    rows = []
    for a in report.get("attacks", []):
        rows.append(f"<tr><td><a href=\"#atk-{_e(a['name'])}\">{_e(a['name'])}</a></td>"
                    f"<td>{_e(a.get('family', ''))}</td><td>{_e(a.get('status'))}</td>"
                    f"<td>{_risk_badge(a.get('risk'))}</td>"
                    f"<td>{_e(a.get('queries', 0))}</td><td>{_e(a.get('reason', ''))}</td></tr>")
    if not rows:
        return "<p>No attack ran.</p>"
    return ("<table><tr><th>attack</th><th>family</th><th>status</th><th>risk</th><th>queries</th>"
            "<th>why</th></tr>" + "".join(rows) + "</table>")


def _attack_section(a: dict[str, Any]) -> str:
    name = a["name"]
    out = [f'<h3 id="atk-{_e(name)}">{_e(name)} {_risk_badge(a.get("risk"))}</h3>']
    fam = a.get("family", "")
    what = FAMILY_TEXT.get(fam, "is an attack on this deployment.")
    paper = f" (paper {a['paper']})" if a.get("paper") else ""
    out.append(f"<p><b>What was attempted:</b> this {_e(fam)} attack {_e(what)}{_e(paper)}</p>")
    status = a.get("status")
    if status == "skipped":
        out.append(f"<p><b>Skipped:</b> {_e(a.get('reason', ''))}</p>")
        return "\n".join(out)
    if status == "error":
        out.append(f"<p><b>Crashed</b> (not judged): {_e(a.get('reason', ''))}</p>")
    out.append(f"<p><b>Cost:</b> {_e(a.get('queries', 0))} queries, {_e(_fmt(a.get('wall_s', 0.0)))} s.</p>")
    if a.get("outcome"):
        extra = f" — {a['outcome_reason']}" if a.get("outcome_reason") else ""
        out.append(f"<p><b>Outcome:</b> {_e(a['outcome'])}{_e(extra)}</p>")
    if status == "ok":
        out.append(f"<p><b>Risk:</b> {_risk_badge(a.get('risk'))} — {_e(a.get('reason', ''))}</p>")
    metrics = a.get("metrics") or {}
    if metrics:
        out.append("<details open><summary>Measured</summary>" + _kv_table(sorted(metrics.items()))
                   + "</details>")
    if a.get("notes"):
        out.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in a["notes"]) + "</ul>")
    for fname, path in (a.get("artifacts") or {}).items():
        fig = embed_file(path, f"{name}: {fname}")
        out.append(fig or f'<p class="muted">file: {_e(fname)} ({_e(Path(str(path)).name)})</p>')
    for key, pts in (a.get("curves") or {}).items():
        try:
            png = _curve_png(key, list(pts))
        except (TypeError, ValueError):
            png = None
        if png:
            out.append(f"<figure>{_img_tag(png, 'image/png', key)}<figcaption>{_e(name)}: {_e(key)}"
                       "</figcaption></figure>")
    params = a.get("params")
    if params:
        out.append("<details><summary>Parameters</summary><pre>"
                   f"{_e(json.dumps(params, indent=1, default=str))}</pre></details>")
    return "\n".join(out)


def _rero(report: dict[str, Any]) -> str:
    rows = report.get("rero") or []
    out = ["<h2>Reconstruction bounds (ReRo)</h2>"]
    if not rows:
        out.append("<p>No ReRo bound was computed for this run.</p>")
        return "\n".join(out)
    out.append("<p>γ bounds the success of <em>any</em> reconstruction attack against a record drawn "
               "from the prior (κ is the success of guessing without the model); "
               "γ = 1 means no guarantee.</p>")
    keys = [k for k in ("prior_desc", "prior", "eta", "kappa", "bound", "gamma", "tightest", "rigorous",
                        "vacuous", "violation", "note")
            if any(k in r for r in rows)]
    head = "".join(f"<th>{_e(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{_e(_fmt(r.get(k)))}</td>" for k in keys) + "</tr>" for r in rows)
    out.append(f"<table><tr>{head}</tr>{body}</table>")
    return "\n".join(out)


def to_html(report: dict[str, Any], scenario: dict[str, Any] | None = None,
            figures: list[str | Path] | None = None) -> str:
    """The report as one self-contained HTML page (str)."""
    cls, sentence = verdict_sentence(report)
    title = f"leakmeter report: {report.get('scenario', '?')}"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="muted">run started {_e(report.get("started", ""))}; seed {_e(report.get("seed", ""))}; '
        f'MLflow run {_e(report.get("mlflow_run_id") or "not tracked")}</p>',
        f'<div class="verdict {cls}">{_e(sentence)}</div>',
        "<p>leakmeter played the attacker against this deployment: it ran the attacks below through the "
        "same interface a user of the API has, then compared what they obtained with the truth (the real "
        "model and training data). Risk levels say how much each attack took; the verdict applies the "
        "policy.</p>",
        "<h2>Attacks at a glance</h2>", _summary(report),
        _deployment(report),
        "<h2>Each attack</h2>",
        *[_attack_section(a) for a in report.get("attacks", [])],
        _rero(report),
    ]
    figs = [embed_file(f, Path(f).stem.replace("_", " ")) for f in (figures or [])]
    if any(figs):
        parts += ["<h2>Figures</h2>", *figs]
    if scenario is not None:
        text = yaml.safe_dump(scenario, sort_keys=False, allow_unicode=True)
        parts += ["<h2>The scenario</h2>",
                  "<p>The settings this run used (after command-line overrides):</p>",
                  f"<pre>{_e(text)}</pre>"]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html(report: dict[str, Any], path: str | Path, scenario: dict[str, Any] | None = None) -> Path:
    """Write report.html; figures are the PNGs found next to it. Returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    figures = sorted(p.parent.glob("*.png"))
    p.write_text(to_html(report, scenario, figures), encoding="utf-8")
    return p
