"""What every attack is: a small class with a name, a family, the interfaces it needs, the paper
section it implements, typed default parameters, and `run(oracle, params, ctx) -> Artifact`.

Attacks receive only an `OracleView` and a `RunContext`; they never see the victim's truth.
Their `Artifact` goes to a scorer (harness/scoring) that compares it with the truth, and the
attack's `judge` turns the scored metrics into a risk level with a reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, model_validator

FAMILIES = ("extraction", "span", "reconstruction", "membership")
INTERFACES = ("prediction", "gradient", "smoothgrad", "whitebox")
# what an attack may assume of the model (`Attack.assumes`), in words; the scenario declares which
# hold (victims/models/facts.py: PublicInfo.declared)
ASSUMPTIONS = {
    "network": "a neural network (hidden units behind a linear first layer)",
    "relu_network": "a fully connected piecewise-linear ReLU network",
}


class Params(BaseModel):
    """Base for attack parameters: typed, with defaults; unknown keys are errors.

    A generic range rule backs each attack's own checks: where the default is a positive count
    (int), a given value must be ≥ 1; where it is a positive real, a given value must be finite
    and ≥ 0 (element-wise for lists and tuples of such values).
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    @model_validator(mode="after")
    def _positive_like_default(self) -> Params:
        for name, info in type(self).model_fields.items():
            default, value = info.default, getattr(self, name)
            pairs = (list(zip(default, value, strict=False))
                     if isinstance(default, list | tuple) and isinstance(value, list | tuple)
                     else [(default, value)])
            for d, v in pairs:
                if isinstance(d, bool) or isinstance(v, bool) or v is None:
                    continue
                if isinstance(d, int) and d > 0 and isinstance(v, int) and v < 1:
                    raise ValueError(f"{name} must be a count ≥ 1 (got {v})")
                if isinstance(d, float) and d > 0 and isinstance(v, int | float) and (
                        v < 0 or not math.isfinite(v)):
                    raise ValueError(f"{name} must be finite and ≥ 0 (got {v})")
        return self


@dataclass
class ThreatModel:
    """What the attacker is declared to know beyond the oracle (the scenario's `attacker:`
    section, docs/contract.md), and the analysis settings its artifact is scored with."""

    seed: int  # the attacker's own randomness, shared by the run's attacks; never the defender's
    architecture: Any = None  # the model spec (widths, activations) when known, else None
    input_domain_source: str = ""  # where PublicInfo.input_low/high come from
    claimed_privacy: Any = None  # the deployment's stated DP guarantee (audits test it)
    declared_dp: Any = None  # the DP-SGD settings the defender declares (audits compare with them)
    rero_eta: list[float] | None = None  # η at which reconstruction success is measured


@dataclass
class RunContext:
    """Per-attack resources: seeded generators, the device, a folder for files, progress."""

    seed: int
    rng: np.random.Generator
    gen: torch.Generator
    device: torch.device
    outdir: Path
    progress: Any = None  # callable(desc, total) -> tqdm-like, or None
    threat: ThreatModel | None = None  # declared attacker knowledge (never the truth)
    # informed-adversary knowledge (paper 004 Def. 1): a lazy provider whose `release(T, C)`
    # returns D₋, the recipe and T released models; None for remote victims
    knowledge: Any = None
    best: Artifact | None = None  # the best artifact so far (see `keep`)

    def keep(self, artifact: Artifact) -> Artifact:
        """Record the attack's best artifact so far: if the attack is stopped (budget, faults,
        precision, interrupt...), the runner scores this one. Returns it."""
        self.best = artifact
        return artifact


@dataclass
class Artifact:
    """What an attack produced, handed to the scorer.

    kind: which scorer reads it ("subspace", "model", "reconstruction", ...).
    data: tensors/arrays/callables the scorer needs (e.g. {"basis": V}).
    metrics: what the attacker can measure without the truth (e.g. recovered_rank).
    stopped_by: None when the procedure ran to its end, else why it stopped (errors.STOP_REASONS).
    progress: how far it got, in the attack's own words ("17 of 24 units").
    """

    kind: str
    data: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    stopped_by: str | None = None
    progress: str = ""
    notes: list[str] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)


class Attack:
    """Base class. Subclasses set the class attributes and implement `run` and `judge`."""

    name: ClassVar[str]
    family: ClassVar[str]
    needs: ClassVar[frozenset[str]]  # interfaces it can run against
    paper: ClassVar[str]  # e.g. "003 Alg. 1"
    summary: ClassVar[str] = ""
    Params: ClassVar[type[Params]] = Params
    # what it assumes of the model (keys of ASSUMPTIONS): skipped on a model declared otherwise;
    # where nothing is declared (an endpoint) it runs and its own tests decide
    assumes: ClassVar[frozenset[str]] = frozenset()
    language_models: ClassVar[bool] = False  # it can attack a language model's next-token API

    def run(self, oracle: Any, params: Any, ctx: RunContext) -> Artifact:
        raise NotImplementedError

    def judge(self, metrics: dict[str, float], artifact: Artifact) -> tuple[str | None, str]:
        """Return (risk, reason) from the scored metrics: risk in low | medium | high, or None
        when the metrics cannot support any level (nothing verified: the attack is incomplete)."""
        raise NotImplementedError

    def skip_reason(self, info: Any) -> str | None:
        """Why this attack cannot run against a deployment with `info`, or None. Extraction and
        span recovery decline a white-box release: the released weights are the model and its
        first-layer span, so "stealing" them would be a finding that says nothing."""
        if getattr(info, "task", "") == "lm" and not self.language_models:
            return ("the victim is a language model (token-id prompts, next-token logprobs); this "
                    "attack works on feature-vector models")
        if info.interface not in self.needs:
            return f"needs one of {sorted(self.needs)}; the deployment offers {info.interface}"
        if info.interface == "whitebox" and self.family in ("extraction", "span"):
            return ("the weights are released (white-box): the model and its first-layer span are "
                    f"the attacker's already, so {self.family} would show nothing more")
        return self.assumption_skip(info)

    def assumption_skip(self, info: Any) -> str | None:
        """Why the declared model does not meet what this attack assumes, or None."""
        declared = getattr(info, "declared", None) or {}
        for need in sorted(self.assumes):
            if declared.get(need) is False:
                what = getattr(info, "declared_as", "") or "a model declared otherwise"
                return f"assumes {ASSUMPTIONS[need]}; the scenario's model is {what}"
        return None
