"""The runner: scenario → victim → oracle → attacks → scoring → verdict → reports + MLflow.

`run_scenario` returns the report (a plain dict, per docs/contract.md). Bad input is found before
any MLflow run or output folder exists. Every attack ends with a status (`ok`, `incomplete`,
`skipped`, `error`) and the *scored* risk of the artifact it held when it stopped; an attack's own
success flag is a metric, never the judge. A crash ends the MLflow run FAILED and an interrupt
KILLED, with the partial report written either way.
"""

from __future__ import annotations

import sys
import time
import traceback
import zlib
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from pydantic import ValidationError

from defenses.output import OutputDefenses
from harness.attacker.informed import InformedKnowledge
from harness.attacker.membership import MembershipKnowledge
from harness.attacker.reference_executors import close as close_executors
from harness.attacks import registry
from harness.attacks.base import Artifact, Attack, RunContext, ThreatModel
from harness.core.errors import AttackFailed, AttackSkipped, BadInput, InterfaceError
from harness.core.interrupts import Interrupted, deferred
from harness.core.oracle import OFFERS, Oracle
from harness.core.output import WarningsCapture, existing, prune_empty
from harness.core.progress import RunProgress, busy, stage, sub_bar
from harness.rero.product import rero_section
from harness.run.budget_check import budget_check, max_rows, settle_budget_stops
from harness.run.heartbeat import heartbeat
from harness.run.outputs import finish, log_attack, log_scenario
from harness.scenario import Scenario
from harness.scoring import is_blackbox, score
from reports.metadata import run_metadata
from reports.tracking import Tracker, TrackingUnavailable, probe_server
from reports.verdict import reaches, status_of, verdict
from victims import devices
from victims.build import build_victim
from victims.http.secrets import SECRETS, clip, register_tracking_env

_ATTACKER, _DEFENDER = 0xA77AC4, 0xDEFE4D  # stream tags: the two sides never share a seed


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
            raise BadInput(f"attacks[{i}].name: unknown attack {choice.name!r}; "
                           f"known: {', '.join(reg)}")
        cls = reg[choice.name]
        try:
            params = cls.Params.model_validate(choice.params)
        except ValidationError as exc:
            e = exc.errors()[0]
            where = ".".join(str(p) for p in e["loc"])
            raise BadInput(f"attacks[{i}].params.{where}: {e['msg']} ({choice.name})") from None
        out.append(Planned(cls(), params))
    return out


def _probe_tracking(uri: str | None) -> None:
    try:
        probe_server(uri or "")
    except TrackingUnavailable as exc:
        raise BadInput(f"tracking.uri: {uri}: {exc}") from None


def open_tracker(s: Scenario, tracking_uri: str | None) -> Tracker:
    """The MLflow tracker for this run; BadInput (exit 2) when the store cannot be used."""
    uri = tracking_uri or s.tracking.uri
    SECRETS.add_url(uri or "")  # a tracking server's user:password never reaches any output
    register_tracking_env()  # MLFLOW_TRACKING_TOKEN / _PASSWORD, ... (a server may echo them)
    try:
        return Tracker(uri, s.tracking.experiment, s.tracking.enabled)
    except TrackingUnavailable as exc:
        raise BadInput(f"tracking.uri: {uri}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any other store failure is a bad tracking setting
        raise BadInput(f"tracking.uri: cannot use MLflow store {uri!r}: "
                       f"{type(exc).__name__}: {clip(' '.join(str(exc).split()), 1000)}") from None


def run_scenario(s: Scenario, *, tracking_uri: str | None = None, out: str | Path | None = None,
                 json_path: str | Path | None = None, source: str | None = None,
                 victim=None, extra_tags: dict[str, str] | None = None) -> dict[str, Any]:
    """Run every planned attack against the scenario's deployment; returns the report.
    Raises BadInput before anything runs, and re-raises Interrupted after the partial report."""
    with RunProgress() as live:  # stage lines with the run's clock, one live bar per attack
        return _run_scenario(s, live, tracking_uri, out, json_path, source, victim, extra_tags)


def _run_scenario(s: Scenario, live: RunProgress, tracking_uri, out, json_path, source, victim,
                  extra_tags) -> dict[str, Any]:
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    torch.manual_seed(s.seed)
    if s.tracking.enabled:  # a silent tracking server is bad input, found before anything else
        _probe_tracking(tracking_uri or s.tracking.uri)
    plan = plan_attacks(s)
    for note in s.notes():
        print(f"leakmeter: note: {note}", file=sys.stderr)
    # live only (a bad store is bad input: its one line must stand alone)
    with busy(f"opening the MLflow store (experiment {s.tracking.experiment})", announce=False) \
            if s.tracking.enabled else nullcontext():
        tracker = open_tracker(s, tracking_uri)
    caught = WarningsCapture().start()  # third-party warnings go to the report, not the terminal
    try:
        policy = devices.activate(s.device) if victim is None else devices.current(s.device)
        if victim is None:
            stage(f"{s.name}: " + ("checking the endpoint" if s.victim.endpoint else "loading the model file"
                                   if s.victim.model.arch == "file" else "training the victim"))
            victim = build_victim(s)
            stage(f"{s.name}: victim ready ({_utility_line(victim)})")
        if victim.record.get("input_scaling_warning"):  # also in the victim section's notes
            print(f"leakmeter: warning: {victim.record['input_scaling_warning']}", file=sys.stderr)
        if victim.info.interface not in OFFERS:
            raise BadInput(f"interface.kind: {victim.info.interface} is not supported")
    except BaseException:
        caught.stop()
        raise
    oracle = Oracle(victim.backend, victim.info, OutputDefenses.from_spec(s.defenses),
                    s.defenses.query_budget, s.seed, max_rows=max_rows(s))
    report = _new_report(s, victim, oracle, started)
    outdir = Path(out) if out else Path("leakmeter-out") / f"{s.name}-{report['started']}"
    before, since = existing(outdir), time.time()  # never delete or upload what was there
    outdir.mkdir(parents=True, exist_ok=True)
    report["outdir"] = str(outdir)
    oracle.progress = live.queries
    stop: Interrupted | None = None
    parent = tracker.start(s.name, {"leakmeter.scenario": s.name,
                                    "leakmeter.fingerprint": s.fingerprint(), **(extra_tags or {})})
    try:
        log_scenario(tracker, parent, s, source)
        for i, planned in enumerate(plan, 1):
            live.start_attack(f"attack {i}/{len(plan)} {planned.attack.name}", s.defenses.query_budget,
                              announce=not planned.attack.skip_reason(victim.info))
            entry = new_entry(planned)
            report["attacks"].append(entry)  # kept even if an interrupt cuts the attack short
            with heartbeat(live):  # off a terminal: a line every few seconds while it works
                run_attack(planned, oracle, victim, s, outdir, tracker, parent, entry)
            live.end_attack(_outcome(entry))
        cls = budget_check(report["attacks"], s)
        if cls is not None:  # a budget stop needs the cheapest attack under the same budget
            live.start_attack("budget check surrogate", s.defenses.query_budget)
            check = Planned(cls(), cls.Params())
            entry = new_entry(check)
            entry["added_by"] = "budget check"
            report["attacks"].append(entry)
            with heartbeat(live):
                run_attack(check, oracle, victim, s, outdir, tracker, parent, entry)
            live.end_attack(_outcome(entry))
        settle_budget_stops(report["attacks"], s.policy.fail_on, s.defenses.query_budget)
        with busy("ReRo bounds"):
            report["rero"] = rero_section(s, victim, report["attacks"], outdir)
    except Interrupted as exc:
        stop = exc
        report["interrupted"] = exc.name
    except Exception as exc:  # noqa: BLE001 - the run crashed: keep what was measured
        report["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        live.end_attack()
        close_executors()  # a Ray started for this run's reference models
        with deferred():
            _judge(report, s, oracle)
            report["duration_s"] = round(time.perf_counter() - t0, 3)
            report["devices"] = policy.report()  # which part of the run ran where
            for k, v in run_metadata(started, victim.info.device,
                                     source or yaml.safe_dump(s.public_dump(), sort_keys=False)).items():
                report.setdefault(k, v)  # leakmeter_version, device, scenario_sha256
            report["warnings"] = caught.stop()
            SECRETS.scrub_in_place(report)  # nothing secret reaches a report file, MLflow or stdout
            crashed = report.get("error") or any(a["status"] == "error" for a in report["attacks"])
            status = "KILLED" if stop else ("FAILED" if crashed else "FINISHED")
            finish(report, s, tracker, parent, outdir, json_path, status, before, since)
            prune_empty(outdir, before)  # attack folders nothing was written to
    if stop is not None:
        stop.report = report
        raise stop
    return report


def _utility_line(victim) -> str:
    u = ", ".join(f"{k} {v:.3f}" for k, v in victim.utility.items())
    n = victim.record.get("parameters")
    if not u and n is None and isinstance(victim.record.get("endpoint"), dict):
        return "an endpoint: no local model to measure"
    out = victim.record.get("model_output")
    return f"{u or 'no test split'}; {n if n is not None else '?'} parameters" + (f"; {out}" if out else "")


def _outcome(entry: dict[str, Any]) -> str:
    """How an attack ended, for its closing stage line."""
    if entry["status"] == "skipped":
        return f"skipped ({entry['reason']})"
    status = entry["status"] + (f"/{entry['stopped_by']}" if entry.get("stopped_by") else "")
    risk = f", risk {entry['risk']}" if entry.get("risk") else ""
    return f"{status}{risk}, {entry.get('queries', 0)} queries"


def _new_report(s: Scenario, victim, oracle: Oracle, started: datetime) -> dict[str, Any]:
    privacy = _privacy(victim)
    defenses = oracle.defenses.active + (
        [f"query_budget({s.defenses.query_budget})"] if s.defenses.query_budget is not None else []
    ) + ([f"dp_sgd({privacy['epsilon']:.3g}, {s.defenses.dp_sgd.delta})"] if privacy else [])
    return {
        "scenario": s.name, "verdict": None, "risk": None, "verdict_reason": "",
        "started_at": started.isoformat().replace("+00:00", "Z"),
        "started": started.strftime("%Y%m%d-%H%M%S"),
        "victim": _victim_section(victim), "privacy": privacy, "rero": [], "attacks": [],
        "policy": s.policy.model_dump(), "seed": s.seed,
        "interface": {"kind": s.interface.kind, "output": s.interface.output},
        "fingerprint": s.fingerprint(), "defenses": defenses,
        "query_budget": s.defenses.query_budget, "mlflow_run_id": None, "tracking_uri": None,
        "attacker": _attacker_section(s, victim), "notes": s.notes(),
    }


def _victim_section(victim) -> dict[str, Any]:
    sec = dict(victim.utility)
    sec.update({k: v for k, v in victim.record.items() if k not in ("notes",)})
    sec["notes"] = victim.record.get("notes", [])
    sec["truth_available"] = victim.truth is not None and victim.truth.model is not None
    return sec


def _privacy(victim) -> dict[str, Any] | None:
    rec = getattr(getattr(victim.truth, "train_record", None), "dp", None)
    return rec.as_dict() if rec is not None else None


# --------------------------------------------------------------------------- one attack


def new_entry(planned: Planned) -> dict[str, Any]:
    atk = planned.attack
    return {"name": atk.name, "family": atk.family, "paper": atk.paper,
            "params": planned.params.model_dump(mode="json"), "status": "error",
            "stopped_by": None, "reason": "", "risk": None, "queries": 0, "queries_sent": 0,
            "retries": 0, "faults": 0, "wall_s": 0.0, "metrics": {}}


def _knowledge(s: Scenario, victim, oracle: Oracle, name: str, seed: int, secret: int, family: str):
    """What the attacker is handed besides the oracle, for local victims (None otherwise): the
    membership evaluation set and reference-model recipe, or the informed adversary's releases.
    `seed` is the attacker's; `secret` draws the defender's secrets (targets, member order)."""
    if getattr(victim.truth, "data", None) is None:
        return None
    if family == "membership":
        return MembershipKnowledge(s, victim, oracle, name, seed, secret)
    return InformedKnowledge(s, victim, oracle, name, secret)


def attacker_run_seed(s: Scenario) -> int:
    """The attacker's seed for the run: declared (attacker.seed), else drawn from the scenario's
    seed in a stream of its own, apart from every seed the defender uses."""
    if s.attacker.seed is not None:
        return int(s.attacker.seed)
    return int(np.random.SeedSequence([s.seed, _ATTACKER]).generate_state(1)[0])


def attack_seeds(run_seed: int, scenario_seed: int, name: str) -> tuple[int, int]:
    """(the attack's own seed, the defender's secret seed for that attack's provider): two
    unrelated streams, so nothing the attacker holds derives the defender's secrets."""
    key = zlib.crc32(name.encode())
    own = np.random.SeedSequence([run_seed, key]).generate_state(1)[0]
    secret = np.random.SeedSequence([scenario_seed, _DEFENDER, key]).generate_state(1)[0]
    return int(own), int(secret)


def threat_model(s: Scenario, victim) -> ThreatModel:
    """What the attacker is declared to know (reported as the report's `attacker` section)."""
    known = s.attacker.knows_architecture or s.interface.kind == "whitebox"  # weights show it
    return ThreatModel(seed=attacker_run_seed(s), architecture=s.victim.model if known else None,
                       input_domain_source=victim.info.input_domain_source,
                       claimed_privacy=s.victim.claimed_privacy, declared_dp=s.defenses.dp_sgd,
                       rero_eta=s.rero.eta)


def _attacker_section(s: Scenario, victim) -> dict[str, Any]:
    info = victim.info
    return {"input_domain": [info.input_low, info.input_high],
            "input_domain_source": info.input_domain_source, "pool": int(len(info.x_pool)),
            "knows_architecture": s.attacker.knows_architecture or s.interface.kind == "whitebox",
            "seed": "declared" if s.attacker.seed is not None else "drawn apart from the defender's"}


def run_attack(planned: Planned, oracle: Oracle, victim, s: Scenario, outdir: Path,
               tracker: Tracker, parent: str | None, entry: dict[str, Any] | None = None
               ) -> dict[str, Any]:
    """Run, score and judge one attack, logged as a nested MLflow run; returns its report entry
    (filling `entry` when given). A crash becomes status `error`; an interrupt is recorded (the
    partial artifact scored) and re-raised."""
    atk = planned.attack
    entry = entry if entry is not None else new_entry(planned)
    reason = atk.skip_reason(victim.info)
    if reason:
        entry.update(status="skipped", reason=reason)
        return entry
    view = oracle.view(atk.name)
    ctx, provider = attack_context(s, victim, oracle, atk, outdir / atk.name)
    run_id = tracker.start(atk.name, {"leakmeter.attack": atk.name, "leakmeter.family": atk.family},
                           parent=parent)
    art: Artifact | None = None
    stopped = False
    try:
        art = attempt(planned, view, ctx, provider, victim, s.policy.fail_on, entry)
    except Interrupted:
        stopped = True
        raise
    finally:
        art = art or ctx.best
        with deferred():
            log_attack(tracker, run_id, entry, art)
            tracker.end(run_id, "KILLED" if stopped else ("FAILED" if entry["status"] == "error"
                                                          else "FINISHED"))
    return entry


def attack_context(s: Scenario, victim, oracle: Oracle, atk: Attack, outdir: Path
                   ) -> tuple[RunContext, Any]:
    """The attack's RunContext (its own seeds, declared knowledge, a folder) and the knowledge
    provider behind `ctx.knowledge` (whose truth the scorer reads), or None."""
    outdir.mkdir(parents=True, exist_ok=True)
    threat = threat_model(s, victim)
    seed, secret = attack_seeds(threat.seed, s.seed, atk.name)
    ctx = RunContext(seed=seed, rng=np.random.default_rng(seed),
                     gen=torch.Generator(device="cpu").manual_seed(seed),
                     device=victim.info.device, outdir=outdir, progress=sub_bar,
                     threat=threat)
    provider = _knowledge(s, victim, oracle, atk.name, seed, secret, atk.family)
    ctx.knowledge = provider.access() if provider is not None else None
    return ctx, provider


def attempt(planned: Planned, view, ctx: RunContext, provider, victim, fail_on: str,
            entry: dict[str, Any]) -> Artifact | None:
    """Run the attack, then score and judge whatever artifact it holds (the one kept with
    `ctx.keep` if it was stopped), filling `entry`; returns that artifact. An interrupt is
    recorded in `entry` and re-raised."""
    atk = planned.attack
    stop: Interrupted | None = None
    t0 = time.perf_counter()
    try:
        art = _run(atk, planned.params, view, ctx, entry)
    except Interrupted as exc:
        stop, art = exc, ctx.best
        entry.update(status="ok", stopped_by="interrupt", stop_reason="interrupted")
    entry["wall_s"] = round(time.perf_counter() - t0, 4)
    entry.update(queries=view.queries, queries_sent=view.queries_sent, **view.transport())
    if view.budget is not None:
        entry["query_budget"] = view.budget
    if entry["stopped_by"] == "budget" and view.capped_by_rows():
        entry["stopped_by"] = "cap"  # the scan's own row cap, not the attacker's budget
        entry["stop_reason"] = (f"the scan's row cap (victim.endpoint.max_rows) ran out after "
                                f"{view.queries_sent} rows: {entry.get('stop_reason', '')}")
    if entry["status"] != "skipped":
        truth = getattr(provider, "truth", None) or victim.truth  # a release's own truth
        _score_and_judge(atk, art, truth, victim.info, entry, fail_on)
        entry["wall_s"] = round(time.perf_counter() - t0, 4)  # its scoring included, as its stage line
    if stop is not None:
        raise stop
    return art


def _run(atk: Attack, params: Any, view, ctx: RunContext, entry: dict[str, Any]) -> Artifact | None:
    """The attack's artifact, and in `entry` why it stopped; the best artifact so far when it was
    stopped (budget, faults, endpoint, precision...) or crashed."""
    art: Artifact | None = None
    try:
        art = atk.run(view, params, ctx)
        entry["status"] = "ok"
        entry["stopped_by"] = art.stopped_by
        if art.reason:
            entry["stop_reason"] = art.reason
    except AttackSkipped as exc:
        entry.update(status="skipped", reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - one attack's crash must not stop the others
        stopped_by = getattr(exc, "stopped_by", None)
        if stopped_by is None and isinstance(exc, AttackFailed | InterfaceError):
            stopped_by = "assumption"  # the attack found the deployment breaks what it needs
        art = getattr(exc, "artifact", None) or ctx.best
        if stopped_by is None:
            entry.update(status="error", reason=f"{type(exc).__name__}: {exc}",
                         traceback=traceback.format_exc(limit=8))
        else:
            entry.update(status="ok", stopped_by=stopped_by, stop_reason=str(exc))
    return art


def _score_and_judge(atk: Attack, art: Artifact | None, truth, info, entry: dict[str, Any],
                     fail_on: str) -> None:
    """Score whatever artifact exists against the truth, judge its risk, settle the status. A
    judge that returns no risk (an artifact nothing could verify) leaves the attack incomplete."""
    crashed = entry["status"] == "error"
    stopped_by = entry["stopped_by"]
    risk, why = None, ""
    if art is not None and art.kind != "none":
        metrics = dict(art.metrics)
        try:
            metrics.update(score(art, truth, info))
            metrics["queries"] = float(entry["queries"])
            risk, why = atk.judge(metrics, art)
        except Interrupted:
            raise
        except Exception as exc:  # noqa: BLE001 - an unscorable artifact is not a pass
            crashed = True
            entry["reason"] = f"scoring failed: {type(exc).__name__}: {exc}"
        entry.update(metrics=metrics, notes=art.notes, progress=art.progress,
                     artifacts={k: str(v) for k, v in art.files.items()})
        if art.data.get("curves"):
            entry["curves"] = {k: [list(p) for p in pts] for k, pts in art.data["curves"].items()}
    if risk is None and stopped_by == "budget" and not crashed and not is_blackbox(truth):
        risk, why = "low", "nothing to score yet"
    if stopped_by in ("precision", "cap") and reaches(risk, fail_on):
        # a missed self-check or an own cap is a metric: the scored artifact already shows the risk
        label = "self-check" if stopped_by == "precision" else "stopped at its own cap"
        entry["notes"] = [*entry.get("notes", []), f"{label}: {entry.get('stop_reason', '')}"]
        stopped_by = None
    status = status_of(stopped_by, crashed)
    if status == "ok" and risk is None:  # ran, but left nothing a scorer could judge or verify
        status = "incomplete"
        if is_blackbox(truth):  # nothing verified it: the endpoint's doing, the scan's row cap, or
            # the attack's own budget (one that declined before sending anything is no endpoint's stop)
            unverified = art.data.get("unverified_by") if art is not None else None
            stopped_by = unverified or ("budget" if stopped_by == "budget" else "endpoint")
        else:
            stopped_by = stopped_by or "assumption"
        why = why or "the attack left no artifact to score"
    entry.update(status=status, stopped_by=stopped_by, risk=risk)
    if not crashed:
        entry["reason"] = _reason(why, entry)


def _reason(why: str, entry: dict[str, Any]) -> str:
    stop = entry.get("stop_reason") or entry.get("reason")
    if entry["stopped_by"] == "budget":
        where = f" ({entry['progress']})" if entry.get("progress") else ""
        budget = entry.get("query_budget")
        of = f" of {budget}" if budget is not None else ""
        said = f"stopped by the query budget after {entry['queries_sent']}{of} queries{where}" + (
            f": {stop}" if stop else "")
        return f"{why}; {said}" if why else said
    if entry["stopped_by"] and stop:
        where = f" ({entry['progress']})" if entry.get("progress") else ""
        return f"{why}; stopped by {entry['stopped_by']}{where}: {stop}" if why else \
            f"stopped by {entry['stopped_by']}{where}: {stop}"
    return why


# --------------------------------------------------------------------------- verdict and reports


def _judge(report: dict[str, Any], s: Scenario, oracle: Oracle) -> None:
    """The verdict over what was shown, and the run's query totals."""
    v, risk, why = verdict(report["attacks"], s.policy.fail_on, report.get("error"),
                           bool(report.get("interrupted")))
    violations = [r["message"] for r in report["rero"] if r.get("violation")]
    if violations:  # measured reconstruction above a DP bound: DP-SGD or its accounting is broken
        v, risk, why = "fail", "high", violations[0]
        report["rero_violations"] = violations
        print(*(f"leakmeter: {m}" for m in violations), sep="\n", file=sys.stderr)
    report.update(verdict=v, risk=risk, verdict_reason=why)
    report["queries_total"] = sum(a["queries"] for a in report["attacks"])
    report["queries_sent_total"] = oracle.quotas.used
