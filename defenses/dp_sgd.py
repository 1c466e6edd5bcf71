"""DP-SGD through Opacus, and the accounting record later issues need (RDP curves, ReRo).

`make_private` wraps a model/optimizer/loader with Opacus' PrivacyEngine; `DPRecord` is plain
data: ε, δ, accountant, noise multiplier, sample rate, steps, clipping norm.

Two hooks serve DP audits (docs/membership.md): a *tap* (`PrivateTraining.wrap(..., tap=)`)
that an auditor attaches to the private optimizer to insert gradient canaries (harness/attacker/
gradient_canaries.py), and `audit_fault(kind)`, **for tests and benchmarks only**: a recipe whose
Opacus configuration breaks its own accountant — `low_noise` (the noise added is `factor` × the σ
the accountant is told), `no_clipping` (per-example gradients summed unclipped), `shuffle`
(shuffled batches while the accountant assumes Poisson sampling). No scenario key reaches it.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import asdict, dataclass
from functools import lru_cache

import torch


@dataclass
class DPRecord:
    """What was spent: enough to recompute any accountant's curve for this run."""

    epsilon: float
    delta: float
    accountant: str
    noise_multiplier: float
    sample_rate: float
    steps: int
    max_grad_norm: float
    target_epsilon: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


@lru_cache(maxsize=256)
def noise_for_epsilon(epsilon: float, delta: float, sample_rate: float, epochs: int,
                      accountant: str) -> float:
    """σ that reaches (ε, δ) after `epochs` epochs at this sample rate: Opacus' own binary search
    (the σ `make_private_with_epsilon` picks), remembered, because every shadow and reference
    model of a run asks the same question. Under the RDP accountant the search's ε comes from
    the vectorised series of defenses/rdp.py (the same σ, ~10× faster than Opacus' scalar loop:
    about a second of a DP digits run); other accountants are Opacus' as they are."""
    from opacus.accountants.utils import get_noise_multiplier

    if accountant == "rdp":
        from defenses import rdp

        return rdp.noise_multiplier(epsilon, delta, sample_rate, epochs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta,
                                          sample_rate=sample_rate, epochs=epochs,
                                          accountant=accountant))


FAULTS = ("low_noise", "no_clipping", "shuffle")
_FAULT: dict = {}  # the active audit fault (tests and benchmarks only), {"kind": ..., "factor": ...}


@contextlib.contextmanager
def audit_fault(kind: str, factor: float = 0.25):
    """Tests and benchmarks only: every DP-SGD run inside the block has the bug `kind` (FAULTS)."""
    if kind not in FAULTS:
        raise ValueError(f"audit fault {kind!r} not in {FAULTS}")
    old = dict(_FAULT)
    _FAULT.clear()
    _FAULT.update(kind=kind, factor=float(factor))
    try:
        yield
    finally:
        _FAULT.clear()
        _FAULT.update(old)


def _apply_fault(optimizer, kind: str, factor: float) -> None:
    """Break the private optimizer behind its accountant's back (the accountant keeps reading
    `optimizer.noise_multiplier`, the σ it was told)."""
    if kind == "low_noise":
        add_noise = optimizer.add_noise

        def quiet():
            told = optimizer.noise_multiplier
            optimizer.noise_multiplier = told * factor
            try:
                add_noise()
            finally:
                optimizer.noise_multiplier = told
        optimizer.add_noise = quiet
    elif kind == "no_clipping":
        clip = optimizer.clip_and_accumulate

        def unclipped():
            bound = optimizer.max_grad_norm
            optimizer.max_grad_norm = float("inf")  # clip factor min(1, ∞/‖g‖) = 1
            try:
                clip()
            finally:
                optimizer.max_grad_norm = bound
        optimizer.clip_and_accumulate = unclipped


class PrivateTraining:
    """Opacus' engine around one training run; call `record()` after training."""

    def __init__(self, spec, epochs: int):
        from opacus import PrivacyEngine

        self.spec = spec
        self.epochs = epochs
        self.engine = PrivacyEngine(accountant=spec.accountant)

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader, criterion,
             tap=None):
        """Return (model, optimizer, loader) made private per the spec; `tap.attach(optimizer,
        loader)` (an auditor's canary hook) is called on the private optimizer."""
        out = self._wrap(model, optimizer, loader)
        if _FAULT.get("kind") in ("low_noise", "no_clipping"):
            _apply_fault(out[1], _FAULT["kind"], _FAULT["factor"])
        if tap is not None:
            tap.attach(out[1], out[2], self.epochs)
        return out

    def _wrap(self, model, optimizer, loader):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sigma = self.spec.noise_multiplier
            if self.spec.epsilon is not None:  # as make_private_with_epsilon: q = 1 / batches
                sigma = noise_for_epsilon(float(self.spec.epsilon), float(self.spec.delta),
                                          1.0 / len(loader), max(1, self.epochs),
                                          self.engine.accountant.mechanism())
            return self.engine.make_private(
                module=model, optimizer=optimizer, data_loader=loader,
                noise_multiplier=sigma, max_grad_norm=self.spec.max_grad_norm,
                poisson_sampling=_FAULT.get("kind") != "shuffle",
            )

    def record(self, optimizer) -> DPRecord:
        """The accounting of the finished run."""
        acc = self.engine.accountant
        history = getattr(acc, "history", [])
        steps = int(sum(h[2] for h in history)) if history else 0
        sigma = float(history[-1][0]) if history else float(optimizer.noise_multiplier)
        q = float(history[-1][1]) if history else 0.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eps = float(acc.get_epsilon(delta=self.spec.delta)) if steps else 0.0
        return DPRecord(eps, self.spec.delta, self.spec.accountant, sigma, q, steps,
                        self.spec.max_grad_norm, self.spec.epsilon)
