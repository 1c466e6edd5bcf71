"""DP-SGD through Opacus, and the accounting record later issues need (RDP curves, ReRo).

`make_private` wraps a model/optimizer/loader with Opacus' PrivacyEngine; `DPRecord` is plain
data: ε, δ, accountant, noise multiplier, sample rate, steps, clipping norm.
"""

from __future__ import annotations

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
    model of a run asks the same question and each answer costs seconds of RDP arithmetic."""
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta,
                                          sample_rate=sample_rate, epochs=epochs,
                                          accountant=accountant))


class PrivateTraining:
    """Opacus' engine around one training run; call `record()` after training."""

    def __init__(self, spec, epochs: int):
        from opacus import PrivacyEngine

        self.spec = spec
        self.epochs = epochs
        self.engine = PrivacyEngine(accountant=spec.accountant)

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader, criterion):
        """Return (model, optimizer, loader) made private per the spec."""
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
