"""span_threshold — paper 003 (Jayaram, Woodruff, Zhang, ICLR 2020), Sec. 4.1, Alg. 2.

Adaptive span recovery when the API returns only a 0/1 decision M(x) = 1[σ(Ax) > θ] (for a
multiclass label API: 1[label(x) = c] for one class c, whose boundary is locally a level set of
a logit difference, also a function of Ax). Each round finds a point x₀ on the decision boundary
of the network restricted to o + V⊥ (V = directions found so far, o ∈ span V an offset), reads
the gradient of σ restricted to V⊥ from where nearby lines cross the boundary, and adds its
direction to V.

What is done differently from the paper, and why (all measured on random thresholded tanh nets):
(a) The paper perturbs x₀ by uᵢ = δgᵢ − x/‖x‖² and bisects the scale cᵢ. Taken literally this
    failed (energy in span 0.1–0.2): the perturbation is nearly tangent to the ray. Here each
    line is parallel to the search direction d (the segment from a 0-point to a 1-point, in V⊥)
    and passes through x₀ + h·ξᵢ, ξᵢ an orthonormal basis of V⊥ ∩ d⊥. Its crossing offset tᵢ
    gives the slope ∂σ/∂ξᵢ / ∂σ/∂d = −(tᵢ − t₀)/h (t₀: the line through x₀ itself), so the
    gradient direction is d + Σ slopeᵢ ξᵢ — an orthonormal design, no least squares needed.
(b) Errors compound through the projections, so every crossing is bisected `bisect_steps`
    (default 24) times inside a bracket of ±`bracket`·h: slope resolution 2·bracket/2^steps.
(c) After k − 1 exact vectors the 1-region can miss V⊥ entirely (the paper's Assumption 3 fails).
    Probes are then drawn around offsets o inside span V at growing scales; restarts also
    redraw the pair when d is nearly tangent to the boundary (a crossing outside the bracket,
    the analogue of the paper's |cᵢ| test in line 7).
(d) Coarse arithmetic (float32) moves the boundary by its rounding: second differences of the
    crossings measure each estimate's slope error, and the step h climbs a ladder (1e-5, 1e-4,
    1e-3, 3e-3 × input scale) while that error exceeds `target_error` (noise error falls as 1/h,
    curvature error grows as h). An estimate's own error, amplified by 1/residual, must stay
    below `max_own_error` (else other boundary points are tried and the best kept), and a check
    whose part outside V is within its own error, or within 3× V's own error, cannot tell a new
    direction from the noise: it counts as quiet, and a span ended by such checks is reported
    `stopped_by: precision` (scored as usual: a direction may hide below the noise).
Scores (probabilities/logits) are reduced to the decided label, to measure what a label-only
deployment of the same model leaks.
Stopping: when no probe around any offset changes the label, the 0/1 output no longer depends
on V⊥ as far as the attacker can see, and V is reported as the span (the number of probes is
reported). Every search is bounded; a budget, a flat victim or exhausted restarts end in an
honest partial result.

Cost per vector: (n − m)·bisect_steps + probes + ~30 queries (n = input dim, m = vectors so far).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.span.nonadaptive import judge_span, vacuous_span
from harness.core.answers import api_labels
from harness.core.errors import AssumptionViolated, PrecisionLimit

# adaptive steps (× input scale): the slope error from the answers' noise falls as 1/h and the
# boundary's curvature error grows as h; a second-difference error above `target_error` climbs
STEPS = (1e-5, 1e-4, 1e-3, 3e-3)


class ThresholdParams(Params):
    max_vectors: int | None = None  # stop after this many vectors (default: input dim − 1)
    probes: int = 64  # Gaussian probes per search for a label change
    step: float | None = None  # h, × input scale; None: from 1e-5 up the STEPS ladder while too rough
    bracket: float = 64.0  # crossings are searched within ±bracket·h (max slope ratio)
    bisect_steps: int = 24  # bisection steps per crossing
    boundary_tol: float = 1e-2  # x₀ is placed within boundary_tol·h of the boundary
    restarts: int = 8  # failed tries (tangent d, lost crossings) allowed per vector
    probe_scales: list[float] = [1.0, 3.0, 10.0]  # spreads of the first probes, × input scale
    probe_rounds: int = 4  # rounds of first probes (scales ×3 each) while all agree
    slice_scales: list[float] = [0.01, 0.1, 1.0]  # spreads of probes in V⊥ around a boundary point
    min_residual: float = 1e-3  # a gradient with less than this share outside V adds nothing
    checks: int = 3  # boundary points that must show no new direction before stopping
    accept_residual: float = 0.02  # below this share outside V, look for a better-conditioned point
    max_amplified_error: float = 1e-3  # ...unless V's measured errors ÷ that share stay below this
    max_own_error: float = 1e-2  # ...and its own slope error ÷ its share outside V stays below this
    weak_tries: int = 2  # boundary points tried for a better-conditioned estimate
    noise_lines: int = 4  # extra lines per vector whose second differences estimate the error
    max_error: float = 1e-2  # stop (partial) when a slope error estimate exceeds this
    target_error: float = 3e-4  # with an adaptive step, a larger slope error moves up the ladder


@dataclass
class Decision:
    """The 0/1 view of the oracle: M(x) = 1[label(x) = positive]."""

    oracle: object
    positive: int
    calls: int = 0
    probes_seen: int = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return decisions(self.oracle, x) == self.positive


def decisions(oracle, x: torch.Tensor) -> torch.Tensor:
    """The API's label for each input (the argmax when it returns scores)."""
    return api_labels(oracle.predict(x), oracle.output)


@dataclass
class State:
    basis: torch.Tensor  # (m, n) orthonormal rows found so far
    slopes: list[float] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    restarts: int = 0
    last_residual: float = 1.0
    noisy_checks: int = 0  # checks of the current search whose part outside V was within the noise
    floor: float = 0.0  # V's own direction error: the largest own error of an accepted vector
    rough: int = 0  # vectors kept as the best of their tries with an own error above max_own_error


def input_scale(oracle) -> float:
    """Typical per-coordinate input magnitude (RMS of the attacker's pool, else 1)."""
    pool = oracle.info.x_pool
    if pool is not None and len(pool):
        s = float(pool.double().pow(2).mean().sqrt())
        if math.isfinite(s) and s > 0:
            return s
    return 1.0


def complement(basis: torch.Tensor, extra: torch.Tensor | None, n: int) -> torch.Tensor:
    """Orthonormal basis (rows) of the complement of span(basis ∪ extra) in Rⁿ."""
    cols = [basis.T] + ([extra[:, None]] if extra is not None else [])
    known = torch.cat(cols, dim=1) if cols else torch.zeros(n, 0, dtype=basis.dtype)
    m = known.shape[1]
    q, _ = torch.linalg.qr(torch.cat([known, torch.eye(n, dtype=basis.dtype, device=basis.device)],
                                     dim=1))
    return q[:, m:n].T.contiguous()


class _Budget(Exception):
    pass


def bisect_lines(dec: Decision, starts: torch.Tensor, d: torch.Tensor, lo, hi,
                 steps: int, budget) -> tuple[torch.Tensor, torch.Tensor]:
    """Crossing offsets t along `starts + t·d` (label 0 below, 1 above), bisected `steps` times
    in [lo, hi] (scalars or one per line); returns (t, inside), inside False where the crossing
    was not inside the bracket."""
    n = len(starts)
    lo = torch.as_tensor(lo, dtype=torch.float64).to(starts.device).expand(n).clone()
    hi = torch.as_tensor(hi, dtype=torch.float64).to(starts.device).expand(n).clone()
    a, b = lo.clone(), hi.clone()
    for _ in range(steps):
        if budget(n) < n:
            raise _Budget()
        mid = (a + b) / 2
        up = dec(starts + mid[:, None] * d)
        b = torch.where(up, mid, b)
        a = torch.where(up, a, mid)
    width = (hi - lo) / 2**steps
    inside = (a > lo + 0.5 * width) & (b < hi - 0.5 * width)
    return (a + b) / 2, inside


def boundary_point(dec: Decision, one: torch.Tensor, zero: torch.Tensor, tol: float,
                   budget) -> torch.Tensor:
    """A point within `tol` of the boundary on the segment zero → one."""
    length = float((one - zero).norm())
    steps = min(80, max(1, math.ceil(math.log2(max(length / tol, 2.0)))))
    t, _ = bisect_lines(dec, zero[None], (one - zero) / length, 0.0, length, steps, budget)
    return zero + t[0] * (one - zero) / length


def seed_points(oracle, n: int, scale: float, p: ThresholdParams, gen: torch.Generator
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian probes in Rⁿ at each of `probe_scales` and their raw labels. While every probe
    got the same label, another round is drawn with the scales tripled (up to `probe_rounds`
    rounds, within the budget): a small decision region is found by looking wider, not by
    giving up on the first draw."""
    all_pts, all_lab = [], []
    for r in range(p.probe_rounds):
        pts = torch.cat([c * 3**r * scale * torch.randn(p.probes, n, generator=gen,
                                                        dtype=torch.float64)
                         for c in p.probe_scales]).to(oracle.device)
        if oracle.affordable(len(pts)) < len(pts):
            if r == 0:
                raise AssumptionViolated(f"the budget allows no first probes ({len(pts)} queries)",
                                         stopped_by="budget")
            break
        all_pts.append(pts)
        all_lab.append(decisions(oracle, pts))
        if len(torch.unique(torch.cat(all_lab))) > 1:
            break
    return torch.cat(all_pts), torch.cat(all_lab)


def slice_pair(dec: Decision, basis: torch.Tensor, known: tuple[torch.Tensor, torch.Tensor],
               scale: float, p: ThresholdParams, gen: torch.Generator, budget
               ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A (1-point, 0-point) pair differing only in V⊥, or None if the probes found none.

    A random boundary point b (between a known 1-point and 0-point) is generically crossed by
    its slice b + V⊥ unless the decision no longer depends on V⊥ there; probes b ± s·z (z in V⊥)
    then straddle it.
    """
    pts, lab = known
    dev, n = pts.device, pts.shape[1]
    i1 = torch.nonzero(lab)[:, 0]
    i0 = torch.nonzero(~lab)[:, 0]
    a = i1[torch.randint(len(i1), (1,), generator=gen)].item()
    c = i0[torch.randint(len(i0), (1,), generator=gen)].item()
    b = boundary_point(dec, pts[a], pts[c], 1e-6 * scale, budget)
    half = max(1, p.probes // 2)
    z = torch.randn(half, n, generator=gen, dtype=torch.float64).to(dev)
    z = z - (z @ basis.T) @ basis
    z = z / z.norm(dim=1, keepdim=True).clamp_min(1e-300) * math.sqrt(n)
    for s in p.slice_scales:
        if budget(2 * half) < 2 * half:
            raise _Budget()
        probe = torch.cat([b + s * scale * z, b - s * scale * z])
        got = dec(probe)
        dec.probes_seen += len(probe)
        if got.any() and (~got).any():
            pos, neg = probe[got], probe[~got]
            dist = torch.cdist(pos, neg)
            i, j = divmod(int(dist.argmin()), dist.shape[1])
            return pos[i], neg[j]
    return None


@dataclass
class Estimate:
    vector: torch.Tensor | None  # new unit vector in V⊥, or None
    residual: float  # |P⊥∇σ| / |∇σ| at the boundary point (1.0 when V is empty)
    error: float = 0.0  # slope error relative to the gradient, from second differences

    @property
    def own(self) -> float:
        """The new direction's error from its own noise: the slope error over the part outside V."""
        return self.error / max(self.residual, 1e-300)


def estimate(dec: Decision, st: State, one: torch.Tensor, zero: torch.Tensor, scale: float,
             step: float, p: ThresholdParams, budget) -> Estimate | None:
    """The gradient direction of σ at a boundary point between `one` and `zero` (which differ
    only in V⊥): its V⊥ part as a unit vector, and the share of the gradient outside V.
    None when a crossing left its bracket (d nearly tangent to the boundary)."""
    n = one.shape[0]
    h = step * scale
    x0 = boundary_point(dec, one, zero, p.boundary_tol * h, budget)
    d = (one - zero) / (one - zero).norm()
    narrow = p.bracket * h
    # the line through x0 and the lines along V first (offset h·min_residual, so a V part up to
    # bracket/min_residual times ∂σ/∂d still crosses inside the bracket): if the V part dwarfs
    # the V⊥ part along d, the n − m lines in V⊥ are not worth their queries
    hv = h * p.min_residual
    starts = torch.cat([x0[None], x0 + hv * st.basis])
    t, ok = bisect_lines(dec, starts, d, -narrow, narrow, p.bisect_steps, budget)
    if not bool(ok[0]):
        return None
    if not bool(ok[1:].all()):
        return Estimate(None, 0.0)  # ∂σ/∂V ≫ ∂σ/∂d: nothing measurable left outside V
    t0, along_v = t[0], -(t[1:] - t[0]) / hv
    xi = complement(st.basis, d, n)
    c = min(p.noise_lines, len(xi))
    # lines at +h·ξᵢ for every i, and at −h·ξᵢ for the first c: second differences measure the
    # slope error (curvature, or noise in the victim's arithmetic)
    starts = torch.cat([x0 + h * xi, x0 - h * xi[:c]])
    tx, inside = bisect_lines(dec, starts, d, -narrow, narrow, p.bisect_steps, budget)
    if not bool(inside.all()):
        return None
    plus, minus = tx[: len(xi)], tx[len(xi):]
    slopes = -(plus - t0) / h
    v = d + slopes @ xi
    out = float(v.norm())
    err = float((plus[:c] + minus - 2 * t0).abs().max()) / h / out if c else 0.0
    residual = out / math.sqrt(out**2 + float(along_v.pow(2).sum()))
    v = v - (v @ st.basis.T) @ st.basis
    st.slopes.append(float(slopes.abs().max()) if len(slopes) else 0.0)
    st.errors.append(err)
    return Estimate(v / v.norm(), residual, err)


def _rough(error: float, limit: float) -> str:
    return (f"the decision boundary is too rough for this step: second differences show slope "
            f"errors of {error:.2g} of the gradient (> {limit:g}); the victim's arithmetic is "
            "coarse (float32?) or its answers are randomised — a larger `step` may help")


def next_vector(dec: Decision, st: State, known, scale: float, step: float, p: ThresholdParams,
                gen: torch.Generator, budget, grow: bool = False) -> torch.Tensor | None:
    """One new unit vector ≈ the gradient of σ restricted to V⊥; None when V is complete as far
    as `checks` boundary points show. Raises AssumptionViolated after `restarts` failed tries.

    Errors in V are amplified by 1/residual in the next vector, and so is the estimate's own
    slope error. A vector measured where less than `accept_residual` of the gradient lies outside
    V and V's measured slope errors, so amplified, exceed `max_amplified_error`, or whose own
    amplified error exceeds `max_own_error`, is kept only as a fallback: up to `weak_tries` other
    boundary points are tried and the estimate with the smallest own error wins. A check whose
    part outside V is no larger than its own slope error (coarse arithmetic: float32) cannot tell
    a remaining direction from the noise; it counts as quiet and is counted in `noisy_checks`.
    """
    quiet, failed = 0, 0
    best: Estimate | None = None
    weak = 0
    st.noisy_checks = 0
    while True:
        pair = slice_pair(dec, st.basis, known, scale, p, gen, budget)
        est = estimate(dec, st, *pair, scale, step, p, budget) if pair is not None else Estimate(None, 0.0)
        if est is None:
            st.restarts += 1  # d nearly tangent to the boundary: redraw (paper Alg. 2, line 7)
            failed += 1
            if failed > p.restarts:
                raise AssumptionViolated(f"{p.restarts} tries found no usable boundary crossing (search "
                                   "direction tangent to the boundary or crossings out of the bracket)")
            continue
        st.last_residual = est.residual
        own = est.own
        limit = p.target_error if grow else p.max_error
        if grow and est.vector is not None and est.residual >= p.min_residual and est.error > limit:
            raise PrecisionLimit(_rough(est.error, limit))  # a larger step may read it: climb first
        if est.vector is not None and est.residual >= p.min_residual and \
                (own >= 1 or est.residual < 3 * st.floor):
            # the part outside V is no larger than the answers' noise, or than V's own error
            st.noisy_checks += 1
            est = Estimate(None, est.residual, est.error)
        if est.vector is None or est.residual < p.min_residual:
            quiet += 1
            if quiet >= p.checks:
                if best is not None:
                    st.floor = max(st.floor, best.own)
                return best.vector if best is not None else None
            continue
        if est.error > limit:
            raise PrecisionLimit(_rough(est.error, limit))
        # errors of V enter the new vector amplified by 1/residual: a poorly conditioned point
        # is still good enough when V's measured slope errors, so amplified, stay small
        conditioned = est.residual >= p.accept_residual or \
            max(st.errors, default=0.0) / est.residual <= p.max_amplified_error
        if conditioned and own <= p.max_own_error:
            st.floor = max(st.floor, own)
            return est.vector
        if best is None or own < best.own:
            best = est
        weak += 1
        if weak >= p.weak_tries:
            st.floor = max(st.floor, best.own)
            st.rough += int(best.own > p.max_own_error)  # kept for want of better: say so
            return best.vector


@register
class SpanThreshold(Attack):
    name = "span_threshold"
    family = "span"
    needs = frozenset({"prediction"})
    paper = "003 Sec. 4.1, Alg. 2"
    summary = "adaptive span recovery of the first layer through 0/1 (label-only) outputs"
    assumes = frozenset({"network"})
    Params = ThresholdParams

    def skip_reason(self, info):
        if info.task == "regression":
            return "needs a classifier (0/1 decisions); the victim is a regressor"
        if info.output != "label":
            return ("for label-only APIs; this one returns real-valued scores, from which "
                    "span_nonadaptive recovers the span with far fewer queries")
        return super().skip_reason(info)

    def run(self, oracle, params: ThresholdParams, ctx) -> Artifact:
        n = oracle.info.dim
        dev = oracle.device
        scale = input_scale(oracle)
        limit = min(params.max_vectors or n - 1, n - 1)
        pts, raw = seed_points(oracle, n, scale, params, ctx.gen)
        positive = 1 if oracle.info.n_classes <= 2 else int(torch.mode(raw.cpu()).values)
        dec = Decision(oracle, positive=positive)
        known = (pts, raw == positive)
        if bool(known[1].all()) or not bool(known[1].any()):
            art = Artifact("subspace", data={"basis": torch.zeros(0, n, dtype=torch.float64)},
                           metrics={"recovered_rank": 0.0}, stopped_by="assumption")
            art.reason = (f"all {len(pts)} first probes got the same decision: the 0/1 output is "
                          "constant where the attacker looked (flat or saturated victim)")
            return art
        step = params.step or STEPS[0]
        adapt = params.step is None
        st = State(basis=torch.zeros(0, n, dtype=torch.float64, device=dev))
        stopped, reason, done = None, "", False
        bar = ctx.progress("span: 0/1 vectors", None) if ctx.progress else None  # stops at the span, ≤ limit
        per_vector: list[float] = []
        try:
            while len(st.basis) < limit:
                q0 = oracle.queries
                try:
                    v = next_vector(dec, st, known, scale, step, params, ctx.gen, oracle.affordable,
                                    grow=adapt and step < STEPS[-1])
                except PrecisionLimit:
                    # the boundary is rougher than this step can read (coarse arithmetic, e.g.
                    # float32): the answers say so, so the step climbs the ladder
                    if not adapt or step >= STEPS[-1]:
                        raise
                    step = next(s for s in STEPS if s > step)
                    continue
                if v is None:
                    done = True
                    break
                st.basis = torch.cat([st.basis, v[None]])
                per_vector.append(float(oracle.queries - q0))
                ctx.keep(Artifact("subspace", data={"basis": st.basis.cpu()},
                                  metrics={"recovered_rank": float(len(st.basis))},
                                  progress=f"{len(st.basis)} vectors"))
                if bar is not None:
                    bar.update(1)
        except _Budget:
            stopped, reason = "budget", f"budget exhausted after {len(st.basis)} vectors"
        except PrecisionLimit as exc:
            stopped, reason = "precision", f"stopped after {len(st.basis)} vectors: {exc}"
        except AssumptionViolated as exc:
            stopped, reason = "assumption", f"stopped after {len(st.basis)} vectors: {exc}"
        finally:
            if bar is not None:
                bar.close()
        r = len(st.basis)
        if r == 0 and stopped is None:
            stopped, reason = "assumption", "no boundary point showed a usable gradient"
        notes = [] if oracle.output == "label" else [
            f"the API returns {oracle.output}; only the decided label was used (what a label-only "
            "deployment of this model would leak)"]
        notes += [f"decision: label == {positive}; input scale {scale:.3g}; "
                 f"step h = {step:g}·scale; {dec.probes_seen} slice probes"]
        if stopped is None and st.rough:
            stopped = "precision"
            reason = (f"stopped after {r} vectors: {st.rough} of them were kept with an own "
                      f"slope error above {params.max_own_error:g} of their part outside the "
                      "span (no better-conditioned boundary point found)")
        elif done and st.noisy_checks:
            # complete only as far as the noise shows: a direction may hide below it
            stopped = "precision"
            reason = (f"stopped after {r} vectors: {st.noisy_checks} of the {params.checks} last "
                      "boundary checks could not tell the gradient outside the recovered span "
                      "from the answers' noise (coarse arithmetic: float32?)")
        elif done:
            notes.append(f"stopped: {params.checks} boundary points showed < {params.min_residual} "
                         f"of the gradient outside the {r} recovered directions")
        elif stopped is None and r < oracle.info.dim - 1:
            stopped = "cap"  # its own parameter, not evidence that nothing more leaks
            reason = (f"stopped at max_vectors = {limit} before its boundary checks showed the "
                      "span complete: more vectors may leak more")
        elif stopped is None:
            notes.append(f"stopped at max_vectors = {limit}")
        metrics = {
            "recovered_rank": float(r),
            "restarts": float(st.restarts),
            "queries_per_vector": float(sum(per_vector) / len(per_vector)) if per_vector else 0.0,
            "max_slope_ratio": max(st.slopes) if st.slopes else 0.0,
            "last_residual": st.last_residual,
            "max_slope_error": max(st.errors) if st.errors else 0.0,
        }
        return Artifact("subspace", data={"basis": st.basis.cpu()}, metrics=metrics,
                        stopped_by=stopped, reason=reason, notes=notes,
                        progress=f"{r} vectors")

    def judge(self, m, artifact):
        q = int(m.get("queries", 0))
        r = int(m.get("recovered_rank", 0))
        if "true_rank" not in m or vacuous_span(m):
            return judge_span(m)
        k, e = int(m["true_rank"]), m.get("min_energy_in_span", 0.0)
        if r >= k and e >= 0.999:
            return "high", f"the full first-layer span (rank {k}) leaked through 0/1 answers in {q} queries"
        if r >= 1 and e >= 0.99:
            return "medium", f"{min(r, k)} of {k} span directions leaked through 0/1 answers ({q} queries)"
        return "low", f"0/1 span recovery got {r} of {k} directions, min energy in span {e:.3g}"
