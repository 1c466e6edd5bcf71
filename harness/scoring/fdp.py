"""f-DP and Gaussian-DP analysis of audit outcomes, as pure functions.

A trade-off curve f bounds how well any test tells D from D′: FNR ≥ f(FPR). μ-GDP is the
Gaussian curve f_μ(a) = Φ(Φ⁻¹(1 − a) − μ) (Dong, Roth, Su 2022); DP-SGD's curve tends to
it (their central limit theorem), and an (ε, δ) pair of a Gaussian mechanism is μ ↔ ε through
δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (their Cor. 2.13).

- `gdp_mu_lower(fpr_hi, fnr_hi)`: from upper confidence bounds on a test's FPR and FNR (iid
  trials, Clopper–Pearson), μ ≥ Φ⁻¹(1 − FPR_hi) − Φ⁻¹(FNR_hi) (Dong, Roth, Su 2022, Eq. 6; Nasr
  et al. 2023): no Gaussian curve with a smaller μ lets that test exist. `gdp_epsilon(μ, δ)`
  converts μ to ε at δ.
  Unlike the (ε, δ) inequalities, the bound is not capped near log(trials): a test far from
  perfect already fixes μ.
- `one_run_fdp_epsilon(m, r, v, δ, α)`: the one-run audit (m canaries, r guesses, v right)
  analysed against the Gaussian curve of each (ε, δ) (Mahloujifar, Melis, Chaudhuri 2025,
  "audit with cap"): the largest ε whose curve the guesses refute at level α.

Both refute the *Gaussian* curve with that (ε, δ), the shape DP-SGD's accountant certifies in
its CLT regime; a claim stated as a bare (ε, δ) pair allows a weaker curve, which only the
Clopper–Pearson analysis (harness/scoring/audit.py) tests.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, stats

_norm = stats.norm


def gdp_delta(mu: float, eps: float) -> float:
    """δ(ε) of μ-GDP (Dong, Roth, Su 2022, Cor. 2.13), computed in log space."""
    if mu <= 0:
        return 0.0
    a = _norm.logcdf(-eps / mu + mu / 2)
    b = eps + _norm.logcdf(-eps / mu - mu / 2)
    return float(math.exp(a) * -math.expm1(b - a)) if b < a else 0.0


def gdp_epsilon(mu: float, delta: float) -> float:
    """The ε at which μ-GDP is (ε, δ)-DP: the root of δ(ε) = δ (0 when δ(0) ≤ δ)."""
    if mu <= 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(mu, hi) > delta and hi < 1e4:
        hi *= 2
    return float(optimize.brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-10))


def gdp_mu_lower(fpr_hi: float, fnr_hi: float) -> float:
    """μ that an (FPR_hi, FNR_hi) pair rules out, ≥ 0 (the Gaussian curve is symmetric, so the
    pair's other inequality gives the same μ). Only upper bounds enter: a test worse than chance
    shows nothing here (reversing it would need *lower* bounds on its rates)."""
    if not (0 < fpr_hi < 1 and 0 < fnr_hi < 1):
        return 0.0
    return max(0.0, float(_norm.isf(fpr_hi) - _norm.ppf(fnr_hi)))


@functools.lru_cache(maxsize=1024)
def gaussian_sigma(eps: float, delta: float) -> float:
    """Noise σ (sensitivity 1) of the Gaussian mechanism that is exactly (ε, δ)-DP: μ = 1/σ."""
    if gdp_delta(60.0, eps) <= delta:  # even a near-noiseless mechanism satisfies it
        return 0.0
    lo, hi = 1e-3, 1.0
    while gdp_delta(1.0 / hi, eps) > delta:
        hi *= 2
    return float(optimize.brentq(lambda s: gdp_delta(1.0 / s, eps) - delta, lo, hi, xtol=1e-12))


def _cap_objective(eps: float, m: int, r: int, v: int, delta: float, alpha: float) -> float:
    """> 0 when r guesses with v right refute the Gaussian curve of (ε, δ) at level α
    (Mahloujifar et al. 2025, the recursion of their capped audit)."""
    sigma = gaussian_sigma(eps, delta)
    if sigma == 0:
        inv = lambda x: float(x >= 1.0)  # noqa: E731
    else:
        inv = lambda x: float(_norm.cdf(_norm.ppf(x) - 1.0 / sigma))  # noqa: E731
    right = alpha * v / m
    wrong = alpha * (r - v) / m
    for i in range(v - 1, -1, -1):
        new_wrong = max(wrong, inv(right))
        if new_wrong == wrong:
            break
        right = min(right + i / (r - i) * (new_wrong - wrong), 1.0)
        wrong = new_wrong
    return right + wrong - r / m


def one_run_fdp_epsilon(m: int, r: int, v: int, delta: float, alpha: float) -> float:
    """Largest ε whose Gaussian curve the one-run guesses refute (0 when none is)."""
    if r == 0 or v == 0 or _cap_objective(0.0, m, r, v, delta, alpha) <= 0:
        return 0.0
    lo, hi = 0.0, 1.0
    while _cap_objective(hi, m, r, v, delta, alpha) > 0 and hi < 200:
        lo, hi = hi, 2 * hi
    return float(optimize.brentq(lambda e: _cap_objective(e, m, r, v, delta, alpha), lo, hi, xtol=1e-9))


def iid_audit(member_scores: np.ndarray, nonmember_scores: np.ndarray, thresholds: np.ndarray,
              delta: float, alpha: float, analysis: str) -> tuple[float, float, float]:
    """(ε_lower, ε_perfect, μ_lower) of "member if score ≥ t" over a fixed grid, for iid trials
    (one per canary or per training run): Clopper–Pearson rates at α/(2·grid) each, turned into ε
    by the (ε, δ) inequalities (`clopper-pearson`) or through μ-GDP (`gdp`, `fdp`)."""
    from harness.scoring.audit import cp_upper, eps_from_rates

    mem = np.sort(np.asarray(member_scores, dtype=np.float64))
    non = np.sort(np.asarray(nonmember_scores, dtype=np.float64))
    thr = np.asarray(thresholds, dtype=np.float64)
    g = max(1, len(thr))
    a = alpha / (2 * g)
    n1, n0 = len(mem), len(non)
    fn = np.searchsorted(mem, thr, side="left")
    fp = n0 - np.searchsorted(non, thr, side="left")
    best, mu_best = 0.0, 0.0
    for i in range(len(thr)):
        fpr, fnr = cp_upper(int(fp[i]), n0, a), cp_upper(int(fn[i]), n1, a)
        if analysis == "clopper-pearson":
            best = max(best, eps_from_rates(fpr, fnr, delta))
        elif max(fpr, fnr) < 1 - delta:
            mu_best = max(mu_best, gdp_mu_lower(fpr, fnr))
    f0, f1 = cp_upper(0, n0, a), cp_upper(0, n1, a)
    if analysis == "clopper-pearson":
        return best, eps_from_rates(f0, f1, delta), 0.0
    return gdp_epsilon(mu_best, delta), gdp_epsilon(gdp_mu_lower(f0, f1), delta), mu_best
