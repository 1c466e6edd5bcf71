"""Precision improvement for hyperplanes found from coarse answers (Carlini, Jagielski, Mironov
2020, "Cryptanalytic Extraction of Neural Network Models", Sec. 4–6: many points on each
critical hyperplane, solved in float64 on the attacker's side).

A finite-difference normal carries the answers' error divided by the step, which float32
arithmetic makes ~1e-2 on a 300-dimensional input. Instead of differencing, each hyperplane is
re-measured where it is: around its kink, `2d + 16` points are spread on the current estimate
of the plane and, from each, the line along the current normal is probed at ±w, ±2w, ±3w; the
two affine pieces on either side are intersected to place the plane on that line (an error of
~3σ/|p| along the normal, p the unit's output weight: no division by a step). A probe whose
pieces are not straight within the noise, or whose slope change is not the unit's, met another
hyperplane and is dropped; the plane is the least-squares fit through the rest (τ linear in the position on
the plane), trimmed once at 3 robust standard deviations. Three rounds (`radii`): around the kink where the
plane was found, at radius 0.1 (a coarse normal's tilt stays inside ±w) and 1, then around its
point nearest a fresh Gaussian input (where its offset matters).
Cost: 6·(2d + 16) predict queries per plane and round. Distances are in input units
(standardised inputs: a coordinate's scale is ~1): probes within the round's radius, ±3w along
the normal, w = `width` in the first round.
"""

from __future__ import annotations

import torch

from harness.attacks.extraction.cryptanalysis import relu_lines as rl
from harness.core.gradients import AnswerNoise

OFFSETS = torch.tensor([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0], dtype=torch.float64)


def _fit_plane(n: torch.Tensor, foot: torch.Tensor, g: torch.Tensor, tau: torch.Tensor,
               keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The plane through the kept points foot + g + τ·n (g ⊥ n): least squares τ ≈ a·g + c
    (a d × d solve per plane, cheaper than an SVD of the points), new normal ∝ n − a."""
    w = keep.to(g.dtype)
    x = torch.cat([g, torch.ones_like(tau)[..., None]], -1) * w[..., None]
    gram = x.transpose(1, 2) @ x
    # the direction n carries no data (g ⊥ n): a small ridge keeps every solve regular
    ridge = 1e-10 * (gram.diagonal(dim1=1, dim2=2).mean(-1) + 1.0)
    gram = gram + ridge[:, None, None] * torch.eye(gram.shape[-1], dtype=g.dtype, device=g.device)
    coef = torch.linalg.solve(gram, (x.transpose(1, 2) @ (tau * w)[..., None]))[..., 0]
    a, c = coef[:, :-1], coef[:, -1]
    a = a - (a * n).sum(1, keepdim=True) * n
    normal = n - a
    scale = normal.norm(dim=1, keepdim=True)
    point = foot + c[:, None] * n  # on the fitted plane
    normal = normal / scale
    return normal, -(normal * point).sum(1)


def _residuals(n: torch.Tensor, b: torch.Tensor, pts: torch.Tensor) -> torch.Tensor:
    return ((pts * n[:, None, :]).sum(-1) + b[:, None]).abs()


def refine_planes(oracle, n: torch.Tensor, b: torch.Tensor, centers: torch.Tensor,
                  jumps: torch.Tensor, noise: AnswerNoise, gen: torch.Generator,
                  width: float = 0.02, radii: tuple[float, ...] = (0.1, 1.0, 1.0),
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Refined (unit normals, offsets, refined mask) of the planes n·x + b = 0 (unit n) whose
    kinks were seen at `centers` with slope jumps of size `jumps` (h,); a plane whose last round
    kept too few probes keeps its estimate and a False mask."""
    h, d = n.shape
    if h == 0:
        return n, b, torch.zeros(0, dtype=torch.bool, device=n.device)
    dev = n.device
    m = 2 * d + 16  # a plane fit has d unknowns: its error is ~ τ error · d / (radius · √(m − d))
    offs = OFFSETS.to(dev)
    for r, radius in enumerate(radii):
        # first around the kink (where the plane is known best: a small radius keeps a coarse
        # normal's tilt inside ±w), then around the plane's point nearest a fresh Gaussian input
        # (where inputs live, so where its offset matters; not the origin, which every plane
        # with a small bias passes close to)
        c = centers if r < len(radii) - 1 else torch.randn(h, d, generator=gen,
                                                            dtype=torch.float64).to(dev)
        foot = c - ((c * n).sum(1) + b)[:, None] * n
        g = torch.randn(h, m, d, generator=gen, dtype=torch.float64).to(dev)
        g = g - (g @ n[:, :, None]) * n[:, None, :]
        g = radius * g / g.norm(dim=2, keepdim=True).clamp_min(1e-300)
        y = foot[:, None, :] + g
        w = width
        probes = y[:, :, None, :] + (w * offs)[None, None, :, None] * n[:, None, None, :]
        f = rl.ask(oracle, probes.reshape(-1, d)).reshape(h, m, len(offs), -1)
        sig = noise.at(y)[..., None]  # (h, m, 1)
        # straightness of each side, slopes, and the intersection along the normal
        bend_l = (f[:, :, 0] + f[:, :, 2] - 2 * f[:, :, 1]).abs().amax(-1)
        bend_r = (f[:, :, 3] + f[:, :, 5] - 2 * f[:, :, 4]).abs().amax(-1)
        sl = (f[:, :, 2] - f[:, :, 0]) / (2 * w)
        sr = (f[:, :, 5] - f[:, :, 3]) / (2 * w)
        al = f[:, :, 2] + w * sl  # left piece extrapolated to τ = 0
        ar = f[:, :, 3] - w * sr  # right piece extrapolated to τ = 0
        ds = sl - sr
        den = (ds * ds).sum(-1)
        tau = ((ar - al) * ds).sum(-1) / den.clamp_min(1e-300)
        jump = den.sqrt() / jumps[:, None]  # the unit's own slope change is 1
        ok = (bend_l < 20 * sig[..., 0]) & (bend_r < 20 * sig[..., 0]) & (tau.abs() < 1.5 * w)
        ok &= (jump > 0.5) & (jump < 2) & torch.isfinite(tau)
        # a plane fit absorbs part of a lone outlier (leverage ~ d/m), so gross
        # ones go before fitting: τ far (8 robust s.d.) from the others' median
        tau_ok = torch.where(ok, tau, torch.full_like(tau, float("nan")))
        med = tau_ok.nanmedian(dim=1, keepdim=True).values
        mad = (tau_ok - med).abs().nanmedian(dim=1, keepdim=True).values
        ok &= (tau - med).abs() <= 8 * 1.4826 * mad + 1e-12
        pts = y + tau[..., None] * n[:, None, :]
        n_new, b_new = _fit_plane(n, foot, g, tau, ok)
        # one trim at 3 robust standard deviations of the residuals, then the final fit
        res = _residuals(n_new, b_new, pts)
        mad = torch.where(ok, res, torch.full_like(res, float("nan"))).nanmedian(dim=1).values
        ok &= res <= 3 * 1.4826 * mad[:, None].clamp_min(1e-300)
        n_new, b_new = _fit_plane(n, foot, g, tau, ok)
        enough = ok.sum(1) >= max(d + 1, m // 2)
        flip = torch.sign((n_new * n).sum(1)).clamp_min(0) * 2 - 1
        n = torch.where(enough[:, None], n_new * flip[:, None], n)
        b = torch.where(enough, b_new * flip, b)
    return n, b, enough


def relocate_offsets(oracle, n: torch.Tensor, b: torch.Tensor, reach: torch.Tensor,
                     fine: float = 1e-9, rounds: int = 60) -> torch.Tensor:
    """Offsets of the planes n·x + b = 0 (unit n) re-measured by explained gradients at each
    plane's foot −b·n, the point nearest the origin: the kink on the line foot + τ·n is bracketed
    in ±`reach` (h,) and bisected (one explain query per plane and round) to `fine`·max(1, |b|).
    A kink located far out on a search line carries the normal's error times its distance into
    the offset; at the foot that distance is |b|. A plane keeps its offset unless the final
    bracket holds a jump along its own normal (another plane's kink in the bracket has its own)."""
    h = len(n)
    if h == 0:
        return b
    foot = -b[:, None] * n
    tl, tr = -reach.clone(), reach.clone()
    g = rl.ask(oracle, torch.cat([foot + tl[:, None] * n, foot + tr[:, None] * n]), "explain")
    gl, gr = g[:h], g[h:]
    size = ((gr - gl) * n).sum(1).abs()
    seen = size > 1e-3 * (gl.norm(dim=1) + gr.norm(dim=1))
    todo = seen.clone()
    for _ in range(rounds):
        todo &= (tr - tl) > fine * b.abs().clamp_min(1.0)
        i = torch.nonzero(todo).flatten()
        if not len(i):
            break
        tm = (tl[i] + tr[i]) / 2
        gm = rl.ask(oracle, foot[i] + tm[:, None] * n[i], "explain")
        left = ((gm - gl[i]) * n[i]).sum(1).abs() > ((gr[i] - gm) * n[i]).sum(1).abs()
        tr[i] = torch.where(left, tm, tr[i])
        gr[i] = torch.where(left[:, None], gm, gr[i])
        tl[i] = torch.where(left, tl[i], tm)
        gl[i] = torch.where(left[:, None], gl[i], gm)
    jump = gr - gl
    along = (jump * n).sum(1).abs() / jump.norm(dim=1).clamp_min(1e-300)
    ours = seen & (along > 1 - 1e-4) & ((tr - tl) <= fine * b.abs().clamp_min(1.0))
    return torch.where(ours, b - (tl + tr) / 2, b)


def relocate_offsets_by_values(oracle, n: torch.Tensor, b: torch.Tensor, at: torch.Tensor,
                               jumps: torch.Tensor, noise: AnswerNoise, tries: int = 5
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Offsets of the planes n·x + b = 0 (unit n, kinks seen at points `at`, slope jumps of
    size `jumps`) re-measured from predictions at each plane's foot −b·n, the point nearest the
    origin: on the line foot + τ·n the values are asked at τ = ±w, ±2w, ±3w and the two affine
    pieces intersected (6 queries per plane). A kink located far out on a search line carries
    the normal's error times its distance into the offset; at the foot that distance is |b|.
    w = 1e-6·max(1, |at|) covers that error; a plane whose pieces are not straight within 20σ,
    whose slope change is not its own to 1e-5 (another plane crossing inside ±w adds its own),
    or whose kink lies outside ±1.5w is tried again with w/4 (`tries` times in all), then keeps its
    offset. Returns
    (offsets, relocated mask)."""
    h = len(n)
    moved = torch.zeros(h, dtype=torch.bool, device=n.device)
    if h == 0:
        return b, moved
    b = b.clone()
    offs = OFFSETS.to(n.device)
    w = 1e-6 * at.norm(dim=1).clamp_min(1.0)
    for _ in range(tries):
        i = torch.nonzero(~moved).flatten()
        if not len(i):
            break
        foot = -b[i, None] * n[i]
        pts = foot[:, None, :] + (w[i, None] * offs)[..., None] * n[i, None, :]
        f = rl.ask(oracle, pts.reshape(-1, n.shape[1])).reshape(len(i), len(offs), -1)
        sig = noise.at(foot)
        bend = torch.maximum((f[:, 0] + f[:, 2] - 2 * f[:, 1]).abs().amax(-1),
                             (f[:, 3] + f[:, 5] - 2 * f[:, 4]).abs().amax(-1))
        sl = (f[:, 2] - f[:, 0]) / (2 * w[i, None])
        sr = (f[:, 5] - f[:, 3]) / (2 * w[i, None])
        al, ar = f[:, 2] + w[i, None] * sl, f[:, 3] - w[i, None] * sr  # both pieces at τ = 0
        ds = sl - sr
        den = (ds * ds).sum(-1)
        tau = ((ar - al) * ds).sum(-1) / den.clamp_min(1e-300)
        ratio = den.sqrt() / jumps[i].clamp_min(1e-300)
        # another plane crossing between −w and w (no probe there) leaves both pieces straight
        # but adds its slope change: the change must be this unit's own, to its precision
        slack = 1e-5 + 100 * sig / (w[i] * jumps[i].clamp_min(1e-300))
        ok = (bend <= 20 * sig) & (tau.abs() < 1.5 * w[i]) & ((ratio - 1).abs() <= slack)
        ok &= torch.isfinite(tau)
        b[i[ok]] = b[i[ok]] - tau[ok]
        moved[i[ok]] = True
        w[i[~ok]] = w[i[~ok]] / 4
    return b, moved
