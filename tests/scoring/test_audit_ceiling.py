"""Ceilings of an iid DP audit (harness/scoring/audit_ceiling.py) against formulas and simulations
written here independently, and the shuffled-epoch likelihood ratio on update sequences generated
here."""

import math

import numpy as np
import pytest
from scipy import stats

from harness.attacker.gradient_canaries import canary_scores
from harness.scoring.audit_ceiling import (
    canary_scores_of,
    optimal_test_ceiling,
    perfect_epsilon,
    shuffle_max_test_epsilon,
)


def _cp_zero(n, a):
    return stats.beta.ppf(1 - a, 1, n)  # Clopper–Pearson upper bound on 0 successes of n


@pytest.mark.parametrize("n_in, n_out, alpha, grid", [(128, 128, 0.025, 64), (140, 116, 0.05, 1),
                                                     (4810, 4810, 0.0125, 64)])
def test_perfect_epsilon_is_the_zero_error_clopper_pearson_bound(n_in, n_out, alpha, grid):
    a = alpha / (2 * grid)
    p_in, p_out = _cp_zero(n_in, a), _cp_zero(n_out, a)
    want = max(math.log((1 - 1e-5 - p_in) / p_out), math.log((1 - 1e-5 - p_out) / p_in))
    assert perfect_epsilon(n_in, n_out, 1e-5, alpha, grid) == pytest.approx(want, rel=1e-9)


def test_no_sound_bound_from_256_fair_coin_runs_reaches_4():
    # all α on one pre-fixed threshold; fair coins split 256 runs within 128 ± 32 (8 SD): even a
    # test that is never wrong stays below 4 (3.53 at the even split)
    p = _cp_zero(128, 0.025)
    assert perfect_epsilon(128, 128, 1e-5, 0.05, 1) == pytest.approx(math.log((1 - 1e-5 - p) / p), rel=1e-9)
    assert 3.5 < math.log((1 - 1e-5 - p) / p) < 3.55
    assert max(perfect_epsilon(n, 256 - n, 1e-5, 0.05, 1) for n in range(96, 161)) < 3.8


def test_ceiling_of_the_gaussian_mechanism_matches_its_analytic_rates():
    # q = 1, one step: N(1, σ²) vs N(0, σ²); the audit's expected bound from the exact rates
    sigma, n, alpha = 0.5, 2000, 0.025
    a = alpha / 128
    best = 0.0
    for t in np.linspace(-1, 3, 801):
        fp = round(n * stats.norm.sf(t / sigma))
        fn = round(n * stats.norm.cdf((t - 1) / sigma))
        fpr, fnr = (stats.beta.ppf(1 - a, k + 1, n - k) if k < n else 1.0 for k in (fp, fn))
        if 1 - 1e-5 - fnr > 0:
            best = max(best, math.log((1 - 1e-5 - fnr) / fpr))
    got = optimal_test_ceiling(n, n, sigma, 1.0, 1, 1e-5, alpha, reps=5)
    assert got == pytest.approx(best, abs=0.3)


def test_the_simulated_scores_are_the_audits_own_scores():
    sigma, q, k, epochs, n = 0.7, 0.25, 4, 3, 50
    for sampling, key in (("poisson", "poisson"), ("shuffle", "epoch")):
        a = canary_scores_of(np.random.default_rng(1), n, sigma, q, k * epochs, True, sampling, k)
        # the same draws, turned into observations and scored by the white-box audit
        r = np.random.default_rng(1)
        y = r.standard_normal((k * epochs, n)) * sigma
        if sampling == "poisson":
            y += r.random((k * epochs, n)) < q
        else:
            y = y.reshape(epochs, k, n)
            y += np.arange(k)[None, :, None] == r.integers(k, size=(epochs, 1, n))
            y = y.reshape(k * epochs, n)
        assert np.allclose(a, canary_scores(y, q, sigma, k)[key])


def test_shuffled_epoch_ratio_finds_the_once_per_epoch_canary():
    # synthetic shuffled updates: each member canary in exactly one of k steps per epoch; the
    # epoch likelihood ratio ranks members above non-members better than the Poisson one
    rng = np.random.default_rng(3)
    sigma, k, epochs, n = 0.3, 8, 2, 3000
    y = rng.standard_normal((epochs, k, 2 * n)) * sigma
    y[..., :n] += np.arange(k)[None, :, None] == rng.integers(k, size=(epochs, 1, n))
    s = canary_scores(y.reshape(epochs * k, 2 * n), 1 / k, sigma, k)
    auc = {key: stats.mannwhitneyu(v[:n], v[n:]).statistic / n**2 for key, v in s.items()}
    assert auc["epoch"] > 0.99 and auc["epoch"] >= auc["poisson"]


def test_max_test_with_one_batch_is_the_gaussian_mechanisms_exact_epsilon():
    sigma, delta = 1.0, 1e-5

    def d(e):  # Balle & Wang 2018: δ(ε) of N(1, σ²) vs N(0, σ²)
        n = stats.norm.cdf
        return n(-e * sigma + 0.5 / sigma) - math.exp(e) * n(-e * sigma - 0.5 / sigma)

    lo, hi = 0.0, 20.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if d(mid) > delta else (lo, mid)
    assert shuffle_max_test_epsilon(sigma, 1, delta)[0] == pytest.approx(lo, abs=2e-3)


def test_max_test_rates_match_a_monte_carlo_of_the_shuffled_epoch():
    sigma, k = 1.0, 4
    eps, tau, fpr, tpr = shuffle_max_test_epsilon(sigma, k, 0.05)
    rng = np.random.default_rng(0)
    y = rng.standard_normal((200_000, k)) * sigma
    assert (y.max(1) > tau).mean() == pytest.approx(fpr, abs=4e-3)
    y[np.arange(len(y)), rng.integers(k, size=len(y))] += 1
    assert (y.max(1) > tau).mean() == pytest.approx(tpr, abs=4e-3)
    assert eps == pytest.approx(math.log((tpr - 0.05) / fpr), rel=1e-9)
