"""Scoring membership attacks against the truth.

- kind "membership" — the informed membership game (paper 004 Alg. 2) against its secret bits:
  success_rate with a 95% Clopper–Pearson interval; for a DP victim `dp_bound`, the largest
  success any attack may have: the game's two datasets differ by a replacement (two add/remove
  steps), so the add/remove guarantee (ε, δ) gives (e^{2ε} + (1 + e^ε)δ)/(1 + e^{2ε});
  `epsilon_lower` = the add/remove ε the interval's lower end rules out.
- kind "membership_scores" — a score per evaluation point (members and as many non-members):
  `auc`, `tpr_at_fpr_0.01`, `tpr_at_fpr_0.001` (with `_measured` = 0 when the FPR is below
  1/`nonmembers`: then it is the TPR at zero false positives), their 95% one-sided bounds
  (`..._tpr_low`, `..._fpr_high`), `advantage`, `mannwhitney_p`, `lr_low` (the largest
  TPR_low / FPR_high at the two low-FPR thresholds, a likelihood ratio a statistician signs),
  `epsilon_lower` (the threshold audit of these scores at 95%, δ = the victim's or 1e-5) with
  `epsilon_perfect`, `auc_ci_low` / `auc_ci_high` (the AUC's 95% interval, Hanley–McNeil), and
  a log-log ROC plot `roc.png` in the attack's folder.
- kind "dp_audit" — the same ROC measures, plus the ε lower bounds of harness/scoring/audit.py:
  the threshold audit on the evaluation set and the one-run canary audit, each at α = 2.5% so that
  `epsilon_lower` (their max) holds at 95%; `epsilon_perfect` beside it; `epsilon_accounted`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from harness.scoring import dp_audit_parts, scorer
from harness.scoring.audit import (
    clopper_pearson,
    game_epsilon,
    game_success_bound,
    one_run_audit,
    threshold_audit,
    threshold_grid,
)
from harness.scoring.roc import advantage, auc, mann_whitney_p, roc, save_roc_plot, tpr_at_fpr

TARGET_FPRS = (0.01, 0.001)
SUMMARY = ("auc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.001", "advantage", "lr_low")


@scorer("membership")
def score_membership(art, truth, info) -> dict[str, float]:
    b = getattr(truth, "choice", None)
    if b is None:
        return {}
    guess = torch.as_tensor(art.data["guess"]).cpu()
    b = b.cpu()[: len(guess)]
    k, n = int((guess == b).sum()), len(guess)
    lo, hi = clopper_pearson(k, n)
    rec = getattr(getattr(truth, "base", None), "train_record", None)
    dp = getattr(rec, "dp", None)
    delta = dp.delta if dp is not None else 0.0
    out = {"games": float(n), "success_rate": k / n if n else 0.0, "success_ci_low": lo,
           "success_ci_high": hi, "epsilon_lower": game_epsilon(lo, delta)}
    if dp is not None:
        out["dp_bound"] = game_success_bound(dp.epsilon, dp.delta)
    return out


def roc_metrics(scores: np.ndarray, is_member: np.ndarray, alpha: float = 0.05) -> dict[str, float]:
    """The ROC measures of one score vector (bounds at alpha / 2 each: two target FPRs)."""
    r = roc(scores, is_member)
    out = {"auc": auc(r), "advantage": advantage(r), "members": float(r.members),
           "nonmembers": float(r.nonmembers), "fpr_floor": 1.0 / max(r.nonmembers, 1),
           "mannwhitney_p": mann_whitney_p(scores, is_member)}
    out["auc_ci_low"], out["auc_ci_high"] = auc_interval(out["auc"], r.members, r.nonmembers, alpha)
    lr = 0.0
    for f in TARGET_FPRS:
        at = tpr_at_fpr(r, f, alpha / len(TARGET_FPRS))
        key = f"tpr_at_fpr_{f:g}"
        out.update({key: at.tpr, f"{key}_measured": float(at.measured), f"{key}_tpr_low": at.tpr_low,
                    f"{key}_fpr_high": at.fpr_high, f"{key}_tp": float(at.tp), f"{key}_fp": float(at.fp)})
        lr = max(lr, at.tpr_low / at.fpr_high if at.fpr_high > 0 else 0.0)
    out["lr_low"] = lr
    return out


def auc_interval(a: float, n1: int, n0: int, alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided (1 − alpha) interval of an AUC from n1 members and n0 non-members (Hanley &
    McNeil 1982's standard error, normal approximation), clipped to [0, 1]."""
    if n1 == 0 or n0 == 0:
        return 0.0, 1.0
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n0 - 1) * (q2 - a * a)) / (n1 * n0)
    half = float(stats.norm.isf(alpha / 2)) * math.sqrt(max(var, 0.0))
    return max(0.0, a - half), min(1.0, a + half)


def _is_member(art, truth) -> np.ndarray | None:
    mem = getattr(truth, "is_member", None)
    if mem is None or len(mem) == 0:
        return None
    return np.asarray(mem, dtype=bool)[: len(art.data["scores"])]


def _plot(art, is_member: np.ndarray, title: str) -> None:
    outdir = art.data.get("outdir")
    if outdir is None:
        return
    curves = {name: roc(np.asarray(s), is_member)
              for name, s in art.data.get("roc_scores", {"score": art.data["scores"]}).items()}
    try:
        art.files["roc"] = save_roc_plot(curves, Path(outdir) / "roc.png", title)
    except Exception as exc:  # noqa: BLE001 - a plot must not sink the scores
        art.notes.append(f"ROC plot failed: {type(exc).__name__}: {exc}")


@scorer("membership_scores")
def score_membership_scores(art, truth, info) -> dict[str, float]:
    mem = _is_member(art, truth)
    if mem is None:
        return {}
    scores = np.asarray(art.data["scores"], dtype=np.float64)
    out = roc_metrics(scores, mem)
    # the ε these scores rule out at 95% (threshold audit, Bonferroni over a 64-quantile grid)
    _, dp_delta = _accounted(truth)
    th = threshold_audit(scores[mem], scores[~mem], threshold_grid(scores), dp_delta or 1e-5)
    out.update(epsilon_lower=th.epsilon_lower, epsilon_perfect=th.perfect)
    for name, extra in art.data.get("extra_scores", {}).items():  # variants beside the main score
        em = roc_metrics(np.asarray(extra, dtype=np.float64), mem)
        out.update({f"{name}_{k}": em[k] for k in SUMMARY})
    _plot(art, mem, art.data.get("title", "membership ROC"))
    return out


def _accounted(truth) -> tuple[float | None, float | None]:
    rec = getattr(getattr(truth, "base", None), "train_record", None)
    dp = getattr(rec, "dp", None)
    return (dp.epsilon, dp.delta) if dp is not None else (None, None)


@scorer("dp_audit")
def score_dp_audit(art, truth, info) -> dict[str, float]:
    """ε lower bounds (harness/scoring/audit.py) from the audit's scores and the secret bits."""
    delta = float(art.data["delta"])
    alpha = float(art.data.get("alpha", 0.05))
    parts = 0
    out: dict[str, float] = {"audit_delta": delta}
    mem = _is_member(art, truth) if "scores" in art.data else None
    canary_in = getattr(truth, "canary_in", None)
    use_canaries = canary_in is not None and art.data.get("canary_scores") is not None
    n_parts = int(mem is not None) + int(use_canaries) + dp_audit_parts.n_parts(art, truth)
    if n_parts == 0:
        return {}
    a = alpha / n_parts
    lower, perfect = 0.0, 0.0
    if mem is not None:
        scores = np.asarray(art.data["scores"], dtype=np.float64)
        out.update(roc_metrics(scores, mem))
        _plot(art, mem, art.data.get("title", "dp_audit ROC"))
        sets = art.data.get("audit_scores") or {"score": scores}
        grids = art.data["thresholds"]
        grids = grids if isinstance(grids, dict) else {"score": grids}
        truth_all = np.asarray(truth.is_member, dtype=bool)
        ths = {}
        for k, v in sets.items():  # α split between the attacks' score sets (Bonferroni)
            v = np.asarray(v, dtype=np.float64)
            mk = truth_all[: len(v)]
            ths[k] = threshold_audit(v[mk], v[~mk], np.asarray(grids[k]), delta, a / len(sets))
        best = max(ths, key=lambda k: ths[k].epsilon_lower)
        th = ths[best]
        th.perfect = max(t.perfect for t in ths.values())
        out.update({f"epsilon_lower_{k}": t.epsilon_lower for k, t in ths.items()})
        out.update(epsilon_lower_threshold=th.epsilon_lower, epsilon_perfect_threshold=th.perfect,
                   threshold_grid=float(th.grid), threshold_fp=float(th.fp), threshold_fn=float(th.fn))
        lower, perfect = max(lower, th.epsilon_lower), max(perfect, th.perfect)
        parts += 1
    if use_canaries:
        cs = np.asarray(art.data["canary_scores"], dtype=np.float64)
        inc = np.asarray(canary_in, dtype=bool)[: len(cs)]
        grid = [tuple(g) for g in art.data["guess_grid"]]
        one = one_run_audit(cs, inc, grid, delta, a)
        out.update(dp_audit_parts.one_run_estimate(art, cs, inc, grid, delta, a))
        out.update(epsilon_lower_one_run=one.epsilon_lower, epsilon_perfect_one_run=one.perfect,
                   canaries=float(one.canaries), one_run_guesses=float(one.guesses),
                   one_run_correct=float(one.correct))
        lower, perfect = max(lower, one.epsilon_lower), max(perfect, one.perfect)
        cdp = getattr(truth, "canary_dp", None)
        if cdp is not None:
            out["epsilon_accounted_canary_run"] = float(cdp.epsilon)
        parts += 1
    analysis = art.data.get("analysis", "clopper-pearson")
    extra, e_x, p_x = dp_audit_parts.score_parts(art, truth, delta, a, analysis)  # white/black box
    out.update(extra)
    lower, perfect, parts = max(lower, e_x), max(perfect, p_x), parts + dp_audit_parts.n_parts(art, truth)
    out.update(epsilon_lower=lower, epsilon_perfect=perfect, audit_confidence=1 - alpha, runs=float(
        art.data.get("runs", 1)))
    eps, _ = _accounted(truth)
    rec = getattr(getattr(truth, "base", None), "train_record", None)
    acc = dp_audit_parts.accountant_epsilon(getattr(rec, "dp", None), delta)  # at the audit's δ
    if acc is not None:
        out["epsilon_accountant"] = acc
    if eps is not None:
        out["epsilon_accounted"] = float(eps)
    if "epsilon_claimed" in art.metrics and not math.isnan(art.metrics["epsilon_claimed"]):
        out["epsilon_claimed"] = float(art.metrics["epsilon_claimed"])
    return out

