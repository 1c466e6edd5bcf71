"""What an API's answers say, as both the attacks and the scorers read them: class labels from any
output kind, logit-like signals from probabilities (centred log-probabilities), and the decimal
grid that rounded answers lie on. Kept below both, so scoring never imports an attack module."""

from __future__ import annotations

import torch

from harness.core.errors import AssumptionViolated


def logit_signals(y: torch.Tensor, output: str) -> torch.Tensor:
    """Map predict outputs (N, C) to logit-like signals (N, K'): logits as they are,
    probabilities to centred log-probabilities (binary: the single logit)."""
    if output == "label":
        raise AssumptionViolated("the API returns labels only: no finite differences possible")
    y = y.reshape(len(y), -1)
    if output == "logits":
        return y
    logp = torch.log(y.clamp_min(1e-300))
    if y.shape[1] == 2:
        return (logp[:, 1] - logp[:, 0])[:, None]
    return logp - logp.mean(dim=1, keepdim=True)


def api_labels(y: torch.Tensor, output: str) -> torch.Tensor:
    """Class labels (N,) from API outputs: labels as they are; one column thresholded (logits at
    0, probabilities at 0.5); several columns by argmax."""
    if output == "label" or y.dim() == 1:
        return y.long().reshape(-1)
    y = y.reshape(len(y), -1)
    if y.shape[1] == 1:
        return (y[:, 0] > (0.5 if output == "probabilities" else 0.0)).long()
    return y.argmax(dim=1)


def float32_exact(y: torch.Tensor) -> bool:
    """Whether every finite answer is exactly a float32 number (answers computed in float32)."""
    y = y[torch.isfinite(y)].double()
    return bool(len(y)) and bool(torch.all(y.float().double() == y))


def _grid(y: torch.Tensor) -> torch.Tensor:
    """The largest power of two q with y/q an integer (0 for 0)."""
    m, e = torch.frexp(y.abs())
    mant = (m * 2.0**53).long()
    q = (mant & -mant).double() * torch.pow(2.0, (e - 53).double())
    return torch.where(y == 0, torch.zeros_like(y), q)


def logit_error(y: torch.Tensor) -> torch.Tensor:
    """Per row of two-class probabilities (N, 2), a bound on the error of its logit log(p₁/p₀)
    that the answers' own precision allows, read from the answers alone: each probability is
    off by up to 2 ulps (its rounding and its computation's), the smaller one by 2 ulps of the
    larger when it lies on the larger one's grid (then it was computed as 1 − the larger, as
    sigmoid exporters do, and that is all the precision it has). inf where that error reaches the
    probability itself (a 0 included)."""
    y = y.reshape(len(y), -1).double()
    bits = 24 if float32_exact(y) else 53
    lo, hi = y.amin(1), y.amax(1)
    ulp_hi = torch.pow(2.0, (torch.frexp(hi)[1] - bits).double())
    ulp_lo = torch.pow(2.0, (torch.frexp(lo)[1] - bits).double())
    off_lo = 2 * torch.where(_grid(lo) >= ulp_hi, ulp_hi, ulp_lo) / lo.clamp_min(1e-300)
    off_hi = 2 * ulp_hi / hi.clamp_min(1e-300)
    err = -torch.log1p(-off_lo.clamp_max(1.0)) - torch.log1p(-off_hi.clamp_max(1.0))
    return torch.where(lo > 0, err, torch.full_like(err, float("inf")))


def readable(y: torch.Tensor, signals: torch.Tensor) -> torch.Tensor:
    """Rows of probability answers whose logit signals (`logit_signals`) carry the answers'
    precision: with two columns, those whose logit error (`logit_error`) is within 16 ulps of the
    answers' dtype times max(1, |logit|) (a saturated sigmoid's 1 − p column is read no further
    than its precision goes); with more, those where no probability underflowed."""
    y = y.reshape(len(y), -1)
    if y.shape[1] > 2:
        return y.amin(1) >= 1e-290
    eps = 2.0**-24 if float32_exact(y) else 2.0**-53
    return logit_error(y) <= 16 * eps * signals[:, 0].abs().clamp_min(1.0)


def decimal_grid(y: torch.Tensor) -> float | None:
    """The step 10⁻ᵏ (k ≤ 8) of a decimal grid every answer lies on, else None."""
    y = y[torch.isfinite(y)]
    if len(y) == 0:
        return None
    for k in range(9):
        if bool(torch.all(torch.round(y, decimals=k) == y)):
            return 10.0**-k
    return None
