"""One-sided 95% bounds of sample judgments (harness/scoring/bounds.py) against independent
formulas: Clopper–Pearson from scipy's binomtest, κ's bounds bracketing κ and narrowing with n,
R²'s bootstrap bounds bracketing the point estimate."""

import torch
from scipy.stats import binomtest

from harness.scoring.bounds import agreement_bounds, kappa_bounds, label_bounds, r2_bounds
from harness.scoring.model import cohen_kappa


def test_agreement_bounds_are_clopper_pearson():
    for n, k in ((119, 113), (256, 250), (2048, 1950), (50, 50), (50, 0)):
        same = torch.arange(n) < k
        lo, hi = agreement_bounds(same)
        ci = binomtest(k, n).proportion_ci(confidence_level=0.90, method="exact")
        assert abs(lo - ci.low) < 1e-9 and abs(hi - ci.high) < 1e-9


def test_kappa_bounds_bracket_and_narrow_with_more_probes():
    gen = torch.Generator().manual_seed(0)
    widths = []
    for n in (120, 2000):
        a = torch.randint(0, 2, (n,), generator=gen)
        b = torch.where(torch.rand(n, generator=gen) < 0.95, a, 1 - a)
        k = cohen_kappa(a, b)
        lo, hi = kappa_bounds(a, b, k)
        assert lo < k < hi
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 3  # ~1/√n


def test_two_probes_cannot_lift_a_verdict_on_119():
    """95.0% of 119 probes (the issue's KServe V2 case) and 96.6% of 119 both stay below the
    high bar's 95% on the lower bound: the verdict does not flip on two probes."""
    for k in (113, 115):
        a = torch.zeros(119, dtype=torch.long)
        a[:60] = 1
        b = a.clone()
        b[: 119 - k] = 1 - b[: 119 - k]
        m = label_bounds(a, b, cohen_kappa(a, b))
        assert m["n_probes"] == 119 and m["agreement_lower"] < 0.95


def test_r2_bounds_bracket_the_point_estimate():
    gen = torch.Generator().manual_seed(1)
    y = torch.randn(300, generator=gen, dtype=torch.float64)
    yhat = y + 0.3 * torch.randn(300, generator=gen, dtype=torch.float64)
    r2 = 1 - float((y - yhat).pow(2).sum() / (y - y.mean()).pow(2).sum())
    lo, hi = r2_bounds(y, yhat)
    assert lo < r2 < hi and hi - lo < 0.2
