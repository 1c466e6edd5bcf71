"""The spectrum of finite-difference gradient rows, as span_nonadaptive reads it (paper 003,
Lemma 3.2: gradients through `predict`), with the errors such rows carry that exact gradients do
not:

- the answers' noise σ, divided by the step s: a floor no true span direction lies under
  (`noise_floor`);
- the base answer F(x) shared by a point's d differences: its error enters every column of the
  point's rows alike, a rank-one term along the all-ones direction 1 of size σ/s·√(rows·d) that
  outgrows the i.i.d. floor and reads as one spurious extra dimension. The rank is read on the
  rows projected onto 1⊥ (`without_ones`), and the span lifted back by least squares over all rows
  (`lift_from_ones_complement`), which averages the base errors out;
- a step that crossed a ReLU kink: that point's rows are not gradients of one linear piece, and
  their error is a direction of its own that no other point shares (`lone_points`). Such a
  point is set aside, not thrown away: a unit active at one point only also looks like that,
  and its point comes back as soon as another point shows the same direction (`readmit`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.core.gradients import AnswerNoise


def noise_floor(noise: AnswerNoise, step: float, x_inf: float, rows: int, d: int) -> float:
    """Largest singular value that finite-difference noise alone gives a rows × d gradient
    matrix: entries carry at most √2·σ/s (σ the answers' noise, s the absolute step), and an
    i.i.d. matrix's top singular value is about σ_entry·(√rows + √d); 3× that is the floor."""
    entry = 2**0.5 * noise.sigma / (step * max(1.0, x_inf))
    return 3 * entry * (rows**0.5 + d**0.5)


def ones_direction(d: int, like: torch.Tensor) -> torch.Tensor:
    return like.new_full((d,), d**-0.5)


def without_ones(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows projected onto 1⊥, their components along 1/√d)."""
    one = ones_direction(rows.shape[1], rows)
    along = rows @ one
    return rows - along[:, None] * one, along


def lift_from_ones_complement(u: torch.Tensor, s: torch.Tensor, vh: torch.Tensor,
                              along: torch.Tensor, r: int) -> torch.Tensor:
    """Orthonormal basis (rows) of the span whose projection onto 1⊥ has basis vh[:r]: every
    row is Σₖ cₖ(vₖ + βₖ·1/√d) plus noise, c = U·S its coordinates, and β the least-squares fit
    of the rows' components along 1/√d on c (cᵀc = S², so β = Uᵀ·along / S)."""
    if r == 0:
        return vh[:0]
    beta = (u[:, :r].T @ along) / s[:r]
    lifted = vh[:r] + beta[:, None] * ones_direction(vh.shape[1], vh)[None]
    q, _ = torch.linalg.qr(lifted.T)
    return q.T


def lone_points(rows: torch.Tensor, per_point: int, u: torch.Tensor, r: int,
                rank_of: Callable[[torch.Tensor], int], share: float = 0.3, most: int = 8
                ) -> list[int]:
    """Points that alone carry a direction of the rank-r span: a point holding ≥ `share` of the
    energy of one of the top r singular directions (u: left singular vectors of `rows`) is a
    suspect, and it is one when the rows without it have a smaller rank (`rank_of`). A true
    span direction shows at every point where its unit is active; a step over a kink shows at
    one. (A unit active at only one point is dropped with it until another point shows it: the
    rank is under-read, never over-read.)"""
    if r == 0 or len(rows) <= per_point:
        return []
    energy = u[:, :r].reshape(-1, per_point, r).pow(2).sum(1).amax(1)
    suspects = [int(p) for p in energy.argsort(descending=True)[:most] if float(energy[p]) >= share]
    out: list[int] = []
    for p in suspects:
        keep = torch.ones(len(rows) // per_point, dtype=torch.bool, device=rows.device)
        keep[out + [p]] = False
        without = rank_of(rows.reshape(-1, per_point, rows.shape[1])[keep].reshape(-1, rows.shape[1]))
        if without < r:
            out.append(p)
            r = without
    return out


def readmit(rows: torch.Tensor, aside: torch.Tensor, per_point: int, r: int,
            rank_of: Callable[[torch.Tensor], int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(rows, points still aside, points back): a point set aside comes back (its rows placed
    first) when adding it leaves the rank at r, i.e. another point now shows its direction."""
    if not len(aside):
        return rows, aside, 0
    d = rows.shape[1]
    pts = aside.reshape(-1, per_point, d)
    back = torch.tensor([rank_of(torch.cat([rows, p])) <= r for p in pts], dtype=torch.bool,
                        device=rows.device)
    if not bool(back.any()):
        return rows, aside, 0
    return (torch.cat([pts[back].reshape(-1, d), rows]), pts[~back].reshape(-1, d),
            int(back.sum()))
