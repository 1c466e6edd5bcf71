"""The signs of a layer, from the layer above it (Carlini, Jagielski, Mironov 2020, Sec. 4, find
them by search, exponential in the width; Canales-Martínez et al., EUROCRYPT 2024, make it
polynomial by wiggling each neuron; here they follow by linear algebra from the next layer).

A critical hyperplane has two orientations: neuron j of layer m is found as u_j = 0 and the true
activation is ReLU(u_j) or ReLU(−u_j) = ReLU(u_j) − u_j. Every neuron η of layer m + 1 is found in
the features (ReLU(u_m), h_{m−1}, 1) as p·ReLU(u_m) + β·h_{m−1} + c, and a flipped neuron j
leaves its linear part −p_ηj·(W_j·h_{m−1} + b_j) there. So with w_j = 1 for the flipped neurons,

    β_η + Σ_j w_j p_ηj W_j = 0   for every η,

d_{m−1} equations per neuron of the next layer in d_m unknowns: least squares, then w must be 0
or 1 to rounding. The same holds for the output layer (p = output weights, β = their skip part).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SignFix:
    """Which neurons of layer m are flipped, which carry no weight upward (dropped), and how
    clean the solution is (largest distance of w from {0, 1}; residual relative to |β|)."""

    flip: torch.Tensor
    used: torch.Tensor
    deviation: float
    residual: float

    @property
    def clean(self) -> bool:
        return self.deviation < 1e-3 and self.residual < 1e-6


def solve_signs(p: torch.Tensor, beta: torch.Tensor, rows: torch.Tensor) -> SignFix:
    """p (n, d_m), beta (n, d_b): the next layer's coefficients; rows (d_m, d_b): layer m."""
    n, dm = p.shape
    mat = torch.einsum("nj,jk->nkj", p, rows).reshape(-1, dm)
    rhs = -beta.reshape(-1)
    col = mat.norm(dim=0)
    used = col > 1e-9 * float(col.max()) if dm else col.bool()
    flip = torch.zeros(dm, dtype=torch.bool, device=p.device)
    if not bool(used.any()):
        return SignFix(flip, used, 0.0, 0.0)
    sub = mat[:, used] / col[used]
    sol = torch.linalg.lstsq(sub.cpu(), rhs.cpu()[:, None], driver="gelsd").solution[:, 0]
    w = (sol / col[used].cpu()).to(p.device)
    flip[used] = w > 0.5
    dev = float((w - w.round()).abs().max())
    scale = float(rhs.norm()) + float(mat.abs().max()) * 1e-12 + 1e-300
    res = float((mat[:, used] @ w.round() - rhs).norm()) / scale
    return SignFix(flip, used, dev, res)


def apply_signs(fix: SignFix, w_m: torch.Tensor, b_m: torch.Tensor, p: torch.Tensor,
                beta: torch.Tensor, c: torch.Tensor):
    """Layer m in its true orientation and the layer above in plain form: (W_m, b_m) flipped
    where `fix.flip`, dropped where not `fix.used`; the next layer's (p, c) with the flipped
    neurons' linear parts moved into c, and what is left of β (≈ 0 when `fix.clean`)."""
    f = fix.flip
    c = c + (p[:, f] * b_m[f]).sum(1)
    beta = beta + p[:, f] @ w_m[f]
    w_m, b_m = w_m.clone(), b_m.clone()
    w_m[f], b_m[f] = -w_m[f], -b_m[f]
    keep = fix.used
    return w_m[keep], b_m[keep], p[:, keep], beta, c
