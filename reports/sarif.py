"""SARIF 2.1.0 for code scanning (GitHub, GitLab): one rule per attack, one result per finding.

A *finding* is an attack whose scored risk is medium or high, or that could not finish
(`incomplete`) or crashed (`error`): what a reviewer must look at. An attack that ran to the end
with risk low is no finding and gets no result, so an alert closes once a fix makes the attack
fail; a skipped attack shows nothing either way. Levels: high → error, medium → warning, an
unfinished or crashed attack without a higher risk → note / warning.

Each result points at the scenario file, at the line that asks for the attack (its entry under
`attacks:`, else the `attacks:` key, else `interface:`): code scanning shows no finding without a
file and line. Its fingerprint hashes scenario, cell, attack and headline metric, so the same
finding keeps its alert from run to run. `run.automationDetails.id` is per scenario, so uploads
for different scenarios do not close each other's alerts. Works on plain report dicts.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from reports import mitigation
from reports.compare import key_metric
from reports.metadata import leakmeter_version
from reports.outputs import write_output
from reports.text import one_line

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
LEVEL_OF_RISK = {"high": "error", "medium": "warning", "low": "note"}


def scenario_lines(text: str) -> dict[str, int]:
    """1-based lines of a scenario's top-level keys and of each attack entry ("attack:<name>")."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return {}
    out: dict[str, int] = {}
    if not isinstance(root, yaml.MappingNode):
        return out
    for key, value in root.value:
        out.setdefault(str(key.value), key.start_mark.line + 1)
        if key.value != "attacks" or not isinstance(value, yaml.SequenceNode):
            continue
        for item in value.value:
            if isinstance(item, yaml.ScalarNode):
                out.setdefault(f"attack:{item.value}", item.start_mark.line + 1)
            elif isinstance(item, yaml.MappingNode):
                for k, v in item.value:
                    if k.value == "name" and isinstance(v, yaml.ScalarNode):
                        out.setdefault(f"attack:{v.value}", item.start_mark.line + 1)
    return out


def attack_line(lines: dict[str, int], attack: str) -> int:
    return lines.get(f"attack:{attack}") or lines.get("attacks") or lines.get("interface") or 1


def source_root(path: Path) -> Path:
    """The root a scenario's URI is relative to: the repository that holds it (the nearest folder
    above it with a .git), else the working directory (the checkout in CI)."""
    for folder in path.parents:
        if (folder / ".git").exists():
            return folder
    return Path.cwd().resolve()


def artifact_uri(path: str | Path) -> tuple[str, str | None]:
    """(uri, uriBaseId): relative to the repository root (`%SRCROOT%`) when the file is inside
    it; a file URI only for a scenario outside any repository and the working directory."""
    p = Path(path).resolve()
    try:
        return p.relative_to(source_root(p)).as_posix(), "%SRCROOT%"
    except ValueError:
        return p.as_uri(), None


def rule_id(attack: str) -> str:
    return f"leakmeter/{attack}"


def _rule(a: dict[str, Any]) -> dict[str, Any]:
    name, family = a.get("name", "?"), a.get("family")
    spec = mitigation.advice_for(name, family)
    text, markdown = mitigation.help_text(name, family, a.get("paper"))
    fam = mitigation.families().get(family or "", {})
    cwes = [c.lower().replace("cwe-", "") for c in spec["cwe"]]
    return {
        "id": rule_id(name),
        "name": "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", name)),
        "shortDescription": {"text": spec["title"]},
        "fullDescription": {"text": f"{name} ({family} attack, paper {a.get('paper') or '-'}): tries to "
                                    f"{' '.join(str(fam.get('goal', 'attack the deployment.')).split())}"},
        "defaultConfiguration": {"level": "error"},
        "help": {"text": text, "markdown": markdown},
        "properties": {
            "tags": ["security", *(f"external/cwe/cwe-{c}" for c in cwes),
                     *([f"leakmeter/{family}"] if family else [])],
            "security-severity": str(spec["security_severity"]),
            "precision": "high",
            "problem.severity": "error",
            "paper": a.get("paper"),
        },
    }


def fingerprint(scenario: str, attack: str, metric: str | None, cell: str | None = None) -> str:
    blob = json.dumps([scenario, cell or "", attack, metric or ""], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def _level(a: dict[str, Any]) -> str | None:
    """The SARIF level of an attack's result, or None when it is no finding."""
    risk, status = a.get("risk"), a.get("status")
    if risk in ("medium", "high"):
        return LEVEL_OF_RISK[risk]
    if status == "error":
        return "warning"
    if status == "incomplete":
        return "note"
    return None


def _numbers(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if isinstance(v, int | float | str | bool)
            and not (isinstance(v, float) and not math.isfinite(v))}


def _message(a: dict[str, Any], report: dict[str, Any], scenario: dict[str, Any] | None, cell: str | None,
             sweep: dict[str, Any] | None) -> str:
    status = a.get("status")
    head = f"{a.get('name')}: risk {a.get('risk') or 'not judged'}"
    if status != "ok":
        head += f", {status}" + (f" (stopped by {a['stopped_by']})" if a.get("stopped_by") else "")
    parts = [f"[{cell}] {head}" if cell else head, one_line(a.get("reason") or "")]  # one line, no controls
    advice = mitigation.render_advice(a, report, scenario, sweep)
    if advice:
        parts.append("What to change: " + " ".join(advice))
    return ". ".join(p.rstrip(".") for p in parts if p) + "."


def results_for(report: dict[str, Any], uri: tuple[str, str | None], lines: dict[str, int],
                rule_index: dict[str, int], scenario: dict[str, Any] | None = None, cell: str | None = None,
                sweep_cells: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The results of one report (one run, or one cell of a sweep)."""
    out = []
    fail_on = (report.get("policy") or {}).get("fail_on", "high")
    for a in report.get("attacks") or []:
        level = _level(a)
        if level is None:
            continue
        metrics = a.get("metrics") or {}
        sweep = mitigation.sweep_facts(sweep_cells, a.get("name", ""), fail_on) if sweep_cells else None
        loc: dict[str, Any] = {"uri": uri[0]}
        if uri[1]:
            loc["uriBaseId"] = uri[1]
        out.append({
            "ruleId": rule_id(a.get("name", "?")),
            "ruleIndex": rule_index[a.get("name", "?")],
            "level": level,
            "message": {"text": _message(a, report, scenario, cell, sweep)},
            "locations": [{"physicalLocation": {
                "artifactLocation": loc,
                "region": {"startLine": attack_line(lines, a.get("name", "?"))}}}],
            "partialFingerprints": {
                "leakmeterFinding/v1": fingerprint(str(report.get("scenario")), a.get("name", "?"),
                                                   key_metric(metrics), cell)},
            "properties": {"risk": a.get("risk"), "status": a.get("status"),
                           "stopped_by": a.get("stopped_by"), "family": a.get("family"),
                           "queries": a.get("queries"),
                           "verdict": report.get("verdict"), **({"cell": cell} if cell else {}),
                           "metrics": _numbers(metrics)},
        })
    return out


def to_sarif(reports: list[tuple[str | None, dict[str, Any]]], scenario_path: str | Path,
             scenario: dict[str, Any] | None = None, sweep_cells: list[dict[str, Any]] | None = None,
             category: str | None = None) -> dict[str, Any]:
    """A SARIF log (dict) for one run (`[(None, report)]`) or the cells of a sweep
    (`[(cell label, report, cell's scenario dict), ...]`, with the comparison's cells for
    sweep-measured advice). `scenario` is the scenario dict of entries that bring none."""
    text = Path(scenario_path).read_text(encoding="utf-8") if Path(scenario_path).is_file() else ""
    lines = scenario_lines(text)
    uri = artifact_uri(scenario_path)
    rules: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    for _, rep, *_ in reports:
        for a in rep.get("attacks") or []:
            if a.get("name") not in index:
                index[a.get("name", "?")] = len(rules)
                rules.append(_rule(a))
    results = [r for cell, rep, *own in reports
               for r in results_for(rep, uri, lines, index, own[0] if own else scenario, cell, sweep_cells)]
    first = reports[0][1] if reports else {}
    verdicts = [item[1].get("verdict") for item in reports]
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "leakmeter", "version": leakmeter_version(),
                            "semanticVersion": leakmeter_version(), "rules": rules}},
        "automationDetails": {"id": category or f"leakmeter/{first.get('scenario', 'scenario')}/"},
        "invocations": [{"executionSuccessful": "error" not in verdicts and None not in verdicts,
                         "properties": {"verdicts": verdicts, "started_at": first.get("started_at")}}],
        "results": results,
        "properties": {"scenario": first.get("scenario"), "verdict": _overall(verdicts)},
    }
    if uri[1]:
        # no absolute path of this machine: the consumer (GitHub, GitLab) knows where its checkout is
        run["originalUriBaseIds"] = {uri[1]: {"description": {"text": "the repository root"}}}
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _overall(verdicts: list[str | None]) -> str | None:
    for v in ("fail", "error", "inconclusive", "pass"):
        if v in verdicts:
            return v
    return None


def write_sarif(path: str | Path, reports: list[tuple[str | None, dict[str, Any]]], scenario_path: str | Path,
                scenario: dict[str, Any] | None = None, sweep_cells: list[dict[str, Any]] | None = None,
                category: str | None = None) -> Path:
    """Write the SARIF log as JSON; returns the path."""
    log = to_sarif(reports, scenario_path, scenario, sweep_cells, category)
    # a temporary file renamed over a regular file only: never a device, never through a link
    return write_output(path, json.dumps(log, indent=2, default=str, allow_nan=False))
