"""Critical points of a deep ReLU network on lines, their gradient jumps, and cheap checks that a
predicted critical point is where the answers put it (Carlini, Jagielski, Mironov 2020, Sec. 4:
critical points on lines by bisection and the intersection of the affine pieces on either side;
the jump of the gradient across a critical point is the neuron's row, carried through the layers
below it).

Every search asks values (`predict`, as logit signals) and reuses relu_lines' bisection and exact
location; jumps come from `explain` where the API offers it (two queries a kink: the gradient
interface's advantage) and otherwise from finite-difference Jacobians of the cells on either side
(fd_rows), whose jump is rank one: its top right singular vector is the normal.
"""

from __future__ import annotations

import torch

from harness.attacks.extraction.cryptanalysis import relu_lines as rl
from harness.attacks.extraction.cryptanalysis.fd_rows import central_jacobians, probed_jacobians
from harness.core.gradients import AnswerNoise

OFFSETS = torch.tensor([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0], dtype=torch.float64)


def line_kinks(oracle, line: rl.Line, grid: torch.Tensor, noise: AnswerNoise, max_units: int,
               w_min: float = 1e-4) -> tuple[torch.Tensor, torch.Tensor]:
    """Kinks of F on `line` within the grid: (sorted t, mask of positions checked on three
    points, `relu_lines.locate_sure`)."""
    k = rl.bisect_values(oracle, line, grid, w_min, noise, max_units)
    if not len(k.tl):
        return grid[:0], grid[:0].bool()
    if noise.rel < 1e-12:
        t, sure = rl.locate_sure(oracle, line, k.tl, k.tr, k.left, k.right, noise)
    else:
        t = rl.locate(oracle, line, k.tl, k.tr, k.left, k.right)
        sure = torch.ones_like(t, dtype=torch.bool)
    order = torch.argsort(t)
    return t[order], sure[order]


def cell_points(t_all: torch.Tensor, idx: torch.Tensor, pad: float = 1.0
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For kinks t_all[idx] (t_all sorted): the midpoints of the cells left and right of each,
    and the half-width of the narrower cell (a finite-difference step must stay inside)."""
    big = t_all.abs().max() + pad if len(t_all) else torch.tensor(pad)
    ext = torch.cat([t_all[:1] - 2 * big, t_all, t_all[-1:] + 2 * big])
    i = idx + 1
    left, right = (ext[i - 1] + ext[i]) / 2, (ext[i] + ext[i + 1]) / 2
    half = torch.minimum(ext[i] - ext[i - 1], ext[i + 1] - ext[i]) / 2
    return left, right, half


FD_STEP = 1e-2  # forward step (× max(1, |x|∞)), capped at a tenth of the cell: the pieces are
# exactly linear inside a cell, so a long step loses nothing and divides the rounding by more


def gradients_at(oracle, x: torch.Tensor, reach: torch.Tensor, noise: AnswerNoise,
                 explain: bool, fd_step: float = FD_STEP) -> torch.Tensor:
    """Gradients (N, K, d) at points x inside cells of radius `reach`: explained (K = 1) when
    `explain` (exact gradients), else finite-difference Jacobians (forward, probed once; central
    with crossing repair where the probe misses or the answers are coarse)."""
    if explain:
        return rl.ask(oracle, x, "explain")[:, None, :]
    if noise.rel < 1e-12:
        step = torch.minimum(fd_step * x.abs().amax(dim=1).clamp_min(1.0), 0.1 * reach)
        probes = torch.nn.functional.normalize(torch.ones_like(x) + 0.1 * torch.arange(
            x.shape[1], dtype=x.dtype, device=x.device), dim=1)
        jac, miss = probed_jacobians(oracle, x, step, probes)
        bad = ~(miss <= 20 * noise.at(x))
        if bool(bad.any()):
            jac[bad] = central_jacobians(oracle, x[bad], step[bad], noise)
        return jac
    step = torch.minimum(0.1 * reach / x.shape[1] ** 0.5, 0.05 * x.abs().amax(dim=1).clamp_min(1.0))
    return central_jacobians(oracle, x, step, noise)


def rank_one_normal(jump: torch.Tensor) -> torch.Tensor:
    """The normal of a (N, K, d) jump: its top right singular vector times the singular value
    (for K = 1 the jump itself)."""
    if jump.shape[1] == 1:
        return jump[:, 0]
    _, s, vh = torch.linalg.svd(jump, full_matrices=False)
    return s[:, :1] * vh[:, 0, :]


def kink_normals(oracle, line: rl.Line, t_all: torch.Tensor, idx: torch.Tensor,
                 noise: AnswerNoise, explain: bool) -> torch.Tensor:
    """Gradient jumps (len(idx), d) across the kinks t_all[idx] of a line whose kinks are all
    t_all (sorted): the gradients of the cells on either side, differenced."""
    if not len(idx):
        return torch.zeros(0, oracle.info.dim, dtype=torch.float64, device=oracle.device)
    left, right, half = cell_points(t_all, idx)
    x = line.at(torch.cat([left, right]))
    reach = (half * line.v.norm()).repeat(2)
    g = gradients_at(oracle, x, reach, noise, explain)
    n = len(idx)
    jump = torch.nan_to_num(g[n:] - g[:n], nan=0.0, posinf=0.0, neginf=0.0)
    return rank_one_normal(jump)


def search_kinks(oracle, y: torch.Tensor, direction: torch.Tensor, span: float,
                 noise: AnswerNoise, n_grid: int = 9) -> torch.Tensor:
    """Positions τ (sorted) of the kinks of F on y + τ·direction, |τ| ≤ span (checked positions
    only: a bracket that holds two kinks is split, not guessed)."""
    line = rl.Line(y, direction)
    grid = torch.linspace(-span, span, n_grid, dtype=torch.float64, device=y.device)
    # two bisection rounds at most: the position comes from the pieces on either side, exact
    # however wide the bracket, once the bracket holds one kink (locate_sure checks that)
    w_min = 0.5 * span / (n_grid - 1) / max(1.0, span)
    t, sure = line_kinks(oracle, line, grid, noise, max_units=64, w_min=w_min)
    return t[sure]


def check_kinks(oracle, pts: torch.Tensor, normals: torch.Tensor, width: torch.Tensor,
                noise: AnswerNoise) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Is there a critical point at each of `pts` across `normals`? The values at ±w, ±2w, ±3w
    along the unit normal (6 queries a point), each side's piece straight within 20σ, intersected.
    Returns (τ, the kink's offset along the normal; visible: the slopes differ beyond the noise;
    straight: both sides are single affine pieces)."""
    n = len(pts)
    if n == 0:
        z = pts.new_zeros(0)
        return z, z.bool(), z.bool()
    unit = torch.nn.functional.normalize(normals, dim=1)
    offs = OFFSETS.to(pts.device)
    probes = pts[:, None, :] + (width[:, None] * offs)[..., None] * unit[:, None, :]
    f = rl.ask(oracle, probes.reshape(-1, pts.shape[1])).reshape(n, len(offs), -1)
    sig = noise.at(pts)
    bend = torch.maximum((f[:, 0] + f[:, 2] - 2 * f[:, 1]).abs().amax(-1),
                         (f[:, 3] + f[:, 5] - 2 * f[:, 4]).abs().amax(-1))
    straight = torch.nan_to_num(bend, nan=float("inf")) <= 20 * sig + 1e-12 * f.abs().amax((1, 2))
    w = width[:, None]
    sl, sr = (f[:, 2] - f[:, 0]) / (2 * w), (f[:, 5] - f[:, 3]) / (2 * w)
    al, ar = f[:, 2] + w * sl, f[:, 3] - w * sr  # both pieces extrapolated to τ = 0
    ds = sl - sr
    den = (ds * ds).sum(-1)
    tau = ((ar - al) * ds).sum(-1) / den.clamp_min(1e-300)
    slope = (sl.abs() + sr.abs()).amax(-1)
    visible = torch.nan_to_num(den.sqrt(), nan=0.0) > torch.maximum(
        1e-9 * slope, 40 * sig / width)
    return torch.nan_to_num(tau, nan=float("inf")), visible, straight
