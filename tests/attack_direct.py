"""Run one attack of a scenario the way the runner does under the stopping contract, without
MLflow or report files: the artifact (the one kept with `ctx.keep` when the attack is stopped),
its scored metrics, stopped_by and the judge's risk. Shared by the extraction and span tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from defenses.output import OutputDefenses
from harness.attacks.base import Artifact, RunContext
from harness.errors import AttackStopped, BudgetExhausted
from harness.oracle import Oracle
from harness.runner import plan_attacks
from harness.scoring import score


@dataclass
class Result:
    artifact: Artifact | None
    metrics: dict[str, float]
    stopped_by: str | None
    reason: str
    risk: str
    why: str
    queries: int
    victim: Any


def run_direct(s, outdir: Path, victim=None, index: int = 0) -> Result:
    """Run attack `index` of scenario `s` against its victim (built unless given)."""
    if victim is None:
        from victims.build import build_victim

        victim = build_victim(s)
    oracle = Oracle(victim.backend, victim.info, OutputDefenses.from_spec(s.defenses),
                    s.defenses.query_budget, s.seed)
    planned = plan_attacks(s)[index]
    atk = planned.attack
    view = oracle.view(atk.name)
    seed = s.seed + sum(map(ord, atk.name))
    outdir.mkdir(parents=True, exist_ok=True)
    ctx = RunContext(seed=seed, rng=np.random.default_rng(seed),
                     gen=torch.Generator(device="cpu").manual_seed(seed),
                     device=victim.info.device, outdir=outdir, scenario=s)
    stopped, reason = None, ""
    try:
        art = atk.run(view, planned.params, ctx)
        stopped, reason = art.stopped_by, art.reason
    except AttackStopped as exc:
        art = exc.artifact or ctx.best
        stopped, reason = exc.stopped_by, str(exc)
    except BudgetExhausted as exc:
        art, stopped, reason = ctx.best, "budget", str(exc)
    metrics = dict(art.metrics) if art is not None else {}
    if art is not None:
        metrics.update(score(art, victim.truth, victim.info))
    metrics["queries"] = float(view.queries)
    risk, why = atk.judge(metrics, art if art is not None else Artifact("none"))
    return Result(art, metrics, stopped, reason, risk, why, view.queries, victim)
