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

A noisy or rounded API blurs the spectrum. Through `predict`, the answers' noise σ is estimated
from queries (repeats and second differences, `estimate_noise`; never the victim's declared
dtype), the step is √(σ/|F|) of the input scale, and singular values below the noise floor of
the finite-difference matrix (3·√2·σ/s·(√rows + √d)) do not count (float32 answers: the rank
is read above their noise instead of "the whole input space"). When the gap at `rtol` is
unclear but a clear gap (≥ `min_gap`) lies higher up, the rank is read there; when no gap is
clear anywhere the attack ends with `stopped_by: precision` and the subspace it has (scored as
usual). The subspace so far is kept (`ctx.keep`) after every round.
"""

from __future__ import annotations

import torch
from pydantic import Field

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.gradients import AnswerNoise, cost_per_point, estimate_noise, fd_step, gradient_rows
from harness.errors import AssumptionViolated, PrecisionLimit


class SpanParams(Params):
    max_samples: int | None = Field(default=None, ge=1)  # gradient points; default 2·d + 20
    batch: int = Field(default=16, ge=1)  # points per round
    rtol: float = Field(default=1e-5, gt=0, lt=1)  # rank tolerance relative to the largest σ
    patience: int = Field(default=2, ge=1)  # rounds without rank growth before stopping
    fd_step: float | None = Field(default=None, gt=0)  # None = from the answers' precision
    min_gap: float = Field(default=100.0, gt=1)  # σ_r / σ_{r+1} below this = no clear rank
    growth_window: float = Field(default=0.5, gt=0, le=1)  # no rank growth over this share: stop
    max_heldout_residual: float = Field(default=1e-2, gt=0)  # fresh gradients this close to span


def noise_floor(noise: AnswerNoise, step: float, x_inf: float, rows: int, d: int) -> float:
    """Largest singular value that finite-difference noise alone gives a rows × d gradient
    matrix: entries carry √2·σ/s (σ the answers' noise, s the absolute step), and an i.i.d.
    matrix's top singular value is about σ_entry·(√rows + √d); 3× that is the floor."""
    entry = 2**0.5 * noise.sigma / (step * max(1.0, x_inf))
    return 3 * entry * (rows**0.5 + d**0.5)


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


def gap_rank(s: torch.Tensor, rtol: float, min_gap: float, floor: float = 0.0
             ) -> tuple[int, float, str]:
    """(rank, gap, how): the numerical rank at rtol (and above the noise floor) when its gap is
    clear ("rtol"); else the largest clear gap higher in the spectrum ("largest_gap"); else
    rtol's rank ("unclear"). With a noise floor (finite differences), a single dominant gap
    above it (≥ 4 and twice any other ratio there: float32 answers and the occasional step over
    a kink leave no gap of 100) sets the rank ("noise_gap")."""
    r = numerical_rank(s, rtol)
    if floor > 0:  # above the noise floor, the rank sits at the spectrum's one dominant gap
        top = s[: int((s > floor).sum()) + 1]
        if len(top) >= 2 and float(top[-1]) > 0:
            ratios = (top[:-1] / top[1:].clamp_min(1e-300)).sort(descending=True)
            best, nxt = float(ratios.values[0]), float(ratios.values[1]) if len(top) > 2 else 1.0
            if best >= 4 and best >= 2 * nxt:
                return int(ratios.indices[0]) + 1, best, "noise_gap"
        r = min(r, len(top) - 1)
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
        step, notes, noise = params.fd_step, [], None
        fd = not oracle.offers("explain")
        if fd:
            if oracle.affordable(32 + per_point) < 32 + per_point:
                raise AssumptionViolated(f"the budget ({oracle.remaining}) allows no gradient point "
                                         f"({per_point} queries, after 32 noise probes)",
                                         stopped_by="budget")
            noise = estimate_noise(oracle, ctx.gen)
            step = step or fd_step(noise)
            notes.append(f"{noise.describe()}; finite-difference step {step:.2g}")
            if step >= 0.1:
                empty = Artifact("subspace", data={"basis": torch.zeros(0, d, dtype=torch.float64)},
                                 metrics={"recovered_rank": 0.0}, progress="no gradient read")
                raise PrecisionLimit(f"{noise.describe()}: finite differences would need a step "
                                     f"of {step:.2g}, too coarse to read gradients", artifact=empty)
        rows: list[torch.Tensor] = []
        ranks: list[int] = []
        seen: list[int] = []
        samples, stalled, path, how, gap, x_inf = 0, 0, "explain", "rtol", 0.0, 1.0
        s = torch.zeros(0, dtype=torch.float64)
        vh = torch.zeros(0, d, dtype=torch.float64)
        bar = ctx.progress("span: gradient samples", max_samples) if ctx.progress else None
        while samples < max_samples:
            n = min(params.batch, max_samples - samples, oracle.affordable(10**12) // per_point)
            if n <= 0:
                break
            g = torch.randn(n, d, generator=ctx.gen, dtype=torch.float64).to(oracle.device)
            x_inf = float(g.abs().amax(1).median())
            new, path = gradient_rows(oracle, g, step)
            rows.append(new)
            samples += n
            if bar:
                bar.update(n)
            s, vh = spectrum(torch.cat(rows))
            floor = noise_floor(noise, step, x_inf, sum(map(len, rows)), d) if fd else 0.0
            r, gap, how = gap_rank(s, params.rtol, params.min_gap, floor)
            ranks.append(r)
            seen.append(samples)
            ctx.keep(self._artifact(rows, vh, s, r, gap, seen, ranks, per_point, path, notes))
            if r >= d:
                break
            stalled = stalled + 1 if len(ranks) > 1 and ranks[-1] <= ranks[-2] else 0
            if stalled >= params.patience and self._flat(ranks, seen, params.growth_window):
                break
        if bar:
            bar.close()
        if not rows:
            raise AssumptionViolated(f"the budget allows no gradient point ({per_point} queries "
                                     "each)", stopped_by="budget")
        r = ranks[-1]
        art = self._artifact(rows, vh, s, r, gap, seen, ranks, per_point, path, notes)
        resid = art.metrics["heldout_residual"]
        if how == "largest_gap":
            art.notes.append(f"noise floor above rtol = {params.rtol}: rank read at the largest "
                             f"spectral gap ({gap:.3g})")
        stopped = stalled >= params.patience and self._flat(ranks, seen, params.growth_window)
        if r == 0:
            art.stopped_by, art.reason = "assumption", "all gradients were zero (a dead network?)"
        elif r >= d:
            art.stopped_by = "precision"
            art.reason = ("the gradients span the whole input space: the first layer has full rank, "
                          "or the answers are too noisy to separate a subspace")
        elif how == "unclear":
            art.stopped_by = "precision"
            art.reason = (f"no clear spectral gap (σ_r/σ_r+1 = {gap:.3g} < {params.min_gap}): "
                          "outputs are noisy or rounded, the rank estimate is unreliable")
        elif resid > params.max_heldout_residual:
            art.stopped_by = "precision"
            grew = len(ranks) > 1 and ranks[-1] > ranks[-2]
            art.reason = (f"the last {len(rows[-1])} gradients keep {resid:.2g} of their energy "
                          "outside the span of the earlier ones: "
                          + ("the rank is still growing (more samples may leak more)" if grew else
                             "the answers are noisy or rounded, the subspace is unreliable"))
        elif oracle.remaining is not None and samples < max_samples and not stopped:
            art.stopped_by = "budget"
            art.reason = f"budget exhausted after {samples} gradient points (rank still growing?)"
        elif samples >= max_samples and not stopped:
            art.notes.append(f"the rank was still growing at max_samples = {max_samples}: more "
                             "samples may leak more")
        return art

    @staticmethod
    def _artifact(rows, vh, s, r, gap, seen, ranks, per_point, path, notes) -> Artifact:
        all_rows = torch.cat(rows)
        zero = float((all_rows.abs().amax(dim=1) == 0).double().mean())
        resid = heldout_residual(all_rows, len(rows[-1]), r) if len(rows) > 1 else 0.0
        metrics = {"recovered_rank": float(r), "samples": float(seen[-1]),
                   "queries_per_gradient": float(per_point), "spectral_gap": gap,
                   "zero_gradients": zero, "heldout_residual": resid}
        art = Artifact("subspace", data={"basis": vh[:r].cpu(), "singular_values": s.cpu()},
                       metrics=metrics, notes=[f"gradients via {path}", *notes],
                       progress=f"rank {r} after {seen[-1]} gradient points")
        art.data["curves"] = {"recovered_rank_vs_samples": list(zip(seen, map(float, ranks),
                                                                    strict=True))}
        return art

    @staticmethod
    def _flat(ranks: list[int], seen: list[int], window: float) -> bool:
        """True when the rank did not grow over the last `window` share of the samples."""
        start = seen[-1] * (1 - window)
        before = [r for r, n in zip(ranks, seen, strict=True) if n <= start]
        return bool(before) and before[-1] >= ranks[-1]

    def judge(self, m, artifact):
        return judge_span(m)


def judge_span(m: dict[str, float]) -> tuple[str, str]:
    """Risk from the scored subspace: against the true first layer when there is one, else from
    how much of fresh held-out gradients the recovered span holds (black-box endpoints)."""
    q, r = int(m.get("queries", 0)), int(m.get("recovered_rank", 0))
    if "true_rank" not in m:
        e = m.get("blackbox_heldout_energy")
        if e is None or r == 0:
            return "low", f"a rank-{r} subspace, not verifiable against the truth ({q} queries)"
        lvl = "high" if e >= 0.999 else "medium" if e >= 0.99 else "low"
        return lvl, (f"a rank-{r} subspace holding {e:.2%} of fresh gradients' energy was "
                     f"recovered in {q} queries (no truth to compare)")
    k, ang = int(m["true_rank"]), m.get("max_principal_angle_deg", 90.0)
    if r > k:
        return "low", (f"the recovered rank {r} exceeds the true rank {k}: noise, not the span "
                       f"({q} queries)")
    if r >= k and ang < 1.0:
        return "high", f"the full first-layer span (rank {k}) leaked in {q} queries"
    if r >= k / 2 and ang < 5.0:
        return "medium", f"{r} of {k} span dimensions leaked in {q} queries (angle {ang:.2g}°)"
    return "low", f"span recovery got {r} of {k} dimensions, max angle {ang:.2g}° ({q} queries)"
