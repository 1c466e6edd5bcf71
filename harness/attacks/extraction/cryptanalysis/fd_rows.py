"""Rows of the first layer from finite differences (paper 000 App. C): the Jacobian of the
outputs, by finite differences, in every cell a line crosses; consecutive cells differ by the
rank-one jump wᵢ·Aᵢᵀ of the unit between them.

The step is chosen from the answers' noise σ (estimated from queries, `estimate_noise`):
- float64-clean answers: forward differences (d + 1 queries per cell), a step of `fd_step`
  relative to the point, inside the cell (at most 1e-1 of the distance along the line to the
  nearest kink: a coordinate step reaches a neighbouring plane only if that plane is nearly
  parallel to the line), and one probe query per cell that checks no coordinate step left the
  cell (else central differences with the repair below). The normal's error is ~σ·√d/(step·|p|),
  p the unit's output weight: the largest step the cell allows matters for weak units;
- coarser answers (float32 arithmetic, rounding, noise): the error of a difference quotient is
  σ/s, so the step is made as large as the cell allows — central differences (2d + 1 queries)
  with a step of a tenth of the distance to the nearest kink on the line; a coordinate whose
  second difference F(x + s·eⱼ) + F(x − s·eⱼ) − 2F(x) exceeds the noise crossed some other unit's
  hyperplane and is measured again with a step 8 times smaller (twice at most).
"""

from __future__ import annotations

import torch

from harness.attacks.extraction.cryptanalysis import relu_lines as rl
from harness.core.gradients import AnswerNoise

FLOAT64_STEP = 1e-5


def fd_jacobians(oracle, x: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """Forward-difference Jacobians (N, K, d) of the output signals at x, one predict call of
    N·(d+1) queries; `step` (N,) per point."""
    return probed_jacobians(oracle, x, step)[0]


def probed_jacobians(oracle, x: torch.Tensor, step: torch.Tensor, probes: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`fd_jacobians`, and with unit `probes` δ (N, d) one more query per point: the mismatch
    maxₖ |F(x + sδ) − F(x) − s·Jδ| (N,), the answers' rounding inside one cell, far more where
    a coordinate step crossed some unit's hyperplane (its column of J is then wrong)."""
    n, d = x.shape
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    shifted = (x[:, None, :] + step[:, None, None] * eye[None]).reshape(n * d, d)
    extra = [x + step[:, None] * probes] if probes is not None else []
    out = rl.ask(oracle, torch.cat([x, shifted, *extra]))
    base, moved = out[:n], out[n:n + n * d].reshape(n, d, -1)
    jac = ((moved - base[:, None, :]) / step[:, None, None]).permute(0, 2, 1)
    if probes is None:
        return jac, None
    predicted = step[:, None] * torch.einsum("nkd,nd->nk", jac, probes)
    return jac, (out[n + n * d:] - base - predicted).abs().amax(1)


def central_jacobians(oracle, x: torch.Tensor, step: torch.Tensor, noise: AnswerNoise,
                      retries: int = 2) -> torch.Tensor:
    """Central-difference Jacobians (N, K, d) with crossing repair (see the module docstring)."""
    n, d = x.shape
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    base = rl.ask(oracle, x)
    s = step[:, None].expand(n, d).clone()
    jac = torch.zeros(n, d, base.shape[1], dtype=x.dtype, device=x.device)
    todo = torch.ones(n, d, dtype=torch.bool, device=x.device)
    for attempt in range(retries + 1):
        i, j = torch.nonzero(todo, as_tuple=True)
        if not len(i):
            break
        delta = s[i, j, None] * eye[j]
        vals = rl.ask(oracle, torch.cat([x[i] + delta, x[i] - delta]))
        plus, minus = vals[: len(i)], vals[len(i):]
        jac[i, j] = (plus - minus) / (2 * s[i, j, None])
        bend = torch.nan_to_num((plus + minus - 2 * base[i]).abs().amax(1), nan=float("inf"))
        bad = bend > 20 * noise.at(x[i])
        todo[:] = False
        if attempt < retries:
            todo[i[bad], j[bad]] = True
            s[i[bad], j[bad]] /= 8
    return jac.permute(0, 2, 1)


def jacobian_jumps(oracle, line: rl.Line, t: torch.Tensor, noise: AnswerNoise,
                   fd_step: float = FLOAT64_STEP, gen: torch.Generator | None = None) -> torch.Tensor:
    """One normal per kink t (sorted): the top right singular vector of the Jacobian jump across
    it, scaled by its singular value (cells between kinks share their Jacobian). With `gen`,
    float64-clean forward differences are probed once per cell (`probed_jacobians`), and a cell
    whose probe misses by more than 20σ is measured again by central differences with crossing
    repair: a coordinate step can cross a hyperplane the line never meets near the cell."""
    if len(t) == 0:
        return torch.zeros(0, oracle.info.dim, dtype=torch.float64, device=oracle.device)
    pad = t.abs().clamp_min(1.0)
    mids = torch.cat([t[:1] - pad[:1], (t[:-1] + t[1:]) / 2, t[-1:] + pad[-1:]])
    x = line.at(mids)
    # the distance (along t) to the nearest kink bounds the step that stays in the cell
    edges = torch.cat([t[:1] - 2 * pad[:1], t, t[-1:] + 2 * pad[-1:]])
    gap = torch.minimum(mids - edges[:-1], edges[1:] - mids)
    reach = gap * line.v.norm() / oracle.info.dim**0.5  # a typical coordinate's share of the move
    if noise.rel < 1e-12:
        step = torch.minimum(fd_step * x.abs().amax(dim=1).clamp_min(1.0), 0.1 * gap)
        probes = None
        if gen is not None:
            probes = torch.randn(x.shape, generator=gen, dtype=x.dtype).to(x.device)
            probes = probes / probes.norm(dim=1, keepdim=True)
        jac, miss = probed_jacobians(oracle, x, step, probes)
        if miss is not None:
            bad = ~(miss <= 20 * noise.at(x))  # NaN answers count as a miss
            if bool(bad.any()):
                jac[bad] = central_jacobians(oracle, x[bad], step[bad], noise)
    else:
        step = torch.minimum(0.1 * reach, 0.05 * x.abs().amax(dim=1).clamp_min(1.0))
        jac = central_jacobians(oracle, x, step, noise)
    jump = torch.nan_to_num(jac[1:] - jac[:-1], nan=0.0, posinf=0.0, neginf=0.0)
    _, s, vh = torch.linalg.svd(jump, full_matrices=False)
    return s[:, :1] * vh[:, 0, :]
