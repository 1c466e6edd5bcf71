"""The privacy curves of the victim's own DP-SGD run, recomputed from its record (σ, q, steps).

RDP at a dense grid of orders (Opacus' `compute_rdp`, the same analysis its RDP accountant uses),
the privacy profile δ(ε) from Opacus' PRV analysis (discretised privacy loss composed by FFT, turned
into a rigorous upper bound with the discretisation's error terms), zCDP and μ-GDP parameters.
Returns plain data; `Privacy.from_record` reads a `defenses.dp_sgd.DPRecord` (or its dict).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np

# Opacus' fractional-order series breaks down for large fractional α; above 64 only integers.
_FRAC_MAX = 64.0


def rdp_orders(max_order: int = 1024) -> np.ndarray:
    """The dense grid of RDP orders: 40 fractional orders in (1, 2], 120 geometric to 64, then the
    integers on a geometric grid to `max_order`; returns a sorted float64 array."""
    near_one = 1.0 + np.geomspace(1e-3, 1.0, 40)
    mid = np.geomspace(2.0, _FRAC_MAX, 120)
    high = np.unique(np.round(np.geomspace(_FRAC_MAX, max_order, 160)))
    return np.unique(np.concatenate([near_one, mid, high]))


def rdp_curve(noise_multiplier: float, sample_rate: float, steps: int,
              orders: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """ε(α) of `steps` compositions of the Poisson-subsampled Gaussian mechanism; returns
    (orders, rdp) with non-finite values (Opacus overflow) as +inf. RDP composes additively, so
    this is `steps` times one step's curve (as Opacus' `compute_rdp` computes it); one step's
    curve is computed once per (σ, q, orders), whatever the number of steps asked for."""
    a = rdp_orders() if orders is None else np.asarray(orders, dtype=np.float64)
    if int(steps) <= 0:  # nothing was released: no privacy spent at any order
        return a, np.zeros_like(a)
    r = _rdp_one_step(float(noise_multiplier), float(sample_rate), tuple(a.tolist()))
    return a, r * int(steps)


@lru_cache(maxsize=64)
def _rdp_one_step(noise_multiplier: float, sample_rate: float, orders: tuple) -> np.ndarray:
    """One step's ε(α): the series of every order at once (defenses/rdp.py, Opacus' values to
    rounding); where that cannot answer an order (Opacus' own scalar code raises for it), order
    by order as Opacus computes it, non-finite as +inf. ε(α) is non-decreasing in α, so orders
    above the first infinite one (sorted grid) are +inf without being computed."""
    from opacus.accountants.analysis.rdp import compute_rdp

    from defenses import rdp

    a = np.asarray(orders, dtype=np.float64)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            fast = rdp.compute_rdp(sample_rate, noise_multiplier, 1, a)
        except (ValueError, OverflowError):
            fast = None
    if fast is not None:
        fast = np.where(np.isfinite(fast), fast, math.inf)
        fast = np.where(np.maximum.accumulate(fast == math.inf), math.inf, fast)
        fast.setflags(write=False)
        return fast
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        vals: list[float] = []
        for o in a:
            if vals and vals[-1] == math.inf and o >= a[len(vals) - 1]:
                vals.append(math.inf)
                continue
            try:
                vals.append(float(compute_rdp(q=sample_rate, noise_multiplier=noise_multiplier,
                                              steps=1, orders=float(o))))
            except (ValueError, OverflowError):
                vals.append(math.inf)
            if not math.isfinite(vals[-1]):
                vals[-1] = math.inf
    out = np.asarray(vals, dtype=np.float64)
    out.setflags(write=False)
    return out


def coarse_orders() -> np.ndarray:
    """Every third order of `rdp_orders()`: for figures and the PRV domain, where a slightly
    looser (still valid) RDP bound costs nothing that matters and a third of the time."""
    return rdp_orders()[::3]


def _safe_domain_size(noise_multiplier: float, sample_rate: float, steps: int,
                      eps_error: float, delta_error: float) -> float:
    """Half-width of the privacy-loss domain to discretise (Gopi et al. 2021, Remark 5.6, as
    Opacus' `compute_safe_domain_size` sizes it): the larger of the RDP ε of all `steps` at
    δ_err/4 and of one step at δ_err/(8·steps), plus 3. Any valid RDP bound sizes it safely;
    the coarse grid's is read from the cached one-step curve instead of recomputed."""
    from opacus.accountants.analysis.rdp import get_privacy_spent

    def eps_at(k: int, delta: float) -> float:
        o, r = rdp_curve(noise_multiplier, sample_rate, k, coarse_orders())
        ok = np.isfinite(r)
        if not ok.any():
            return math.inf
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return float(get_privacy_spent(orders=o[ok], rdp=r[ok], delta=delta)[0])

    big = max(eps_at(steps, delta_error / 4), eps_at(1, delta_error / (8 * steps)))
    return max(big, eps_error) + 3.0


@lru_cache(maxsize=16)
def privacy_profile(noise_multiplier: float, sample_rate: float, steps: int,
                    eps_error: float = 0.01, delta_error: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """Upper bound on the privacy profile δ(ε) of the run, on a grid of ε (negative ones included:
    they tighten the bound for large κ); returns (eps, delta).

    Opacus' PRV analysis discretises the privacy-loss variable and composes it by FFT; with its
    error terms (Gopi et al.) the true δ(ε) ≤ δ̂(ε − eps_error) + delta_error, which is what is
    returned (every grid point of the composed variable, shifted by eps_error)."""
    from opacus.accountants.analysis.prv import (
        Domain,
        PoissonSubsampledGaussianPRV,
        TruncatedPrivacyRandomVariable,
        compose_heterogeneous,
        discretize,
    )

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        prv = PoissonSubsampledGaussianPRV(sample_rate, noise_multiplier)
        size = _safe_domain_size(noise_multiplier, sample_rate, steps, eps_error, delta_error)
        mesh = eps_error / math.sqrt(steps * math.log(12 / delta_error) / 2)
        domain = Domain.create_aligned(-size, size, mesh)
        tprv = TruncatedPrivacyRandomVariable(prv, domain.t_min, domain.t_max)
        dprv = compose_heterogeneous(dprvs=[discretize(tprv, domain)], num_self_compositions=[steps])
    t = np.asarray(dprv.domain.ts, dtype=np.float64)
    p = np.clip(np.asarray(dprv.pmf, dtype=np.float64), 0.0, None)
    tail_p = np.cumsum(p[::-1])[::-1]  # Σ_{s≥t} p(s)
    tail_pe = np.cumsum((p * np.exp(-t))[::-1])[::-1]  # Σ_{s≥t} p(s) e^{-s}
    delta_hat = np.clip(tail_p - np.exp(t) * tail_pe, 0.0, 1.0)  # δ̂ at ε = t (grid point)
    eps = t + eps_error
    delta = np.minimum(1.0, delta_hat + delta_error)
    return eps, delta


def zcdp_rho(noise_multiplier: float, steps: int) -> float:
    """ρ of `steps` Gaussian mechanisms with noise multiplier σ: steps/(2σ²). Valid for DP-SGD
    (subsampling never increases the Rényi divergence) but ignores amplification by sampling."""
    return steps / (2.0 * noise_multiplier**2)


def gdp_mu(noise_multiplier: float, sample_rate: float, steps: int) -> tuple[float, bool]:
    """μ for μ-GDP and whether it is exact: √steps/σ without subsampling (q = 1, exact); else
    Opacus' central-limit approximation for Poisson sampling (not a guarantee)."""
    if sample_rate >= 1.0:
        return math.sqrt(steps) / noise_multiplier, True
    from opacus.accountants.analysis.gdp import compute_mu_poisson

    mu = compute_mu_poisson(steps=steps, noise_multiplier=noise_multiplier, sample_rate=sample_rate)
    return float(mu), False


@dataclass
class Privacy:
    """A DP guarantee, from a DP-SGD record or from the command line (any subset of fields)."""

    epsilon: float | None = None
    delta: float | None = None
    noise_multiplier: float | None = None
    sample_rate: float | None = None
    steps: int | None = None
    rho: float | None = None
    mu: float | None = None
    accountant: str | None = None

    @property
    def has_mechanism(self) -> bool:
        """True when the run itself (σ, q, steps) is known: the curves can be recomputed."""
        return bool(self.noise_multiplier and self.sample_rate and self.steps)

    @classmethod
    def from_record(cls, rec: Any) -> Privacy:
        """From a `DPRecord` (or its `as_dict()`)."""
        d = rec if isinstance(rec, dict) else rec.as_dict()
        return cls(epsilon=d.get("epsilon"), delta=d.get("delta"),
                   noise_multiplier=d.get("noise_multiplier"), sample_rate=d.get("sample_rate"),
                   steps=int(d["steps"]) if d.get("steps") else None, accountant=d.get("accountant"))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
