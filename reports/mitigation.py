"""Mitigation advice per attack, filled from the numbers a run (or a sweep) measured.

One YAML file per attack under `reports/advice/` (`<attack>.yaml`) holds the rule text of the
SARIF output and the advice of the HTML report: `title`, `help` (Markdown, static), optional
`cwe` / `security_severity` (else the family's, from `families.yaml`), and `advice`, a list of
`{when, text}` items. `when` is a Jinja2 expression and `text` a Jinja2 template over
  m        the attack's metrics          a      the attack's report entry
  run      facts of the run (epsilon, rero_gamma, budget, interface, defenses as configured)
  fail_on  the policy's failure level    sweep  facts measured across a sweep (absent otherwise)
rendered in Jinja2's sandbox. An item whose `when` is false, or whose text needs a number the run
did not measure, is left out: advice never shows a blank where a figure should be.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jinja2 import ChainableUndefined, TemplateError, Undefined, UndefinedError
from jinja2.sandbox import SandboxedEnvironment

ADVICE_DIR = Path(__file__).parent / "advice"
LEVELS = ("low", "medium", "high")


class _Missing(ChainableUndefined):
    """Chains through absent keys (so `d.dp_sgd.epsilon is defined` works) but refuses to be
    printed or turned into a number: the item that needs it is dropped."""

    __str__ = Undefined._fail_with_undefined_error  # type: ignore[assignment]
    __int__ = Undefined._fail_with_undefined_error  # type: ignore[assignment]
    __float__ = Undefined._fail_with_undefined_error  # type: ignore[assignment]
    __round__ = Undefined._fail_with_undefined_error  # type: ignore[assignment]


def _num(v: Any, digits: int = 3) -> str:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if isinstance(v, int) or float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.{digits}g}"


def _pct(v: Any) -> str:
    return f"{float(v):.0%}"


def _shown(v: Any) -> Any:
    """What a template prints: a missing value (None) drops the item like an undefined one."""
    if v is None:
        raise UndefinedError("a value the advice needs is missing")
    return v


@cache
def _env() -> SandboxedEnvironment:
    env = SandboxedEnvironment(undefined=_Missing, autoescape=False, trim_blocks=True, lstrip_blocks=True,
                               finalize=_shown)
    env.filters.update(num=_num, pct=_pct)
    env.globals.update(log=math.log, log2=math.log2, exp=math.exp, sqrt=math.sqrt, min=min, max=max)
    return env


@cache
def _condition(source: str):
    """A compiled `when:` expression (compiled once per process, not once per attack entry)."""
    return _env().compile_expression(source)


@cache
def _template(source: str):
    """A compiled advice text template (once per process)."""
    return _env().from_string(source)


@cache
def families() -> dict[str, Any]:
    """families.yaml: per family the goal, CWE, severity and risk-level definitions; statuses; verdicts."""
    return yaml.safe_load((ADVICE_DIR / "families.yaml").read_text(encoding="utf-8"))


@cache
def papers() -> dict[str, Any]:
    """papers.yaml: the papers behind the attacks, by number ("000" … "004")."""
    return yaml.safe_load((ADVICE_DIR / "papers.yaml").read_text(encoding="utf-8"))


@cache
def advice_for(attack: str, family: str | None = None) -> dict[str, Any]:
    """The advice entry of an attack, with the family's CWE and severity filled in where the file
    gives none; a generic entry for an attack without a file."""
    path = ADVICE_DIR / f"{attack}.yaml"
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}
    fam = families().get(family or data.get("family") or "", {})
    data.setdefault("title", f"{attack} ({family or 'unknown'} attack)")
    goal = fam.get("goal", "take something from the model.")
    data.setdefault("help", f"The {attack} attack tries to {goal}")
    data.setdefault("cwe", fam.get("cwe", ["CWE-200"]))
    data.setdefault("security_severity", fam.get("security_severity", "5.0"))
    data.setdefault("advice", [])
    return data


def paper_citations(paper: str | None) -> list[dict[str, Any]]:
    """The papers an attack's `paper` field names, each with the section it cites:
    "003 Sec. 3.1" → paper 003 at "Sec. 3.1"; "Carlini et al. 2022 Sec. IV" → that paper at
    "Sec. IV"; several are separated by ";"."""
    known = papers()
    out = []
    for part in str(paper or "").split(";"):
        part = part.strip()
        key = next((k for k in sorted(known, key=len, reverse=True)
                    if part == k or part.startswith(k + " ")), None)
        if key is not None:
            out.append({**known[key], "id": key, "section": part[len(key):].strip()})
    return out


def paper_names(paper: str) -> str:
    """An attack's `paper` field with each paper named as a reader knows it ("000 App. C" →
    "Milli et al. 2019, App. C"); names it does not know are kept as written."""
    out = []
    for part in str(paper or "").split(";"):
        part = part.strip()
        found = paper_citations(part)
        if not found:
            out.append(part)
            continue
        c = found[0]
        short = str(c.get("short", c["id"]))
        authors, _, venue = short.partition(" (")
        year = venue.rstrip(")").split()[-1] if venue else ""
        first = authors.split(",")[0].strip()
        name = f"{first} et al. {year}" if "," in authors else f"{first} {year}"
        out.append(f"{name}, {c['section']}" if c["section"] else name)
    return "; ".join(out)


def paper_citation(paper: str | None) -> dict[str, Any] | None:
    """The first paper an attack's `paper` field names (see `paper_citations`), or None."""
    found = paper_citations(paper)
    return found[0] if found else None


def _rero_gamma(rows: list[dict[str, Any]]) -> float | None:
    ok = [r for r in rows if isinstance(r.get("gamma"), int | float) and r.get("rigorous", True) is not False
          and not str(r.get("bound", "")).startswith("check")]
    tight = [r for r in ok if r.get("tightest")] or ok
    return min(float(r["gamma"]) for r in tight) if tight else None


def run_facts(report: dict[str, Any], scenario: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a run measured or was configured with that advice can quote."""
    priv = report.get("privacy") or {}
    scen = scenario or {}
    return {
        "epsilon": priv.get("epsilon"), "delta": priv.get("delta"),
        "rero_gamma": _rero_gamma(report.get("rero") or []),
        "budget": report.get("query_budget"), "queries_total": report.get("queries_total"),
        "interface": (report.get("interface") or {}).get("kind"),
        "output": (report.get("interface") or {}).get("output"),
        "test_accuracy": (report.get("victim") or {}).get("test_accuracy"),
        "d": scen.get("defenses") or {},
    }


def sweep_facts(cells: list[dict[str, Any]], attack: str, fail_on: str) -> dict[str, Any] | None:
    """Across a sweep's cells (reports.compare cells): per grid key, the values at which `attack`
    stayed below `fail_on` (ran to the end) and those at which it reached it. None when the
    attack never ran in two cells."""
    bar = LEVELS.index(fail_on) if fail_on in LEVELS else len(LEVELS)
    rows = []
    for c in cells:
        a = (c.get("attacks") or {}).get(attack)
        if not a or a.get("risk") not in LEVELS:
            continue
        leaked = LEVELS.index(a["risk"]) >= bar
        if not leaked and a.get("status") != "ok":
            continue  # an unfinished attack that showed little is no evidence the setting holds
        rows.append((c.get("settings") or {}, leaked, c))
    if len(rows) < 2:
        return None
    keys = list(dict.fromkeys(k for s, _, _ in rows for k in s))

    def show(v: Any) -> str:
        return "none" if v is None else _num(v)

    held = []
    for k in keys:  # a value "held" only if every cell with it held, whatever the other settings
        by_value: dict[str, list[bool]] = {}
        for s, lk, _ in rows:
            by_value.setdefault(show(s.get(k)), []).append(lk)
        ok = [v for v, lks in by_value.items() if not any(lks)]
        bad = [v for v, lks in by_value.items() if all(lks)]
        if ok and bad:
            held.append({"key": k, "held": ok, "leaked": bad})
    out: dict[str, Any] = {"cells": len(rows), "held": held, "fail_on": fail_on,
                           "held_in": [c.get("label") or ", ".join(f"{k}={show(v)}" for k, v in s.items())
                                       for s, lk, c in rows if not lk]}
    by_eps: dict[float, list[bool]] = {}
    for _, lk, c in rows:
        if c.get("epsilon") is not None:
            by_eps.setdefault(float(c["epsilon"]), []).append(lk)
    safe = None  # the largest ε such that every cell at or below it held
    for e in sorted(by_eps):
        if any(by_eps[e]):
            out["unsafe_epsilon"] = e
            break
        safe = e
    if safe is not None:
        out["safe_epsilon"] = safe
    return out


def render_advice(entry: dict[str, Any], report: dict[str, Any], scenario: dict[str, Any] | None = None,
                  sweep: dict[str, Any] | None = None) -> list[str]:
    """The advice lines for one attack entry, filled from its numbers (items that cannot be
    filled are left out)."""
    spec = advice_for(entry.get("name", ""), entry.get("family"))
    fail_on = (report.get("policy") or {}).get("fail_on", "high")
    ctx = {"m": entry.get("metrics") or {}, "a": entry, "run": run_facts(report, scenario),
           "fail_on": fail_on}
    if sweep is not None:
        ctx["sweep"] = sweep
    out = []
    for item in [*spec["advice"], *families().get("common_advice", [])]:
        try:
            if item.get("when") and not _condition(item["when"])(**ctx):
                continue
            text = " ".join(_template(item["text"]).render(**ctx).split())
        except (TemplateError, TypeError, ValueError, ZeroDivisionError, OverflowError):
            continue
        if text:
            out.append(text)
    return out


def help_text(attack: str, family: str | None, paper: str | None) -> tuple[str, str]:
    """(plain text, Markdown) help of an attack's rule: what it does, the paper, what to change."""
    spec = advice_for(attack, family)
    fam = families().get(family or "", {})
    md = [spec["help"].strip(), ""]
    for cite in paper_citations(paper):
        where = f", {cite['section']}" if cite["section"] else ""
        md.append(f"Paper: {cite['short']}, *{cite['title']}*{where} ({cite['url']}).")
    levels = fam.get("levels") or {}
    if levels:
        md += ["", "Risk levels for this family:", ""]
        md += [f"- **{lvl}**: {' '.join(str(levels[lvl]).split())}" for lvl in ("high", "medium", "low")
               if lvl in levels]
    markdown = "\n".join(md).strip() + "\n"
    plain = markdown.replace("**", "").replace("*", "").replace("`", "")
    return plain, markdown
