"""Empirical privacy auditing: lower bounds on ε at a stated confidence, as pure functions.

Every bound here is a statement "the mechanism is not (ε, δ)-DP for any ε below this", true with
probability ≥ 1 − α over the audit's randomness. Where the audit searches a grid (thresholds,
numbers of guesses), α is split over the grid (Bonferroni), so taking the best entry is honest.

- Threshold audit (Jagielski, Ullman, Oprea 2020, Sec. 3; Nasr et al. 2021, Sec. 4): a test
  "member if score ≥ t" with false-positive and false-negative rates FPR, FNR satisfies, for an
  (ε, δ)-DP mechanism, FPR + e^ε·FNR ≥ 1 − δ and FNR + e^ε·FPR ≥ 1 − δ. With Clopper–Pearson
  upper bounds FPR_hi, FNR_hi: ε ≥ max(log((1 − δ − FNR_hi)/FPR_hi), log((1 − δ − FPR_hi)/FNR_hi)).
  Treating each member/non-member outcome as an independent trial is exact when every trial is a
  fresh training run, and is the one-model practice (ML Privacy Meter, Nasr et al.); the one-run
  audit below is the variant proven for one training run.
- One-run audit (Steinke, Nasr, Jagielski 2023, Thm. 3.1 / Prop. 5.2): m canaries, each included
  independently with probability ½; the auditor makes r guesses (abstaining on the rest) of which v
  are right. Under (ε, δ)-DP, P[v ≥ V] ≤ P[Binom(r, p_ε) ≥ V] + 2mδ·max_{1≤i≤V} P[V − i ≤ Binom(r,
  p_ε) < V]/i, p_ε = e^ε/(1 + e^ε). The bound is the largest ε whose p-value stays below α.
- The informed membership game (paper 004, Alg. 2): one of two candidates, a fair coin; an
  (ε, δ)-DP test wins with probability ≤ (e^ε + δ)/(1 + e^ε). The game's two datasets differ by
  a *replacement*, two add/remove steps: under add/remove accounting the game sees
  (2ε, (1 + e^ε)δ) (group privacy).
- `perfect_*`: what the same audit reports for an attack that is never wrong — the largest
  ε_lower the sample sizes allow (the one-run audit: for the actual split of canaries, where
  a grid entry may ask for more "in" guesses than there are included canaries). An ε_lower far
  below it says "private"; when the perfect value itself is small, it says "too few samples to
  tell".
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

ALPHA = 0.05


def cp_upper(k: int, n: int, alpha: float) -> float:
    """One-sided (1 − alpha) Clopper–Pearson upper bound on a proportion k/n (SciPy's exact
    binomial interval; 1 when nothing was counted)."""
    return _exact(k, n, alpha, "less")[1] if n > 0 else 1.0


def cp_lower(k: int, n: int, alpha: float) -> float:
    """One-sided (1 − alpha) Clopper–Pearson lower bound on a proportion k/n."""
    return _exact(k, n, alpha, "greater")[0] if n > 0 else 0.0


def clopper_pearson(k: int, n: int, alpha: float = ALPHA) -> tuple[float, float]:
    """Exact two-sided (1 − alpha) Clopper–Pearson interval for a proportion k/n."""
    if n <= 0:
        return 0.0, 1.0
    return _exact(k, n, alpha, "two-sided")


@functools.lru_cache(maxsize=4096)  # a threshold grid asks the same (k, n, alpha) many times
def _exact(k: int, n: int, alpha: float, alternative: str) -> tuple[float, float]:
    ci = stats.binomtest(int(k), int(n), alternative=alternative).proportion_ci(1 - alpha, method="exact")
    return float(ci.low), float(ci.high)


def eps_from_rates(fpr_hi: float, fnr_hi: float, delta: float) -> float:
    """The ε an (FPR, FNR) pair rules out: max of the two DP inequalities' logs, ≥ 0."""
    best = 0.0
    for a, b in ((fpr_hi, fnr_hi), (fnr_hi, fpr_hi)):
        num = 1.0 - delta - b
        if num > 0 and a > 0:
            best = max(best, math.log(num / a))
    return best


@dataclass
class ThresholdAudit:
    """Result of a threshold audit over a grid."""

    epsilon_lower: float
    threshold: float  # the grid threshold that gave it (nan when none beat 0)
    fp: int
    fn: int
    members: int
    nonmembers: int
    grid: int
    alpha: float
    perfect: float  # ε_lower of an attack that is never wrong, same sizes and grid


def threshold_audit(member_scores: np.ndarray, nonmember_scores: np.ndarray, thresholds: np.ndarray,
                    delta: float, alpha: float = ALPHA) -> ThresholdAudit:
    """ε lower bound from "member if score ≥ t" over the grid `thresholds` (fixed without the
    truth), Bonferroni over the grid and the two rates (each bound at alpha / (2·grid))."""
    mem = np.sort(np.asarray(member_scores, dtype=np.float64))
    non = np.sort(np.asarray(nonmember_scores, dtype=np.float64))
    thr = np.asarray(thresholds, dtype=np.float64)
    g = max(1, len(thr))
    a = alpha / (2 * g)
    n1, n0 = len(mem), len(non)
    fn = np.searchsorted(mem, thr, side="left")  # members below t
    fp = n0 - np.searchsorted(non, thr, side="left")  # non-members at or above t
    best, where = 0.0, -1
    for i in range(len(thr)):
        e = eps_from_rates(cp_upper(int(fp[i]), n0, a), cp_upper(int(fn[i]), n1, a), delta)
        if e > best:
            best, where = e, i
    perfect = eps_from_rates(cp_upper(0, n0, a), cp_upper(0, n1, a), delta)
    return ThresholdAudit(best, float(thr[where]) if where >= 0 else float("nan"),
                          int(fp[where]) if where >= 0 else 0, int(fn[where]) if where >= 0 else 0,
                          n1, n0, g, alpha, perfect)


def threshold_grid(scores: np.ndarray, size: int = 64) -> np.ndarray:
    """Thresholds at score quantiles, log-spaced toward both tails (chosen without the truth)."""
    tail = np.logspace(-3.5, np.log10(0.5), max(1, size // 2))
    levels = np.unique(np.clip(np.concatenate([tail, 1 - tail]), 0, 1))
    s = np.asarray(scores, dtype=np.float64)
    finite = s[np.isfinite(s)]
    return np.unique(np.quantile(finite, levels)) if len(finite) else np.zeros(1)


def one_run_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """P-value of ≥ v correct guesses out of r (m canaries) under (ε, δ)-DP (Steinke et al. Thm 3.1)."""
    return float(_p_values(m, r, v, np.asarray([eps], dtype=np.float64), delta)[0])


def _p_values(m: int, r: int, v: int, eps: np.ndarray, delta: float) -> np.ndarray:
    """one_run_p_value at every ε of `eps` in one call of each scipy function."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 ≤ v ≤ r ≤ m, got v={v}, r={r}, m={m}")
    p = 1.0 / (1.0 + np.exp(-eps))
    tail = stats.binom.sf(v - 1, r, p)  # P[Binom(r, p) ≥ v]
    if delta > 0 and v > 0:
        i = np.arange(1, v + 1)
        pmf = stats.binom.pmf(v - i[None, :], r, p[:, None])  # P[Binom = v − i]
        worst = np.max(np.cumsum(pmf, axis=1) / i, axis=1)  # max_i P[v − i ≤ Binom < v] / i
        tail = tail + 2 * m * delta * worst
    return np.minimum(1.0, tail)


def one_run_epsilon(m: int, r: int, v: int, delta: float, alpha: float = ALPHA) -> float:
    """The largest ε whose one-run p-value stays below alpha (0 when none does): 50 halvings of
    the bracket, taken 6 at a time (63 interior points in one vectorised call; the p-value rises
    with ε, so the same ε as halving one at a time, in 9 calls instead of 50)."""
    if r == 0 or one_run_p_value(m, r, v, 0.0, delta) >= alpha:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, delta) < alpha and hi < 200:
        lo, hi = hi, 2 * hi
    for bits in (6, 6, 6, 6, 6, 6, 6, 6, 2):
        n = 1 << bits
        mids = lo + (hi - lo) * (np.arange(1, n) / n)
        k = int(np.sum(_p_values(m, r, v, mids, delta) < alpha))  # the points below the threshold
        lo, hi = (mids[k - 1] if k else lo), (mids[k] if k < n - 1 else hi)
    return float(lo)


@dataclass
class OneRunAudit:
    epsilon_lower: float
    guesses: int  # r of the best grid entry
    correct: int  # v of the best grid entry
    canaries: int
    grid: int
    alpha: float
    perfect: float


def one_run_audit(scores: np.ndarray, included: np.ndarray, guess_grid: list[tuple[int, int]],
                  delta: float, alpha: float = ALPHA) -> OneRunAudit:
    """Guess "in" for the k₊ highest scores and "out" for the k₋ lowest, for each (k₊, k₋) of the
    grid (fixed without the truth); Bonferroni over the grid."""
    s = np.asarray(scores, dtype=np.float64)
    inc = np.asarray(included, dtype=bool)
    m = len(s)
    g = max(1, len(guess_grid))
    a = alpha / g
    best = OneRunAudit(0.0, 0, 0, m, g, alpha, 0.0)
    perfect = 0.0
    for kp, kn in guess_grid:
        r, v = _guesses(s, inc, kp, kn)
        e = one_run_epsilon(m, r, v, delta, a)
        # the ceiling for this split: an attack that ranks every included canary first is right
        # on min(k₊, #in) of its "in" guesses and as many "out" guesses as the outs allow
        _, v_best = _guesses(inc.astype(np.float64), inc, kp, kn)
        perfect = max(perfect, one_run_epsilon(m, r, v_best, delta, a))
        if e > best.epsilon_lower:
            best = OneRunAudit(e, r, v, m, g, alpha, 0.0)
    best.perfect = perfect
    return best


def _guesses(s: np.ndarray, inc: np.ndarray, kp: int, kn: int) -> tuple[int, int]:
    """(guesses r, correct v): "in" for the k₊ highest scores, "out" for the k₋ lowest of the rest."""
    m = len(s)
    order = np.argsort(-s, kind="stable")
    kp = min(kp, m)
    kn = min(kn, m - kp)
    v = int(inc[order[:kp]].sum()) + int((~inc[order[m - kn:]]).sum() if kn else 0)
    return kp + kn, v


def game_success_bound(eps: float, delta: float, replacement: bool = True) -> float:
    """Largest success of the informed membership game under add/remove (ε, δ)-DP."""
    e2, d2 = (2 * eps, (1 + math.exp(min(eps, 700))) * delta) if replacement else (eps, delta)
    e = math.exp(min(e2, 700))
    return min(1.0, (e + d2) / (1 + e))


def game_epsilon(success_low: float, delta: float, replacement: bool = True) -> float:
    """The add/remove ε a game success rate (its 95% lower end) rules out; 0 when ≤ ½."""
    if success_low <= game_success_bound(0.0, delta, replacement):
        return 0.0
    lo, hi = 0.0, 1.0
    while game_success_bound(hi, delta, replacement) < success_low and hi < 700:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if game_success_bound(mid, delta, replacement) < success_low:
            lo = mid
        else:
            hi = mid
    return lo
