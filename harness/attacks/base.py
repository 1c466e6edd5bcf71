"""What every attack is: a small class with a name, a family, the interfaces it needs, the paper
section it implements, typed default parameters, and `run(oracle, params, ctx) -> Artifact`.

Attacks receive only an `OracleView` and a `RunContext`; they never see the victim's truth.
Their `Artifact` goes to a scorer (harness/scoring) that compares it with the truth, and the
attack's `judge` turns the scored metrics into a risk level with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

FAMILIES = ("extraction", "span", "reconstruction")
INTERFACES = ("prediction", "gradient", "smoothgrad", "whitebox")


class Params(BaseModel):
    """Base for attack parameters: typed, with defaults; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())


@dataclass
class RunContext:
    """Per-attack resources: seeded generators, the device, a folder for files, progress."""

    seed: int
    rng: np.random.Generator
    gen: torch.Generator
    device: torch.device
    outdir: Path
    progress: Any = None  # callable(desc, total) -> tqdm-like, or None
    scenario: Any = None  # the validated Scenario (threat-model settings, never the truth)
    # informed-adversary knowledge (paper 004 Def. 1): a lazy provider whose `release(T, C)`
    # returns D₋, the recipe and T released models; None for remote victims
    knowledge: Any = None


@dataclass
class Artifact:
    """What an attack produced, handed to the scorer.

    kind: which scorer reads it ("subspace", "model", "reconstruction", ...).
    data: tensors/arrays/callables the scorer needs (e.g. {"basis": V}).
    metrics: what the attacker can measure without the truth (e.g. recovered_rank).
    outcome: ok | partial | failed — an honest failure is a result, not a crash.
    """

    kind: str
    data: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    outcome: str = "ok"
    reason: str = ""
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

    def run(self, oracle: Any, params: Any, ctx: RunContext) -> Artifact:
        raise NotImplementedError

    def judge(self, metrics: dict[str, float], artifact: Artifact) -> tuple[str, str]:
        """Return (risk, reason) from the scored metrics: risk in low | medium | high."""
        raise NotImplementedError

    def skip_reason(self, info: Any) -> str | None:
        """Why this attack cannot run against a deployment with `info`, or None."""
        if info.interface not in self.needs:
            return f"needs one of {sorted(self.needs)}; the deployment offers {info.interface}"
        return None
