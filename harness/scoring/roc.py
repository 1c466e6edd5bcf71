"""ROC measures of a membership score against the truth (Carlini et al. 2022, Sec. III-B: report
TPR at low FPR on a log-log ROC, not only AUC or accuracy), as pure functions, and the plot.

A higher score means "more likely a member". `tpr_at_fpr(f)` is the largest TPR among the
thresholds whose measured FPR is ≤ f. When f < 1/(non-members) the only such thresholds are the
ones with no false positive at all: the value is then the TPR at zero false positives, and
`measured` is False — the number of non-members says how low an FPR this evaluation can see.

The ROC is computed here rather than with scikit-learn's `roc_curve`: the two agree point for
point, and this one is 3–40× faster at 200–200,000 scores (`python benchmarks/scoring_stats.py`),
which matters where it is called per reference model and per attack.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from harness.scoring.audit import cp_lower, cp_upper


@dataclass
class Roc:
    fpr: np.ndarray  # ascending, from 0 to 1
    tpr: np.ndarray
    tp: np.ndarray  # counts at each threshold
    fp: np.ndarray
    members: int
    nonmembers: int


def roc(scores: np.ndarray, is_member: np.ndarray) -> Roc:
    """The empirical ROC over every distinct threshold (ties broken together)."""
    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(is_member, dtype=bool)
    s = np.where(np.isfinite(s), s, np.where(np.isnan(s), -np.inf, s))
    order = np.argsort(-s, kind="stable")
    s, m = s[order], m[order]
    last = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1]  # the end of each run of equal scores
    tp = np.r_[0, np.cumsum(m)[last]]
    fp = np.r_[0, np.cumsum(~m)[last]]
    n1, n0 = int(m.sum()), int((~m).sum())
    return Roc(fp / max(n0, 1), tp / max(n1, 1), tp, fp, n1, n0)


def auc(r: Roc) -> float:
    """Area under the ROC curve (trapezoids: ties count half)."""
    return float(np.trapezoid(r.tpr, r.fpr))


def advantage(r: Roc) -> float:
    """Membership advantage: max over thresholds of TPR − FPR (Yeom et al. 2018, Def. 4)."""
    return float(np.max(r.tpr - r.fpr))


@dataclass
class AtFpr:
    tpr: float
    tp: int
    fp: int
    measured: bool  # False: the target FPR is below 1/(non-members)
    tpr_low: float  # one-sided Clopper–Pearson bounds at the threshold used
    fpr_high: float


def tpr_at_fpr(r: Roc, target: float, alpha: float = 0.05) -> AtFpr:
    """TPR at the thresholds with measured FPR ≤ target, with one-sided (1 − alpha) bounds."""
    ok = r.fp <= target * r.nonmembers + 1e-9
    i = int(np.nonzero(ok)[0][-1])
    return AtFpr(float(r.tpr[i]), int(r.tp[i]), int(r.fp[i]), target * r.nonmembers >= 1,
                 cp_lower(int(r.tp[i]), r.members, alpha), cp_upper(int(r.fp[i]), r.nonmembers, alpha))


def mann_whitney_p(scores: np.ndarray, is_member: np.ndarray) -> float:
    """One-sided p-value that members score no higher than non-members (AUC = ½ under H0)."""
    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(is_member, dtype=bool)
    if m.all() or not m.any():
        return 1.0
    s = np.nan_to_num(s, nan=-np.inf, posinf=np.finfo(float).max, neginf=-np.finfo(float).max)
    return float(stats.mannwhitneyu(s[m], s[~m], alternative="greater").pvalue)


def save_roc_plot(curves: dict[str, Roc], path: Path, title: str) -> Path:
    """Log-log ROC (the LiRA paper's Fig. style) with the chance line and the FPR floor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    floor = 1.0
    for label, r in curves.items():
        lo = 1.0 / max(r.nonmembers, 1)
        floor = min(floor, lo)
        ax.plot(np.maximum(r.fpr, lo / 2), np.maximum(r.tpr, lo / 2), label=f"{label} (AUC {auc(r):.3f})")
    grid = np.logspace(np.log10(floor / 2), 0, 50)
    ax.plot(grid, grid, "k:", lw=0.8, label="chance")
    ax.axvline(floor, color="grey", lw=0.6, ls="--", label=f"FPR floor 1/{int(round(1 / floor))}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(floor / 2, 1)
    ax.set_ylim(floor / 2, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    # fixed margins for this one fixed-size axes: tight_layout measured every text (0.1 s a plot)
    fig.subplots_adjust(left=0.16, right=0.96, bottom=0.12, top=0.92)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
