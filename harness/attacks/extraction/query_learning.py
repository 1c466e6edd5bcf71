"""query_learning — paper 001 (Chen, Klivans, Meka, NeurIPS 2021), Alg. 1–4.

Learn a one-hidden-layer ReLU network *with biases* from value queries alone, without the
linear-independence or separation assumptions of the exact attacks. A Gaussian line
L = x₀ + t·v is partitioned into intervals (Alg. 3); at each interval's midpoint GETGRADIENT
(Alg. 2: d random unit directions zⱼ, (F(x + αzⱼ) − F(x))/α, solve the d×d system) gives the
gradient and GETBIAS (Alg. 1: the value at the midpoint minus the slope of the chord over the
interval times t) the intercept of F's affine piece there. Differences of the (gradient,
intercept) pairs of intervals are candidate neurons; LEARNFROMQUERIES (Alg. 4) fits the output
by least squares over [ReLU(ŵⱼ·x − b̂ⱼ), x, 1] on Gaussian queries.

Practical choices instead of the theory's constants (documented, not required by the paper):
- the partition is sinh-spaced on [−span, span] (`intervals` pieces, 200): short pieces near 0,
  where most critical points of a Gaussian line lie, long ones in the Cauchy tails. Unless
  `intervals` is given, the kinks are then isolated locally (harness/attacks/extraction/
  line_pieces.py): a kinked piece that may hold two kinks (next to another kinked piece, or
  whose clean neighbours' affine maps do not meet at one kink inside it — one value query) is
  halved, so neighbouring clean pieces differ by one neuron (many neurons, k > d, crowd the
  pieces: a fixed partition loses them). A kink in an end piece (large biases push kinks out)
  quadruples the span, and the line is searched again;
- α = `alpha`·max(1, |x|) (1e-6 on float64-clean answers: below any realistic distance to a
  kink, above rounding). Coarse answers (float32 arithmetic, rounding, noise; σ measured from
  the answers) take α = 3·√(σ/|F|), and each decision allows for their noise: a piece is clean
  within 6 standard errors of chord and gradient (the gradient's error measured by asking
  GETGRADIENT twice at 8 points), a jump is a neuron only beyond 8. The neurons then carry
  ~σ_g/|jump| of error: the fit is a working copy, not the exact units;
- intervals whose chord slope disagrees with ∇·v contain a kink and are dropped (GETBIAS is
  only valid inside a linear piece); candidates are differences of *neighbouring* clean
  intervals (the paper forms all m(m−1) pairs and filters them by the bounds (5); neighbours
  already contain one neuron per critical point and keep the regression small);
- `lines` independent lines, union of candidates, near-duplicates merged; then more lines (up
  to `max_lines`) while the fit misses 32 fresh answers by more than their own noise allows
  (normalised loss above max(`exact_loss`, 100·(σ/|F|)²), σ estimated from the answers),
  until two lines in a row add no unit;
- the regression uses `fit_factor`·(#features) Gaussian queries, plain least squares (the
  answers of earlier fits and checks are reused).
Raw inputs far from a standard scale (a model file fed as it is; judged from the attacker pool's
statistics: the median feature's mean beyond 3 or its spread outside [1/3, 3]) are searched in the pool's
standardised coordinates (attacker knowledge, reported), and the copy carries that scaling.
Multi-output victims: every output shares the neurons; the regression has K targets (from
probabilities, centred logits). Noisy outputs blur the neurons; the fit then degrades and the
attacker-side `self_check_loss` on fresh queries says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from harness.attacker.scaling import PoolScale, ScaledOracle
from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.extraction.cryptanalysis import line_pieces as lp
from harness.attacks.extraction.cryptanalysis import relu_lines as rl
from harness.core.errors import AssumptionViolated
from harness.core.gradients import estimate_noise
from harness.scoring.fidelity import judge_fidelity


class QueryLearningParams(Params):
    intervals: int | None = None  # pieces per line; None: 200, kinked pieces halved where needed
    span: float | None = None  # the line is partitioned on t ∈ [−span, span]; None: 50, grown
    max_intervals: int = 1600  # pieces per line, the local refinement included
    min_width: float = 1e-4  # kinked pieces are halved down to this width (× max(1, |t|))
    lines: int = 3  # lines searched before the first fit
    max_lines: int = 12  # lines searched while the fit misses fresh answers beyond their noise
    alpha: float | None = None  # GETGRADIENT step (× max(1, |x|)); None: 1e-6, coarse answers 3·√(σ/|F|)
    fit_factor: float = 3.0  # regression queries per feature
    kink_tol: float = 1e-6  # relative chord/gradient slope mismatch that marks a kink
    exact_loss: float = 1e-10  # a fit this close (normalised loss, or the noise's own) is complete
    max_queries: int | None = None  # None: the budget


def neurons_on_line(oracle, line: rl.Line, p: QueryLearningParams, gen, intervals: int,
                    span: float, alpha: float, prec: lp.Precision | None
                    ) -> tuple[torch.Tensor, torch.Tensor, int, bool]:
    """Alg. 3 on one line: candidate neurons (w (M, d), b (M,)) with ReLU(w·x − b), the pieces
    the line ended with, and whether an end piece held a kink (the span is too short)."""
    edges = rl.sinh_grid(intervals + 1, span, line.u.device)
    pc = lp.measure(oracle, line, edges, alpha, gen)
    # a kink near an end: the span is too short; an unanswered end (saturated probabilities far
    # out on the line) says nothing about kinks
    answered = ~(pc.fm.isnan().any(1) | pc.fl.isnan().any(1) | pc.fr.isnan().any(1))
    kinked = ~pc.clean(line, p.kink_tol, prec) & answered
    at_end = bool(kinked[:2].any() or kinked[-2:].any())
    if p.intervals is None:
        pc = lp.isolate_kinks(oracle, line, pc, alpha, p.kink_tol, gen, min_width=p.min_width,
                              max_pieces=p.max_intervals, prec=prec)
    w, b = lp.neurons(pc, line, p.kink_tol, oracle.info.dim, prec)
    return w, b, len(pc), at_end


def _joined(x, y, x_new, y_new) -> tuple[torch.Tensor, torch.Tensor]:
    """Answered points so far with new ones appended (y may still be empty, of no width)."""
    if len(y) == 0:
        return x_new, y_new
    return torch.cat([x, x_new]), torch.cat([y, y_new])


@dataclass
class _Fit:
    """One regression (Alg. 4): the model, its candidate units, the answered points it used (kept
    for the next fit), the self-check loss, and why the budget cut it short ("" if it did not)."""

    net: rl.ReluNet | None
    w: torch.Tensor
    off: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    loss: float
    units: int
    stopped: str

    @staticmethod
    def empty(d: int, dev) -> _Fit:
        z = torch.zeros(0, d, dtype=torch.float64, device=dev)
        return _Fit(None, z, z[:, 0], z, z[:, :0], float("nan"), 0, "")


@register
class QueryLearning(Attack):
    name = "query_learning"
    family = "extraction"
    needs = frozenset({"prediction", "gradient", "smoothgrad", "whitebox"})
    paper = "001 Alg. 1-4"
    summary = "one-hidden-layer ReLU with biases from value queries (neurons on a Gaussian line + regression)"
    assumes = frozenset({"relu_network"})
    Params = QueryLearningParams

    def skip_reason(self, info):
        if info.output == "label":
            return "needs real-valued predictions (logits or probabilities); the API returns labels"
        return super().skip_reason(info)

    def run(self, oracle, p: QueryLearningParams, ctx) -> Artifact:
        scale = PoolScale.of(getattr(oracle.info, "x_pool", None), oracle.info.dim, oracle.device)
        if not scale.far_from_standard():
            return self._run(oracle, p, ctx)
        # raw inputs (a model file fed as it is): Gaussian lines and regression points in the
        # pool's standardised coordinates, the copy behind the same standardisation
        art = self._run(ScaledOracle(oracle, scale), p, ctx)
        net = art.data.get("model")
        if net is not None:
            art.data["model"] = nn.Sequential(scale.layer(), net)
            w, off = art.data["normals"], art.data["offsets"]
            sd, mu = scale.sd.to(w), scale.mean.to(w)
            art.data["normals"], art.data["offsets"] = w / sd, off - (w / sd) @ mu
        art.notes.append(scale.describe())
        art.metrics["standardised_inputs"] = 1.0
        return art

    def _run(self, oracle, p: QueryLearningParams, ctx) -> Artifact:
        d, dev = oracle.info.dim, oracle.device
        cap = p.max_queries if p.max_queries is not None else oracle.remaining
        # what ends it when the queries run out: the deployment's budget, or its own max_queries
        # (a cap, not a defense)
        out = "cap" if p.max_queries is not None and (
            oracle.remaining is None or p.max_queries < oracle.remaining) else "budget"
        intervals, span = p.intervals or 200, p.span or 50.0
        per_line = (intervals + 1) + intervals * (d + 1)

        def room(n: int) -> bool:
            return (cap is None or oracle.queries + n <= cap) and oracle.affordable(n) >= n

        if not room(per_line + 32 + 2 * d):
            raise AssumptionViolated(f"one line of {intervals} intervals needs {per_line} queries; "
                                     f"{cap} are available (lower intervals)", stopped_by=out)
        noise = estimate_noise(oracle, ctx.gen)
        target = max(p.exact_loss, 100 * noise.rel**2)  # what the answers' own noise leaves
        ws, bs, notes, fit = [], [], [f"{noise.describe()}"], _Fit.empty(d, dev)
        lines, want, idle, pieces, stopped, reason = 0, p.lines, 0, intervals, None, ""
        try:
            alpha, prec = self._precision(oracle, p, noise, ctx.gen, notes)
            while True:
                while lines < want and room(per_line + 2 * d):
                    w, b, pieces, at_end = neurons_on_line(oracle, rl.random_line(d, ctx.gen, dev),
                                                           p, ctx.gen, intervals, span, alpha, prec)
                    if p.span is None and at_end and span < 1e4:
                        span *= 4  # a kink in an end piece lies beyond the span: search again
                        notes.append(f"line {lines + 1}: a kink at the ends: span [−{span:g}, {span:g}]")
                        continue
                    ws.append(w), bs.append(b)
                    lines += 1
                if not ws:
                    break
                before = fit.units
                fit = self._fit(oracle, ws, bs, p, ctx, fit, room, out)
                if fit.stopped:
                    stopped, reason = out, fit.stopped
                    break
                idle = idle + 1 if fit.units <= before else 0
                if fit.loss <= target or lines >= p.max_lines or idle >= 2 or not room(per_line + 2 * d):
                    break
                want = lines + 1  # the fit misses fresh answers: a unit was lost, search on
        except rl.OutOfBudget:
            what = "query budget" if out == "budget" else "max_queries"
            stopped, reason = out, f"the {what} ran out during the line search"
        if fit.net is None:
            raise AssumptionViolated(f"the budget ({cap}) ran out before one line of {intervals} "
                                     "intervals was searched and fitted", stopped_by=out)
        if lines > p.lines:
            notes.append(f"{lines - p.lines} more line(s): the fit missed fresh answers")
        if stopped is None and not fit.loss <= target:
            # the procedure ended without a model that explains the answers as well as their own
            # noise allows: the search is out of precision, not evidence that nothing leaks
            stopped = "precision"
            reason = (f"self-check: the fit misses fresh answers (normalised loss {fit.loss:.2g}, "
                      f"the answers' noise allows {target:.2g}) after {lines} line(s)")
        metrics = {"neurons": float(fit.units), "lines": float(lines), "self_check_loss": fit.loss,
                   "regression_queries": float(len(fit.x)), "intervals": float(pieces),
                   "span": float(span), "noise_loss_floor": target}
        return Artifact("model", data={"model": fit.net, "space": rl.output_space(oracle),
                                       "normals": fit.w.cpu(), "offsets": fit.off.cpu()},
                        metrics=metrics, stopped_by=stopped, reason=reason,
                        progress=f"{fit.units} candidate neurons from {lines} line(s)",
                        notes=[f"{fit.units} candidate neurons from {lines} line(s)", *notes])

    @staticmethod
    def _precision(oracle, p: QueryLearningParams, noise, gen, notes: list[str]
                   ) -> tuple[float, lp.Precision | None]:
        """GETGRADIENT's step and the tolerances of coarse answers (float32 arithmetic, rounding,
        noise: σ/|F| ≥ 1e-12, measured): α = 3·√(σ/|F|) (≥ 1e-6) balances the noise error σ/α
        against steps that cross a kink, and every kink and neuron decision allows for the
        measured value and gradient noise. float64-clean answers keep α = 1e-6, no allowance."""
        if noise.rel < 1e-12:
            return p.alpha or 1e-6, None
        alpha = p.alpha or min(max(1e-6, 3 * noise.rel**0.5), 0.1)
        prec = lp.measure_precision(oracle, alpha, noise, gen)
        notes.append(f"coarse answers: GETGRADIENT step α = {alpha:.2g}, gradient error ≈ "
                     f"{prec.grad:.2g} (measured twice at 8 points)")
        return alpha, prec

    @staticmethod
    def _fit(oracle, ws, bs, p: QueryLearningParams, ctx, last: _Fit, room, out: str = "budget") -> _Fit:
        """Alg. 4 on the candidates so far (near-duplicates merged): least squares over Gaussian
        queries (the earlier fits' and checks' answers reused), then the attacker's own check,
        the normalised loss on 32 fresh queries."""
        d, dev = oracle.info.dim, oracle.device
        w, off = rl.canonical(torch.cat(ws), -torch.cat(bs))  # offsets: w·x − b = w·x + (−b)
        keep = rl.dedupe(w, off, 1e-4)
        w, off = w[keep], off[keep]
        n_feat = 2 * len(w) + 1 + (d if len(w) < d else 0)
        need = max(int(p.fit_factor * n_feat) + 8 - len(last.x), 0)
        stopped = ""
        if not room(need + 32):
            need = max(oracle.affordable(need + 32) - 32, 0)
            stopped = f"budget left {need + len(last.x)} regression queries for {n_feat} features"
            if need + len(last.x) < 2:
                raise AssumptionViolated("no queries left for the regression (Alg. 4)",
                                         stopped_by=out)
        x_new = torch.randn(need, d, generator=ctx.gen, dtype=torch.float64).to(dev)
        x, y = _joined(last.x, last.y, x_new, rl.ask(oracle, x_new))
        ok = ~y.isnan().any(1)
        x, y = x[ok], y[ok]
        # Alg. 4's features [ReLU(ŵ·x − b̂), x, 1]; x enters through the units' own affine maps
        # ŵ·x − b̂ when the neurons span the input (the paper's full x is used otherwise)
        phi = rl.features(x, w, off)
        lin = x if len(w) < d else x[:, :0]
        phi = torch.cat([phi, lin], 1)
        col = phi.norm(dim=0).clamp_min(1e-300)
        coef = rl.lstsq(phi / col, y) / col[:, None]
        h = len(w)
        skip = coef[2 * h + 1:].T if len(w) < d else None
        net = rl.ReluNet(w, off, coef[:h].T, coef[h:2 * h].T, coef[2 * h], skip)
        loss = float("nan")
        if not stopped and room(32):
            xc = torch.randn(32, d, generator=ctx.gen, dtype=torch.float64).to(dev)
            yc = rl.ask(oracle, xc)
            with torch.no_grad():
                loss = float((net(xc) - yc).pow(2).nanmean() / yc.pow(2).nanmean())
            x, y = _joined(x, y, xc, yc)  # fresh answers: the next fit's data
        return _Fit(net, w, off, x, y, loss, h, stopped)

    def judge(self, m, artifact):
        return judge_fidelity(m)
