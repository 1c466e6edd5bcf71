"""The vectorised RDP series (defenses/rdp.py) against Opacus' scalar loop and against the
definition A_α = E_{z∼N(0,σ²)}[((1−q) + q·e^{(2z−1)/2σ²})^α] integrated to 40 digits."""

import math
import warnings

import mpmath
import numpy as np
import pytest

from defenses import rdp

# (q, σ): DP-SGD's usual sample rates and noise, full-batch-like rates, tiny and large noise
GRID = [(1e-4, 1.0), (0.004, 0.7), (0.02, 0.3), (0.064, 1.1), (0.2, 2.0), (0.5, 0.8), (0.9, 8.0)]


def _opacus_rdp(q, sigma, orders):
    from opacus.accountants.analysis.rdp import compute_rdp

    return np.array([compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=float(a)) for a in orders])


@pytest.mark.parametrize("q,sigma", GRID)
def test_every_default_order_is_opacus_value_to_rounding(q, sigma):
    from opacus.accountants import RDPAccountant

    orders = np.array(RDPAccountant.DEFAULT_ALPHAS + [1.001, 1.01, 100, 256, 1024], dtype=float)
    ours, theirs = rdp.compute_rdp(q, sigma, 1, orders), _opacus_rdp(q, sigma, orders)
    assert np.array_equal(np.isfinite(ours), np.isfinite(theirs))
    fin = np.isfinite(theirs)
    # one step's log A_α, the summed quantity: the series stop below e^-30 ≈ 1e-13 either way
    assert np.max(np.abs(ours[fin] - theirs[fin]) * (orders[fin] - 1)) <= 1e-12


def _true_log_a(q, sigma, alpha):
    mpmath.mp.dps = 40
    q, s, a = mpmath.mpf(q), mpmath.mpf(sigma), mpmath.mpf(alpha)

    def f(z):
        return mpmath.npdf(z, 0, s) * ((1 - q) + q * mpmath.exp((2 * z - 1) / (2 * s * s))) ** a

    return float(mpmath.log(mpmath.quad(f, [-mpmath.inf, -8 * s, 0, 1, 8 * s + 1, mpmath.inf])))


@pytest.mark.parametrize("q,sigma,alpha", [(0.064, 1.1, 1.001), (0.064, 1.1, 1.5), (0.01, 0.8, 3.7),
                                           (0.2, 2.0, 12), (0.5, 0.8, 2.5)])
def test_log_a_is_the_definition_integrated(q, sigma, alpha):
    """Ground truth independent of either series: both are within their truncation of it."""
    from opacus.accountants.analysis.rdp import _compute_log_a

    truth = _true_log_a(q, sigma, alpha)
    ours = float(rdp.log_a(q, sigma, [alpha])[0])
    assert abs(ours - truth) <= 3e-13 * max(1.0, abs(truth)), (ours, truth)
    assert abs(_compute_log_a(q, sigma, alpha) - truth) <= 3e-13 * max(1.0, abs(truth))  # the control


def test_special_cases_are_opacus():
    orders = [1.5, 2.0, 32.0, math.inf]
    assert rdp.compute_rdp(0.0, 1.0, 10, orders).tolist() == [0.0] * 4
    assert np.isinf(rdp.compute_rdp(0.1, 0.0, 10, orders)).all()
    assert rdp.compute_rdp(1.0, 2.0, 10, orders[:3]).tolist() == [a / 8 * 10 for a in orders[:3]]
    assert np.isinf(rdp.compute_rdp(0.1, 1.0, 10, orders)[-1])


@pytest.mark.parametrize("eps,delta,q,epochs", [
    (1.0, 1e-5, 0.1, 100), (8.0, 1e-5, 64 / 300, 10), (3.0, 1e-5, 0.01, 5),
    pytest.param(50.0, 1e-5, 0.5, 1, marks=pytest.mark.slow)])  # Opacus' own search: 1.6 s here
def test_noise_multiplier_is_opacus_search_result(eps, delta, q, epochs):
    """The same σ as Opacus' get_noise_multiplier (the σ make_private_with_epsilon picks)."""
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = get_noise_multiplier(target_epsilon=eps, target_delta=delta, sample_rate=q,
                                      epochs=epochs, accountant="rdp")
    assert rdp.noise_multiplier(eps, delta, q, epochs) == theirs
    steps = int(epochs / q)
    assert eps - 0.01 <= rdp.epsilon(q, theirs, steps, delta) <= eps  # the search's own stop rule


def test_a_budget_no_noise_reaches_is_refused_as_opacus_refuses_it():
    with pytest.raises(ValueError, match="privacy budget is too low"):
        rdp.noise_multiplier(1e-12, 1e-12, 0.001, 1)
