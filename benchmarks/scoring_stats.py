"""The membership scorer's statistics against the libraries that also compute them, measured in
one run: leakmeter's ROC (harness/scoring/roc.py: counts per distinct threshold, AUC by
trapezoids) beside scikit-learn's `roc_curve` + `roc_auc_score`, and the threshold audit's
Clopper–Pearson bounds (SciPy's `binomtest(...).proportion_ci(method="exact")`, cached) beside
the Beta quantiles written out. Both sides give the same numbers (checked here); the table says
which is faster at the sizes leakmeter scores (members + non-members of one evaluation set).

    python benchmarks/scoring_stats.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import time


def _best(fn, repeat: int) -> float:
    """The fastest of `repeat` calls, in milliseconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    from harness.core.threads import pin_threads

    pin_threads(1)
    import numpy as np
    from scipy import stats
    from sklearn.metrics import roc_auc_score, roc_curve

    from harness.scoring import audit
    from harness.scoring.roc import auc, roc

    print("ROC + AUC of one membership score (ms, best of repeats; ties: 1 in 4 scores rounded)")
    print(f"{'points':>8}  {'leakmeter':>10}  {'sklearn':>10}  {'ratio':>6}  same")
    rng = np.random.default_rng(0)
    for n in (200, 898, 2000, 20000, 200000):
        s = rng.normal(size=n) + 0.3 * (np.arange(n) < n // 2)
        s[::4] = np.round(s[::4], 1)
        m = np.arange(n) < n // 2
        ours = _best(lambda s=s, m=m: auc(roc(s, m)), args.repeat)
        theirs = _best(lambda s=s, m=m: (roc_curve(m, s, drop_intermediate=False), roc_auc_score(m, s)),
                       args.repeat)
        r = roc(s, m)
        fpr, tpr, _ = roc_curve(m, s, drop_intermediate=False)
        same = (np.allclose(r.fpr, fpr) and np.allclose(r.tpr, tpr)
                and abs(auc(r) - roc_auc_score(m, s)) < 1e-12)
        print(f"{n:>8}  {ours:>10.3f}  {theirs:>10.3f}  {theirs / ours:>5.1f}×  {same}")

    print("\nthreshold audit: 64 thresholds, 449 + 449 points (ms; the Bonferroni bounds of each)")
    mem, non = rng.normal(0.3, 1, 449), rng.normal(0, 1, 449)
    grid = audit.threshold_grid(np.r_[mem, non])

    def beta_written_out():
        a = 0.05 / (2 * len(grid))
        fp = 449 - np.searchsorted(np.sort(non), grid)
        return [float(stats.beta.ppf(1 - a, k + 1, 449 - k)) if k < 449 else 1.0 for k in fp]

    def scipy_exact(cold: bool):
        if cold:
            audit._exact.cache_clear()
        return audit.threshold_audit(mem, non, grid, 1e-5)

    print(f"{'Beta quantiles written out':<34} {_best(beta_written_out, args.repeat):8.2f}")
    print(f"{'binomtest, first call (no cache)':<34} {_best(lambda: scipy_exact(True), args.repeat):8.2f}")
    print(f"{'binomtest, cached':<34} {_best(lambda: scipy_exact(False), args.repeat):8.2f}")


if __name__ == "__main__":
    main()
