"""Baseline error κ(η) = sup_{z₀} P_{Z∼π}[ℓ(Z, z₀) ≤ η] of paper 004, Sec. VII-B, for four priors.

κ is the success probability of the best *oblivious* attack (one that ignores the model). Every
function returns a float in [0, 1]; `log_kappa_*` variants keep precision where κ underflows
(a 64-dimensional ball gives κ = η^64).
"""

from __future__ import annotations

import math

import numpy as np
import torch


def log_kappa_uniform_ball(eta: float, radius: float, dim: int) -> float:
    """log κ for the uniform prior on the ℓ₂ ball of `radius` in `dim` dimensions, ℓ = ℓ₂.

    Prop. 6 (proof): κ = Vol(B_η)/Vol(B_r) = (η/r)^d for η ≤ r (the ball of radius η fits inside);
    for r < η < 2r a ball of radius η around the centre already covers the prior: κ = 1."""
    _check_pos(eta=eta, radius=radius)
    if eta >= radius:
        return 0.0
    return dim * math.log(eta / radius)


def kappa_uniform_ball(eta: float, radius: float, dim: int) -> float:
    """κ = (η/r)^d for η ≤ r, else 1 (Prop. 6)."""
    return math.exp(log_kappa_uniform_ball(eta, radius, dim))


def log_kappa_gaussian(eta: float, sigma: float, dim: int) -> float:
    """log κ for the isotropic Gaussian prior N(w, σ²I_d), ℓ = ℓ₂, exactly: the best centre is the
    mean (Prop. 7, proof), so κ = P[χ²_d ≤ η²/σ²] (scipy's chi-square log-CDF)."""
    from scipy.stats import chi2

    _check_pos(eta=eta, sigma=sigma)
    return float(chi2.logcdf((eta / sigma) ** 2, dim))


def kappa_gaussian(eta: float, sigma: float, dim: int) -> float:
    """κ = P[χ²_d ≤ η²/σ²] (exact, Prop. 7)."""
    return math.exp(log_kappa_gaussian(eta, sigma, dim))


def log_kappa_gaussian_closed_form(eta: float, sigma: float, dim: int) -> float:
    """The paper's closed-form upper bound on log κ for N(w, σ²I_d) (Prop. 7, via the chi-square
    lower-tail bound): (d/2)(1 − x + log x) with x = η²/(σ²d) when x < 1; it is vacuous (0) for
    x ≥ 1, where the lower-tail bound does not apply."""
    _check_pos(eta=eta, sigma=sigma)
    x = eta**2 / (sigma**2 * dim)
    if x >= 1.0:
        return 0.0
    return 0.5 * dim * (1.0 - x + math.log(x))


def kappa_gaussian_closed_form(eta: float, sigma: float, dim: int) -> float:
    """exp((d/2)(1 − x + log x)), x = η²/(σ²d): the paper's bound, always ≥ the exact κ."""
    return math.exp(log_kappa_gaussian_closed_form(eta, sigma, dim))


def kappa_finite(size: int) -> float:
    """κ = 1/|Z| for the uniform prior on a finite set with the 0/1 loss (any η in (0, 1))."""
    if size < 1:
        raise ValueError(f"size must be ≥ 1, got {size}")
    return 1.0 / size


def empirical_counts(pool: torch.Tensor | np.ndarray, etas: list[float] | np.ndarray,
                     chunk: int = 256) -> np.ndarray:
    """For every pool point z₀ and every η, the number of pool points within ℓ₂ distance η of z₀
    (z₀ itself included); returns an int64 array (len(etas), N).

    Exact: squared distances come from one matrix product per chunk of centres (float64); the
    pairs whose distance lies within rounding error of η are recomputed directly, so ties (η equal
    to a pairwise distance, as with the NN-oracle threshold) are counted as ≤ η exactly."""
    x = torch.as_tensor(pool).reshape(len(pool), -1).to(torch.float64)
    etas_t = torch.as_tensor(np.asarray(etas, dtype=np.float64), device=x.device)
    n = len(x)
    out = torch.zeros(len(etas_t), n, dtype=torch.int64, device=x.device)
    if n == 0:
        return out.cpu().numpy()
    sq = (x * x).sum(1)
    sqmax = sq.max()
    for start in range(0, n, chunk):
        xc = x[start:start + chunk]
        sc = sq[start:start + chunk]
        d2 = torch.addmm(sq[None, :], xc, x.T, alpha=-2.0).add_(sc[:, None])
        for j, eta in enumerate(etas_t):
            e2 = eta * eta
            # rounding error of the expanded square ≤ ~1e-15·(‖x‖² + ‖y‖²); 1e-9 is a wide margin
            tol = (1e-9 * (sc + sqmax + e2))[:, None]
            hi = (d2 <= e2 + tol).sum(1)
            lo = (d2 <= e2 - tol).sum(1)
            cnt = lo
            rows = (hi != lo).nonzero(as_tuple=True)[0]
            if len(rows):
                sub = (d2[rows] - e2).abs() <= tol[rows]
                r, cols = sub.nonzero(as_tuple=True)
                exact = ((xc[rows[r]] - x[cols]) ** 2).sum(1) <= e2
                cnt = cnt + torch.zeros_like(cnt).index_add_(0, rows[r], exact.to(cnt.dtype))
            out[j, start:start + chunk] = cnt
    return out.cpu().numpy()


def kappa_empirical(pool: torch.Tensor | np.ndarray, etas: list[float] | np.ndarray,
                    chunk: int = 256) -> np.ndarray:
    """κ(η) for the uniform prior over a pool of candidate records with ℓ₂: the success of the best
    oblivious attack that guesses a pool point, max over z₀ in the pool of the fraction of the pool
    within η of z₀; returns an array (len(etas),).

    This restricts the centre z₀ to pool points (the issue's definition). The supremum over *all*
    centres is at most `kappa_empirical(pool, 2η)`: a ball of radius η holding a set S lies inside
    the ball of radius 2η around any point of S (`kappa_empirical_upper`)."""
    counts = empirical_counts(pool, etas, chunk)
    n = max(1, counts.shape[1])
    return counts.max(axis=1) / n if counts.shape[1] else np.zeros(len(counts))


def kappa_empirical_upper(pool: torch.Tensor | np.ndarray, etas: list[float] | np.ndarray,
                          chunk: int = 256) -> np.ndarray:
    """A rigorous upper bound on sup over all z₀ ∈ ℝ^d of the pool fraction within η: the
    pool-centred κ at 2η; returns an array (len(etas),)."""
    return kappa_empirical(pool, 2.0 * np.asarray(etas, dtype=np.float64), chunk)


def nn_distances(pool: torch.Tensor | np.ndarray, chunk: int = 256) -> np.ndarray:
    """Distance from each pool point to its nearest *other* pool point (the NN oracle of paper 004,
    Sec. V-B, within the pool); returns an array (N,) (inf when N < 2)."""
    x = torch.as_tensor(pool).reshape(len(pool), -1).to(torch.float64)
    n = len(x)
    out = torch.full((n,), float("inf"), dtype=torch.float64, device=x.device)
    sq = (x * x).sum(1)
    for start in range(0, n, chunk):
        xc = x[start:start + chunk]
        d2 = (sq[start:start + chunk, None] + sq[None, :] - 2.0 * (xc @ x.T)).clamp_min_(0.0)
        idx = torch.arange(start, start + len(xc), device=x.device)
        d2[torch.arange(len(xc), device=x.device), idx] = float("inf")
        j = d2.argmin(1)
        out[start:start + len(xc)] = ((xc - x[j]) ** 2).sum(1).sqrt()  # exact for the chosen pair
    return out.cpu().numpy()


def _check_pos(**kw: float) -> None:
    for k, v in kw.items():
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"{k} must be a positive finite number, got {v}")
