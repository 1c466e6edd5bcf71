"""The privacy curves recomputed from a DP-SGD record: equal to Opacus' own RDP accountant, to an
independent binomial-expansion implementation, and the privacy profile never looser than RDP."""

import math

import mpmath
import numpy as np
import pytest

from harness.rero import accounting as A
from harness.rero import bounds as B

RUNS = [(1.1, 0.064, 470), (0.8, 0.01, 1000), (2.0, 0.2, 30)]


@pytest.mark.parametrize("sigma,q,steps", [RUNS[0], RUNS[2]])
def test_rdp_curve_equals_opacus_rdp_accountant(sigma, q, steps):
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import compute_rdp

    acc = RDPAccountant()
    for _ in range(steps):
        acc.step(noise_multiplier=sigma, sample_rate=q)
    orders = A.rdp_orders()
    _, ours = A.rdp_curve(sigma, q, steps, orders)
    theirs = sum(compute_rdp(q=sq, noise_multiplier=ns, steps=n, orders=list(orders))
                 for ns, sq, n in acc.history)
    fin = np.isfinite(ours)
    assert fin.sum() > 300 and np.array_equal(fin, np.isfinite(theirs))
    # compared as one step's log A_α = ε(α)·(α − 1)/steps, the quantity both series sum: equal to
    # 1e-12, ten times the series' own truncation (terms stop below e^-30 ≈ 1e-13; near α = 1 the
    # division by α − 1 magnifies that rounding 1000×, which a relative test of ε(α) would read)
    log_a = np.abs(ours[fin] - theirs[fin]) * (orders[fin] - 1) / steps
    assert log_a.max() <= 1e-12, log_a.max()
    # and ε(δ) from our curve equals the accountant's own answer on the same orders
    eps_acc = acc.get_epsilon(delta=1e-5, alphas=list(orders[fin]))
    from opacus.accountants.analysis.rdp import get_privacy_spent

    assert get_privacy_spent(orders=orders[fin], rdp=ours[fin], delta=1e-5)[0] == pytest.approx(eps_acc,
                                                                                                rel=1e-12)


def _rdp_binomial(q, sigma, alpha):
    """Independent: integer-order RDP of the Poisson-subsampled Gaussian (Mironov et al. 2019),
    A_α = Σ_k C(α,k) (1−q)^{α−k} q^k exp((k²−k)/(2σ²)), ε(α) = log A_α/(α−1), in 50-digit mpmath."""
    mpmath.mp.dps = 50
    q, s2 = mpmath.mpf(q), 2 * mpmath.mpf(sigma) ** 2
    a = mpmath.fsum(mpmath.binomial(alpha, k) * (1 - q) ** (alpha - k) * q**k
                    * mpmath.exp(mpmath.mpf(k * k - k) / s2) for k in range(alpha + 1))
    return float(mpmath.log(a) / (alpha - 1))


@pytest.mark.parametrize("sigma,q,steps", RUNS)
def test_rdp_curve_against_binomial_expansion(sigma, q, steps):
    orders = np.array([2.0, 3.0, 5.0, 8.0, 16.0, 32.0])
    _, ours = A.rdp_curve(sigma, q, steps, orders)
    ref = np.array([steps * _rdp_binomial(q, sigma, int(a)) for a in orders])
    assert ours == pytest.approx(ref, rel=1e-9)


def test_rdp_without_subsampling_is_gaussian():
    orders = np.array([1.5, 2.0, 10.0, 100.0])
    _, r = A.rdp_curve(2.0, 1.0, 50, orders)
    assert r == pytest.approx(50 * orders / (2 * 4.0), rel=1e-12)
    assert A.zcdp_rho(2.0, 50) == 50 / 8
    mu, exact = A.gdp_mu(2.0, 1.0, 50)
    assert exact and mu == pytest.approx(math.sqrt(50) / 2)


@pytest.mark.parametrize("sigma,q,steps", [(1.1, 0.064, 470), (0.8, 0.02, 200)])
def test_profile_never_looser_than_rdp_and_is_an_upper_bound(sigma, q, steps):
    from opacus.accountants import PRVAccountant

    orders, rdp = A.rdp_curve(sigma, q, steps)
    eps, delta = A.privacy_profile(sigma, q, steps)
    for kappa in (0.5, 0.1, 1e-2, 1e-4, 1e-6):
        g_rdp = B.gamma_rdp(kappa, orders, rdp).gamma
        g_prof = B.gamma_profile(kappa, eps, delta).gamma
        assert g_prof <= g_rdp, (kappa, g_prof, g_rdp)
    # the profile is an upper bound: its δ at Opacus' PRV ε upper estimate is ≥ the target δ
    acc = PRVAccountant()
    acc.history = [(sigma, q, steps)]
    e_up = acc.get_epsilon(delta=1e-5)
    assert np.interp(e_up - 0.02, eps, delta) >= 1e-5 * 0.999


def test_profile_of_unsubsampled_run_matches_exact_gdp():
    # q = 1: T Gaussian steps with σ are exactly μ-GDP with μ = √T/σ; the PRV profile bound must be
    # within its discretisation error of the exact Φ(Φ⁻¹(κ) + μ) and never below it
    sigma, steps = 4.0, 16
    eps, delta = A.privacy_profile(sigma, 1.0, steps)
    mu, _ = A.gdp_mu(sigma, 1.0, steps)
    for kappa in (0.3, 1e-2, 1e-4):
        exact = B.gamma_gdp(kappa, mu).gamma
        got = B.gamma_profile(kappa, eps, delta).gamma
        assert exact * (1 - 1e-9) <= got <= exact * 1.03 + 1e-9


def test_privacy_from_record_dict():
    p = A.Privacy.from_record({"epsilon": 3.0, "delta": 1e-5, "accountant": "rdp", "noise_multiplier": 1.0,
                               "sample_rate": 0.1, "steps": 100, "max_grad_norm": 1.0})
    assert p.has_mechanism and p.steps == 100 and p.epsilon == 3.0


@pytest.mark.parametrize("sigma, q, steps", [(0.5, 0.5, 2), (1.0, 0.01, 1000), (0.3, 1.0, 100)])
def test_prv_domain_from_the_cached_curve_matches_opacus_sizing(sigma, q, steps):
    """The PRV domain is sized from our cached one-step RDP curve; Opacus sizes it from its own
    accountant's orders: both valid RDP bounds, so the two agree to the grids' difference."""
    from opacus.accountants.analysis.prv import PoissonSubsampledGaussianPRV, compute_safe_domain_size

    theirs = compute_safe_domain_size(prvs=[PoissonSubsampledGaussianPRV(q, sigma)],
                                      max_self_compositions=[steps], eps_error=0.01,
                                      delta_error=1e-10)
    ours = A._safe_domain_size(sigma, q, steps, 0.01, 1e-10)
    assert ours == pytest.approx(theirs, rel=5e-3)
    # RDP composes additively: k steps are k times one step, order by order
    o, one = A.rdp_curve(sigma, q, 1)
    _, many = A.rdp_curve(sigma, q, steps)
    ok = np.isfinite(one)
    assert np.allclose(many[ok], steps * one[ok], rtol=1e-12)
