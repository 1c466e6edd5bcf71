"""Scoring a recovered subspace against the true row span of the first layer."""

from __future__ import annotations

import numpy as np
import torch

from harness.scoring import scorer


def row_basis(a: torch.Tensor, rtol: float = 1e-7) -> np.ndarray:
    """Orthonormal basis (rows) of the row span of `a`, numerical rank at `rtol`."""
    a = a.detach().cpu().double().numpy()
    _, s, vh = np.linalg.svd(a, full_matrices=False)
    r = int((s > rtol * s[0]).sum()) if len(s) and s[0] > 0 else 0
    return vh[:r]


def compare_subspaces(v: np.ndarray, u: np.ndarray) -> dict[str, float]:
    """Principal-angle metrics of recovered rows `v` against true rows `u` (both orthonormal).

    max_principal_angle_deg: the largest of the min(r, k) principal angles.
    min_energy_in_span: min over unit vectors w in span(v) of ‖P_u w‖² (0 if r > k).
    """
    if len(v) == 0 or len(u) == 0:
        return {"max_principal_angle_deg": 90.0, "min_energy_in_span": 0.0}
    cos = np.linalg.svd(v @ u.T, compute_uv=False).clip(0.0, 1.0)
    k = min(len(v), len(u))
    # angle = arcsin of the residual is accurate for tiny angles, arccos is not
    sin = np.sqrt(np.clip(1.0 - cos[:k] ** 2, 0.0, 1.0))
    m = v @ u.T
    resid = v - m @ u
    sin_max = np.linalg.svd(resid, compute_uv=False)[0] if len(v) <= len(u) else sin.max()
    angle = float(np.degrees(np.arcsin(min(1.0, max(sin_max, 0.0)))))
    energy = float(np.linalg.eigvalsh(m @ m.T).min()) if len(v) <= len(u) else 0.0
    return {"max_principal_angle_deg": angle, "min_energy_in_span": energy}


@scorer("subspace")
def score_subspace(artifact, truth, info) -> dict[str, float]:
    if truth.first_layer is None:
        return {}
    u = row_basis(truth.first_layer)
    v = np.asarray(artifact.data["basis"], dtype=np.float64).reshape(-1, u.shape[1] if len(u) else 1)
    out = {"true_rank": float(len(u))}
    out.update(compare_subspaces(v, u))
    return out
