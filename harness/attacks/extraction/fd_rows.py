"""Rows of the first layer from finite differences (paper 000 App. C): the Jacobian of the
outputs, by forward differences (d + 1 predict queries per point), in every cell a line
crosses; consecutive cells differ by the rank-one jump wᵢ·Aᵢᵀ of the unit between them.
"""

from __future__ import annotations

import torch

from harness.attacks.extraction import relu_lines as rl


def fd_jacobians(oracle, x: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """Forward-difference Jacobians (N, K, d) of the output signals at x, one predict call of
    N·(d+1) queries; `step` (N,) per point."""
    n, d = x.shape
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    shifted = (x[:, None, :] + step[:, None, None] * eye[None]).reshape(n * d, d)
    out = rl.ask(oracle, torch.cat([x, shifted]))
    base, moved = out[:n], out[n:].reshape(n, d, -1)
    return ((moved - base[:, None, :]) / step[:, None, None]).permute(0, 2, 1)


def jacobian_jumps(oracle, line: rl.Line, t: torch.Tensor, fd_step: float,
                   tol: float) -> torch.Tensor:
    """One normal per kink t (sorted): the top right singular vector of the Jacobian jump across
    it, scaled by its singular value (cells between kinks share their Jacobian)."""
    if len(t) == 0:
        return torch.zeros(0, oracle.info.dim, dtype=torch.float64, device=oracle.device)
    pad = t.abs().clamp_min(1.0)
    mids = torch.cat([t[:1] - pad[:1], (t[:-1] + t[1:]) / 2, t[-1:] + pad[-1:]])
    x = line.at(mids)
    # stay well inside the cell: a step far below the distance (along t) to the nearest kink
    edges = torch.cat([t[:1] - 2 * pad[:1], t, t[-1:] + 2 * pad[-1:]])
    gap = torch.minimum(mids - edges[:-1], edges[1:] - mids)
    step = torch.minimum(fd_step * x.abs().amax(dim=1).clamp_min(1.0), 1e-2 * gap)
    jac = fd_jacobians(oracle, x, step)
    jump = torch.nan_to_num(jac[1:] - jac[:-1], nan=0.0, posinf=0.0, neginf=0.0)
    _, s, vh = torch.linalg.svd(jump, full_matrices=False)
    return s[:, :1] * vh[:, 0, :]
