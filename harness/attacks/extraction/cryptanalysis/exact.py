"""The shared driver of the exact attacks (paper 000 Alg. 1, 1a, 1b, App. B and C): search
random lines for ReLU kinks (by gradients or by values), turn every kink into a hyperplane,
fit the output layer, check the model against fresh queries, and start a new line at the worst
check point while it disagrees.

Every tolerance comes from the answers themselves, never from the victim's declared precision
(the attacker does not know it): `estimate_noise` measures the answers' error from repeated and
nearby queries, and kink tests, finite-difference steps and the self-check use it (Carlini,
Jagielski, Mironov 2020, Sec. 4–6: precision is the attack's bottleneck on real models).
The best model so far is kept with `ctx.keep` after every line, so a stopped attack (budget,
faults, interrupt) is scored on what it had; a self-check that never reaches the answers' noise
is reported as `stopped_by: precision` with the model and the error it did reach.
"""

from __future__ import annotations

import torch

from harness.attacks.base import Artifact
from harness.attacks.extraction.cryptanalysis import relu_lines as rl
from harness.attacks.extraction.cryptanalysis.plane_refine import (
    refine_planes,
    relocate_offsets,
    relocate_offsets_by_values,
)
from harness.core.errors import AssumptionViolated, PrecisionLimit
from harness.core.gradients import AnswerNoise, estimate_noise

FINE_T = 1e-9  # gradient brackets are bisected to this relative width (below float32 resolution)


def gradient_tolerance(oracle, gen: torch.Generator) -> tuple[float, bool]:
    """(relative change that counts as a gradient jump, randomized?) from 3 explain queries: a
    point twice (randomized explanations differ) and once moved by 1e-7 of its norm (the same
    linear cell: any difference is the victim's arithmetic jitter)."""
    d = oracle.info.dim
    x = torch.randn(1, d, generator=gen, dtype=torch.float64).to(oracle.device)
    v = torch.randn(1, d, generator=gen, dtype=torch.float64).to(oracle.device)
    g = rl.ask(oracle, torch.cat([x, x, x + 1e-7 * x.norm() * v / v.norm()]), "explain")
    scale = float(g.abs().amax()) + 1e-300
    if float((g[0] - g[1]).abs().max()) > 1e-6 * scale:
        return 0.0, True
    jitter = float((g[0] - g[2]).abs().max()) / scale
    f32 = bool(torch.all(g.float().double() == g))
    return max(30 * jitter, 1e-6 if f32 else 1e-9), False


def verify_planes(oracle, n: torch.Tensor, b: torch.Tensor, delta: torch.Tensor,
                  gen: torch.Generator, step: float, tol: float, crossings: int = 1
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Which candidate hyperplanes are real: crossing each at `crossings` more points changes the
    explained gradient by vectors parallel to the first jump. Returns (mask, normals averaged
    over every crossing: each jump carries its own rounding, so the mean is more precise)."""
    h, d = n.shape
    r = torch.randn(crossings, h, d, generator=gen, dtype=torch.float64).to(n.device)
    r = r - (r * n).sum(-1, keepdim=True) * n
    p = -b[:, None] * n + r  # points of the hyperplane, away from the search line
    s = step * p.norm(dim=-1, keepdim=True).clamp_min(1.0)
    g = rl.ask(oracle, torch.cat([(p + s * n).reshape(-1, d), (p - s * n).reshape(-1, d)]),
               "explain").reshape(2, crossings, h, d)
    jump = g[0] - g[1]
    dot = (jump * delta).sum(-1)
    cos = dot.abs() / (jump.norm(dim=-1) * delta.norm(dim=-1)).clamp_min(1e-300)
    big = jump.norm(dim=-1) > tol * (g[0].norm(dim=-1) + g[1].norm(dim=-1))
    par = big & (cos > 1 - max(100 * tol, 1e-6))
    ok = par.sum(0) >= (crossings + 1) // 2  # a crossing may meet another unit's plane too
    aligned = jump * (torch.sign(dot) * par)[..., None]
    mean = (delta + aligned.sum(0)) / (1 + par.sum(0))[:, None]
    return ok, mean


def find_planes(oracle, line, grid, p, search, noise: AnswerNoise, tol: float, gen=None):
    """Candidate hyperplanes crossing one line: (normals, offsets, jump weights, raw jumps,
    kink points, whether each position passed its check)."""
    sure = None
    if search == "gradients":
        k = rl.bisect_gradients(oracle, line, grid, p.eps or FINE_T, tol, p.max_units)
        if not len(k.tl):  # the gradient never changed along this line
            z = line.u.new_zeros(0, line.u.shape[-1])
            return z, z[:, 0], z[:, 0], z, z, z[:, 0].bool()
        if noise.rel < 1e-12:  # float64-clean values: intersect the affine pieces exactly
            t = rl.locate(oracle, line, k.tl, k.tr)
        else:  # the bracket is already below the answers' resolution
            t = (k.tl + k.tr) / 2
        normals = k.right - k.left
    else:
        from harness.attacks.extraction.cryptanalysis.fd_rows import jacobian_jumps

        k = rl.bisect_values(oracle, line, grid, p.eps or 1e-4, noise, p.max_units)
        if not len(k.tl):  # the values stayed linear along this line
            z = line.u.new_zeros(0, line.u.shape[-1])
            return z, z[:, 0], z[:, 0], z, z, z[:, 0].bool()
        if noise.rel < 1e-12:  # float64-clean values: the position is checked (one query)
            t, sure = rl.locate_sure(oracle, line, k.tl, k.tr, k.left, k.right, noise)
        else:  # coarse values: the planes are re-measured where they are (plane_refine)
            t = rl.locate(oracle, line, k.tl, k.tr, k.left, k.right)
        normals = jacobian_jumps(oracle, line, t, noise, getattr(p, "fd_step", 1e-5), gen)
    offsets = -(normals * line.at(t)).sum(1)
    ok = torch.isfinite(normals).all(1) & torch.isfinite(offsets) & (normals.abs().amax(1) > 0)
    sure = torch.ones_like(ok) if sure is None else sure
    normals, offsets, x, sure = normals[ok], offsets[ok], line.at(t)[ok], sure[ok]
    return normals, offsets, rl.jump_weights(normals, line.v), normals, x, sure


def check_tolerance(noise: AnswerNoise, given: float | None, search: str, d: int) -> float:
    """The self-check's bar: the answers' own error (a max over fresh queries of ~6σ relative to
    the signal scale; by values, amplified by the d-dimensional plane fits), within [1e-7, 1e-2]."""
    if given is not None:
        return given
    amp = d if search == "values" and noise.rel >= 1e-12 else 1
    return min(max(1e-7, 10 * noise.rel * amp), 1e-2)  # above 1%: not the model, whatever the noise


def extract(oracle, ctx, p, search: str) -> Artifact:
    """The shared driver of gradient_exact (search='gradients') and finite_difference_exact
    (search='values'); returns the model artifact with the attacker's own measurements."""
    d, dev = oracle.info.dim, oracle.device
    state = _State(d, dev)
    try:
        noise = estimate_noise(oracle, ctx.gen)
        state.notes.append(noise.describe())
        tol = p.tol or 0.0
        if search == "gradients":
            gtol, randomized = gradient_tolerance(oracle, ctx.gen)
            if randomized:
                raise AssumptionViolated("the API's explanations are randomized (the same query "
                                         "twice differs): exact extraction needs exact gradients")
            tol = p.tol or gtol
        elif noise.randomized:
            state.notes.append("predictions are randomized: kinks are judged against their noise")
        check_tol = check_tolerance(noise, p.check_tol, search, d)
        state.dedupe_tol = 1e-4 if noise.rel < 1e-12 else 1e-2
        grid = rl.sinh_grid(p.grid, p.span, dev)
        single = max(1, oracle.info.n_outputs) == 1
        while state.lines < p.max_lines:
            line = rl.random_line(d, ctx.gen, dev, state.start)
            state.lines += 1
            n, b, w, jumps, at, fine = find_planes(oracle, line, grid, p, search, noise, tol, ctx.gen)
            size = jumps.norm(dim=1)
            n, b = rl.canonical(n, b)
            if search == "values" and noise.rel < 1e-12 and len(n):
                # float64-clean answers: each offset measured again where the plane is nearest
                # the origin, not at a kink far out on the line
                b, _ = relocate_offsets_by_values(oracle, n, b, at, size, noise)
            if search == "values" and noise.rel >= 1e-12 and len(n):
                # coarse answers: re-measure the planes this line adds (not those known already)
                new = state.novel(n, b, 0.05)
                n, b, w = n[new], b[new], w[new]
                n, b, fine = refine_planes(oracle, n, b, at[new], size[new], noise, ctx.gen)
            if p.verify and search == "gradients" and len(n):
                # float32-like gradients: average the jump over 16 crossings of each plane
                many = 16 if tol >= 1e-6 else 1
                ok, mean = verify_planes(oracle, n, b, jumps, ctx.gen, 1e-5, max(tol, 1e-9), many)
                state.rejected += int((~ok).sum())
                if many > 1:
                    n2, b2 = rl.canonical(mean, -(mean * at).sum(1))
                    n, b = n2, b2
                n, b, w, fine, at = n[ok], b[ok], w[ok], fine[ok], at[ok]
                if many > 1 and len(n):  # the offset from a far kink carries the normal's error
                    reach = (100 * max(tol, 1e-9) * at.norm(dim=1)).clamp(1e-3, 1.0)
                    b = relocate_offsets(oracle, n, b, reach)
            state.add(n, b, w, fine)
            if len(state.n) > p.max_units:  # smooth outputs (tanh, sigmoid) bend everywhere
                raise AssumptionViolated(
                    f"more than {p.max_units} distinct hyperplanes after {state.lines} line(s): the "
                    "outputs are not those of a one-hidden-layer ReLU network")
            if not len(state.n):
                state.start = None
                continue
            err, per = state.fit(oracle, ctx, search == "gradients" and single, noise, check_tol)
            ctx.keep(state.artifact(oracle, search, check_tol))
            if err <= check_tol:
                break
            state.start = state.xc[int(per.argmax())]
    except rl.OutOfBudget as exc:
        return state.artifact(oracle, search, None, stopped_by="budget",
                              reason=f"query budget exhausted after {state.lines} line(s) ({exc})")
    except AssumptionViolated as exc:
        exc.artifact = ctx.best
        raise
    if state.net is None:
        if noise.rel >= 1e-12:  # coarse answers: a bend may hide below their noise
            raise PrecisionLimit(f"no ReLU hyperplane rose above the answers' noise on "
                                 f"{state.lines} line(s) ({noise.describe()})")
        raise AssumptionViolated(f"no ReLU hyperplane found on {state.lines} line(s) (the "
                                 "outputs never bent, or every change failed verification)")
    art = state.artifact(oracle, search, check_tol)
    if not state.err <= check_tol:  # a NaN error fails the check too
        art.stopped_by = "precision"
        art.reason = (f"the recovered model disagrees with the API on fresh queries (max relative "
                      f"error {state.err:.3g} > {check_tol:.3g}, the answers' own noise) after "
                      f"{state.lines} line(s): units missed, answers too coarse, or not a "
                      "one-hidden-layer ReLU network")
    return art


class _State:
    """What the driver has so far: hyperplanes, jump weights, the fitted model, its check."""

    def __init__(self, d: int, dev):
        self.n = torch.zeros(0, d, dtype=torch.float64, device=dev)
        self.b = torch.zeros(0, dtype=torch.float64, device=dev)
        self.w = torch.zeros(0, dtype=torch.float64, device=dev)
        self.fine = torch.zeros(0, dtype=torch.bool, device=dev)
        self.net, self.err, self.cond = None, float("inf"), float("inf")
        self.lines, self.rejected, self.start, self.xc = 0, 0, None, None
        self.notes: list[str] = []
        self.output_from = "predictions"
        self.dedupe_tol = 1e-4

    def novel(self, n, b, tol: float) -> torch.Tensor:
        """Mask of planes farther than tol from every well-measured plane found so far."""
        known = self.fine
        if not bool(known.any()) or not len(n):
            return torch.ones(len(n), dtype=torch.bool, device=n.device)
        new = torch.cat([n, b[:, None]], 1)
        old = torch.cat([self.n[known], self.b[known, None]], 1)
        dist = torch.minimum(torch.cdist(new, old), torch.cdist(new, -old))
        return dist.min(dim=1).values > tol

    def add(self, n, b, w, fine) -> None:
        """Merge new planes; of near-equal ones the first in the order (well-measured old, new,
        coarse old) stays."""
        parts = [(self.n[self.fine], self.b[self.fine], self.w[self.fine], self.fine[self.fine]),
                 (n, b, w, fine),
                 (self.n[~self.fine], self.b[~self.fine], self.w[~self.fine], self.fine[~self.fine])]
        n, b, w, fine = (torch.cat(c) for c in zip(*parts, strict=True))
        keep = rl.dedupe(n, b, self.dedupe_tol)
        self.n, self.b, self.w, self.fine = n[keep], b[keep], w[keep], fine[keep]

    def fit(self, oracle, ctx, from_jumps: bool, noise: AnswerNoise, check_tol: float):
        """Fit the output layer (least squares on predictions; for a one-output gradient API also
        from the gradient jumps, keeping whichever matches fresh queries better)."""
        extra = 16 if noise.rel < 1e-10 else 16 + 4 * (2 * len(self.n) + 1)
        net, cond = rl.fit_output(oracle, self.n, self.b, ctx.gen, extra=extra)
        self.xc = rl.check_points(oracle, 32, ctx.gen)
        err, per = rl.self_check(oracle, net, self.xc)
        how = "predictions"
        if from_jumps:
            alt = rl.output_from_jumps(oracle, self.n, self.b, self.w, ctx.gen)
            err2, per2 = rl.self_check(oracle, alt, self.xc)
            # noisy or rounded predictions: 32 check points cannot tell the two fits apart, and
            # the least-squares one fitted 2h + 1 coefficients to that noise where the jumps'
            # model took only its bias from it; it is kept while it matches within the noise
            if err2 < err or (noise.rel >= 1e-10 and err2 <= check_tol):
                net, err, per, how = alt, err2, per2, "gradient jumps"
        self.net, self.err, self.cond, self.output_from = net, err, cond, how
        return err, per

    def artifact(self, oracle, search, check_tol, stopped_by=None, reason="") -> Artifact:
        notes = self.notes + [f"search by {search}, {self.lines} line(s); output layer from "
                              f"{self.output_from}"]
        if self.rejected:
            notes.append(f"{self.rejected} gradient jumps were not ReLU hyperplanes (class "
                         "boundaries)")
        metrics = {"units_found": float(len(self.n)), "lines": float(self.lines),
                   "self_check_error": self.err, "fit_condition": self.cond}
        if check_tol is not None:
            metrics["self_check_tolerance"] = check_tol
        data = {"model": self.net, "space": rl.output_space(oracle), "normals": self.n.cpu(),
                "offsets": self.b.cpu()}
        progress = f"{len(self.n)} units found on {self.lines} line(s)"
        return Artifact("model", data=data, metrics=metrics, notes=notes, stopped_by=stopped_by,
                        reason=reason, progress=progress)
