"""The linear system of one next-layer neuron's row θ followed along its surface
(harness/attacks/extraction/cryptanalysis/neuron_walk.py): homogeneous equations from critical points (θ·φ(x)
= 0), gradient jumps (ν ∥ (∂φ/∂x)ᵀθ) and the top layer's known orientations, solved by SVD
(Carlini, Jagielski, Mironov 2020, Sec. 4: a signature from critical points and jumps)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.attacks.extraction.cryptanalysis.deep_model import KnownLayers

CONSISTENT = 1e-9  # relative smallest singular value of a system with an exact solution
DETERMINED = 1e-7  # relative second-smallest one when that solution is unique


@dataclass
class Solution:
    theta: torch.Tensor
    rel_min: float
    rel_next: float

    @property
    def determined(self) -> bool:
        return self.rel_min <= CONSISTENT and self.rel_next >= DETERMINED

    @property
    def inconsistent(self) -> bool:
        return self.rel_min > 1e3 * CONSISTENT


class NeuronSystem:
    """Homogeneous linear equations on θ (D,): location rows φ(x)/|φ(x)| and jump rows
    (I − ν̂ν̂ᵀ)(∂φ/∂x)ᵀ/|∂φ/∂x| (the constant column zero), kept as the R factor of their QR
    decomposition (D × D at most: the same solutions, column norms and singular values)."""

    def __init__(self, width: int, device):
        self.width = width
        self.rows = torch.zeros(0, width, dtype=torch.float64, device=device)
        self.count = 0

    def _add(self, rows: torch.Tensor) -> None:
        self.count += len(rows)
        stacked = torch.cat([self.rows, rows])
        if len(stacked) > self.width:
            stacked = torch.linalg.qr(stacked, mode="r")[1]
        self.rows = stacked

    def add_location(self, phi: torch.Tensor) -> None:
        phi = phi.reshape(-1, self.width)
        self._add(phi / phi.norm(dim=1, keepdim=True).clamp_min(1e-300))

    def add_jump(self, jphi: torch.Tensor, nu: torch.Tensor) -> None:
        """jphi (D − 1, d) = ∂φ/∂x at the point, nu (d,) the measured jump."""
        n = nu / nu.norm().clamp_min(1e-300)
        proj = jphi - (jphi @ n)[:, None] * n[None, :]  # (D − 1, d)
        rows = torch.cat([proj.T, proj.new_zeros(proj.shape[1], 1)], 1)
        self._add(rows / jphi.norm().clamp_min(1e-300))

    def add_signs(self, known: KnownLayers, signs: torch.Tensor | None) -> None:
        """Rows for the top layer's orientations known already (w_j = 1: neuron j flipped; NaN:
        unknown): a flipped neuron's linear part is −p_j·u_j, an upright one has none (see
        layer_signs.py). In (ReLU(u_m), u_m, 1) features: q_j + w_j p_j = 0 per known j; in
        (ReLU(u_m), h_{m−1}, 1) features, once every orientation is known: β + Σ_j w_j p_j W_j = 0."""
        if signs is None or known.depth == 0:
            return
        dm = len(known.b[-1])
        idx = torch.nonzero(~torch.isnan(signs)).flatten()
        if known.linear_on_top:
            rows = torch.zeros(len(idx), self.width, dtype=torch.float64, device=self.rows.device)
            rows[torch.arange(len(idx)), dm + idx] = 1.0
            rows[torch.arange(len(idx)), idx] = signs[idx].to(rows)
        elif len(idx) == dm:
            wm = known.w[-1]
            rows = torch.zeros(wm.shape[1], self.width, dtype=torch.float64, device=self.rows.device)
            rows[:, dm:-1] = torch.eye(wm.shape[1], dtype=torch.float64, device=rows.device)
            rows[:, :dm] = (signs.to(wm)[:, None] * wm).T
        else:
            return
        if len(rows):
            self._add(rows / rows.norm(dim=1, keepdim=True))

    def solve(self) -> Solution:
        a = self.rows
        col = a.norm(dim=0).clamp_min(1e-300)
        _, s, vh = torch.linalg.svd((a / col).cpu(), full_matrices=True)
        s = torch.cat([s, s.new_zeros(self.width - len(s))]) if len(s) < self.width else s
        theta = (vh[-1] / col.cpu()).to(a.device)
        top = float(s[0]) if len(s) else 1.0
        return Solution(theta / theta.norm(), float(s[-1]) / top, float(s[-2]) / top)
