"""The audit math (harness/scoring/audit.py) and the ROC measures (harness/scoring/roc.py) against
formulas evaluated independently, brute force, and mechanisms whose ε is known exactly."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from harness.scoring import audit, roc


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), frac=st.floats(0, 1), alpha=st.sampled_from([0.05, 0.01, 0.001]))
def test_clopper_pearson_one_sided_bounds_are_exact(n, frac, alpha):
    k = int(round(frac * n))
    hi, lo = audit.cp_upper(k, n, alpha), audit.cp_lower(k, n, alpha)
    assert lo <= k / n <= hi
    if k < n:  # at the upper bound, seeing ≤ k has probability exactly alpha
        assert stats.binom.cdf(k, n, hi) == pytest.approx(alpha, rel=1e-6, abs=1e-12)
    if k > 0:
        assert stats.binom.sf(k - 1, n, lo) == pytest.approx(alpha, rel=1e-6, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(0.01, 8), delta=st.sampled_from([0.0, 1e-5, 1e-3]))
def test_eps_from_rates_inverts_the_optimal_dp_test(eps, delta):
    # the (ε, δ)-DP trade-off's symmetric corner: FPR = FNR = (1 − δ)/(1 + e^ε)
    r = (1 - delta) / (1 + math.exp(eps))
    assert audit.eps_from_rates(r, r, delta) == pytest.approx(eps, rel=1e-9)
    assert audit.eps_from_rates(0.5, 0.5, 0.0) == 0.0  # a coin flip shows nothing


def _randomized_response(eps, n, rng):
    """Scores of an exactly ε-DP test (randomized response on the membership bit)."""
    p = math.exp(eps) / (1 + math.exp(eps))
    return (rng.random(n) < p).astype(float), (rng.random(n) >= p).astype(float)


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_threshold_audit_holds_at_95_percent_on_an_exact_eps_dp_mechanism(eps):
    rng = np.random.default_rng(0)
    trials, above = 200, 0
    for _ in range(trials):
        mem, non = _randomized_response(eps, 1000, rng)
        res = audit.threshold_audit(mem, non, np.array([0.5, 1.0, 2.0]), 0.0)
        above += res.epsilon_lower > eps
    # P[ε_lower > ε] ≤ 5%: more than 19 of 200 would reject that at the 1e-3 level
    assert above <= 19
    assert res.epsilon_lower > 0.5 * eps  # and it is not vacuous: the mechanism leaks


def test_threshold_audit_perfect_attack_and_bonferroni():
    mem, non = np.ones(500), np.zeros(500)
    one = audit.threshold_audit(mem, non, np.array([0.5]), 1e-5)
    many = audit.threshold_audit(mem, non, np.linspace(0.1, 0.9, 50), 1e-5)
    # a perfect split reaches the perfect bound; searching 50 thresholds costs confidence
    assert one.epsilon_lower == pytest.approx(one.perfect)
    assert many.epsilon_lower < one.epsilon_lower
    a = 0.05 / 2
    expect = math.log((1 - 1e-5 - audit.cp_upper(0, 500, a)) / audit.cp_upper(0, 500, a))
    assert one.perfect == pytest.approx(expect)
    assert one.perfect == pytest.approx(math.log((1 - 1e-5 - (1 - a ** (1 / 500))) / (1 - a ** (1 / 500))))


@settings(max_examples=40, deadline=None)
@given(r=st.integers(1, 300), frac=st.floats(0, 1), eps=st.floats(0, 6))
def test_one_run_p_value_is_the_binomial_tail_without_delta(r, frac, eps):
    v = int(round(frac * r))
    p = math.exp(eps) / (1 + math.exp(eps))
    brute = sum(math.comb(r, i) * p**i * (1 - p) ** (r - i) for i in range(v, r + 1))
    assert audit.one_run_p_value(r, r, v, eps, 0.0) == pytest.approx(min(1.0, brute), rel=1e-6, abs=1e-12)
    # δ only adds: the δ-term of Thm. 3.1, brute force
    d = 1e-4
    worst = max((sum(math.comb(r, j) * p**j * (1 - p) ** (r - j) for j in range(v - i, v)) / i
                 for i in range(1, v + 1)), default=0.0)
    assert audit.one_run_p_value(r, r, v, eps, d) == pytest.approx(min(1.0, brute + 2 * r * d * worst),
                                                                     rel=1e-6, abs=1e-12)


def test_one_run_epsilon_is_the_largest_rejected_eps():
    m, r, v, delta, alpha = 1000, 200, 190, 1e-5, 0.05
    e = audit.one_run_epsilon(m, r, v, delta, alpha)
    assert e > 0
    assert audit.one_run_p_value(m, r, v, e, delta) < alpha
    assert audit.one_run_p_value(m, r, v, e + 1e-3, delta) >= alpha
    assert audit.one_run_epsilon(m, r, r // 2, delta, alpha) == 0.0  # half right: nothing shown


# 200 audits each (~3 s CPU): ε = 3 by default, ε = 1 (the same code path and claim) in -m slow
@pytest.mark.parametrize("eps", [pytest.param(1.0, marks=pytest.mark.slow), 3.0])
def test_one_run_audit_holds_at_95_percent_on_an_exact_eps_dp_mechanism(eps):
    rng = np.random.default_rng(1)
    m, trials, above = 400, 200, 0
    grid = [(20, 20), (50, 50), (200, 200), (40, 0)]
    p = math.exp(eps) / (1 + math.exp(eps))
    for _ in range(trials):
        inc = rng.random(m) < 0.5
        # ε-DP randomized response on each canary's coin, then a continuous score
        seen = np.where(rng.random(m) < p, inc, ~inc)
        score = seen + 0.01 * rng.random(m)
        above += audit.one_run_audit(score, inc, grid, 0.0).epsilon_lower > eps
    assert above <= 19
    res = audit.one_run_audit(score, inc, grid, 0.0)
    assert 0 < res.epsilon_lower <= res.perfect


@settings(max_examples=40, deadline=None)
@given(eps=st.floats(0, 6), delta=st.sampled_from([0.0, 1e-5, 1e-3]))
def test_game_bound_is_group_privacy_and_inverts(eps, delta):
    e2 = math.exp(2 * eps)
    expect = min(1.0, (e2 + (1 + math.exp(eps)) * delta) / (1 + e2))
    assert audit.game_success_bound(eps, delta) == pytest.approx(expect)
    assert audit.game_success_bound(eps, delta, replacement=False) == pytest.approx(
        min(1.0, (math.exp(eps) + delta) / (1 + math.exp(eps))))
    b = audit.game_success_bound(eps, delta)
    if b < 1.0 and eps > 0.01:
        assert audit.game_epsilon(b, delta) == pytest.approx(eps, rel=1e-6, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 300))
def test_roc_measures_against_brute_force(seed, n):
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(seed)
    mem = rng.random(n) < 0.5
    if mem.all() or not mem.any():
        mem[0], mem[-1] = True, False
    scores = np.round(rng.normal(size=n) + mem, 1)  # ties on purpose
    r = roc.roc(scores, mem)
    assert roc.auc(r) == pytest.approx(roc_auc_score(mem, scores))
    thr = np.unique(np.r_[scores, np.inf])
    tpr = np.array([(scores[mem] >= t).mean() for t in thr])
    fpr = np.array([(scores[~mem] >= t).mean() for t in thr])
    assert roc.advantage(r) == pytest.approx(np.max(tpr - fpr))
    for f in (0.01, 0.1, 0.5):
        at = roc.tpr_at_fpr(r, f)
        assert at.tpr == pytest.approx(tpr[fpr <= f + 1e-12].max())
        assert at.measured == (f * (~mem).sum() >= 1)


def test_one_run_ceiling_is_for_the_actual_split():
    # 114 of 256 canaries in: guessing "in" for the top 128 and "out" for the bottom 128, an attack
    # that is never wrong still has 14 of its "in" guesses on outs: 242 of 256 right, not 256
    inc = np.zeros(256, bool)
    inc[np.random.default_rng(0).permutation(256)[:114]] = True
    res = audit.one_run_audit(np.random.default_rng(1).random(256), inc, [(128, 128)], 1e-5)
    assert res.perfect == pytest.approx(audit.one_run_epsilon(256, 256, 242, 1e-5, 0.05))
    assert res.perfect < audit.one_run_epsilon(256, 256, 256, 1e-5, 0.05)
    # a perfect score reaches it; the top-only entry (10 guesses) allows all right
    both = audit.one_run_audit(inc.astype(float), inc, [(128, 128), (10, 0)], 1e-5)
    assert both.perfect == pytest.approx(max(audit.one_run_epsilon(256, 256, 242, 1e-5, 0.025),
                                             audit.one_run_epsilon(256, 10, 10, 1e-5, 0.025)))
    assert both.epsilon_lower == pytest.approx(both.perfect)
