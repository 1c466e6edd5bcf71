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
- the partition is sinh-spaced on [−span, span] (`intervals` pieces): short pieces near 0,
  where most critical points of a Gaussian line lie, long ones in the Cauchy tails; unless
  given, both are chosen from what the line shows: more than 1 in 8 pieces with a kink (two
  kinks in one piece lose a neuron: many neurons, k > d) doubles the pieces, a kink in an end
  piece (large biases push kinks out) quadruples the span, and the line is searched again
  (its candidates dropped);
- α = `alpha`·max(1, |x|) (1e-6: below any realistic distance to a kink, above rounding);
- intervals whose chord slope disagrees with ∇·v contain a kink and are dropped (GETBIAS is
  only valid inside a linear piece); candidates are differences of *neighbouring* clean
  intervals (the paper forms all m(m−1) pairs and filters them by the bounds (5); neighbours
  already contain one neuron per critical point and keep the regression small);
- `lines` independent lines, union of candidates, near-duplicates merged;
- the regression uses `fit_factor`·(#features) Gaussian queries, plain least squares.
Multi-output victims: every output shares the neurons; the regression has K targets (from
probabilities, centred logits). Noisy outputs blur the neurons; the fit then degrades and the
attacker-side `self_check_loss` on fresh queries says so.
"""

from __future__ import annotations

import torch

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.extraction import relu_lines as rl
from harness.attacks.extraction.fidelity import judge_fidelity
from harness.errors import AssumptionViolated


class QueryLearningParams(Params):
    intervals: int | None = None  # pieces per line; None: from the data (200, doubled while needed)
    span: float | None = None  # the line is partitioned on t ∈ [−span, span]; None: 50, grown
    max_intervals: int = 1600  # the data-driven choice stops here
    lines: int = 3
    alpha: float = 1e-6  # GETGRADIENT step, relative to max(1, |x|)
    fit_factor: float = 3.0  # regression queries per feature
    kink_tol: float = 1e-6  # relative chord/gradient slope mismatch that marks a kink
    max_queries: int | None = None  # None: the budget


def get_gradients(oracle, x: torch.Tensor, alpha: float, gen: torch.Generator):
    """Alg. 2 for a batch of points: (values (N, K), gradients (N, K, d)); N·(d+1) queries."""
    n, d = x.shape
    z = torch.randn(n, d, d, generator=gen, dtype=torch.float64).to(x.device)
    z = z / z.norm(dim=2, keepdim=True)
    a = alpha * x.norm(dim=1).clamp_min(1.0)
    pts = torch.cat([x, (x[:, None, :] + a[:, None, None] * z).reshape(n * d, d)])
    f = rl.ask(oracle, pts)
    base, moved = f[:n], f[n:].reshape(n, d, -1)
    v = (moved - base[:, None, :]) / a[:, None, None]  # (n, d, K): ⟨∇F_k, z_j⟩
    grads = torch.linalg.solve(z, v)  # (n, d, K)
    return base, grads.permute(0, 2, 1)


def neurons_on_line(oracle, line: rl.Line, p: QueryLearningParams, gen, intervals: int,
                    span: float) -> tuple[torch.Tensor, ...]:
    """Alg. 3 on one line: candidate neurons (w (M, d), b (M,)) with ReLU(w·x − b), and what the
    partition showed: (share of intervals with a kink, whether an end interval had one)."""
    edges = rl.sinh_grid(intervals + 1, span, line.u.device)
    ends = rl.ask(oracle, line.at(edges))  # GETBIAS: F at every interval end, shared
    mids = (edges[:-1] + edges[1:]) / 2
    fm, grads = get_gradients(oracle, line.at(mids), p.alpha, gen)
    chord = (ends[1:] - ends[:-1]) / (edges[1:] - edges[:-1])[:, None]  # (m, K)
    along = grads @ line.v  # (m, K): ∇F·v
    scale = chord.abs().amax(1) + along.abs().amax(1) + 1e-300
    clean = ((chord - along).abs().amax(1) <= p.kink_tol * scale) & ~fm.isnan().any(1)
    clean &= ~(ends[1:].isnan().any(1) | ends[:-1].isnan().any(1))
    kinked = ~clean
    crowded = float(kinked.double().mean())
    at_end = bool(kinked[:2].any() or kinked[-2:].any())
    intercept = fm - chord * mids[:, None]  # b_L(I) = F(t_mid) − s·t_mid  (Alg. 1)
    # the d-dimensional affine piece F(x) = G x + c at the midpoint: c = b_L − G·x₀
    g, c = grads[clean], intercept[clean] - grads[clean] @ line.u
    dg, dc = g[1:] - g[:-1], c[1:] - c[:-1]  # neighbouring clean pieces
    size = dg.flatten(1).norm(dim=1)
    keep = size > 1e-6 * (g.flatten(1).norm(dim=1).max() if len(g) else 1.0)
    dg, dc = dg[keep], dc[keep]
    if not len(dg):
        return dg.new_zeros(0, oracle.info.dim), dg.new_zeros(0), crowded, at_end
    # jump of the K outputs = a_k·(w·x − b): its direction in x by the top singular vector
    u, s, vh = torch.linalg.svd(dg, full_matrices=False)
    w = vh[:, 0, :]
    a = u[:, :, 0] * s[:, :1]  # (M, K)
    b = -(dc * a).sum(1) / (a * a).sum(1)  # dc ≈ −a·b
    return w, b, crowded, at_end


@register
class QueryLearning(Attack):
    name = "query_learning"
    family = "extraction"
    needs = frozenset({"prediction", "gradient", "smoothgrad", "whitebox"})
    paper = "001 Alg. 1-4"
    summary = "one-hidden-layer ReLU with biases from value queries (neurons on a Gaussian line + regression)"
    Params = QueryLearningParams

    def skip_reason(self, info):
        if info.output == "label":
            return "needs real-valued predictions (logits or probabilities); the API returns labels"
        return super().skip_reason(info)

    def run(self, oracle, p: QueryLearningParams, ctx) -> Artifact:
        d, dev = oracle.info.dim, oracle.device
        cap = p.max_queries if p.max_queries is not None else oracle.remaining
        intervals, span = p.intervals or 200, p.span or 50.0
        per_line = (intervals + 1) + intervals * (d + 1)
        if cap is not None and cap - 2 * d < per_line:
            raise AssumptionViolated(f"one line of {intervals} intervals needs {per_line} queries; "
                                     f"{cap} are available (lower intervals)", stopped_by="budget")
        ws, bs, lines, notes = [], [], 0, []
        try:
            while lines < p.lines:
                w, b, crowded, at_end = neurons_on_line(oracle, rl.random_line(d, ctx.gen, dev),
                                                        p, ctx.gen, intervals, span)
                lines += 1
                ws.append(w), bs.append(b)
                # data-driven partition (beyond the paper): a line whose intervals hold kinks
                # in more than 1 of 8 pieces likely has two in one (a neuron lost), and kinks in
                # the end pieces lie beyond the span; refine and keep what was found
                grow = p.intervals is None and crowded > 1 / 8 and 2 * intervals <= p.max_intervals
                reach = p.span is None and at_end and span < 1e4
                more = 2 * intervals if grow else intervals
                if cap is not None and oracle.queries + (more + 1) * (d + 2) > cap - 2 * d:
                    grow = reach = False  # the budget cannot pay a finer line: keep this one
                if grow or reach:
                    intervals = 2 * intervals if grow else intervals
                    span = 4 * span if reach else span
                    notes.append(f"line {lines}: kinks in {crowded:.0%} of the pieces"
                                 f"{' and at the ends' if at_end else ''}: {intervals} pieces on "
                                 f"[−{span:g}, {span:g}]")
                    ws.pop(), bs.pop()  # its neurons may straddle two kinks: search it again
                    lines -= 1
                if cap is not None and oracle.queries + (intervals + 1) * (d + 2) > cap - 2 * d:
                    break
        except rl.OutOfBudget:
            notes.append("budget ran out during the line search")
        if not ws:
            raise AssumptionViolated(f"the budget ({cap}) ran out before one line of {intervals} "
                                     "intervals was searched", stopped_by="budget")
        w, b = rl.canonical(torch.cat(ws), -torch.cat(bs))  # offsets: w·x − b = w·x + (−b)
        keep = rl.dedupe(w, b, 1e-4)
        w, off = w[keep], b[keep]
        n_feat = 2 * len(w) + 1 + (d if len(w) < d else 0)
        n_fit = int(p.fit_factor * n_feat) + 8
        stopped, reason = None, ""
        if oracle.affordable(n_fit) < n_fit:
            n_fit = oracle.affordable(n_fit)
            stopped, reason = "budget", f"budget left {n_fit} regression queries for {n_feat} features"
            if n_fit < 2:
                raise AssumptionViolated("no budget left for the regression (Alg. 4)",
                                         stopped_by="budget")
        x = torch.randn(n_fit, d, generator=ctx.gen, dtype=torch.float64).to(dev)
        y = rl.ask(oracle, x)
        keep = ~y.isnan().any(1)
        x, y = x[keep], y[keep]
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
        xc = torch.randn(32, d, generator=ctx.gen, dtype=torch.float64).to(dev)
        loss = float("nan")
        if oracle.affordable(32) == 32:
            yc = rl.ask(oracle, xc)
            with torch.no_grad():
                loss = float((net(xc) - yc).pow(2).mean() / yc.pow(2).mean())
        metrics = {"neurons": float(h), "lines": float(lines), "self_check_loss": loss,
                   "regression_queries": float(len(x)), "intervals": float(intervals),
                   "span": float(span)}
        return Artifact("model", data={"model": net, "space": rl.output_space(oracle),
                                       "normals": w.cpu(), "offsets": off.cpu()},
                        metrics=metrics, stopped_by=stopped, reason=reason,
                        progress=f"{h} candidate neurons from {lines} line(s)",
                        notes=[f"{h} candidate neurons from {lines} line(s)", *notes])

    def judge(self, m, artifact):
        return judge_fidelity(m)
