"""One-sided 95% bounds of judgments made on a sample of probes: label agreement (Clopper–Pearson),
Cohen's κ (its large-sample standard error) and R² (a seeded bootstrap). A black-box judge decides
on the lower bound, so that a handful of probes cannot lift a verdict (docs/contract.md).
"""

from __future__ import annotations

import math

import torch

Z95 = 1.6448536269514722  # one-sided 95% normal quantile
BOOT = 2000  # bootstrap resamples for R²


def agreement_bounds(same: torch.Tensor) -> tuple[float, float]:
    """(lower, upper) one-sided 95% Clopper–Pearson bounds on the agreement rate of `same` (N,)."""
    from scipy.stats import beta

    n, k = len(same), int(same.sum())
    if n == 0:
        return 0.0, 1.0
    lo = 0.0 if k == 0 else float(beta.ppf(0.05, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(0.95, k + 1, n - k))
    return lo, hi


def kappa_bounds(a: torch.Tensor, b: torch.Tensor, kappa: float) -> tuple[float, float]:
    """(lower, upper) one-sided 95% bounds on Cohen's κ of labelings a, b (N,): κ ∓ z·SE with
    SE = √(p_o(1 − p_o) / (n (1 − p_e)²)) (the large-sample standard error)."""
    n = len(a)
    if n == 0:
        return -1.0, 1.0
    a, b = a.long().cpu(), b.long().cpu()
    k = int(max(a.max(), b.max())) + 1
    po = float((a == b).double().mean())
    pe = float((torch.bincount(a, minlength=k).double() * torch.bincount(b, minlength=k).double()).sum()
               / n**2)
    if pe >= 1.0:
        return kappa, kappa
    se = math.sqrt(max(po * (1 - po), 0.25 / n) / n) / (1 - pe)  # never a zero width on a small n
    return max(-1.0, kappa - Z95 * se), min(1.0, kappa + Z95 * se)


def r2_bounds(y: torch.Tensor, yhat: torch.Tensor, seed: int = 0) -> tuple[float, float]:
    """(lower, upper) one-sided 95% bootstrap bounds on R² of yhat against y (N,)."""
    n = len(y)
    if n < 2:
        return float("-inf"), 1.0
    y, yhat = y.double().cpu(), yhat.double().cpu()
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, n, (BOOT, n), generator=gen)
    ys, es = y[idx], (y - yhat)[idx]
    sst = (ys - ys.mean(1, keepdim=True)).pow(2).sum(1).clamp_min(1e-300)
    r2 = 1.0 - es.pow(2).sum(1) / sst
    return float(torch.quantile(r2, 0.05)), float(torch.quantile(r2, 0.95))


def label_bounds(theirs: torch.Tensor, mine: torch.Tensor, kappa: float) -> dict[str, float]:
    """`n_probes`, `agreement_lower` / `_upper` and `kappa_lower` / `_upper` of two labelings."""
    a_lo, a_hi = agreement_bounds(theirs == mine)
    k_lo, k_hi = kappa_bounds(theirs, mine, kappa)
    return {"n_probes": float(len(theirs)), "agreement_lower": a_lo, "agreement_upper": a_hi,
            "kappa_lower": k_lo, "kappa_upper": k_hi}
