"""ReRo bounds (paper 004, Sec. VII) against independent formulas, hand-worked numbers and
property tests. Pure math: no victim is trained here."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import gammaln
from scipy.stats import norm

from harness.rero import bounds as B
from harness.rero import priors as P

# --------------------------------------------------------------------------- κ per prior


@pytest.mark.parametrize("d,eta,r", [(1, 0.3, 1.0), (2, 0.5, 2.0), (10, 0.9, 1.0), (64, 0.5, 1.0)])
def test_kappa_uniform_ball_is_the_volume_ratio(d, eta, r):
    # second implementation: Vol_d(ρ) = π^{d/2} ρ^d / Γ(d/2 + 1), ratio in log space
    logvol = lambda rho: 0.5 * d * math.log(math.pi) + d * math.log(rho) - gammaln(0.5 * d + 1)  # noqa: E731
    assert P.log_kappa_uniform_ball(eta, r, d) == pytest.approx(logvol(eta) - logvol(r), rel=1e-12)
    assert P.kappa_uniform_ball(1.5, 1.0, d) == 1.0  # η ≥ r: one ball covers the prior


def test_kappa_uniform_ball_monte_carlo():
    rng = np.random.default_rng(0)
    d, n = 3, 400_000
    z = rng.standard_normal((n, d))
    z *= (rng.random(n) ** (1 / d) / np.linalg.norm(z, axis=1))[:, None]  # uniform in the unit ball
    frac = float((np.linalg.norm(z, axis=1) <= 0.6).mean())
    assert frac == pytest.approx(P.kappa_uniform_ball(0.6, 1.0, 3), abs=4e-3)  # 0.216


def test_kappa_gaussian_exact_against_closed_forms_and_monte_carlo():
    # d = 2: P[χ²₂ ≤ x] = 1 − e^{−x/2}
    for eta, s in [(0.5, 1.0), (1.0, 0.3), (3.0, 2.0)]:
        assert P.kappa_gaussian(eta, s, 2) == pytest.approx(1 - math.exp(-(eta / s) ** 2 / 2), rel=1e-12)
    rng = np.random.default_rng(1)
    z = rng.standard_normal((300_000, 5)) * 0.7
    mc = float((np.linalg.norm(z, axis=1) <= 1.5).mean())
    assert mc == pytest.approx(P.kappa_gaussian(1.5, 0.7, 5), abs=4e-3)


def test_gaussian_best_centre_is_the_mean():
    # Prop. 7's claim checked by Monte Carlo: moving the centre away from w loses mass
    rng = np.random.default_rng(2)
    z = rng.standard_normal((200_000, 4))
    at_mean = float((np.linalg.norm(z, axis=1) <= 1.5).mean())
    off = float((np.linalg.norm(z - np.array([0.5, 0, 0, 0]), axis=1) <= 1.5).mean())
    assert off < at_mean
    assert at_mean == pytest.approx(P.kappa_gaussian(1.5, 1.0, 4), abs=4e-3)


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-3, 50), st.floats(1e-2, 10), st.integers(1, 400))
def test_closed_form_gaussian_bound_is_an_upper_bound(eta, sigma, d):
    assert P.log_kappa_gaussian(eta, sigma, d) <= P.log_kappa_gaussian_closed_form(eta, sigma, d) + 1e-9


def test_closed_form_gaussian_hand_worked():
    # d = 100, σ = 1, η = 5: x = 0.25, log κ ≤ 50·(0.75 + log 0.25) = −31.81...
    assert P.log_kappa_gaussian_closed_form(5.0, 1.0, 100) == pytest.approx(50 * (0.75 + math.log(0.25)))
    # Prop. 7's regime σ ≥ 2η/√d: κ ≤ e^{−Ω(d)}
    d = 400
    assert P.log_kappa_gaussian_closed_form(1.0, 2.0 / math.sqrt(d), d) < -0.05 * d


def test_kappa_finite():
    assert P.kappa_finite(10) == 0.1
    with pytest.raises(ValueError):
        P.kappa_finite(0)


def _brute_kappa(x, eta):
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    return (d <= eta).sum(1).max() / len(x)


def test_kappa_empirical_brute_force_and_ties():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 6))
    etas = [0.5, 1.5, 2.5, 4.0]
    got = P.kappa_empirical(x, etas, chunk=64)
    assert got == pytest.approx([_brute_kappa(x, e) for e in etas], abs=0)
    # exact ties: integer grid, η equal to pairwise distances (1, √2)
    g = np.array([[i, j] for i in range(7) for j in range(7)], dtype=float) + 1e6  # far from the origin
    assert P.kappa_empirical(g, [1.0])[0] == 5 / 49  # the centre and its 4 neighbours
    assert P.kappa_empirical(g, [math.sqrt(2)])[0] == 9 / 49
    assert P.kappa_empirical(g, [0.999999])[0] == 1 / 49


def test_kappa_empirical_upper_bounds_every_centre():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((400, 2))
    eta = 0.4
    up = P.kappa_empirical_upper(x, [eta])[0]
    # centres anywhere (a dense grid of them) never beat the 2η bound; pool centres are a lower bound
    gx = np.stack(np.meshgrid(np.linspace(-3, 3, 121), np.linspace(-3, 3, 121)), -1).reshape(-1, 2)
    best_any = max(((np.linalg.norm(x - c, axis=1) <= eta).mean()) for c in gx)
    assert P.kappa_empirical(x, [eta])[0] <= up
    assert best_any <= up


def test_kappa_empirical_large_pool_matches_kdtree():
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(5)
    x = rng.standard_normal((10_000, 8))
    etas = [1.5]
    got = P.empirical_counts(x, etas)
    tree = cKDTree(x)
    for j, e in enumerate(etas):
        ref = tree.query_ball_point(x, e, return_length=True)
        assert np.array_equal(got[j], ref)


def test_nn_distances_match_kdtree():
    from scipy.spatial import cKDTree

    x = np.random.default_rng(6).standard_normal((500, 5))
    d, _ = cKDTree(x).query(x, k=2)
    assert P.nn_distances(x) == pytest.approx(d[:, 1], rel=1e-12)


# --------------------------------------------------------------------------- γ formulas


def test_hand_worked_gammas():
    assert B.gamma_eps_dp(0.01, 1.0).gamma == pytest.approx(0.01 * math.e, rel=1e-14)
    b = B.gamma_eps_dp(0.5, 1.0)
    assert b.gamma == 1.0 and b.vacuous
    assert B.gamma_eps_delta(0.01, 1.0, 1e-5).gamma == pytest.approx(0.01 * math.e + 1e-5, rel=1e-14)
    # Cor. 4: κ = e^{−4}, ρ = 1 → exp(−(2 − 1)²)
    assert B.gamma_zcdp(math.exp(-4), 1.0).gamma == pytest.approx(math.exp(-1), rel=1e-12)
    assert B.gamma_zcdp(math.exp(-4), 4.0).vacuous  # ρ ≥ log(1/κ)
    # Thm. 5: ε = 1, γ = 0.9 → δ = 0.9 − 0.1e
    assert B.delta_from_rero(1.0, 0.9) == pytest.approx(0.9 - 0.1 * math.e, rel=1e-12)
    assert B.delta_from_rero(0.0, 0.5) == 0.0
    # GDP: Φ(Φ⁻¹(0.1) + 1)
    assert B.gamma_gdp(0.1, 1.0).gamma == pytest.approx(norm.cdf(norm.ppf(0.1) + 1.0), rel=1e-12)


def test_rdp_alpha_to_infinity_is_cor3():
    # a pure ε-DP mechanism has ε(α) ≤ ε at every order; α → ∞ recovers κ·e^ε
    kappa, eps = 1e-4, 3.0
    orders = np.geomspace(1.01, 1e12, 400)
    b = B.gamma_rdp(kappa, orders, np.full_like(orders, eps))
    assert b.gamma == pytest.approx(B.gamma_eps_dp(kappa, eps).gamma, rel=1e-9)


def test_rdp_on_a_zcdp_curve_matches_cor4():
    # ε(α) = αρ at a dense grid: Thm. 2 minimised over α equals Cor. 4 (grid ⇒ slightly above)
    kappa, rho = 1e-6, 0.5
    orders = 1 + np.geomspace(1e-4, 1e4, 200_000)
    g = B.gamma_rdp(kappa, orders, orders * rho).gamma
    assert g == pytest.approx(B.gamma_zcdp(kappa, rho).gamma, rel=1e-6)
    assert g >= B.gamma_zcdp(kappa, rho).gamma * (1 - 1e-12)


def test_zcdp_rho_to_zero_gives_kappa():
    for kappa in (0.3, 1e-3, 1e-40):
        assert B.gamma_zcdp(kappa, 1e-14).gamma == pytest.approx(kappa, rel=1e-5)


def _gauss_delta(eps, mu):
    """Exact privacy profile of the Gaussian mechanism with μ = sensitivity/σ."""
    return norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * norm.cdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("kappa,mu", [(0.1, 1.0), (1e-3, 2.0), (1e-6, 0.5), (0.4, 3.0)])
def test_profile_bound_of_gaussian_equals_f_dp_bound(kappa, mu):
    # two formulas for the same quantity: inf_ε κe^ε + δ(ε) = 1 − G_μ(κ) = Φ(Φ⁻¹(κ) + μ)
    eps = np.linspace(-40, 40, 400_001)
    got = B.gamma_profile(kappa, eps, _gauss_delta(eps, mu)).gamma
    assert got == pytest.approx(B.gamma_gdp(kappa, mu).gamma, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("eps,sigma", [(0.0, 1.0), (0.5, 1.0), (2.0, 0.7), (1.0, 3.0)])
def test_thm5_on_the_gaussian_mechanism(eps, sigma):
    # Two-point prior p = 1/(e^ε+1) on the mechanism N(0 or 1, σ²): the MAP attack's exact success
    # γ* fed to Thm. 5 gives back exactly the mechanism's tight δ(ε).
    p = 1 / (math.exp(eps) + 1)
    t = eps * sigma**2 + 0.5  # MAP: guess z (mean 1) iff x > t
    success = p * norm.sf(t, loc=1, scale=sigma) + (1 - p) * norm.cdf(t, loc=0, scale=sigma)
    assert B.delta_from_rero(eps, success) == pytest.approx(max(0.0, _gauss_delta(eps, 1 / sigma)),
                                                           abs=1e-12)


# --------------------------------------------------------------------------- properties

kap = st.floats(1e-300, 1.0)
eps_s = st.floats(0.0, 50.0)
delta_s = st.floats(0.0, 1.0)


@settings(max_examples=300, deadline=None)
@given(kap, eps_s, delta_s, st.floats(0.0, 5.0), st.floats(0.0, 1.0))
def test_eps_delta_monotone_and_clamped(kappa, eps, delta, de, dd):
    g = B.gamma_eps_delta(kappa, eps, delta).gamma
    assert kappa <= g <= 1.0
    assert B.gamma_eps_delta(kappa, eps + de, delta).gamma >= g
    assert B.gamma_eps_delta(kappa, eps, min(1.0, delta + dd)).gamma >= g
    assert B.gamma_eps_delta(min(1.0, kappa * 2), eps, delta).gamma >= g
    assert B.gamma_eps_dp(kappa, eps).gamma <= g + 1e-15
    assert (g == 1.0) == B.gamma_eps_delta(kappa, eps, delta).vacuous


@settings(max_examples=300, deadline=None)
@given(kap, st.floats(0.0, 100.0), st.floats(0.0, 10.0))
def test_zcdp_monotone_and_bounded(kappa, rho, dr):
    g = B.gamma_zcdp(kappa, rho).gamma
    assert kappa * (1 - 1e-12) <= g <= 1.0
    assert B.gamma_zcdp(kappa, rho + dr).gamma >= g * (1 - 1e-12)


@settings(max_examples=200, deadline=None)
@given(kap, st.floats(0.01, 20.0), st.floats(1.0, 10.0))
def test_rdp_monotone_in_steps_and_kappa(kappa, rho, factor):
    orders = np.geomspace(1.01, 1e4, 300)
    curve = orders * rho  # a Gaussian mechanism; `factor` more steps scales ε(α)
    g = B.gamma_rdp(kappa, orders, curve).gamma
    assert kappa * (1 - 1e-12) <= g <= 1.0
    assert B.gamma_rdp(kappa, orders, curve * factor).gamma >= g * (1 - 1e-12)
    assert B.gamma_rdp(min(1.0, kappa * factor), orders, curve).gamma >= g * (1 - 1e-12)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 20.0), st.floats(0.0, 1.0))
def test_thm5_range(eps, gamma):
    d = B.delta_from_rero(eps, gamma)
    assert 0.0 <= d <= 1.0 + 1e-12
    # γ at the oblivious level e^ε/(e^ε+1) (guess the likelier point) implies δ = 0
    if eps < 30:
        assert B.delta_from_rero(eps, math.exp(eps) / (math.exp(eps) + 1)) == pytest.approx(0.0, abs=1e-9)


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        B.gamma_eps_dp(1.5, 1.0)
    with pytest.raises(ValueError):
        B.gamma_eps_delta(0.1, -1.0, 0.0)
    with pytest.raises(ValueError):
        B.gamma_rdp(0.1, np.array([1.0, 2.0]), np.array([0.1, 0.2]))  # order 1 is not an RDP order
    with pytest.raises(ValueError):
        P.kappa_uniform_ball(0.0, 1.0, 3)
