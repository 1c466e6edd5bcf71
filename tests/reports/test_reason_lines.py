"""Every attack's one-line reason says what its numbers show: each judge is rendered over many
synthetic metric sets, and the words are checked against the numbers by rules written here,
independently of the judges (a level recomputed from the documented bars, "beyond chance" only
at p < 0.05, "dead network" only when every gradient was zero, printed figures equal to the
metrics)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from harness.attacks import registry
from harness.attacks.base import Artifact

N = 300  # metric sets per attack


def _u(rng, lo, hi):
    return float(rng.uniform(lo, hi))


def _p(rng):
    return float(10 ** rng.uniform(-8, 0))


def membership_metrics(rng):
    n0 = int(rng.choice([50, 500, 5000]))
    lr = float(rng.choice([0.0, _u(rng, 0, 1), _u(rng, 1, 5), _u(rng, 5, 200)]))
    t1, t01 = _u(rng, 0, 0.3), _u(rng, 0, 0.1)
    return {"auc": _u(rng, 0.4, 1.0), "nonmembers": float(n0), "tpr_at_fpr_0.01": t1,
            "tpr_at_fpr_0.001": t01, "tpr_at_fpr_0.001_measured": float(rng.integers(0, 2)),
            "tpr_at_fpr_0.01_tpr_low": t1 * _u(rng, 0, 1), "tpr_at_fpr_0.001_tpr_low": t01 * _u(rng, 0, 1),
            "lr_low": lr, "mannwhitney_p": _p(rng)}


def check_membership(m, risk, why):
    tpr_low = max(m["tpr_at_fpr_0.01_tpr_low"], m["tpr_at_fpr_0.001_tpr_low"])
    identifiable = m["lr_low"] >= 5 and tpr_low >= 0.01
    # issue 34: medium needs a finding a re-draw keeps: z ≥ z(1%) + z(90%)·√2 ≈ 4.139 (p ≈ 1.75e-5)
    medium_p = stats.norm.sf(stats.norm.isf(0.01) + stats.norm.isf(0.1) * 2 ** 0.5)
    assert 1.7e-5 < medium_p < 1.8e-5
    expected = ("high" if identifiable else
                "medium" if m["mannwhitney_p"] < medium_p or m["lr_low"] >= 2 else "low")
    assert risk == expected, (m, risk, why)
    if "beyond what a re-draw undoes" in why:
        assert m["mannwhitney_p"] < medium_p, why
    if "not decisive" in why:
        assert risk == "low" and (m["mannwhitney_p"] < 0.01 or m["lr_low"] > 1), why
    if "identifiable" in why:
        assert identifiable, why
    assert f"AUC {m['auc']:.3f}" in why
    if "Mann–Whitney p" in why:
        assert f"Mann–Whitney p {m['mannwhitney_p']:.2g}" in why, why


def extraction_metrics(rng):
    m = {"queries": float(rng.integers(1, 10**6))}
    if rng.random() < 0.8:
        m["output_error"] = float(10 ** rng.uniform(-9, 0.5))
        m["output_r2"] = float(rng.choice([_u(rng, -1, 0.9), _u(rng, 0.9, 0.99), _u(rng, 0.99, 1)]))
    if rng.random() < 0.8 or "output_error" not in m:
        m["agreement"] = _u(rng, 0.5, 1.0)
        m["kappa"] = min(m["agreement"], _u(rng, -0.1, 1.0))
    return m


def extraction_level(m):
    lv = ["low"]
    if "output_error" in m:
        e, r2 = m["output_error"], m["output_r2"]
        lv.append("high" if e <= 1e-2 and r2 >= 0.99 else "medium" if e <= 0.1 and r2 >= 0.9 else "low")
    if "agreement" in m:
        a, k = m["agreement"], m["kappa"]
        lv.append("high" if a >= 0.95 and k >= 0.9 else "medium" if a >= 0.8 and k >= 0.6 else "low")
    top = max(lv, key=["low", "medium", "high"].index)
    if m.get("output_r2", 0.0) < 0 and top == "high":  # labels only: never "a working copy"
        return "medium"
    return top


def check_extraction(m, risk, why):
    assert risk == extraction_level(m), (m, risk, why)
    assert ("a working copy" in why) == (risk == "high"), why
    if "agreement" in m:
        assert f"agreement {m['agreement']:.3f}" in why and f"κ {m['kappa']:.3f}" in why, why
    if "output_error" in m:
        assert f"output error {m['output_error']:.2g}" in why, why


def surrogate_metrics(rng):
    f = _u(rng, 0.3, 1.0)
    return {"queries": float(rng.integers(1, 5000)), "fidelity": f, "kappa": min(f, _u(rng, -0.1, 1)),
            "queries_to_95": 100.0}


def check_surrogate(m, risk, why):
    f, k = m["fidelity"], m["kappa"]
    expected = "high" if f >= 0.95 and k >= 0.9 else "medium" if f >= 0.8 and k >= 0.6 else "low"
    assert risk == expected, (m, risk, why)
    assert f"{f:.1%}" in why and f"κ {k:.3f}" in why, why


def span_metrics(rng):
    d = int(rng.choice([16, 64, 784]))
    k = int(rng.choice([d // 4, d // 2, d]))
    r = int(rng.integers(0, d + 1))
    return {"input_dim": float(d), "true_rank": float(k), "recovered_rank": float(r),
            "max_principal_angle_deg": float(10 ** rng.uniform(-6, 2)),
            "min_energy_in_span": _u(rng, 0.9, 1.0), "queries": 100.0}


def check_span(m, risk, why):
    d, k, r = (int(m[x]) for x in ("input_dim", "true_rank", "recovered_rank"))
    whole = k >= d or r >= d
    assert ("whole input space" in why) == whole, (m, why)
    if whole:
        assert risk == "low", why
    if risk == "high":
        assert not whole and r >= k, (m, why)
        assert "full first-layer span" in why, why
    if "full first-layer span" in why:
        assert risk == "high" and f"rank {k}" in why


def obfuscation_metrics(rng):
    n = int(rng.choice([32, 200, 300, 1000]))
    m = {"images": float(n)}
    for key in ("1", "0_5"):
        kept = float(rng.choice([1.0, _u(rng, 0.9, 1.0), _u(rng, 0, 0.9)]))
        m[f"kept_at_{key}"] = kept
        m[f"kept_low_at_{key}"] = max(0.0, kept - _u(rng, 0, 0.05)) if kept < 1 else 0.05 ** (1 / n)
        m[f"random_kept_at_{key}"] = _u(rng, 0, 1)
        m[f"control_p_at_{key}"] = _p(rng)
    return m


def check_obfuscation(m, risk, why):
    high = m["kept_low_at_1"] >= 0.99 and m["control_p_at_1"] < 0.05
    medium = m["kept_low_at_0_5"] >= 0.9 and m["control_p_at_0_5"] < 0.05
    assert risk == ("high" if high else "medium" if medium else "low"), (m, risk, why)
    assert f"of {int(m['images'])} predictions" in why, why
    if risk != "low":
        assert "McNemar p" in why


def dp_audit_metrics(rng):
    m = membership_metrics(rng)
    m.update(epsilon_lower=_u(rng, 0, 5), epsilon_perfect=_u(rng, 0, 8), audit_delta=1e-5,
             epsilon_lower_threshold=_u(rng, 0, 5))
    if rng.random() < 0.5:
        m["epsilon_claimed"] = _u(rng, 0.1, 8)
    return m


def check_dp_audit(m, risk, why):
    if "epsilon_claimed" not in m:
        check_membership(m, risk, why.removeprefix("no DP claim: ").split("; the deployed")[0])
        assert "DP claim violated" not in why
        return
    violated = m["epsilon_lower"] > m["epsilon_claimed"]
    assert ("DP claim violated" in why) == violated and (risk == "high") == violated, (m, why)
    if not violated:  # an audit that could not have shown a violation is no "low" (incomplete)
        untestable = m["epsilon_perfect"] <= m["epsilon_claimed"]
        assert (risk is None) == untestable and ("untested" in why) == untestable, (m, risk, why)


def reconstruction_metrics(rng):
    t = int(rng.integers(1, 50))
    return {"success_rate": 0.5, "reconstructed": float(rng.integers(0, t + 1)), "targets": float(t),
            "success_ci_low": 0.1, "success_ci_high": 0.9, "rel_error_max": 1e-3}


def check_reconstruction(m, risk, why):
    k, t = int(m["reconstructed"]), int(m["targets"])
    if k:
        assert f"{k} of {t}" in why, why
    assert (risk == "low") == (k == 0), (m, risk, why)


def logit_metrics(rng):
    vocab, r = int(rng.integers(50, 5000)), int(rng.integers(0, 200))
    m = {"queries": float(rng.integers(1, 10**6)), "vocab": float(vocab), "hidden_dim": float(r)}
    if rng.random() < 0.5:  # the truth is known (a local victim)
        m["hidden_dim_true"] = float(rng.choice([r, r + 1, r + 7]))
        m["final_layer_rel_error"] = float(10 ** rng.uniform(-6, 0))
    else:  # an endpoint: fresh prompts outside the span
        m["subspace_residual"] = float(10 ** rng.uniform(-6, 0))
    return m


def logit_level(m, lm=False):
    """The contract's rule, written apart: high when the layer is recovered (error or residual
    ≤ 1e-2), medium for the width alone (or, on a language model, h−1: a LayerNorm shift's
    direction), else low. The generic test's artifact is not a language model's."""
    r, vocab, true = m["hidden_dim"], m["vocab"], m.get("hidden_dim_true")
    if r == 0 or max(r, true or 0) >= vocab - 1:
        return "low"
    if true is not None:
        if r == true:
            return "high" if m["final_layer_rel_error"] <= 1e-2 else "medium"
        return "medium" if lm and r == true - 1 else "low"
    res = m["subspace_residual"]
    return "high" if res <= 1e-2 else "medium" if res <= 1e-1 else "low"


def check_logits(m, risk, why):
    assert risk == logit_level(m), (m, risk, why)
    assert f"{int(m['queries'])} queries" in why, why
    if risk == "high" and "final_layer_rel_error" in m:
        assert f"relative error {m['final_layer_rel_error']:.2g}" in why, why


CASES = {
    "logit_subspace": (logit_metrics, check_logits),
    "extraction": (extraction_metrics, check_extraction),
    "membership": (membership_metrics, check_membership),
    "span": (span_metrics, check_span),
    "surrogate": (surrogate_metrics, check_surrogate),
    "obfuscation": (obfuscation_metrics, check_obfuscation),
    "dp_audit": (dp_audit_metrics, check_dp_audit),
    "reconn": (reconstruction_metrics, check_reconstruction),
    "glm_closed_form": (reconstruction_metrics, check_reconstruction),
}
SPECIFIC = {"surrogate", "obfuscation", "dp_audit", "reconn", "glm_closed_form", "logit_subspace"}
OWN_RULES = {"span_threshold": None, "kkt": None, "informed_mia": None}  # checked below / own tests


def case_of(name: str, family: str):
    if name in SPECIFIC:
        return CASES[name]
    if name in OWN_RULES:
        return None
    return CASES.get(family)


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_reason_line_agrees_with_its_numbers(name):
    cls = registry()[name]
    case = case_of(name, cls.family)
    if case is None:
        pytest.skip(f"{name}: judged by its own rules (tests of its module)")
    make, check = case
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    art = Artifact("x", data={"task": "multiclass"})
    for _ in range(N):
        m = make(rng)
        risk, why = cls().judge(dict(m), art)
        # dp_audit alone may leave no level: an audit that could not have caught a violation
        assert (risk in ("low", "medium", "high") or name == "dp_audit") and why, (name, m, risk, why)
        check(m, risk, why)


def test_span_threshold_reasons_follow_energy_and_the_whole_space():
    cls = registry()["span_threshold"]
    rng = np.random.default_rng(3)
    for _ in range(N):
        m = span_metrics(rng)
        risk, why = cls().judge(m, Artifact("subspace"))
        check_span_whole = int(m["true_rank"]) >= int(m["input_dim"]) or \
            int(m["recovered_rank"]) >= int(m["input_dim"])
        assert ("whole input space" in why) == check_span_whole, why
        if risk == "high":
            assert m["min_energy_in_span"] >= 0.999 and not check_span_whole


def test_an_unverified_artifact_has_no_risk_level():
    """Nothing verified (an endpoint that answered no held-out probe) is never low: no level."""
    for name in ("gradient_exact", "surrogate", "span_nonadaptive"):
        risk, why = registry()[name]().judge({"queries": 10.0, "recovered_rank": 3.0},
                                             Artifact("x", data={"task": "multiclass"}))
        assert risk is None and ("verified" in why), (name, why)


def test_no_dead_network_without_every_gradient_zero():
    from harness.attacks.span.nonadaptive import SpanNonAdaptive
    from harness.core.gradients import AnswerNoise

    rounded = AnswerNoise(sigma=1e-3, scale=1.0, rounding=0.01)
    clean = AnswerNoise(sigma=1e-16, scale=1.0)
    for zero in (0.0, 0.5, 0.99, 1.0):
        art = Artifact("subspace", metrics={"zero_gradients": zero})
        why_r = SpanNonAdaptive._why_no_rank(art, rounded)
        assert "dead network" not in why_r and "rounded to 0.01" in why_r
        for noise in (clean, None):
            why = SpanNonAdaptive._why_no_rank(art, noise)
            assert ("dead network" in why) == (zero >= 1.0), (zero, why)
            # declared not a network (a tree ensemble): never "a dead network"
            assert "dead network" not in SpanNonAdaptive._why_no_rank(art, noise, network=False)
            assert ("dead network" in SpanNonAdaptive._why_no_rank(art, noise, network=True)) == (zero >= 1.0)
