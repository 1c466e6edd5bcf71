"""span_nonadaptive — paper 003 (Jayaram, Woodruff, Zhang, ICLR 2020), Sec. 3.1, Alg. 1.

Gradients of the network at Gaussian points g ~ N(0, I_n) all lie in the row span of the first
weight layer A; their span is the recovered subspace. Gradients come from `explain` when the API
offers one, else from forward finite differences through `predict` (Lemma 3.2: O(n) queries
each). The number of samples r = O(k log k / γ) depends on unknowns, so points are drawn in
rounds and sampling stops when the numerical rank (singular values above `rtol` of the largest,
the paper's 1e-5, Sec. 6) has not grown for `patience` rounds, or at the budget.

A noisy or rounded API blurs the spectrum: when no clear gap separates the kept singular values
from the rest (ratio below `min_gap`), the result is reported as unreliable, not as a rank.
"""

from __future__ import annotations

import torch

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.gradients import cost_per_point, gradient_rows
from harness.errors import AttackFailed


class SpanParams(Params):
    max_samples: int | None = None  # gradient points; default 2·d + 20
    batch: int = 16  # points per round
    rtol: float = 1e-5  # rank tolerance relative to the largest singular value
    patience: int = 2  # rounds without rank growth before stopping
    fd_step: float | None = None  # finite-difference step; None = from the answers' precision
    min_gap: float = 100.0  # σ_r / σ_{r+1} below this = no clear rank


def spectrum(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Singular values and right singular vectors (rows) of a gradient matrix."""
    _, s, vh = torch.linalg.svd(rows, full_matrices=False)
    return s, vh


def numerical_rank(s: torch.Tensor, rtol: float) -> int:
    if len(s) == 0 or float(s[0]) == 0.0:
        return 0
    return int((s > rtol * s[0]).sum())


@register
class SpanNonAdaptive(Attack):
    name = "span_nonadaptive"
    family = "span"
    needs = frozenset({"prediction", "gradient", "smoothgrad", "whitebox"})
    paper = "003 Sec. 3.1, Alg. 1"
    summary = "span of the first layer from gradients at Gaussian points"
    Params = SpanParams

    def skip_reason(self, info):
        if info.interface == "prediction" and info.output == "label":
            return "needs gradients or real-valued predictions; the API returns labels only"
        return super().skip_reason(info)

    def run(self, oracle, params: SpanParams, ctx) -> Artifact:
        d = oracle.info.dim
        per_point = cost_per_point(oracle)
        max_samples = params.max_samples or 2 * d + 20
        rows: list[torch.Tensor] = []
        ranks: list[int] = []
        samples, stalled, path = 0, 0, "explain"
        s = torch.zeros(0, dtype=torch.float64)
        vh = torch.zeros(0, d, dtype=torch.float64)
        bar = ctx.progress("span: gradient samples", max_samples) if ctx.progress else None
        while samples < max_samples:
            n = min(params.batch, max_samples - samples, oracle.affordable(10**12) // per_point)
            if n <= 0:
                break
            g = torch.randn(n, d, generator=ctx.gen, dtype=torch.float64).to(oracle.device)
            new, path = gradient_rows(oracle, g, params.fd_step)
            rows.append(new)
            samples += n
            if bar:
                bar.update(n)
            s, vh = spectrum(torch.cat(rows))
            ranks.append(numerical_rank(s, params.rtol))
            if ranks[-1] >= d:
                break
            stalled = stalled + 1 if len(ranks) > 1 and ranks[-1] <= ranks[-2] else 0
            if stalled >= params.patience:
                break
        if bar:
            bar.close()
        if not rows:
            raise AttackFailed(f"the budget allows no gradient point ({per_point} queries each)")
        r = ranks[-1]
        gap = float(s[r - 1] / s[r]) if 0 < r < len(s) and s[r] > 0 else float("inf")
        metrics = {
            "recovered_rank": float(r),
            "samples": float(samples),
            "queries_per_gradient": float(per_point),
            "spectral_gap": gap,
        }
        art = Artifact("subspace", data={"basis": vh[:r].cpu(), "singular_values": s.cpu()},
                       metrics=metrics, notes=[f"gradients via {path}"])
        if r == 0:
            art.outcome, art.reason = "failed", "all gradients were zero"
        elif r >= d:
            art.outcome = "failed"
            art.reason = ("the gradients span the whole input space: the first layer has full rank, "
                          "or the answers are too noisy to separate a subspace")
        elif gap < params.min_gap:
            art.outcome = "partial"
            art.reason = (f"no clear spectral gap (σ_r/σ_r+1 = {gap:.3g} < {params.min_gap}): "
                          "outputs are noisy or rounded, the rank estimate is unreliable")
        elif oracle.remaining is not None and samples < max_samples and stalled < params.patience \
                and r < d:
            art.outcome = "partial"
            art.reason = f"budget exhausted after {samples} gradient points"
        return art

    def judge(self, m, artifact):
        q = int(m.get("queries", 0))
        if "true_rank" not in m:
            r = int(m["recovered_rank"])
            lvl = "high" if artifact.outcome == "ok" and r > 0 else "medium"
            return lvl, f"a rank-{r} subspace was recovered in {q} queries (no truth to compare)"
        r, k, ang = int(m["recovered_rank"]), int(m["true_rank"]), m["max_principal_angle_deg"]
        if r > k:
            return "low", (f"the recovered rank {r} exceeds the true rank {k}: noise, not the span "
                           f"({q} queries)")
        if r >= k and ang < 1.0:
            return "high", f"the full first-layer span (rank {k}) leaked in {q} queries"
        if r >= k / 2 and ang < 5.0:
            return "medium", f"{r} of {k} span dimensions leaked in {q} queries (angle {ang:.2g}°)"
        return "low", f"span recovery got {r} of {k} dimensions, max angle {ang:.2g}° ({q} queries)"
