"""Risk of an extraction artifact, judged on scored functional fidelity only (never on the
attack's own success flag or self-check): what the attacker walks away with is a model whose
outputs match the victim's on held-out inputs (see harness/scoring/model.py for the measures).

Thresholds (every extraction attack, every victim family):
- high: `output_error` ≤ 1e-2 (outputs within 1% of the victim's on held-out inputs: a stolen
  model, whatever its parameter error), or for classifiers `agreement` ≥ 0.95 (the same
  decision on 95% of held-out inputs);
- medium: `output_error` ≤ 0.1, or `agreement` ≥ 0.8;
- low: anything less, or no model at all.
Against an endpoint without truth, the held-out probes' `blackbox_agreement` (classifiers) or
`blackbox_r2` (regression, high ≥ 0.9999, medium ≥ 0.99) stand in.
"""

from __future__ import annotations

HIGH_ERROR, MEDIUM_ERROR = 1e-2, 1e-1
HIGH_AGREEMENT, MEDIUM_AGREEMENT = 0.95, 0.8


def judge_fidelity(m: dict[str, float], what: str = "model") -> tuple[str, str]:
    """(risk, reason) from scored fidelity metrics."""
    q = int(m.get("queries", 0))
    err, agree = m.get("output_error"), m.get("agreement")
    if err is None and agree is None:
        return _blackbox(m, what, q)
    parts = []
    if err is not None:
        parts.append(f"output error {err:.2g}")
    if agree is not None:
        parts.append(f"agreement {agree:.3f}")
    if "param_error" in m and m.get("units_true"):
        parts.append(f"{int(m.get('units_matched', 0))} of {int(m['units_true'])} units, "
                     f"parameter error {m['param_error']:.2g}")
    how = ", ".join(parts) + " on held-out inputs"
    err = float("inf") if err is None else err
    agree = -1.0 if agree is None else agree
    if err <= HIGH_ERROR or agree >= HIGH_AGREEMENT:
        return "high", f"a working copy of the victim was extracted ({how}) in {q} queries"
    if err <= MEDIUM_ERROR or agree >= MEDIUM_AGREEMENT:
        return "medium", f"an approximate {what} was extracted ({how}) in {q} queries"
    return "low", f"the extracted {what} does not reproduce the victim ({how}, {q} queries)"


def _blackbox(m: dict[str, float], what: str, q: int) -> tuple[str, str]:
    if "blackbox_agreement" in m:
        a = m["blackbox_agreement"]
        lvl = "high" if a >= HIGH_AGREEMENT else "medium" if a >= MEDIUM_AGREEMENT else "low"
        return lvl, (f"the extracted {what} agrees with the endpoint on {a:.1%} of held-out probes "
                     f"({q} queries; no truth to compare)")
    if "blackbox_r2" in m:
        r2 = m["blackbox_r2"]
        lvl = "high" if r2 >= 0.9999 else "medium" if r2 >= 0.99 else "low"
        return lvl, f"the extracted {what} reaches R² {r2:.4f} on held-out probes ({q} queries)"
    return "low", f"no {what} was extracted ({q} queries)"
