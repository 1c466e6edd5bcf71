"""The attacker's own input scaling: per-feature statistics of its pool (attacker knowledge, never
the victim's training split), used to standardise the attacker's copies of the model as a plain
scikit-learn thief does (StandardScaler fitted on its own queries). The model the attack hands
over still takes the API's inputs as they are: the scaling is the copy's first layer. A regression
copy's output likewise leaves a standardised body through its answers' mean and std (AnswerScale).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

MIN_SD = 1e-8  # a feature constant across the pool keeps scale 1


@dataclass
class PoolScale:
    """Per-feature mean and standard deviation of the attacker's pool (identity without one)."""

    mean: torch.Tensor  # (d,)
    sd: torch.Tensor  # (d,)
    points: int

    @staticmethod
    def of(pool, dim: int, device=None) -> PoolScale:
        """The statistics of `pool` (N, …) flattened to dim features; identity with < 2 points."""
        if pool is None or len(pool) < 2:
            z = torch.zeros(dim, dtype=torch.float64, device=device)
            return PoolScale(z, torch.ones_like(z), 0 if pool is None else len(pool))
        x = torch.as_tensor(pool, dtype=torch.float64).reshape(len(pool), -1).to(device)
        sd = x.std(0)
        return PoolScale(x.mean(0), torch.where(sd > MIN_SD, sd, torch.ones_like(sd)), len(x))

    @property
    def identity(self) -> bool:
        return self.points < 2

    def far_from_standard(self, tol: float = 3.0) -> bool:
        """True when the pool is not on a standard scale: the median feature's mean beyond `tol`,
        or its spread beyond a factor `tol` of 1 (raw inputs as a model file takes them; a few
        odd features of standardised data do not count)."""
        if self.identity:
            return False
        off_mean = float(self.mean.abs().median()) > tol
        return off_mean or float(self.sd.log().abs().median()) > float(torch.tensor(tol).log())

    def describe(self) -> str:
        if self.identity:
            return "inputs not standardised (no attacker pool to take statistics from)"
        return (f"inputs standardised with the attacker pool's per-feature mean and std "
                f"({self.points} points; attacker knowledge)")

    def layer(self) -> Standardise:
        return Standardise(self.mean, self.sd)

    def to_x(self, z: torch.Tensor) -> torch.Tensor:
        """Standardised points back to the API's inputs."""
        return z * self.sd.to(z) + self.mean.to(z)


class Standardise(nn.Module):
    """(x − mean) / sd per feature, fixed (buffers, not trained)."""

    def __init__(self, mean: torch.Tensor, sd: torch.Tensor):
        super().__init__()
        self.register_buffer("mean", mean.detach().clone().double())
        self.register_buffer("sd", sd.detach().clone().double())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean.to(x.dtype)) / self.sd.to(x.dtype)


class ScaledOracle:
    """An oracle seen in standardised coordinates z = (x − mean)/sd: predict(z) asks the API at
    x = mean + sd·z, explain(z) returns the gradient with respect to z (sd·∇ₓ). Every other
    attribute (budget, counts, info, device) is the oracle's own."""

    def __init__(self, oracle, scale: PoolScale):
        self._oracle, self.scale = oracle, scale

    def __getattr__(self, name):
        return getattr(self._oracle, name)

    def predict(self, z):
        return self._oracle.predict(self.scale.to_x(torch.as_tensor(z, dtype=torch.float64)))

    def explain(self, z):
        g = self._oracle.explain(self.scale.to_x(torch.as_tensor(z, dtype=torch.float64)))
        return g * self.scale.sd.to(g)


class Cast(nn.Module):
    """x in another floating dtype (the float32 body of an MLP copy: float64 in and out)."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.dtype)


class AnswerScale(nn.Module):
    """z·sd + mean: a regression copy's output in the answers' units from a standardised body
    (fixed buffers, not trained). Without it a copy's last bias walks to a target of ~150 (the
    diabetes answers) at Adam's learning rate per step, and training stops long before it fits."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("sd", torch.ones((), dtype=torch.float64))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z.double() * self.sd + self.mean


@torch.no_grad()
def refit_answer_scale(net: nn.Module, y: torch.Tensor) -> None:
    """Set `net`'s AnswerScale to the mean and std of the answers `y` and re-express the linear
    layer before it, so that the function is unchanged (a warm start stays warm)."""
    heads = [m for m in net.modules() if isinstance(m, AnswerScale)]
    y = y.reshape(-1).double()
    if not heads or len(y) < 2:
        return
    head, last = heads[0], [m for m in net.modules() if isinstance(m, nn.Linear)][-1]
    mean, sd = y.mean(), y.std()
    sd = torch.where(sd > MIN_SD, sd, torch.ones_like(sd))
    ratio, shift = head.sd / sd, (head.mean - mean) / sd
    last.weight.mul_(ratio.to(last.weight))
    last.bias.mul_(ratio.to(last.bias)).add_(shift.to(last.bias))
    head.mean.copy_(mean)
    head.sd.copy_(sd)
