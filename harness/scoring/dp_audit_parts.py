"""The parts of a dp_audit score beyond the evaluation-set and one-run audits: the accountant at
the audit's δ (a claim the recipe's own accountant contradicts), the white-box gradient-canary
audit and the black-box worst-case-initialisation audit (harness/scoring/fdp.py for the analysis).

Both canary audits are iid trials: a Dirac canary's observations are its coordinate of the
privatised steps less the base data's known contribution, so each canary's score is drawn from
the subsampled Gaussian mechanism alone (given its coin); a black-box trial is a fresh run.
So the threshold-style analysis is exact for them (no one-model approximation), and its result
is compared with the accountant of the very runs that produced it. Beside each bound,
`epsilon_ceiling_*` is what the optimal (likelihood-ratio) test on the accountant's own mechanism
would show with the same trials (harness/scoring/audit_ceiling.py): a bound near it is as tight as
any attack could be; a bound far above it means the mechanism is worse than accounted.
"""

from __future__ import annotations

import warnings

import numpy as np

from harness.scoring.audit import threshold_grid
from harness.scoring.audit_ceiling import optimal_test_ceiling
from harness.scoring.fdp import iid_audit, one_run_fdp_epsilon


def accountant_epsilon(rec, delta: float) -> float | None:
    """ε of a DPRecord's run at δ, by the run's own accountant (its history: σ, q, steps)."""
    if rec is None:
        return None
    if abs(float(rec.delta) - delta) <= 1e-15 * max(1.0, delta) or not rec.steps:
        return float(rec.epsilon)
    from opacus.accountants import create_accountant

    acc = create_accountant(rec.accountant)
    acc.history = [(float(rec.noise_multiplier), float(rec.sample_rate), int(rec.steps))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(acc.get_epsilon(delta=delta))


def n_parts(art, truth) -> int:
    """How many of these audits have something to score (each gets its share of α)."""
    return sum(1 for key in ("whitebox", "blackbox") if _trial(art, truth, key) is not None)


def _trial(art, truth, key: str):
    """({name: scores}, coins) of one audit, or None when it did not run."""
    sets = art.data.get(f"{key}_scores")
    coins = getattr(truth, f"{key}_in", None)
    if sets is None or coins is None:
        return None
    sets = sets if isinstance(sets, dict) else {"score": sets}
    sets = {k: np.asarray(v, dtype=np.float64) for k, v in sets.items()}
    n = len(next(iter(sets.values())))
    return sets, np.asarray(coins, dtype=bool)[:n]


def score_parts(art, truth, delta: float, a: float, analysis: str) -> tuple[dict[str, float], float, float]:
    """Metrics of the white-box and black-box audits, each at level `a`; (metrics, best ε, best
    perfect). The bounds that decide are Clopper–Pearson's; with `analysis: gdp | fdp` the
    Gaussian-curve figure of the same guesses is reported beside them (`epsilon_gdp_*`)."""
    out: dict[str, float] = {}
    lower = perfect = 0.0
    for key in ("whitebox", "blackbox"):
        got = _trial(art, truth, key)
        if got is None:
            continue
        sets, inc = got
        b = a / len(sets)  # Bonferroni over the score sets (fixed before any coin is read)
        e = p = est = mu = 0.0
        for name, s in sets.items():
            e_s, p_s, _ = iid_audit(s[inc], s[~inc], threshold_grid(s, 64), delta, b, "clopper-pearson")
            if e_s >= e:
                e, best = e_s, name
            p = max(p, p_s)
            if analysis == "fdp" and key == "whitebox":  # the same guesses, the one-run f-DP test
                est = max(est, one_run_fdp(s, inc, art.data.get("whitebox_guess_grid") or [], delta, b)[0])
            elif analysis != "clopper-pearson":
                g, _, mu_s = iid_audit(s[inc], s[~inc], threshold_grid(s, 64), delta, b, "gdp")
                est, mu = max(est, g), max(mu, mu_s)
        if analysis != "clopper-pearson":
            out[f"epsilon_{analysis}_{key}"] = est
            if analysis == "gdp":
                out[f"mu_lower_{key}"] = mu
        out[f"epsilon_lower_{key}"], out[f"epsilon_perfect_{key}"] = e, p
        out[f"{key}_score_sets"] = float(len(sets))
        art.notes.append(f"{key} audit: best score set '{best}' of {sorted(sets)}")
        out[f"{key}_trials_in"], out[f"{key}_trials_out"] = float(inc.sum()), float((~inc).sum())
        rec = getattr(truth, f"{key}_dp", None)
        acc = accountant_epsilon(rec, delta)
        if acc is not None:
            out[f"epsilon_accounted_{key}_run"] = acc
        if rec is not None and rec.steps and rec.sample_rate > 0:
            # the optimal test on the accountant's own mechanism, with these trial counts
            out[f"epsilon_ceiling_{key}"] = optimal_test_ceiling(
                int(inc.sum()), int((~inc).sum()), float(rec.noise_multiplier), float(rec.sample_rate),
                int(rec.steps), delta, a)
        lower, perfect = max(lower, e), max(perfect, p)
    return out, lower, perfect


def one_run_estimate(art, s, inc, grid, delta: float, a: float) -> dict[str, float]:
    """With `analysis: fdp | gdp`, the one-run canaries' Gaussian-curve figure (Mahloujifar et al.)."""
    analysis = art.data.get("analysis", "clopper-pearson")
    if analysis == "clopper-pearson":
        return {}
    return {f"epsilon_{analysis}_one_run": one_run_fdp(s, inc, grid, delta, a)[0]}


def one_run_fdp(s, inc, grid, delta: float, a: float) -> tuple[float, float]:
    """Mahloujifar et al. 2025 on the guesses of Steinke's grid (top k₊ "in"), Bonferroni."""
    grid = [tuple(g) for g in grid] or [(max(1, len(s) // 20), 0)]
    m, g = len(s), len(grid)
    order = np.argsort(-s, kind="stable")
    e = p = 0.0
    for kp, _ in grid:
        kp = min(kp, m)
        v = int(inc[order[:kp]].sum())
        e = max(e, one_run_fdp_epsilon(m, kp, v, delta, a / g))
        p = max(p, one_run_fdp_epsilon(m, kp, min(kp, int(inc.sum())), delta, a / g))
    return e, p
