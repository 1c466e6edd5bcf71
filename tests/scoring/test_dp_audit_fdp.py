"""f-DP / GDP analysis (harness/scoring/fdp.py) against formulas computed here independently, and
against jax_privacy's auditing functions where that package is installed (a bench extra)."""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from harness.scoring.audit import cp_upper, one_run_epsilon, threshold_audit
from harness.scoring.fdp import (
    gaussian_sigma,
    gdp_delta,
    gdp_epsilon,
    gdp_mu_lower,
    iid_audit,
    one_run_fdp_epsilon,
)


def _delta_by_integral(mu, eps):
    # δ(ε) = ∫ max(0, p_in − e^ε p_out): the hockey-stick divergence of N(μ,1) vs N(0,1)
    f = lambda x: max(0.0, stats.norm.pdf(x, mu) - math.exp(eps) * stats.norm.pdf(x))  # noqa: E731
    return integrate.quad(f, eps / mu + mu / 2 - 1e-9, 60, epsabs=1e-14, limit=200)[0]


@pytest.mark.parametrize("mu, eps", [(0.5, 0.2), (1.0, 1.0), (2.0, 3.0), (3.0, 8.0)])
def test_gdp_delta_is_the_hockey_stick_divergence(mu, eps):
    assert gdp_delta(mu, eps) == pytest.approx(_delta_by_integral(mu, eps), rel=1e-6, abs=1e-13)


@pytest.mark.parametrize("mu", [0.3, 1.0, 2.5])
def test_gdp_epsilon_inverts_delta_and_sigma_calibrates(mu):
    e = gdp_epsilon(mu, 1e-5)
    assert _delta_by_integral(mu, e) == pytest.approx(1e-5, rel=1e-5)
    assert gaussian_sigma(e, 1e-5) == pytest.approx(1 / mu, rel=1e-6)
    assert gdp_epsilon(0.0, 1e-5) == 0.0


def test_gdp_mu_from_rates():
    assert gdp_mu_lower(0.05, 0.2) == pytest.approx(stats.norm.ppf(0.95) - stats.norm.ppf(0.2))
    assert gdp_mu_lower(0.6, 0.6) == 0.0  # worse than chance at upper bounds: nothing shown
    assert gdp_mu_lower(0.0, 0.5) == 0.0


def _fdp_independent(m, r, v, delta, alpha):
    """Mahloujifar et al.'s capped audit rewritten from the paper's recursion: bisection on ε."""
    def refuted(eps):
        lo, hi = 1e-4, 1e3  # σ of the (ε, δ) Gaussian mechanism by bisection on δ(ε)
        for _ in range(70):
            mid = math.sqrt(lo * hi)
            d = (stats.norm.cdf(-eps * mid + 0.5 / mid)
                 - math.exp(eps) * stats.norm.cdf(-eps * mid - 0.5 / mid))
            lo, hi = (mid, hi) if d > delta else (lo, mid)
        sigma = hi
        right, wrong = alpha * v / m, alpha * (r - v) / m
        for i in range(v - 1, -1, -1):
            new = max(wrong, stats.norm.cdf(stats.norm.ppf(right) - 1 / sigma))
            if new == wrong:
                break
            right, wrong = min(right + i / (r - i) * (new - wrong), 1.0), new
        return right + wrong > r / m
    lo, hi = 0.0, 16.0
    if not refuted(1e-9):
        return 0.0
    for _ in range(24):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if refuted(mid) else (lo, mid)
    return lo


@pytest.mark.parametrize("m, r, v", [(1000, 100, 95), (256, 50, 50)])
def test_one_run_fdp_matches_an_independent_recursion_and_beats_steinke(m, r, v):
    e = one_run_fdp_epsilon(m, r, v, 1e-5, 0.05)
    assert e == pytest.approx(_fdp_independent(m, r, v, 1e-5, 0.05), abs=2e-5)
    assert e > one_run_epsilon(m, r, v, 1e-5, 0.05)  # tighter from the same guesses
    assert one_run_fdp_epsilon(m, r, r // 2, 1e-5, 0.05) == 0.0  # chance-level guesses show nothing


def test_iid_clopper_pearson_equals_the_threshold_audit_and_gdp_is_not_capped():
    rng = np.random.default_rng(0)
    i, o = rng.normal(3, 1, 500), rng.normal(0, 1, 500)
    thr = np.quantile(np.concatenate([i, o]), np.linspace(0.02, 0.98, 33))
    e, p, _ = iid_audit(i, o, thr, 1e-5, 0.05, "clopper-pearson")
    t = threshold_audit(i, o, thr, 1e-5, 0.05)
    assert (e, p) == (pytest.approx(t.epsilon_lower), pytest.approx(t.perfect))
    g, gp, mu = iid_audit(i, o, thr, 1e-5, 0.05, "gdp")
    # by hand: the best threshold's Clopper–Pearson rates, μ, then ε of μ-GDP
    a = 0.05 / (2 * len(thr))
    mus = [gdp_mu_lower(cp_upper(int((o >= x).sum()), 500, a), cp_upper(int((i < x).sum()), 500, a))
           for x in thr]
    assert mu == pytest.approx(max(mus)) and g == pytest.approx(gdp_epsilon(max(mus), 1e-5))
    assert g > e and gp > p  # not capped near log(trials)


@pytest.mark.slow  # imports jax (seconds); the bench extra
def test_cross_check_with_jax_privacy():
    aud = pytest.importorskip("jax_privacy.auditing")
    for m, r, v in [(1000, 100, 95), (500, 200, 170)]:
        assert one_run_fdp_epsilon(m, r, v, 1e-5, 0.05) == pytest.approx(
            aud._epsilon_one_run_fdp(0, m, r, v, 0.05, 1e-5), abs=1e-6)
        assert one_run_epsilon(m, r, v, 1e-5, 0.05) == pytest.approx(
            aud._epsilon_one_run(0, m, r, v, 0.05, 1e-5), abs=1e-6)
