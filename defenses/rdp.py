"""RDP of the Poisson-subsampled Gaussian mechanism for many orders at once.

The series is Mironov, Talwar & Zhang 2019 ("Rényi Differential Privacy of the Sampled Gaussian
Mechanism", Sec. 3.3): for an integer order α a finite binomial sum, for a fractional one two
alternating series summed until both terms fall below e⁻³⁰. Opacus' `compute_rdp` evaluates it
one scalar term at a time in Python (~2 s for one σ search over its 151 default orders); here the
terms of every order are arrays, with Opacus' stop rule, signs and special functions, so the
values agree with Opacus' to rounding (tests/defenses/test_rdp.py) at ~1/10 of the cost.

Where an alternating series cancels (a partial sum not clearly positive, or a total far below its
largest term) the order is handed to Opacus' own scalar code, whose result or error is then what
is returned, so no order is ever answered less carefully than Opacus answers it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np

_STOP = -30.0  # a fractional order's series stops after the first term below e^-30 (both halves)
_MAX_TERMS = 1 << 14  # beyond this many terms an order goes to Opacus' scalar loop
_CANCEL = 1e-6  # a signed sum below this fraction of its largest term is left to Opacus
_PARTIAL = 1e-9  # ... as is one whose running sum comes this close to 0 (Opacus' running log-sum
# raises where it goes negative; rounding decides so near 0)


def log_a(q: float, sigma: float, orders: Sequence[float] | np.ndarray) -> np.ndarray:
    """log A_α of one step for each order (0 < q < 1, σ > 0); raises what Opacus raises for an
    order whose series it cannot sum."""
    a = np.asarray(orders, dtype=np.float64)
    out = np.empty_like(a)
    whole = np.array([float(x).is_integer() for x in a], dtype=bool)
    if whole.any():
        out[whole] = _log_a_int(q, sigma, a[whole].astype(np.int64))
    frac = np.flatnonzero(~whole)
    if frac.size:
        vals, unsure = _log_a_frac(q, sigma, a[frac])
        out[frac] = vals
        for k in frac[unsure]:
            out[k] = _opacus_log_a(q, sigma, float(a[k]))
    return out


def compute_rdp(q: float, noise_multiplier: float, steps: int,
                orders: Sequence[float] | np.ndarray) -> np.ndarray:
    """RDP ε(α) after `steps` steps at each order: Opacus' `compute_rdp` (same special cases)."""
    a = np.asarray(orders, dtype=np.float64)
    if q == 0:
        return np.zeros_like(a)
    if noise_multiplier == 0:
        return np.full_like(a, np.inf)
    if q == 1.0:
        return a / (2 * noise_multiplier**2) * steps
    finite = np.isfinite(a)
    r = np.full_like(a, np.inf)
    r[finite] = log_a(q, noise_multiplier, a[finite]) / (a[finite] - 1)
    return r * steps


def epsilon(q: float, noise_multiplier: float, steps: int, delta: float,
            orders: Sequence[float] | None = None) -> float:
    """(ε at δ) of the run by RDP over `orders` (Opacus' RDP accountant's default orders), with
    Opacus' own RDP → (ε, δ) conversion."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import get_privacy_spent

    alphas = RDPAccountant.DEFAULT_ALPHAS if orders is None else orders
    rdp = compute_rdp(q, noise_multiplier, steps, alphas)
    eps, _ = get_privacy_spent(orders=alphas, rdp=rdp, delta=delta)
    return float(eps)


def noise_multiplier(target_epsilon: float, target_delta: float, sample_rate: float, epochs: int,
                     tolerance: float = 0.01) -> float:
    """σ reaching (ε, δ) after `epochs` epochs under the RDP accountant: Opacus'
    `get_noise_multiplier` search (doubling from 20, then bisection until ε is within
    `tolerance` below the target), step for step, with `epsilon` as its ε."""
    from opacus.accountants.utils import MAX_SIGMA

    steps = int(epochs / sample_rate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus' "optimal order is the largest alpha"
        eps_high = math.inf
        sigma_low, sigma_high = 0.0, 10.0
        while eps_high > target_epsilon:
            sigma_high = 2 * sigma_high
            eps_high = epsilon(sample_rate, sigma_high, steps, target_delta)
            if sigma_high > MAX_SIGMA:
                raise ValueError("The privacy budget is too low.")
        while target_epsilon - eps_high > tolerance:
            sigma = (sigma_low + sigma_high) / 2
            eps = epsilon(sample_rate, sigma, steps, target_delta)
            if eps < target_epsilon:
                sigma_high, eps_high = sigma, eps
            else:
                sigma_low = sigma
    return sigma_high


# --------------------------------------------------------------------------- the two series
def _log_a_int(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
    """Σ_{i=0..α} C(α, i) q^i (1−q)^(α−i) exp((i² − i) / 2σ²), in logs, for integer orders."""
    from scipy import special

    i = np.arange(int(alphas.max()) + 1, dtype=np.float64)[None, :]
    al = alphas.astype(np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        terms = (np.log(special.binom(al, i)) + i * math.log(q) + (al - i) * math.log(1 - q)
                 + (i * i - i) / (2 * sigma**2))
    terms = np.where(i <= al, terms, -np.inf)
    return _logsumexp(terms)


def _log_a_frac(q: float, sigma: float, alphas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log A_α for fractional orders and a mask of the orders left to Opacus (cancellation or a
    series longer than _MAX_TERMS); an order's terms are recomputed 4× longer until it stops."""
    out = np.full(alphas.shape, np.nan)
    unsure = np.ones(alphas.shape, dtype=bool)
    rows, n = np.arange(alphas.size), 64
    while rows.size:
        s0, s1, sign = _frac_terms(q, sigma, alphas[rows], n)
        below = np.maximum(s0, s1) < _STOP
        done = below.any(axis=1)
        if n >= _MAX_TERMS:
            done[:] = True  # the longer series are Opacus' (unsure stays set for them)
        if done.any():
            last = np.where(below.any(axis=1), below.argmax(axis=1), -1)[done]
            keep = np.arange(n)[None, :] <= last[:, None]  # the stopping term is summed too
            h0, ok0 = _signed_logsum(np.where(keep, s0[done], -np.inf), sign[done])
            h1, ok1 = _signed_logsum(np.where(keep, s1[done], -np.inf), sign[done])
            out[rows[done]] = np.logaddexp(h0, h1)
            unsure[rows[done]] = ~(ok0 & ok1 & (last >= 0))
        rows, n = rows[~done], n * 4
    return out, unsure


def _frac_terms(q: float, sigma: float, alphas: np.ndarray, n: int):
    """The first n terms (log magnitudes of both halves, and their sign) of each order's series."""
    from scipy import special

    i = np.arange(n, dtype=np.float64)[None, :]
    al = alphas[:, None]
    j = al - i
    coef = special.binom(al, i)
    z0 = sigma**2 * math.log(1 / q - 1) + 0.5
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_coef = np.log(np.abs(coef))
        log_t0 = log_coef + i * math.log(q) + j * math.log(1 - q)
        log_t1 = log_coef + j * math.log(q) + i * math.log(1 - q)
        log_e0 = math.log(0.5) + _log_erfc((i - z0) / (math.sqrt(2) * sigma))
        log_e1 = math.log(0.5) + _log_erfc((z0 - j) / (math.sqrt(2) * sigma))
        s0 = log_t0 + (i * i - i) / (2 * sigma**2) + log_e0
        s1 = log_t1 + (j * j - j) / (2 * sigma**2) + log_e1
    return s0, s1, np.where(coef > 0, 1.0, -1.0)


def _log_erfc(x: np.ndarray) -> np.ndarray:
    from scipy import special

    return math.log(2) + special.log_ndtr(-x * 2**0.5)


def _logsumexp(terms: np.ndarray) -> np.ndarray:
    m = terms.max(axis=1)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        return np.log(np.exp(terms - safe[:, None]).sum(axis=1)) + safe


def _signed_logsum(terms: np.ndarray, sign: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log Σ sign·exp(term) per row, and whether every partial sum stayed clearly positive (as
    Opacus' running log-sum requires) and the total did not cancel."""
    m = terms.max(axis=1)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        lin = sign * np.exp(terms - safe[:, None])
        partial = np.cumsum(lin, axis=1)
    total = partial[:, -1]
    running = np.maximum.accumulate(np.abs(lin), axis=1)
    ok = (np.isfinite(m) & (partial > _PARTIAL * running).all(axis=1)
          & (total > _CANCEL * running[:, -1]))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.where(ok, total, 1.0)) + safe, ok


def _opacus_log_a(q: float, sigma: float, alpha: float) -> float:
    from opacus.accountants.analysis.rdp import _compute_log_a

    return float(_compute_log_a(q, sigma, alpha))
