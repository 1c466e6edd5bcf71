"""Run one attack of a scenario through the runner's own steps (harness.run.runner.attempt), without
MLflow or report files: the artifact it held when it stopped, its scored metrics, stopped_by and
the scored risk, exactly as a report would show them. Shared by the extraction and span tests."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from defenses.output import OutputDefenses
from harness.attacks.base import Artifact
from harness.core.oracle import Oracle
from harness.run.runner import attack_context, attempt, new_entry, plan_attacks


@dataclass
class Result:
    artifact: Artifact | None
    metrics: dict[str, float]
    stopped_by: str | None
    reason: str  # why it stopped (the attack's words), or the status reason
    risk: str | None
    why: str  # the report's reason line (the judge's, with the stop appended)
    queries: int
    victim: Any
    status: str


def run_direct(s, outdir: Path, victim=None, index: int = 0) -> Result:
    """Run attack `index` of scenario `s` against its victim (built unless given)."""
    if victim is None:
        from victims.build import build_victim

        victim = build_victim(s)
    oracle = Oracle(victim.backend, victim.info, OutputDefenses.from_spec(s.defenses),
                    s.defenses.query_budget, s.seed)
    planned = plan_attacks(s)[index]
    view = oracle.view(planned.attack.name)
    ctx, provider = attack_context(s, victim, oracle, planned.attack, outdir)
    entry = new_entry(planned)
    art = attempt(planned, view, ctx, provider, victim, s.policy.fail_on, entry)
    return Result(art, entry["metrics"], entry["stopped_by"],
                  entry.get("stop_reason") or entry["reason"], entry["risk"], entry["reason"],
                  entry["queries"], victim, entry["status"])


class RoundedBackend:
    """A victim backend whose `predict` answers carry `bits` significant bits (what a rounding
    defense in bits would return); explanations and weights pass through."""

    remote = False

    def __init__(self, inner, bits: int):
        self.inner, self.bits = inner, bits

    def predict(self, x, kind):
        from harness.attacks.extraction.cryptanalysis.precision_bits import significant

        return significant(self.inner.predict(x, kind).double(), self.bits)

    def explain(self, x, kind, gen):
        return self.inner.explain(x, kind, gen)

    def weights(self):
        return self.inner.weights()


def rounded_victim(victim, bits: int):
    """The same victim behind answers rounded to `bits` significant bits."""
    return replace(victim, backend=RoundedBackend(victim.backend, bits))
