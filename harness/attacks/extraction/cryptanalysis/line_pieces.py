"""The pieces of a Gaussian line for query_learning (paper 001, Alg. 2–3): each piece holds F at
its ends, and F and its gradient (GETGRADIENT) at its midpoint. A piece is clean when its chord
slope equals ∇F·v there (no kink inside: GETBIAS is valid); neurons are the jumps between
neighbouring clean pieces, which is right only when exactly one kink lies between them.

Beyond the paper's fixed partition (its constants assume well-separated critical points): the
kinks are isolated locally. A kinked piece next to another kinked piece holds two kinks or more,
and so does a lone kinked piece whose flanking clean pieces' affine maps do not meet, at one
point inside it, where F takes their common value (one value query checks that); such pieces
are halved (two gradient points each) until every kink sits alone between clean pieces, or the
piece is as narrow as `min_width`·max(1, |t|), or the budget or `max_pieces` says stop.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from harness.attacks.extraction.cryptanalysis import relu_lines as rl
from harness.core.errors import PrecisionLimit
from harness.core.gradients import AnswerNoise


@dataclass
class Precision:
    """What coarse answers allow, measured by the attacker: `noise`, the error of one value (it
    grows with |x|, `AnswerNoise.at`); `grad`, the error norm of one GETGRADIENT row (σ/α
    amplified by the random directions' solve; α is relative to |x|, so it does not grow),
    from two measurements at the same points (`measure_precision`)."""

    noise: AnswerNoise
    grad: float

    def slope_allowance(self, line: rl.Line, pc: Pieces) -> torch.Tensor:
        """6 standard errors of chord slope − ∇F·v on each piece."""
        along = self.grad * line.v.norm() / line.v.numel() ** 0.5  # random error projected on v
        sigma = self.noise.at(line.at(pc.tm))
        return 6 * (along + 2**0.5 * sigma / (pc.tr - pc.tl).clamp_min(1e-300))


def measure_precision(oracle, alpha: float, noise: AnswerNoise, gen: torch.Generator,
                      points: int = 8) -> Precision:
    """GETGRADIENT twice at `points` Gaussian points with fresh random directions: the median
    difference norm / √2 is one gradient's error (2·points·(d + 1) queries)."""
    d = oracle.info.dim
    x = torch.randn(points, d, generator=gen, dtype=torch.float64).to(oracle.device)
    _, g1 = get_gradients(oracle, x, alpha, gen)
    _, g2 = get_gradients(oracle, x, alpha, gen)
    diff = (g1 - g2).norm(dim=2).flatten()
    diff = diff[torch.isfinite(diff)]  # saturated points carry no gradient
    if len(diff) < 4:
        raise PrecisionLimit(f"only {len(diff)} of {points} precision probes answered (saturated "
                             "outputs): the gradient's noise cannot be measured")
    return Precision(noise, float(diff.median()) / 2**0.5)


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


@dataclass
class Pieces:
    """Pieces [tl, tr] of a line, in order: F at the ends (fl, fr), the midpoint tm with F (fm)
    and gradient (g, (m, K, d)) there; `single`: already checked to hold one kink at most."""

    tl: torch.Tensor
    tr: torch.Tensor
    fl: torch.Tensor
    fr: torch.Tensor
    tm: torch.Tensor
    fm: torch.Tensor
    g: torch.Tensor
    single: torch.Tensor

    def __len__(self) -> int:
        return len(self.tl)

    def take(self, idx: torch.Tensor) -> Pieces:
        return Pieces(*(getattr(self, f.name)[idx] for f in fields(self)))

    @staticmethod
    def cat(parts: list[Pieces]) -> Pieces:
        whole = Pieces(*(torch.cat([getattr(p, f.name) for p in parts]) for f in fields(Pieces)))
        return whole.take(torch.argsort(whole.tl))

    def chord(self) -> torch.Tensor:
        return (self.fr - self.fl) / (self.tr - self.tl)[:, None]

    def clean(self, line: rl.Line, tol: float, prec: Precision | None = None) -> torch.Tensor:
        """Pieces with no kink inside: chord slope = ∇F·v at the midpoint (relative `tol`, plus
        6 standard errors of the answers' noise)."""
        chord, along = self.chord(), self.g @ line.v
        scale = chord.abs().amax(1) + along.abs().amax(1) + 1e-300
        allow = prec.slope_allowance(line, self) if prec else 0.0
        ok = (chord - along).abs().amax(1) <= tol * scale + allow
        return ok & ~(self.fm.isnan().any(1) | self.fl.isnan().any(1) | self.fr.isnan().any(1))


def measure(oracle, line: rl.Line, edges: torch.Tensor, alpha: float, gen) -> Pieces:
    """The pieces between consecutive `edges`: (len(edges) + 1) + (len(edges) − 1)·(d + 1) queries."""
    ends = rl.ask(oracle, line.at(edges))  # GETBIAS: F at every piece end, shared
    tm = (edges[:-1] + edges[1:]) / 2
    fm, g = get_gradients(oracle, line.at(tm), alpha, gen)
    single = torch.zeros(len(tm), dtype=torch.bool, device=tm.device)
    return Pieces(edges[:-1], edges[1:], ends[:-1], ends[1:], tm, fm, g, single)


def halve(oracle, line: rl.Line, pc: Pieces, alpha: float, gen) -> Pieces:
    """Each piece split at its midpoint (F there is known): 2·(d + 1) queries per piece."""
    m1, m2 = (pc.tl + pc.tm) / 2, (pc.tm + pc.tr) / 2
    f, g = get_gradients(oracle, line.at(torch.cat([m1, m2])), alpha, gen)
    n = len(pc)
    no = torch.zeros(2 * n, dtype=torch.bool, device=pc.tl.device)
    return Pieces(torch.cat([pc.tl, pc.tm]), torch.cat([pc.tm, pc.tr]),
                  torch.cat([pc.fl, pc.fm]), torch.cat([pc.fm, pc.fr]),
                  torch.cat([m1, m2]), f, g, no)


def meets_once(oracle, line: rl.Line, pc: Pieces, i: torch.Tensor, tol: float,
               prec: Precision | None = None) -> torch.Tensor:
    """For lone kinked pieces i (clean neighbours i ± 1): True where the neighbours' affine maps
    along the line meet at one t* inside piece i and F(t*) is their common value there (one
    query each): one kink. Two kinks t₁ < t₂ leave F(t*) on the middle piece, off both maps."""
    left, right = i - 1, i + 1
    sl, sr = pc.chord()[left], pc.chord()[right]
    cl, cr = pc.fl[left] - sl * pc.tl[left][:, None], pc.fl[right] - sr * pc.tl[right][:, None]
    ds, dc = sr - sl, cr - cl
    t = -(ds * dc).sum(1) / (ds * ds).sum(1).clamp_min(1e-300)
    inside = (t > pc.tl[i]) & (t < pc.tr[i])
    t = torch.where(inside, t, pc.tm[i])
    f = rl.ask(oracle, line.at(t))
    on = cl + sl * t[:, None]
    scale = on.abs().amax(1) + f.abs().amax(1) + 1e-300
    allow = 0.0
    if prec is not None:  # the chord's error carried out to t*, and F's own
        reach = (t - pc.tm[left]).abs() / (pc.tr[left] - pc.tl[left]).clamp_min(1e-300)
        allow = 20 * prec.noise.at(line.at(t)) * (1 + reach)
    return inside & ((f - on).abs().amax(1) <= tol * scale + allow)


def isolate_kinks(oracle, line: rl.Line, pc: Pieces, alpha: float, tol: float, gen, *,
                  min_width: float, max_pieces: int, rounds: int = 12,
                  prec: Precision | None = None) -> Pieces:
    """Halve kinked pieces that may hold more than one kink (see the module docstring), round
    by round, within the budget; the end pieces are left to the span's growth."""
    d = oracle.info.dim
    for _ in range(rounds):
        kinked = ~pc.clean(line, tol, prec)
        if float(kinked.double().mean()) > 0.5:  # not piecewise linear at this tolerance: noise
            break
        crowd = torch.zeros_like(kinked)
        crowd[1:] |= kinked[1:] & kinked[:-1]
        crowd[:-1] |= kinked[:-1] & kinked[1:]
        inner = torch.ones_like(kinked)
        inner[0] = inner[-1] = False  # an end piece has no clean piece beyond it
        crowd &= inner
        lone = torch.nonzero(kinked & ~crowd & ~pc.single & inner).flatten()
        if len(lone) and oracle.affordable(len(lone)) == len(lone):
            once = meets_once(oracle, line, pc, lone, tol, prec)
            pc.single[lone[once]] = True
            crowd[lone[~once]] = True
        wide = (pc.tr - pc.tl) > min_width * torch.maximum(pc.tl.abs(), pc.tr.abs()).clamp_min(1.0)
        split = crowd & wide
        n = int(split.sum())
        if n == 0 or len(pc) + n > max_pieces or oracle.affordable(2 * n * (d + 1)) < 2 * n * (d + 1):
            break
        pc = Pieces.cat([pc.take(~split), halve(oracle, line, pc.take(split), alpha, gen)])
    return pc


def neurons(pc: Pieces, line: rl.Line, tol: float, dim: int, prec: Precision | None = None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate neurons (w (M, d), b (M,)) with ReLU(w·x − b) from the jumps between
    neighbouring clean pieces (Alg. 3); a jump within 8 standard errors of two gradients'
    noise is no neuron."""
    clean = pc.clean(line, tol, prec)
    intercept = pc.fm - pc.chord() * pc.tm[:, None]  # b_L(I) = F(t_mid) − s·t_mid  (Alg. 1)
    # the d-dimensional affine piece F(x) = G x + c at the midpoint: c = b_L − G·x₀
    g, c = pc.g[clean], intercept[clean] - pc.g[clean] @ line.u
    dg, dc = g[1:] - g[:-1], c[1:] - c[:-1]
    size = dg.flatten(1).norm(dim=1)
    floor = 8 * prec.grad * (2 * g.shape[1]) ** 0.5 if prec else 0.0
    keep = (size > 1e-6 * (g.flatten(1).norm(dim=1).max() if len(g) else 1.0)) & (size > floor)
    dg, dc = dg[keep], dc[keep]
    if not len(dg):
        return dg.new_zeros(0, dim), dg.new_zeros(0)
    # jump of the K outputs = a_k·(w·x − b): its direction in x by the top singular vector
    u, s, vh = torch.linalg.svd(dg, full_matrices=False)
    w = vh[:, 0, :]
    a = u[:, :, 0] * s[:, :1]  # (M, K)
    b = -(dc * a).sum(1) / (a * a).sum(1)  # dc ≈ −a·b
    return w, b

