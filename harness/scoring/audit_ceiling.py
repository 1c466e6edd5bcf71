"""What the best possible attack could show: ceilings of an iid DP audit, as pure functions.

An audit of n independent trials (canaries or runs, each in by a fair coin) turns a test's
false-positive and false-negative counts into Clopper–Pearson bounds and those into ε (harness/
scoring/fdp.py `iid_audit`). Two numbers bound what it can report, so a report can say "a perfect
attack could have shown at most X":
- `perfect` (`perfect_epsilon`): a test that is never wrong, 0 errors on both sides:
  ε = log((1 − δ − p₁)/p₀) with p = 1 − (α/(2g))^{1/n} the Clopper–Pearson upper bound on
  0 of n (g thresholds in the grid, two rates each: Bonferroni). It depends on counts only.
- `ceiling` (`optimal_test_ceiling`): the expected result of the *optimal* test (Neyman–Pearson:
  the likelihood ratio) when the mechanism is exactly the one the accountant accounts for —
  DP-SGD on a Dirac canary: T steps, the canary sampled at rate q (Poisson) or once per epoch
  (shuffled), its clipped contribution 1 plus N(0, σ²) noise per step (in units of C). Simulated
  with the audit's own analysis (median of `reps` draws). No attack on that mechanism does better
  in expectation; a bound above it means the mechanism is worse than accounted.
- `shuffle_max_test_epsilon`: for one epoch of k shuffled batches, the ε that the "max over the
  epoch's steps" test certifies exactly (Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha, Zhang,
  ICML 2024, Sec. 4: the lower bound on shuffled DP-SGD they compare with the Poisson accountant),
  with the test's threshold and FPR/TPR at its best — how rare the events carrying that ε are.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def perfect_epsilon(n_in: int, n_out: int, delta: float, alpha: float, grid: int = 64) -> float:
    """ε_perfect of an iid audit: no errors among n_in members and n_out non-members."""
    if n_in <= 0 or n_out <= 0:
        return 0.0
    a = alpha / (2 * max(1, grid))
    p_out = -math.expm1(math.log(a) / n_out)  # Clopper–Pearson upper bound on 0 of n
    p_in = -math.expm1(math.log(a) / n_in)
    return max(0.0, math.log((1 - delta - p_in) / p_out), math.log((1 - delta - p_out) / p_in))


def canary_scores_of(rng: np.random.Generator, n: int, sigma: float, q: float, steps: int,
                     member: bool, sampling: str = "poisson", per_epoch: int = 1) -> np.ndarray:
    """The likelihood-ratio score of n simulated Dirac canaries (the one the mechanism's own
    sampling makes optimal): Poisson Σ_t log(1 − q + q·e^{z_t}); shuffled Σ_epochs
    log(mean_{t∈epoch} e^{z_t}); z_t = (y_t − ½)/σ²."""
    y = rng.standard_normal((steps, n)) * sigma
    if sampling == "poisson":
        if member:
            y += rng.random((steps, n)) < q
        z = (y - 0.5) / sigma**2
        if q >= 1:  # every step: the Gaussian mechanism composed
            return z.sum(axis=0)
        return np.logaddexp(math.log1p(-q), math.log(q) + z).sum(axis=0)
    k = max(1, per_epoch)
    epochs = steps // k
    y = y[: epochs * k].reshape(epochs, k, n)
    if member:  # exactly one step of each epoch holds the canary
        y += np.arange(k)[None, :, None] == rng.integers(k, size=(epochs, 1, n))
    z = (y - 0.5) / sigma**2
    return (np.logaddexp.reduce(z, axis=1) - math.log(k)).sum(axis=0)


def optimal_test_ceiling(n_in: int, n_out: int, sigma: float, q: float, steps: int, delta: float,
                         alpha: float, sampling: str = "poisson", per_epoch: int = 1,
                         reps: int | None = None, seed: int = 0, grid: int = 64) -> float:
    """Median ε_lower that the likelihood-ratio test reaches on the accountant's own mechanism
    with these trial counts, through the audit's analysis (Clopper–Pearson over a `grid`);
    `reps` draws (default: 3 for ~10⁴ trials, up to 25 for a few hundred, where one draw varies
    by ±0.2)."""
    from harness.scoring.audit import threshold_grid
    from harness.scoring.fdp import iid_audit

    if n_in <= 0 or n_out <= 0 or steps <= 0:
        return 0.0
    if reps is None:
        reps = int(min(25, max(3, math.ceil(40_000 / (n_in + n_out)))))
    got = []
    for r in range(reps):
        rng = np.random.default_rng([seed, r, 36])
        s1 = _simulate(rng, n_in, sigma, q, steps, True, sampling, per_epoch)
        s0 = _simulate(rng, n_out, sigma, q, steps, False, sampling, per_epoch)
        thr = threshold_grid(np.concatenate([s1, s0]), grid)
        got.append(iid_audit(s1, s0, thr, delta, alpha, "clopper-pearson")[0])
    return float(np.median(got))


def _simulate(rng, n, sigma, q, steps, member, sampling, per_epoch) -> np.ndarray:
    """Scores in chunks (bounded memory: steps × 2048 draws at a time)."""
    out = []
    for i in range(0, n, 2048):
        out.append(canary_scores_of(rng, min(2048, n - i), sigma, q, steps, member, sampling, per_epoch))
    return np.concatenate(out)


def shuffle_max_test_epsilon(sigma: float, k: int, delta: float) -> tuple[float, float, float, float]:
    """(ε, τ, FPR, TPR) of the max test on one shuffled epoch of k batches: member iff
    max_t y_t > τ, P₀ = N(0, σ²)^k, P₁ = the same with 1 added at a uniform step; best τ."""
    tau = np.linspace(0.0, 14.0, 28001) * sigma
    with np.errstate(divide="ignore"):
        log_fpr = np.log(-np.expm1(k * stats.norm.logcdf(tau / sigma)))
        log_tpr = np.log(-np.expm1(stats.norm.logcdf((tau - 1) / sigma)
                                   + (k - 1) * stats.norm.logcdf(tau / sigma)))
    tpr = np.exp(log_tpr)
    ok = tpr > delta
    eps = np.where(ok, np.log(np.where(ok, tpr - delta, 1.0)) - log_fpr, 0.0)
    i = int(np.argmax(eps))
    return max(0.0, float(eps[i])), float(tau[i]), float(np.exp(log_fpr[i])), float(tpr[i])
