"""The runner: scenario → victim → oracle → attacks → scoring → verdict → report + MLflow.

`run_scenario` returns the report (a plain dict, per CONTRACT.md) and never leaves an MLflow
run RUNNING: bad input is detected before any run starts; a crash ends the run FAILED with the
partial report logged.
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from pydantic import ValidationError
from tqdm.auto import tqdm

from defenses.output import OutputDefenses
from harness.attacker.informed import InformedKnowledge, KnowledgeAccess
from harness.attacks import registry
from harness.attacks.base import Artifact, Attack, RunContext
from harness.errors import (
    AttackFailed,
    AttackSkipped,
    AttackStopped,
    BadInput,
    BudgetExhausted,
    InterfaceError,
)
from harness.oracle import OFFERS, Oracle
from harness.output import WarningsCapture, attack_line, prune_empty, stage, victim_line
from harness.rero.product import rero_section
from harness.scenario import Scenario, flatten
from harness.scoring import score
from reports import render
from reports.html import write_html
from reports.metadata import run_metadata
from reports.tracking import Tracker
from reports.verdict import verdict
from victims.build import build_victim
from victims.models.training import progress_disabled


@dataclass
class Planned:
    attack: Attack
    params: Any


def plan_attacks(s: Scenario) -> list[Planned]:
    """Resolve the scenario's attack list against the registry; BadInput for unknown names
    or bad parameters (before anything runs)."""
    reg = registry()
    if s.attacks == "all":
        return [Planned(cls(), cls.Params()) for cls in reg.values()]
    out = []
    for i, choice in enumerate(s.attacks):
        if choice.name not in reg:
            raise BadInput(
                f"attacks[{i}].name: unknown attack {choice.name!r}; known: {', '.join(reg)}"
            )
        cls = reg[choice.name]
        try:
            params = cls.Params.model_validate(choice.params)
        except ValidationError as exc:
            e = exc.errors()[0]
            where = ".".join(str(p) for p in e["loc"])
            raise BadInput(f"attacks[{i}].params.{where}: {e['msg']} ({choice.name})") from None
        out.append(Planned(cls(), params))
    return out


def _progress_factory():
    def make(desc: str, total: int | None):
        return tqdm(total=total, desc=desc, disable=progress_disabled(), leave=False)

    return make


def _victim_section(victim) -> dict[str, Any]:
    sec = dict(victim.utility)
    sec.update({k: v for k, v in victim.record.items() if k not in ("notes",)})
    sec["notes"] = victim.record.get("notes", [])
    sec["truth_available"] = victim.truth is not None and victim.truth.model is not None
    return sec


def _privacy(victim) -> dict[str, Any] | None:
    rec = getattr(getattr(victim.truth, "train_record", None), "dp", None)
    return rec.as_dict() if rec is not None else None


def _knowledge(s: Scenario, victim, oracle: Oracle, name: str, seed: int):
    """The informed-adversary provider (harness/attacker/informed.py) for local victims, else None."""
    if getattr(victim.truth, "data", None) is None:
        return None
    return InformedKnowledge(s, victim, oracle, name, seed)


def _access(provider):
    """The narrow handle an attack gets to an informed-knowledge provider (or None)."""
    if provider is None:
        return None
    return KnowledgeAccess(provider)


def run_attack(planned: Planned, oracle: Oracle, victim, s: Scenario, outdir: Path,
               tracker: Tracker, parent: str | None) -> dict[str, Any]:
    """Run, score and judge one attack; never raises (a crash becomes status: error)."""
    atk = planned.attack
    entry: dict[str, Any] = {"name": atk.name, "family": atk.family, "paper": atk.paper,
                             "params": planned.params.model_dump(mode="json")}
    reason = atk.skip_reason(victim.info)
    if reason:
        entry.update(status="skipped", reason=reason, queries=0, wall_s=0.0, risk=None,
                     metrics={})
        return entry
    view = oracle.view(atk.name)
    adir = outdir / atk.name
    adir.mkdir(parents=True, exist_ok=True)
    seed = s.seed + sum(map(ord, atk.name))
    ctx = RunContext(seed=seed, rng=np.random.default_rng(seed),
                     gen=torch.Generator(device="cpu").manual_seed(seed),
                     device=victim.info.device, outdir=adir, progress=_progress_factory(),
                     scenario=s)
    provider = _knowledge(s, victim, oracle, atk.name, seed)
    ctx.knowledge = _access(provider)
    run_id = tracker.start(atk.name, {"leakmeter.attack": atk.name, "leakmeter.family": atk.family},
                           parent=parent)
    art: Artifact | None = None
    try:  # the nested run ends whatever happens (even Ctrl-C inside an attack)
        art = _run_and_score(atk, planned.params, view, ctx, provider, victim, entry)
        _log_attack(tracker, run_id, entry, art)
    finally:
        tracker.end(run_id, failed=entry.get("status", "error") == "error")
    return entry


def _run_and_score(atk: Attack, params: Any, view, ctx: RunContext, provider, victim,
                   entry: dict[str, Any]) -> Artifact | None:
    """Run the attack, score its artifact and judge it, filling `entry`; returns the artifact."""
    t0 = time.perf_counter()
    art: Artifact | None = None
    try:
        art = atk.run(view, params, ctx)
        entry["status"] = "ok"
    except AttackSkipped as exc:
        entry.update(status="skipped", reason=str(exc))
    except AttackStopped as exc:
        art = exc.artifact or ctx.best or Artifact("none", outcome="failed")
        if art.outcome == "ok":
            art.outcome = "partial"
        art.stopped_by, art.reason = exc.stopped_by, str(exc)
        entry["status"] = "ok"
    except (AttackFailed, BudgetExhausted, InterfaceError) as exc:
        art = Artifact("none", outcome="failed", reason=str(exc))
        entry["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - one attack's crash must not stop the others
        entry.update(status="error", reason=f"{type(exc).__name__}: {exc}",
                     traceback=traceback.format_exc(limit=8))
    entry["wall_s"] = round(time.perf_counter() - t0, 4)
    entry["queries"] = view.queries
    if art is not None:
        metrics = dict(art.metrics)
        try:
            truth = getattr(provider, "truth", None) or victim.truth  # informed release
            metrics.update(score(art, truth, victim.info))
        except Exception as exc:  # noqa: BLE001
            entry.update(status="error", reason=f"scoring failed: {type(exc).__name__}: {exc}")
        metrics["queries"] = float(view.queries)
        if entry["status"] == "ok":
            if art.outcome == "failed":
                risk, why = "low", f"attack failed: {art.reason}"
            else:
                risk, why = atk.judge(metrics, art)
                if art.outcome == "partial" and art.reason:
                    why = f"{why} (partial: {art.reason})"
            entry.update(risk=risk, reason=why)
        entry.update(outcome=art.outcome, metrics=metrics, notes=art.notes,
                     artifacts={k: str(v) for k, v in art.files.items()})
        if art.data.get("curves"):
            entry["curves"] = {k: [list(p) for p in pts] for k, pts in art.data["curves"].items()}
        if art.reason:
            entry["outcome_reason"] = art.reason
    entry.setdefault("risk", None)
    entry.setdefault("metrics", {})
    return art


def _log_attack(tracker: Tracker, run_id: str | None, entry: dict[str, Any],
                art: Artifact | None) -> None:
    """Params, metrics, tags, files and curves of one attack's nested run."""
    tracker.params(run_id, {f"params.{k}": v for k, v in flatten(entry["params"]).items()})
    curves = art.data.get("curves", {}) if art else {}
    tracker.metrics(run_id, {k: v for k, v in {**entry["metrics"], "wall_s": entry["wall_s"]}.items()
                             if k not in curves})  # a curve's own points carry its final value
    tracker.tags(run_id, {"status": entry["status"], "risk": entry.get("risk"),
                          "reason": entry.get("reason", ""), "outcome": entry.get("outcome")})
    for f in (art.files.values() if art else []):
        tracker.artifact(run_id, f)
    for key, pts in (art.data.get("curves", {}) if art else {}).items():
        tracker.curve(run_id, key, pts)


def run_scenario(s: Scenario, *, tracking_uri: str | None = None, out: str | Path | None = None,
                 json_path: str | Path | None = None, source: str | None = None,
                 victim=None, extra_tags: dict[str, str] | None = None) -> dict[str, Any]:
    """Run every planned attack against the scenario's deployment; returns the report."""
    torch.manual_seed(s.seed)
    plan = plan_attacks(s)
    started_at, t0 = datetime.now(UTC), time.perf_counter()
    stamp = started_at.strftime("%Y%m%d-%H%M%S")
    outdir = Path(out) if out else Path("leakmeter-out") / f"{s.name}-{stamp}"
    try:
        tracker = Tracker(tracking_uri or s.tracking.uri, s.tracking.experiment, s.tracking.enabled)
    except Exception as exc:  # noqa: BLE001 - any store failure is a bad tracking setting
        raise BadInput(f"tracking.uri: cannot use MLflow store {tracking_uri or s.tracking.uri!r}: "
                       f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from None
    caught = WarningsCapture().start()  # third-party warnings go to the report, not the terminal
    if victim is None:
        stage(f"{s.name}: building the victim ({s.victim.data.dataset}, {s.victim.model.arch})", t0)
        try:
            victim = build_victim(s)  # BadInput propagates before any run exists
        except BaseException:
            caught.stop()
            raise
    if victim.info.interface not in OFFERS:
        caught.stop()
        raise BadInput(f"interface.kind: {victim.info.interface} is not supported")
    outdir.mkdir(parents=True, exist_ok=True)  # only now: bad input leaves no empty folder behind
    stage(f"victim ready: {victim_line(victim)}", t0)

    report: dict[str, Any] = {
        "scenario": s.name, "verdict": None, "risk": None,
        "victim": _victim_section(victim), "privacy": _privacy(victim), "rero": [],
        "attacks": [], "policy": s.policy.model_dump(), "seed": s.seed,
        "interface": {"kind": s.interface.kind, "output": s.interface.output},
        "fingerprint": s.fingerprint(), "started": stamp,
    }
    defenses = OutputDefenses.from_spec(s.defenses)
    report["defenses"] = defenses.active + (
        [f"query_budget({s.defenses.query_budget})"] if s.defenses.query_budget is not None else []
    ) + ([f"dp_sgd({report['privacy']['epsilon']:.3g}, {s.defenses.dp_sgd.delta})"]
         if report["privacy"] else [])
    bar = tqdm(total=s.defenses.query_budget, desc="queries", unit="q", disable=progress_disabled())
    oracle = Oracle(victim.backend, victim.info, defenses, s.defenses.query_budget, s.seed,
                    progress=bar.update)
    tags = {"leakmeter.scenario": s.name, "leakmeter.fingerprint": s.fingerprint(),
            **(extra_tags or {})}
    parent = tracker.start(s.name, tags)
    failed = False
    try:
        public = s.public_dump()
        tracker.params(parent, flatten(public))
        if source and public == s.model_dump(mode="json"):  # nothing to redact: keep comments
            tracker.text(parent, source, "scenario.yaml")
        else:
            tracker.text(parent, yaml.safe_dump(public, sort_keys=False),
                         "scenario.yaml")
        for i, planned in enumerate(plan, 1):
            stage(f"attack {i}/{len(plan)} {planned.attack.name}: running", t0)
            report["attacks"].append(run_attack(planned, oracle, victim, s, outdir, tracker, parent))
            stage(attack_line(report["attacks"][-1]), t0)
        report["rero"] = rero_section(s, victim, report["attacks"], outdir)
        report["verdict"], report["risk"] = verdict(report["attacks"], s.policy.fail_on)
        violations = [r["message"] for r in report["rero"] if r.get("violation")]
        if violations:  # measured reconstruction above a DP bound: DP-SGD or its accounting is broken
            report["verdict"], report["risk"], report["rero_violations"] = "fail", "high", violations
            print(*(f"leakmeter: {m}" for m in violations), sep="\n", file=sys.stderr)
        report["queries_total"] = oracle.ledger.used
        report["query_budget"] = s.defenses.query_budget
        failed = any(a["status"] == "error" for a in report["attacks"])
    except BaseException as exc:
        failed = True
        report["error"] = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, Exception):
            raise
    finally:
        bar.close()
        report["mlflow_run_id"] = parent
        report["tracking_uri"] = tracker.uri if tracker.enabled else None
        report["outdir"] = str(outdir)
        report.update(run_metadata(started_at, victim.info.device,
                                   source or yaml.safe_dump(s.public_dump(), sort_keys=False)))
        report["warnings"] = caught.stop()
        _finish(report, s, tracker, parent, outdir, json_path, failed)
        prune_empty(outdir)
        stage(f"verdict {report.get('verdict')}; report: {outdir / 'report.json'}", t0)
    return report


def _finish(report, s, tracker, parent, outdir, json_path, failed) -> None:
    """Write report files, log them and the summary metrics, and end the parent run."""
    try:
        render.write_json(report, outdir / "report.json")
        (outdir / "report.md").write_text(render.to_markdown(report))
        write_html(report, outdir / "report.html", s.public_dump())
        if json_path:
            render.write_json(report, json_path)
        metrics = {f"victim_{k}": v for k, v in report["victim"].items()
                   if isinstance(v, int | float) and not isinstance(v, bool)}
        metrics["queries_total"] = report.get("queries_total", 0)
        if report.get("privacy"):
            metrics["dp_epsilon"] = report["privacy"]["epsilon"]
        for a in report["attacks"]:
            for k, v in a.get("metrics", {}).items():
                metrics[f"{a['name']}.{k}"] = v
        for r in report.get("rero", []):
            if "metric" in r:
                metrics[r["metric"]] = r["gamma"]
        tracker.metrics(parent, metrics)
        tracker.tags(parent, {"verdict": report.get("verdict") or "error",
                              "risk": report.get("risk") or "unknown"})
        for name in ("report.json", "report.md"):
            tracker.artifact(parent, outdir / name)
        for extra in sorted(outdir.glob("*.png")) + sorted(outdir.glob("*.html")):
            tracker.artifact(parent, extra)
    finally:
        tracker.end(parent, failed=failed)
