"""span_nonadaptive — paper 003 (Jayaram, Woodruff, Zhang, ICLR 2020), Sec. 3.1, Alg. 1.

Gradients of the network at Gaussian points g ~ N(0, I_n) all lie in the row span of the first
weight layer A; their span is the recovered subspace. Gradients come from `explain` when the API
offers one, else from forward finite differences through `predict` (Lemma 3.2: O(n) queries
each). The number of samples r = O(k log k / γ) depends on unknowns, so points are drawn in
rounds and sampling stops when the numerical rank (singular values above `rtol` of the largest,
the paper's 1e-5, Sec. 6) has not grown for `patience` rounds *and* over the last
`growth_window` share of the samples, or at the budget.

Deep and bottlenecked networks (paper Sec. 3, Fig. 1–2): gradients of 784→80→6→3-like ReLU nets
are often zero (dead paths) and their rank grows slowly, so a fixed round count would stop early
and under-report what more samples leak; the relative window keeps sampling while the rank still
grows (bounded by `max_samples` and the budget). `zero_gradients` reports the dead share.

A noisy or rounded API blurs the spectrum. When the gap at `rtol` is unclear but the spectrum has
a clear gap (≥ `min_gap`) higher up (a noise floor above rtol), the rank is read at that gap and
the note says so; when no gap is clear anywhere the result is reported as unreliable (partial),
never as a rank.
"""

from __future__ import annotations

import torch
from pydantic import Field

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.gradients import cost_per_point, gradient_rows
from harness.errors import AttackFailed


class SpanParams(Params):
    max_samples: int | None = Field(default=None, ge=1)  # gradient points; default 2·d + 20
    batch: int = Field(default=16, ge=1)  # points per round
    rtol: float = Field(default=1e-5, gt=0, lt=1)  # rank tolerance relative to the largest σ
    patience: int = Field(default=2, ge=1)  # rounds without rank growth before stopping
    fd_step: float | None = Field(default=None, gt=0)  # None = from the answers' precision
    min_gap: float = Field(default=100.0, gt=1)  # σ_r / σ_{r+1} below this = no clear rank
    growth_window: float = Field(default=0.5, gt=0, le=1)  # no rank growth over this share: stop
    max_heldout_residual: float = Field(default=1e-2, gt=0)  # fresh gradients this close to span


def probe_answers(oracle, gen: torch.Generator) -> tuple[float | None, list[str]]:
    """For finite differences: a step matched to what the answers reveal (4 queries: two points,
    each asked twice), and notes. Repeated answers that differ mean output noise of size σ̂: the
    step grows to √σ̂. Answers on a decimal grid 10⁻ᵏ mean rounding: the step grows to 10³⁻ᵏ.
    Returns (step or None for the default, notes); raises AttackFailed when no step ≤ 0.1 fits."""
    need = 4 + 2 * (oracle.info.dim + 1)  # worth it only if two gradient points remain after
    if oracle.affordable(need) < need:
        return None, []
    x = torch.randn(2, oracle.info.dim, generator=gen, dtype=torch.float64).to(oracle.device)
    y = oracle.predict(torch.cat([x, x])).reshape(4, -1).double()
    diff = (y[:2] - y[2:]).abs()
    if float(diff.max()) > 0:
        sigma = float(diff.pow(2).mean().sqrt()) / 2**0.5
        step = sigma**0.5
        note = f"answers are noisy (σ ≈ {sigma:.2g} from repeated queries): step {step:.2g}"
    else:
        k = next((k for k in range(13) if bool(torch.all(torch.round(y, decimals=k) == y))), None)
        if k is None or k >= 9:
            return None, []
        step = 10.0 ** (3 - k)
        note = f"answers are rounded to {k} decimals: step {step:.2g}"
    if step > 0.1:
        raise AttackFailed(f"{note.split(':')[0]}: finite differences would need a step of "
                           f"{step:.2g}, too coarse to read gradients")
    return step, [note]


def heldout_residual(rows: torch.Tensor, last: int, r: int) -> float:
    """Share of the last `last` rows' energy outside the rank-r span of the earlier rows."""
    old, new = rows[:-last], rows[-last:]
    if len(old) == 0 or float(new.norm()) == 0:
        return 0.0
    _, _, vh = torch.linalg.svd(old, full_matrices=False)
    v = vh[:r]
    res = new - (new @ v.T) @ v
    return float(res.norm() / new.norm())


def spectrum(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Singular values and right singular vectors (rows) of a gradient matrix."""
    _, s, vh = torch.linalg.svd(rows, full_matrices=False)
    return s, vh


def numerical_rank(s: torch.Tensor, rtol: float) -> int:
    if len(s) == 0 or float(s[0]) == 0.0:
        return 0
    return int((s > rtol * s[0]).sum())


def gap_at(s: torch.Tensor, r: int) -> float:
    """σ_r / σ_{r+1} (inf when σ_{r+1} = 0; 0 when there is no σ_{r+1} to compare)."""
    if r <= 0 or r >= len(s):
        return float("inf") if r == 0 else 0.0
    return float(s[r - 1] / s[r]) if float(s[r]) > 0 else float("inf")


def gap_rank(s: torch.Tensor, rtol: float, min_gap: float) -> tuple[int, float, str]:
    """(rank, gap, how): the numerical rank at rtol when its gap is clear ("rtol"); else the
    largest clear gap higher in the spectrum ("largest_gap"); else rtol's rank ("unclear")."""
    r = numerical_rank(s, rtol)
    g = gap_at(s, r)
    if r == 0 or g >= min_gap:
        return r, g, "rtol"
    top = s[: min(r + 1, len(s))]
    if len(top) >= 2 and float(top[-1]) > 0:
        ratios = top[:-1] / top[1:]
        i = int(ratios.argmax())
        if float(ratios[i]) >= min_gap:
            return i + 1, float(ratios[i]), "largest_gap"
    return r, g, "unclear"


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
        step, notes = params.fd_step, []
        if step is None and not oracle.offers("explain"):
            step, notes = probe_answers(oracle, ctx.gen)
        rows: list[torch.Tensor] = []
        ranks: list[int] = []
        seen: list[int] = []
        samples, stalled, path, how, gap = 0, 0, "explain", "rtol", 0.0
        s = torch.zeros(0, dtype=torch.float64)
        vh = torch.zeros(0, d, dtype=torch.float64)
        bar = ctx.progress("span: gradient samples", max_samples) if ctx.progress else None
        while samples < max_samples:
            n = min(params.batch, max_samples - samples, oracle.affordable(10**12) // per_point)
            if n <= 0:
                break
            g = torch.randn(n, d, generator=ctx.gen, dtype=torch.float64).to(oracle.device)
            new, path = gradient_rows(oracle, g, step)
            rows.append(new)
            samples += n
            if bar:
                bar.update(n)
            s, vh = spectrum(torch.cat(rows))
            r, gap, how = gap_rank(s, params.rtol, params.min_gap)
            ranks.append(r)
            seen.append(samples)
            if r >= d:
                break
            stalled = stalled + 1 if len(ranks) > 1 and ranks[-1] <= ranks[-2] else 0
            if stalled >= params.patience and self._flat(ranks, seen, params.growth_window):
                break
        if bar:
            bar.close()
        if not rows:
            raise AttackFailed(f"the budget allows no gradient point ({per_point} queries each)")
        r = ranks[-1]
        all_rows = torch.cat(rows)
        zero = float((all_rows.abs().amax(dim=1) == 0).double().mean())
        resid = heldout_residual(all_rows, len(rows[-1]), r) if len(rows) > 1 else 0.0
        metrics = {
            "recovered_rank": float(r),
            "samples": float(samples),
            "queries_per_gradient": float(per_point),
            "spectral_gap": gap,
            "zero_gradients": zero,
            "heldout_residual": resid,
        }
        art = Artifact("subspace", data={"basis": vh[:r].cpu(), "singular_values": s.cpu()},
                       metrics=metrics, notes=[f"gradients via {path}", *notes])
        art.data["curves"] = {"recovered_rank_vs_samples": list(zip(seen, map(float, ranks),
                                                                    strict=True))}
        if how == "largest_gap":
            art.notes.append(f"noise floor above rtol = {params.rtol}: rank read at the largest "
                             f"spectral gap ({gap:.3g})")
        stopped = stalled >= params.patience and self._flat(ranks, seen, params.growth_window)
        if r == 0:
            art.outcome, art.reason = "failed", "all gradients were zero"
        elif r >= d:
            art.outcome = "failed"
            art.reason = ("the gradients span the whole input space: the first layer has full rank, "
                          "or the answers are too noisy to separate a subspace")
            # the attacker stands behind no subspace: report rank 0, keep the numerical rank
            metrics.update(recovered_rank=0.0, numerical_rank=float(r))
            art.data["basis"] = vh[:0].cpu()
        elif how == "unclear":
            art.outcome = "partial"
            art.reason = (f"no clear spectral gap (σ_r/σ_r+1 = {gap:.3g} < {params.min_gap}): "
                          "outputs are noisy or rounded, the rank estimate is unreliable")
        elif resid > params.max_heldout_residual:
            art.outcome = "partial"
            grew = len(ranks) > 1 and ranks[-1] > ranks[-2]
            art.reason = (f"the last {len(rows[-1])} gradients keep {resid:.2g} of their energy "
                          "outside the span of the earlier ones: "
                          + ("the rank is still growing (more samples may leak more)" if grew else
                             "the answers are noisy or rounded, the subspace is unreliable"))
        elif oracle.remaining is not None and samples < max_samples and not stopped:
            art.outcome = "partial"
            art.reason = f"budget exhausted after {samples} gradient points"
        elif samples >= max_samples and not stopped:
            art.notes.append(f"the rank was still growing at max_samples = {max_samples}: more "
                             "samples may leak more")
        return art

    @staticmethod
    def _flat(ranks: list[int], seen: list[int], window: float) -> bool:
        """True when the rank did not grow over the last `window` share of the samples."""
        start = seen[-1] * (1 - window)
        before = [r for r, n in zip(ranks, seen, strict=True) if n <= start]
        return bool(before) and before[-1] >= ranks[-1]

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
