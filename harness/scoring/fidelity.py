"""Risk of an extraction artifact, judged on scored functional fidelity only (never on the
attack's own success flag or self-check): what the attacker walks away with is a model whose
outputs match the victim's on held-out inputs (see harness/scoring/model.py for the measures).

Every bar is measured against the best constant predictor, so a skewed task cannot pass it with
a model that always answers the majority class:
- outputs: `output_error` (99th percentile of the output difference) with `output_r2` (the share
  of the outputs' variance across inputs that the copy reproduces; a constant predictor has 0);
- labels: `agreement` with Cohen's κ (`kappa`: agreement beyond what two independent labelings
  with the same label frequencies would reach; a constant predictor has 0).

Thresholds (every extraction attack, every victim family):
- high: `output_error` ≤ 1e-2 with `output_r2` ≥ 0.99 (a stolen model, whatever its parameter
  error), or for classifiers `agreement` ≥ 0.95 with κ ≥ 0.9;
- medium: `output_error` ≤ 0.1 with `output_r2` ≥ 0.9, or `agreement` ≥ 0.8 with κ ≥ 0.6;
- low: anything less, or no model at all.
A surrogate's learning curve is judged on its final `fidelity`: label agreement with κ by the
label bars; for regression its R² against the victim's outputs (high ≥ 0.99, medium ≥ 0.9).
Against an endpoint without truth, the held-out probes' `blackbox_agreement` with
`blackbox_kappa` (classifiers) or `blackbox_r2` (regression, the R² bars) stand in, judged on
their one-sided 95% lower bounds (`agreement_lower`, `kappa_lower`, `r2_lower` over `n_probes`);
with no probe answered there is no risk (None: the attack is `incomplete`, never low).
"""

from __future__ import annotations

HIGH_ERROR, MEDIUM_ERROR = 1e-2, 1e-1
HIGH_R2, MEDIUM_R2 = 0.99, 0.9
HIGH_AGREEMENT, MEDIUM_AGREEMENT = 0.95, 0.8
HIGH_KAPPA, MEDIUM_KAPPA = 0.9, 0.6


def label_level(agree: float, kappa: float | None) -> str:
    """low | medium | high from label agreement and Cohen's κ (κ unknown: agreement alone)."""
    k = agree if kappa is None else kappa
    if agree >= HIGH_AGREEMENT and k >= HIGH_KAPPA:
        return "high"
    if agree >= MEDIUM_AGREEMENT and k >= MEDIUM_KAPPA:
        return "medium"
    return "low"


def output_level(err: float, r2: float | None) -> str:
    """low | medium | high from the output error and the outputs' explained variance."""
    r = 1.0 if r2 is None else r2
    if err <= HIGH_ERROR and r >= HIGH_R2:
        return "high"
    if err <= MEDIUM_ERROR and r >= MEDIUM_R2:
        return "medium"
    return "low"


def _kappa_words(kappa: float | None) -> str:
    return "" if kappa is None else f" (κ {kappa:.3f} over the best constant guess)"


def judge_fidelity(m: dict[str, float], what: str = "model") -> tuple[str | None, str]:
    """(risk, reason) from scored fidelity metrics; risk None when nothing could be verified."""
    q = int(m.get("queries", 0))
    err, agree = m.get("output_error"), m.get("agreement")
    if err is None and agree is None:
        return _blackbox(m, what, q)
    parts = []
    if err is not None:
        r2 = m.get("output_r2")
        parts.append(f"output error {err:.2g}" + (f", output R² {r2:.4f}" if r2 is not None else ""))
    if agree is not None:
        parts.append(f"agreement {agree:.3f}{_kappa_words(m.get('kappa'))}")
    if "param_error" in m and m.get("units_true"):
        parts.append(f"{int(m.get('units_matched', 0))} of {int(m['units_true'])} units, "
                     f"parameter error {m['param_error']:.2g}")
    how = ", ".join(parts) + " on held-out inputs"
    levels = ["low"]
    if err is not None:
        levels.append(output_level(err, m.get("output_r2")))
    if agree is not None:
        levels.append(label_level(agree, m.get("kappa")))
    lvl = max(levels, key=("low", "medium", "high").index)
    r2 = m.get("output_r2")
    if err is not None and r2 is not None and r2 < 0:  # worse than a constant on the outputs
        if lvl == "low":
            return "low", f"the extracted {what} does not reproduce the victim ({how}, {q} queries)"
        return "medium", (f"the extracted {what} matches the victim's labels but not its outputs "
                          f"({how}, {q} queries): a copy of its labels, not of the model")
    if lvl == "high":
        return "high", f"a working copy of the victim was extracted ({how}) in {q} queries"
    if lvl == "medium":
        return "medium", f"an approximate {what} was extracted ({how}) in {q} queries"
    return "low", f"the extracted {what} does not reproduce the victim ({how}, {q} queries)"


def r2_level(r2: float) -> str:
    """low | medium | high from a regression copy's R² against the victim's outputs."""
    return "high" if r2 >= HIGH_R2 else "medium" if r2 >= MEDIUM_R2 else "low"


def next_bar(score: float, regression: bool) -> float | None:
    """The score the level above `score`'s needs (agreement: its agreement bar alone, which κ can
    only raise; R² for regression); None at high."""
    bars = (MEDIUM_R2, HIGH_R2) if regression else (MEDIUM_AGREEMENT, HIGH_AGREEMENT)
    return next((b for b in bars if score < b), None)


def judge_agreement(m: dict[str, float], what: str = "surrogate",
                    regression: bool = False) -> tuple[str, str]:
    """(risk, reason) from a surrogate's scored `fidelity` (label agreement, or R² against the
    victim's outputs for regression) on held-out data."""
    q = int(m.get("queries", 0))
    fid = m["fidelity"]
    if regression:
        return r2_level(fid), (f"the {what} reaches R² {fid:.4f} against the victim's outputs on "
                               f"held-out inputs in {q} queries")
    kappa = m.get("kappa")
    lvl = label_level(fid, kappa)
    facts = f"{fid:.1%} of held-out inputs{_kappa_words(kappa)}"
    if lvl == "high":
        q95 = int(m.get("queries_to_95", q))
        return "high", f"the {what} agrees with the victim on {facts}; 95% took {q95} queries"
    if lvl == "medium":
        return "medium", f"the {what} reached agreement on {facts} in {q} queries"
    return "low", f"the {what} reached agreement on only {facts} in {q} queries"


def _blackbox(m: dict[str, float], what: str, q: int) -> tuple[str | None, str]:
    """Decided on the one-sided 95% lower bounds where the scorer gives them (n probes)."""
    n = int(m.get("n_probes", m.get("blackbox_probes", 0)))
    if "blackbox_agreement" in m:
        a, kappa = m["blackbox_agreement"], m.get("blackbox_kappa")
        lo, k_lo = m.get("agreement_lower", a), m.get("kappa_lower", kappa)
        bound = (f"; 95% lower bounds {lo:.1%}" + ("" if k_lo is None else f", κ {k_lo:.3f}")
                 if "agreement_lower" in m else "")
        return label_level(lo, k_lo), (
            f"the extracted {what} agrees with the endpoint on {a:.1%} of {n} held-out probes"
            f"{_kappa_words(kappa)}{bound} ({q} queries; no truth to compare)")
    if "blackbox_r2" in m:
        r2 = m["blackbox_r2"]
        lo = m.get("r2_lower", r2)
        bound = f", 95% lower bound {lo:.4f}" if "r2_lower" in m else ""
        return r2_level(lo), (f"the extracted {what} reaches R² {r2:.4f} on {n} held-out probes"
                              f"{bound} ({q} queries)")
    return None, (f"the extracted {what} could not be verified: no held-out probe of the deployed model "
                  f"was answered ({q} queries)")
