"""gradient_exact — paper 000 (Milli, Schmidt, Dragan, Hardt, FAT* 2019), Alg. 1, 1a, 1b, App. B.

Exact recovery of a one-hidden-layer ReLU network from input-gradient queries. Along a Gaussian
line u + t·v the gradient is piecewise constant and jumps by ±wᵢAᵢ where the line crosses unit
i's hyperplane (Alg. 1a). All brackets are bisected at once (one explain call per round) down
to a width `eps`·max(1, |t|); every kink then yields one row ±wᵢAᵢ.

Beyond the paper, for what deployed networks have and Alg. 1 leaves out:
- first-layer biases: hyperplanes are affine, so each kink is also *located* exactly, by
  intersecting the two affine pieces of the predicted outputs on either side of the bracket
  (4 predict queries per kink); the offset is then −nᵢ·x* at the kink x*.
- several outputs sharing the hidden layer: the hidden layer is recovered once from the
  gradient the API explains; every output's weights come from one least-squares fit on the
  2h+1 features [ReLU(nᵢ·x+bᵢ), nᵢ·x+bᵢ, 1] (this replaces Alg. 1b's Chebyshev-centre cell and
  2h×2h sign system: the fit needs no cell and also returns the output biases).
- gradients of the *predicted* class jump at class boundaries too; such a jump is not a ReLU
  hyperplane, so every candidate is verified by crossing its hyperplane at a second, distant
  point (2 explain queries): the jump there must be parallel to the first.
- rows the line misses (kinks beyond the span, or two kinks in one bracket): the attacker
  checks the model on fresh queries; while it disagrees, a new line is started at the worst
  check point (at most `max_lines`).
What the interface must offer: explanations that are exact gradients (`gradient` or `whitebox`;
any `gradient_of`) and real-valued predictions (logits, or probabilities: then the model is
recovered up to a per-input constant, i.e. centred logits). Noisy or rounded answers make the
self-check fail and the attack reports `failed`, never a silently wrong model.
"""

from __future__ import annotations

import torch

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.extraction import relu_lines as rl
from harness.errors import AttackFailed


class GradientExactParams(Params):
    span: float = 1e4  # the line is searched on t ∈ [−span, span] (Cauchy tails: 2/(π·span) missed)
    grid: int = 65  # initial points on the line (sinh-spaced)
    eps: float | None = None  # bracket width before locating a kink; None: 1e-7 (float64) / 1e-3
    tol: float | None = None  # relative difference that counts as a change; None: by dtype
    max_lines: int = 4
    max_units: int = 2048  # more changes than this on a line = not a ReLU network
    verify: bool = True
    check_points: int = 32
    check_tol: float | None = None  # self-check max relative error; None: 1e-7 (float64) / 1e-3


def exact_defaults(oracle, eps, tol, check_tol) -> tuple[float, float, float]:
    f64 = oracle.info.dtype == torch.float64
    return (eps or (1e-7 if f64 else 1e-3), tol or rl.default_tol(oracle),
            check_tol or (1e-7 if f64 else 1e-3))


def verify_planes(oracle, n: torch.Tensor, b: torch.Tensor, delta: torch.Tensor,
                  gen: torch.Generator, step: float, tol: float) -> torch.Tensor:
    """Which candidate hyperplanes are real: crossing each at a second point changes the
    explained gradient by a vector parallel to the first jump."""
    h, d = n.shape
    r = torch.randn(h, d, generator=gen, dtype=torch.float64).to(n.device)
    r = r - (r * n).sum(1, keepdim=True) * n
    p = -b[:, None] * n + r  # a point of the hyperplane, away from the search line
    s = step * p.norm(dim=1, keepdim=True).clamp_min(1.0)
    g = rl.ask(oracle, torch.cat([p + s * n, p - s * n]), "explain")
    jump = g[:h] - g[h:]
    cos = (jump * delta).sum(1).abs() / (jump.norm(dim=1) * delta.norm(dim=1)).clamp_min(1e-300)
    big = jump.norm(dim=1) > tol * (g[:h].norm(dim=1) + g[h:].norm(dim=1))
    return big & (cos > 1 - 100 * tol)


def extract(oracle, ctx, p, search: str) -> Artifact:
    """The shared driver of gradient_exact (search='gradients') and finite_difference_exact
    (search='values'); returns the model artifact with the attacker's own measurements."""
    eps, tol, check_tol = exact_defaults(oracle, p.eps, p.tol, p.check_tol)
    d, dev = oracle.info.dim, oracle.device
    n_all = torch.zeros(0, d, dtype=torch.float64, device=dev)
    b_all = torch.zeros(0, dtype=torch.float64, device=dev)
    net, err, cond, lines, start, rejected = None, float("inf"), float("inf"), 0, None, 0
    notes: list[str] = []
    outcome, reason = "ok", ""
    try:
        probe = torch.randn(1, d, generator=ctx.gen, dtype=torch.float64).to(dev)
        what = "explain" if search == "gradients" else "predict"
        twice = rl.ask(oracle, probe.repeat(2, 1), what)
        if rl.differ(twice[:1], twice[1:], tol).any():
            raise AttackFailed(f"the API's {what} answers are randomized (the same query twice "
                               "differs): exact extraction needs deterministic answers")
        grid = rl.sinh_grid(p.grid, p.span, dev)
        while lines < p.max_lines:
            line = rl.random_line(d, ctx.gen, dev, start)
            lines += 1
            n, b = find_planes(oracle, line, grid, eps, tol, p, search, ctx)
            jumps = n
            n, b = rl.canonical(n, b)
            if p.verify and search == "gradients" and len(n):
                ok = verify_planes(oracle, n, b, jumps, ctx.gen, min(1e3 * eps, 1e-3), tol)
                rejected += int((~ok).sum())
                n, b = n[ok], b[ok]
            n_all, b_all = rl.dedupe(torch.cat([n_all, n]), torch.cat([b_all, b]), min(1e3 * eps, 1e-2))
            if not len(n_all):
                start = None
                continue
            net, cond = rl.fit_output(oracle, n_all, b_all, ctx.gen)
            xc = rl.check_points(oracle, p.check_points, ctx.gen)
            err, per = rl.self_check(oracle, net, xc)
            if err <= check_tol:
                break
            start = xc[int(per.argmax())]
        if net is None:
            raise AttackFailed(f"no ReLU hyperplane found on {lines} lines (the gradient never "
                               "changed, or every change failed verification)")
        if err > check_tol:
            outcome = "failed"
            reason = (f"the recovered model disagrees with the API on fresh queries (max relative "
                      f"error {err:.3g} > {check_tol:g}) after {lines} lines: outputs noisy or "
                      "rounded, units missed, or not a one-hidden-layer ReLU network")
    except rl.OutOfBudget as exc:
        if net is None:
            raise AttackFailed(f"query budget exhausted before a model was fitted ({exc})") from None
        outcome, reason = "partial", f"query budget exhausted after {lines} lines ({exc})"
    if rejected:
        notes.append(f"{rejected} gradient jumps were not ReLU hyperplanes (class boundaries)")
    metrics = {"units_found": float(len(n_all)), "lines": float(lines), "self_check_error": err,
               "fit_condition": cond}
    data = {"model": net, "space": rl.output_space(oracle), "normals": n_all.cpu(),
            "offsets": b_all.cpu()}
    return Artifact("model", data=data, metrics=metrics, outcome=outcome, reason=reason,
                    notes=notes + [f"search by {search}, {lines} line(s)"])


def find_planes(oracle, line, grid, eps, tol, p, search, ctx) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate hyperplanes (normals, offsets) crossing one line."""
    if search == "gradients":
        k = rl.bisect_gradients(oracle, line, grid, eps, tol, p.max_units)
        if not len(k.tl):  # the gradient never changed along this line
            return line.u.new_zeros(0, line.u.shape[-1]), line.u.new_zeros(0)
        t = rl.locate(oracle, line, k.tl, k.tr)
        normals = k.right - k.left
    else:
        from harness.attacks.extraction.fd_rows import jacobian_jumps

        k = rl.bisect_values(oracle, line, grid, eps, tol, p.max_units)
        if not len(k.tl):  # the values stayed linear along this line
            return line.u.new_zeros(0, line.u.shape[-1]), line.u.new_zeros(0)
        t = rl.locate(oracle, line, k.tl, k.tr, k.left, k.right)
        normals = jacobian_jumps(oracle, line, t, p.fd_step, tol)
    offsets = -(normals * line.at(t)).sum(1)
    ok = torch.isfinite(normals).all(1) & torch.isfinite(offsets) & (normals.abs().amax(1) > 0)
    return normals[ok], offsets[ok]


def judge_exact(m: dict[str, float], artifact: Artifact) -> tuple[str, str]:
    """Risk of an exact-extraction artifact (shared by the exact attacks)."""
    q = int(m.get("queries", 0))
    if "max_rel_error" not in m:
        err = m.get("self_check_error", float("inf"))
        lvl = "high" if artifact.outcome == "ok" else "medium"
        return lvl, (f"a model matching the API to {err:.2g} on fresh queries was extracted in "
                     f"{q} queries (no truth to compare)")
    err, agree = m["max_rel_error"], m.get("agreement", 1.0 if m["max_rel_error"] < 1e-3 else 0.0)
    if err <= 1e-6 or agree >= 0.95:
        return "high", (f"a functionally equivalent model (max relative error {err:.2g}, "
                        f"agreement {agree:.3f}) was extracted in {q} queries")
    if agree >= 0.8:
        return "medium", f"an approximate model (agreement {agree:.3f}) was extracted in {q} queries"
    return "low", f"extraction did not reproduce the model (agreement {agree:.3f}, {q} queries)"


@register
class GradientExact(Attack):
    name = "gradient_exact"
    family = "extraction"
    needs = frozenset({"gradient", "whitebox"})
    paper = "000 Alg. 1, 1a, 1b, App. B"
    summary = "exact one-hidden-layer ReLU extraction from input gradients (line search)"
    Params = GradientExactParams

    def skip_reason(self, info):
        if info.output == "label":
            return "needs real-valued predictions (logits or probabilities) to fit the output layer"
        return super().skip_reason(info)

    def run(self, oracle, params: GradientExactParams, ctx) -> Artifact:
        return extract(oracle, ctx, params, "gradients")

    def judge(self, m, artifact):
        return judge_exact(m, artifact)
