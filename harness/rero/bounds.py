"""γ: upper bounds on the success probability of any reconstruction attack (paper 004, Sec. VII).

Every bound takes the baseline κ (`priors`) and a privacy guarantee, and returns a `Bound` whose γ is
clamped to [κ, 1] — κ is reached by the oblivious attack whatever the mechanism, 1 is a certainty — and
marked `vacuous` when γ = 1. Computation is in log space where κ underflows.

Beyond the paper: the privacy-profile bound inf_ε min(1, κ·e^ε + δ(ε)) and the μ-GDP bound
Φ(Φ⁻¹(κ) + μ) (the hypothesis-testing view: γ ≤ 1 − f(κ) for an f-DP mechanism). Both hold with the
add/remove neighbouring relation DP-SGD is accounted under: the proofs compare M(D₋ ∪ {z}) with M(D₋)
instead of M(D₋ ∪ {z₀}), which needs only the divergence of "with the target" from "without it".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

# The kinds, in the order the report lists them.
KINDS = ("eps_dp", "eps_delta_dp", "rdp", "zcdp", "profile", "gdp")


@dataclass
class Bound:
    """One bound: its kind, γ, whether it is vacuous, and how it was obtained."""

    kind: str
    gamma: float
    vacuous: bool
    rigorous: bool = True  # False: rests on an approximation (e.g. the CLT for μ-GDP)
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def clamp(gamma: float, kappa: float) -> float:
    """γ clipped to [κ, 1] (NaN → 1)."""
    if not math.isfinite(gamma) and not gamma == -math.inf:
        return 1.0
    return float(min(1.0, max(kappa, gamma)))


def make(kind: str, gamma: float, kappa: float, *, rigorous: bool = True, **detail: Any) -> Bound:
    """A `Bound` with γ clamped to [κ, 1] and `vacuous` set when γ = 1."""
    g = clamp(gamma, kappa)
    return Bound(kind, g, g >= 1.0, rigorous, detail)


def _log(kappa: float) -> float:
    _check_kappa(kappa)
    return math.log(kappa) if kappa > 0 else -math.inf


def gamma_eps_dp(kappa: float, epsilon: float) -> Bound:
    """Cor. 3: an ε-DP mechanism is (η, κ·e^ε)-ReRo."""
    _check_nonneg(epsilon=epsilon)
    return make("eps_dp", math.exp(min(0.0, _log(kappa) + epsilon)), kappa, epsilon=epsilon)


def gamma_eps_delta(kappa: float, epsilon: float, delta: float) -> Bound:
    """(ε, δ)-DP: γ = κ·e^ε + δ (integrating P[E|z] ≤ e^ε·P[E|ref] + δ over the prior)."""
    _check_nonneg(epsilon=epsilon)
    _check_unit(delta=delta)
    g = math.exp(min(0.0, _log(kappa) + epsilon)) + delta
    return make("eps_delta_dp", g, kappa, epsilon=epsilon, delta=delta)


def log_gamma_rdp_curve(kappa: float, orders: np.ndarray, rdp: np.ndarray) -> np.ndarray:
    """log of Thm. 2's γ(α) = (κ·e^{ε(α)})^{(α−1)/α} at every order, capped at 0 (γ ≤ 1);
    +0 where ε(α) is infinite or NaN."""
    a = np.asarray(orders, dtype=np.float64)
    e = np.asarray(rdp, dtype=np.float64)
    lk = _log(kappa)
    with np.errstate(invalid="ignore"):
        inner = np.where(np.isfinite(e), lk + e, np.inf)
        lg = np.where(a == np.inf, inner, (a - 1.0) / a * inner)
    return np.minimum(np.nan_to_num(lg, nan=0.0, posinf=0.0), 0.0)


def gamma_rdp(kappa: float, orders: np.ndarray, rdp: np.ndarray) -> Bound:
    """Thm. 2 optimised over the given RDP curve: γ = min_α (κ·e^{ε(α)})^{(α−1)/α}."""
    a = np.asarray(orders, dtype=np.float64)
    if a.ndim != 1 or len(a) == 0 or len(a) != len(np.asarray(rdp)) or np.any(a <= 1):
        raise ValueError("orders and rdp must be equal-length 1-D arrays with every order > 1")
    lg = log_gamma_rdp_curve(kappa, a, np.asarray(rdp))
    i = int(np.argmin(lg))
    return make("rdp", math.exp(lg[i]), kappa, alpha=float(a[i]), rdp_at_alpha=float(np.asarray(rdp)[i]),
                orders=len(a))


def gamma_zcdp(kappa: float, rho: float) -> Bound:
    """Cor. 4: a ρ-zCDP mechanism is ReRo with γ = exp(−(√log(1/κ) − √ρ)²) when ρ < log(1/κ),
    else γ = 1 (vacuous)."""
    _check_nonneg(rho=rho)
    lk = _log(kappa)
    if lk == -math.inf:
        return make("zcdp", 0.0, kappa, rho=rho)
    L = -lk
    if rho >= L:
        return make("zcdp", 1.0, kappa, rho=rho)
    return make("zcdp", math.exp(-((math.sqrt(L) - math.sqrt(rho)) ** 2)), kappa, rho=rho,
                alpha=math.sqrt(L / rho) if rho > 0 else math.inf)


def gamma_profile(kappa: float, eps: np.ndarray, delta: np.ndarray, **detail: Any) -> Bound:
    """Tight bound from a privacy profile (the mechanism is (ε, δ(ε))-DP for every ε on the grid):
    γ = min over the grid of min(1, κ·e^ε + δ(ε)). Negative ε are allowed (the hockey-stick δ(ε) of
    ε < 0 is a valid statement too); with them the bound equals 1 − f(κ) for the trade-off curve f."""
    e = np.asarray(eps, dtype=np.float64)
    d = np.asarray(delta, dtype=np.float64)
    if e.ndim != 1 or len(e) == 0 or e.shape != d.shape:
        raise ValueError("eps and delta must be equal-length 1-D arrays")
    lk = _log(kappa)
    with np.errstate(over="ignore"):
        g = np.exp(np.minimum(lk + e, 0.0)) + np.clip(d, 0.0, 1.0)
    i = int(np.argmin(g))
    return make("profile", float(g[i]), kappa, epsilon=float(e[i]), delta=float(d[i]), **detail)


def gamma_gdp(kappa: float, mu: float, *, rigorous: bool = True, **detail: Any) -> Bound:
    """μ-GDP (f-DP with f = G_μ): γ ≤ 1 − G_μ(κ) = Φ(Φ⁻¹(κ) + μ)."""
    from scipy.stats import norm

    _check_nonneg(mu=mu)
    _check_kappa(kappa)
    g = float(norm.cdf(norm.ppf(kappa) + mu)) if kappa > 0 else 0.0
    return make("gdp", g, kappa, rigorous=rigorous, mu=mu, **detail)


def delta_from_rero(epsilon: float, gamma: float) -> float:
    """Thm. 5: (η, γ)-ReRo against every two-point prior with p = 1/(e^ε + 1) under the 0/1 loss
    implies (ε, δ)-DP with δ = max(0, (e^ε + 1)·γ − e^ε); returns δ (≤ 1 only when γ ≤ 1)."""
    _check_nonneg(epsilon=epsilon)
    _check_unit(gamma=gamma)
    if epsilon > 700:  # e^ε overflows; (e^ε + 1)γ − e^ε > 0 only if γ > e^ε/(e^ε + 1) ≈ 1
        return max(0.0, gamma - 1.0)
    ee = math.exp(epsilon)
    return max(0.0, (ee + 1.0) * gamma - ee)


def tightest(bounds: list[Bound], rigorous_only: bool = True) -> Bound | None:
    """The bound with the smallest γ (among the rigorous ones by default); None when empty."""
    pool = [b for b in bounds if b.rigorous or not rigorous_only]
    return min(pool, key=lambda b: b.gamma) if pool else None


def _check_kappa(kappa: float) -> None:
    if not (0.0 <= kappa <= 1.0):
        raise ValueError(f"kappa must lie in [0, 1], got {kappa}")


def _check_nonneg(**kw: float) -> None:
    for k, v in kw.items():
        if not (v >= 0 and not math.isnan(v)):
            raise ValueError(f"{k} must be ≥ 0, got {v}")


def _check_unit(**kw: float) -> None:
    for k, v in kw.items():
        if not (0.0 <= v <= 1.0):
            raise ValueError(f"{k} must lie in [0, 1], got {v}")
