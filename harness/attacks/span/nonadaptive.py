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
usual). Randomized explanations (explanation noise, SmoothGrad) get the same treatment: their
noise per entry is measured on 8 points asked twice (under a budget below 64, a quarter of it:
at least one point, a coarse estimate the notes call so), values below 1.5·σ·(√rows + √d) do not
count, and the rank is read at the spectrum's dominant gap above that floor (not at a fixed
`min_gap`). The subspace so far is kept (`ctx.keep`) after every round.

Finite differences carry two errors exact gradients do not (harness/attacks/span/fd_spectrum.py):
the d differences of one point share its base answer F(x), whose error is a rank-one term along
the all-ones direction that reads as one spurious extra dimension (the rank is read on 1⊥ and the
span lifted back by least squares); and a step that crosses a ReLU kink makes that point's rows
no gradient at all: its error is a direction no other point shares, so a point whose rows
alone carry a direction waits aside until another point shows that direction too (a rarely
active unit), and those still aside at the end are reported (`kinked_points`).

Stopping reads the whole rank curve again at the latest gap: with as many rows as the rank, the
smallest true singular value can sit far below `rtol` (a nearly square random matrix), a dip
that is not growth once more rows show the gap. While there are fewer rows than dimensions and
every row adds one, the rank is still growing ("rows"), not unclear.
"""

from __future__ import annotations

import torch
from pydantic import Field

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.span.fd_spectrum import (
    lift_from_ones_complement,
    lone_points,
    noise_floor,
    readmit,
    without_ones,
)
from harness.core.errors import AssumptionViolated, PrecisionLimit
from harness.core.gradients import cost_per_point, estimate_noise, fd_step, gradient_rows

NOISE_PAIRS = 8  # points asked twice to measure randomized explanations' noise (16 queries)


class SpanParams(Params):
    max_samples: int | None = Field(default=None, ge=1)  # gradient points; default 2·d + 20
    batch: int = Field(default=16, ge=1)  # points per round
    rtol: float = Field(default=1e-5, gt=0, lt=1)  # rank tolerance relative to the largest σ
    patience: int = Field(default=2, ge=1)  # rounds without rank growth before stopping
    fd_step: float | None = Field(default=None, gt=0)  # None = from the answers' precision
    min_gap: float = Field(default=100.0, gt=1)  # σ_r / σ_{r+1} below this = no clear rank
    growth_window: float = Field(default=0.5, gt=0, le=1)  # no rank growth over this share: stop
    max_heldout_residual: float = Field(default=1e-2, gt=0)  # fresh gradients this close to span


def heldout_residual(rows: torch.Tensor, last: int, r: int) -> float:
    """Share of the last `last` rows' energy outside the rank-r span of the earlier rows."""
    old, new = rows[:-last], rows[-last:]
    if len(old) == 0 or float(new.norm()) == 0:
        return 0.0
    _, _, vh = torch.linalg.svd(old, full_matrices=False)
    v = vh[:r]
    res = new - (new @ v.T) @ v
    return float(res.norm() / new.norm())


def spectrum(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left singular vectors, singular values and right singular vectors (rows) of a gradient
    matrix."""
    u, s, vh = torch.linalg.svd(rows, full_matrices=False)
    return u, s, vh


def numerical_rank(s: torch.Tensor, rtol: float) -> int:
    if len(s) == 0 or float(s[0]) == 0.0:
        return 0
    return int((s > rtol * s[0]).sum())


def gap_at(s: torch.Tensor, r: int) -> float:
    """σ_r / σ_{r+1} (inf when σ_{r+1} = 0; 0 when there is no σ_{r+1} to compare)."""
    if r <= 0 or r >= len(s):
        return float("inf") if r == 0 else 0.0
    return float(s[r - 1] / s[r]) if float(s[r]) > 0 else float("inf")


def gap_rank(s: torch.Tensor, rtol: float, min_gap: float, floor: float = 0.0, dim: int | None = None
             ) -> tuple[int, float, str]:
    """(rank, gap, how): every row while there are fewer rows than the `dim` dimensions they
    live in and each adds one ("rows": no gap to read yet);
    else the numerical rank at rtol (and above the noise floor) when its gap is clear ("rtol");
    else the largest clear gap higher in the spectrum ("largest_gap"); else rtol's rank
    ("unclear"). With a noise floor (finite differences) and values below it, a single dominant
    gap above it (≥ 4 and twice any other ratio there: float32 answers leave no gap of 100) sets
    the rank ("noise_gap")."""
    r = numerical_rank(s, rtol)
    if floor > 0:
        above = int((s > floor).sum())
        r = min(r, above)
        if 0 < above < len(s) and float(s[above]) > 0:  # the rank sits at the one dominant gap
            top = s[: above + 1]
            ratios = (top[:-1] / top[1:]).sort(descending=True)
            best, nxt = float(ratios.values[0]), float(ratios.values[1]) if len(top) > 2 else 1.0
            if best >= 4 and best >= 2 * nxt:
                return int(ratios.indices[0]) + 1, best, "noise_gap"
    if 0 < r == len(s) and dim is not None and len(s) < dim:
        return r, 0.0, "rows"
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
    assumes = frozenset({"network"})
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
        sigma_x, pairs = (0.0, 0) if fd else self._explain_noise(oracle, ctx)
        if sigma_x is None:
            raise AssumptionViolated("the budget allows no check of the explanations' noise (one "
                                     "point asked twice: 2 queries)", stopped_by="budget")
        coarse = f"; coarse: {pairs} of the usual {NOISE_PAIRS} under this budget" \
            if 0 < pairs < NOISE_PAIRS else ""
        if sigma_x > 0:
            notes.append(f"randomized explanations: noise {sigma_x:.3g} per entry (measured on {pairs} "
                         f"point(s) asked twice{coarse}); the rank is read at the spectrum's gap above "
                         "its floor")
        elif coarse:
            notes.append(f"explanations taken as deterministic: {pairs} point(s) asked twice gave the "
                         f"same answers{coarse}")
        rows = torch.zeros(0, d, dtype=torch.float64, device=oracle.device)
        ranks: list[int] = []
        seen: list[int] = []
        spectra: list[torch.Tensor] = []
        samples, stalled, path, how, gap, last = 0, 0, "explain", "rtol", 0.0, 0
        aside = rows.new_zeros(0, d)
        s = torch.zeros(0, dtype=torch.float64)
        basis = torch.zeros(0, d, dtype=torch.float64)
        bar = ctx.progress("span: gradient samples", None) if ctx.progress else None  # until the rank stalls
        while samples < max_samples:
            n = min(params.batch, max_samples - samples, oracle.affordable(10**12) // per_point)
            if n <= 0:
                break
            g = torch.randn(n, d, generator=ctx.gen, dtype=torch.float64).to(oracle.device)
            new, path = gradient_rows(oracle, g, step)
            samples += n
            if bar is not None:
                bar.update(n)
            per_row = len(new) // n  # rows per point: one, or one per logit signal
            rows, last = torch.cat([rows, new]), len(new)
            floor_of = self._floor_of(noise, step, float(g.abs().amax(1).median()), d, sigma_x)
            u, s, vh, along = self._spectrum(rows, fd)
            room = d - 1 if fd else d  # finite differences: the rank is read on 1⊥
            r, gap, how = gap_rank(s, params.rtol, params.min_gap, floor_of(len(rows)), room)
            if fd:  # points whose rows alone carry a direction (a step over a kink) wait aside
                def rank_of(m, f=floor_of, k=room):
                    return gap_rank(self._spectrum(m, True)[1], params.rtol, params.min_gap, f(len(m)), k)[0]

                rows, aside, last, moved = self._aside(rows, aside, per_row, last, r, how, rank_of)
                if moved:
                    u, s, vh, along = self._spectrum(rows, fd)
                    r, gap, how = gap_rank(s, params.rtol, params.min_gap, floor_of(len(rows)), room)
            if fd and r >= d - 1:  # all of 1⊥: the whole input space as far as rows can tell
                r = d
            spectra.append(s)
            ranks = self._reread(spectra, ranks, r)
            seen.append(samples)
            basis = (torch.eye(d, dtype=vh.dtype, device=vh.device) if r >= d else
                     lift_from_ones_complement(u, s, vh, along, r) if fd else vh[:r])
            ctx.keep(self._artifact(rows, last, basis, s, r, gap, seen, ranks, per_point, path, notes, fd))
            if r >= d:
                break
            stalled = self._stalled(ranks)
            if stalled >= params.patience and self._flat(ranks, seen, params.growth_window):
                break
        if bar is not None:
            bar.close()
        kinked = len(aside) // per_row if len(aside) else 0
        if not ranks:
            raise AssumptionViolated(f"the budget allows no gradient point ({per_point} queries "
                                     "each)", stopped_by="budget")
        r = ranks[-1]
        art = self._artifact(rows, last, basis, s, r, gap, seen, ranks, per_point, path, notes, fd)
        resid = art.metrics["heldout_residual"]
        if fd:
            art.metrics["kinked_points"] = float(kinked)
            if kinked:
                art.notes.append(f"{kinked} of {samples} points set aside: their rows alone carried a "
                                 "direction (a step crossed a ReLU kink)")
        if how == "noise_gap" and sigma_x > 0:
            art.notes.append(f"rank {r} read at the spectrum's dominant gap ({gap:.3g}×) above the "
                             "measured floor of the explanations' noise")
        if how == "largest_gap":
            art.notes.append(f"noise floor above rtol = {params.rtol}: rank read at the largest "
                             f"spectral gap ({gap:.3g})")
        stopped = stalled >= params.patience and self._flat(ranks, seen, params.growth_window)
        if fd and kinked > samples // 2:
            art.stopped_by = "precision"
            art.reason = (f"{kinked} of {samples} points carried a direction of their own: the "
                          "answers are noisier than measured, the subspace is unreliable")
        elif r == 0:
            network = getattr(oracle.info, "declared", {}).get("network")
            art.stopped_by, art.reason = "assumption", self._why_no_rank(
                art, noise, network, oracle.info.output == "probabilities")
        elif r >= d and not (self._full_rank_shown(s, d - 1 if fd else d, floor_of(len(rows)))
                             if fd or sigma_x > 0 else True):
            art.stopped_by = "precision"
            art.reason = ("the gradients span the whole input space: the first layer has full rank, "
                          "or the answers are too noisy to separate a subspace")
        elif r >= d:
            art.notes.append("the gradients span the whole input space: the first layer has full "
                             "rank, so no subspace is hidden and none leaks")
        elif how == "unclear":
            art.stopped_by = "precision"
            art.reason = (f"no clear spectral gap (σ_r/σ_r+1 = {gap:.3g} < {params.min_gap}): "
                          "outputs are noisy or rounded, the rank estimate is unreliable")
        elif resid > self._residual_allowed(params, rows, sigma_x, r, d) and not (
                len(ranks) > 1 and ranks[-1] > ranks[-2]):
            # the rank stood still, yet fresh gradients leave the span: noise, not growth
            art.stopped_by = "precision"
            art.reason = (f"the last {last} gradient rows keep {resid:.2g} of their energy outside "
                          "the span of the earlier ones: the answers are noisy or rounded, the "
                          "subspace is unreliable")
        elif oracle.remaining is not None and samples < max_samples and not stopped:
            art.stopped_by = "budget"
            art.reason = f"budget exhausted after {samples} gradient points (rank still growing?)"
        elif samples >= max_samples and not stopped:
            art.stopped_by = "cap"  # its own parameter, not a defense
            art.reason = (f"the rank was still growing at max_samples = {max_samples}: more "
                          "samples may leak more")
        return art

    @staticmethod
    def _why_no_rank(art: Artifact, noise, network: bool | None = None, probs: bool = False) -> str:
        """Why no direction was read, from what was measured (never a guess)."""
        zero = art.metrics.get("zero_gradients", 0.0)
        if noise is not None and noise.rounding:
            return (f"no gradient direction stood out: the answers are rounded to {noise.rounding:g}, "
                    f"and {zero:.0%} of the finite differences read exactly zero")
        if zero >= 1.0 and network and probs:
            return ("every gradient read was exactly zero: the probabilities are flat at the sampled "
                    "points (saturated at 0 or 1 in the answers' precision, or a dead network)")
        if zero >= 1.0 and network:
            return ("every gradient read was exactly zero: no path through the network is active at "
                    "the sampled points (a dead network)")
        if zero >= 1.0 and network is False:
            return ("every gradient read was exactly zero: the model's outputs are flat at the sampled "
                    "points (a piecewise-constant model such as a tree ensemble)")
        if zero >= 1.0:
            return ("every gradient read was exactly zero: the model's outputs are flat at the sampled "
                    "points (a dead network, or a piecewise-constant model such as a tree ensemble)")
        return (f"no gradient direction stood above the answers' noise ({zero:.0%} of gradients "
                "exactly zero)")

    @staticmethod
    def _residual_allowed(params: SpanParams, rows: torch.Tensor, sigma_x: float, r: int, d: int) -> float:
        """The held-out residual a right span may leave: `max_heldout_residual`, or with measured
        explanation noise 3× the share of a row's energy that noise puts outside an r-dim span."""
        if sigma_x <= 0 or len(rows) == 0:
            return params.max_heldout_residual
        noise = sigma_x**2 * max(d - r, 0) / float(rows.pow(2).sum(1).mean().clamp_min(1e-300))
        return max(params.max_heldout_residual, 3 * noise)

    @staticmethod
    def _explain_noise(oracle, ctx) -> tuple[float | None, int]:
        """(noise per entry (std), points asked): the explanations' noise, measured by asking
        `NOISE_PAIRS` points twice (16 queries; under a budget below 64, a quarter of it, at least
        one point: a coarser estimate): 0 for deterministic gradients, whose full rank is the first
        layer's; randomized ones (explanation noise, SmoothGrad) could fill the space with noise,
        and their measured floor says where it starts. (None, 0) when the budget cannot pay for
        one point asked twice."""
        pairs = min(NOISE_PAIRS, oracle.affordable(8 * NOISE_PAIRS) // 8)
        if pairs < 1:
            pairs = 1 if oracle.affordable(2) == 2 else 0
        if pairs == 0:
            return None, 0
        x = torch.randn(pairs, oracle.info.dim, generator=ctx.gen, dtype=torch.float64).to(oracle.device)
        g = oracle.explain(torch.cat([x, x])).reshape(2, pairs, -1)
        diff = (g[0] - g[1]).double()
        return (0.0 if bool((diff == 0).all()) else float(diff.pow(2).mean().sqrt()) / 2**0.5), pairs

    @staticmethod
    def _full_rank_shown(s: torch.Tensor, room: int, floor: float) -> bool:
        """Finite differences: every one of the `room` directions stands clearly (10×) above the
        noise floor, so the whole space is the first layer's span, not noise."""
        return len(s) >= room and float(s[room - 1]) > 10 * floor

    @staticmethod
    def _floor_of(noise, step, x_inf, d, sigma_x: float = 0.0):
        """The noise floor for a number of rows: finite differences' (the answers' noise through
        the step), randomized explanations' (1.5·σ·(√rows + √d), σ measured: the top
        singular value of their noise alone is about σ·(√rows + √d)), 0 for exact
        gradients."""
        if noise is not None:
            return lambda rows: noise_floor(noise, step, x_inf, rows, d)
        return lambda rows: 1.5 * sigma_x * (rows**0.5 + d**0.5)

    @staticmethod
    def _aside(rows, aside, per_row, last, r, how, rank_of):
        """(rows, rows aside, rows of the last round left, whether any point moved): points set
        aside come back once another point shows their direction; then, while the rank is not
        merely counting rows, points whose rows alone carry a direction are set aside."""
        rows, aside, back = readmit(rows, aside, per_row, r, rank_of)
        if back:
            r = rank_of(rows)
        if how == "rows" or len(rows) // per_row <= r:  # every point still adds dimensions
            return rows, aside, last, bool(back)
        u = torch.linalg.svd(without_ones(rows)[0], full_matrices=False)[0]
        drop = lone_points(rows, per_row, u, r, rank_of)
        if not drop:
            return rows, aside, last, bool(back)
        pts = rows.reshape(-1, per_row, rows.shape[1])
        keep = torch.ones(len(pts), dtype=torch.bool, device=rows.device)
        keep[drop] = False
        first_new = (len(rows) - last) // per_row
        d = rows.shape[1]
        return (pts[keep].reshape(-1, d), torch.cat([aside, pts[~keep].reshape(-1, d)]),
                int(keep[first_new:].sum()) * per_row, True)

    @staticmethod
    def _spectrum(rows: torch.Tensor, fd: bool):
        """SVD of the gradient rows (finite differences: projected onto 1⊥) and the rows'
        components along 1/√d (None for exact gradients)."""
        along = None
        if fd:
            rows, along = without_ones(rows)
        return (*spectrum(rows), along)

    @staticmethod
    def _artifact(all_rows, last, basis, s, r, gap, seen, ranks, per_point, path, notes, fd) -> Artifact:
        zero = float((all_rows.abs().amax(dim=1) == 0).double().mean())
        checked = without_ones(all_rows)[0] if fd else all_rows  # the rank was read there
        resid = heldout_residual(checked, last, r) if 0 < last < len(all_rows) else 0.0
        metrics = {"recovered_rank": float(r), "samples": float(seen[-1]),
                   "queries_per_gradient": float(per_point), "spectral_gap": gap,
                   "zero_gradients": zero, "heldout_residual": resid}
        art = Artifact("subspace", data={"basis": basis.cpu(), "singular_values": s.cpu()},
                       metrics=metrics, notes=[f"gradients via {path}", *notes],
                       progress=f"rank {r} after {seen[-1]} gradient points")
        art.data["curves"] = {"recovered_rank_vs_samples": list(zip(seen, map(float, ranks),
                                                                    strict=True))}
        return art

    @staticmethod
    def _reread(spectra: list[torch.Tensor], ranks: list[int], r: int) -> list[int]:
        """The rank curve with the latest reading r appended and the earlier rounds' spectra
        re-read at the latest gap (the geometric middle of σ_r and σ_r+1): a nearly square matrix
        (as many rows as the rank) shows its smallest true singular value far below `rtol`, a
        dip the fuller spectrum later shows to be signal, not a rank still growing."""
        s = spectra[-1]
        if 0 < r < len(s):
            cut = float((s[r - 1] * s[r]).sqrt()) if float(s[r]) > 0 else float(s[r - 1]) * 1e-3
            ranks = [int((sp > cut).sum()) for sp in spectra[:-1]]
        return [min(k, r) for k in ranks] + [r]

    @staticmethod
    def _stalled(ranks: list[int]) -> int:
        """Rounds at the end of the curve without rank growth."""
        n = 0
        while n + 1 < len(ranks) and ranks[-1 - n] <= ranks[-2 - n]:
            n += 1
        return n

    @staticmethod
    def _flat(ranks: list[int], seen: list[int], window: float) -> bool:
        """True when the rank did not grow over the last `window` share of the samples."""
        start = seen[-1] * (1 - window)
        before = [r for r, n in zip(ranks, seen, strict=True) if n <= start]
        return bool(before) and before[-1] >= ranks[-1]

    def judge(self, m, artifact):
        return judge_span(m)



def vacuous_span(m: dict[str, float]) -> str | None:
    """The reason a span finding says nothing (the recovered span, or the true one, is the whole
    input space: no direction is hidden, so none can leak), else None."""
    d = int(m.get("input_dim", 0))
    if d <= 0:
        return None
    r, k = int(m.get("recovered_rank", 0)), int(m.get("true_rank", 0))
    if k >= d:
        return (f"the first layer has full rank ({k} of {d} input dimensions): its span is the "
                "whole input space, so it hides no direction and a span leak says nothing")
    if r >= d:
        return (f"the recovered span is the whole input space (rank {r} of {d}): it tells an "
                "attacker nothing")
    return None


def judge_span(m: dict[str, float]) -> tuple[str | None, str]:
    """Risk from the scored subspace: against the true first layer when there is one, else from
    how much of fresh held-out gradients the recovered span holds (black-box endpoints). A span
    that is the whole input space is no finding (low, with that reason)."""
    q, r = int(m.get("queries", 0)), int(m.get("recovered_rank", 0))
    empty = vacuous_span(m)
    if empty:
        return "low", f"{empty} ({q} queries)"
    if "true_rank" not in m:
        e = m.get("blackbox_heldout_energy")
        if r == 0:
            return "low", f"no subspace was recovered ({q} queries)"
        if e is None:
            return None, (f"a rank-{r} subspace that no held-out probe of the deployed model verified "
                          f"({q} queries)")
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
