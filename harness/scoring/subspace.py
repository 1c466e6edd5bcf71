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


def first_layer_of(truth) -> torch.Tensor | None:
    """The first layer's weight (k, d): the truth's, else the first Linear of the model, found by
    class name so TorchScript modules count too."""
    if getattr(truth, "first_layer", None) is not None:
        return truth.first_layer
    model = getattr(truth, "model", None)
    if not isinstance(model, torch.nn.Module):
        return None
    for m in model.modules():
        if getattr(m, "original_name", type(m).__name__) == "Linear" and not list(m.children()):
            return m.weight.detach()
    return None


@scorer("subspace")
def score_subspace(artifact, truth, info) -> dict[str, float]:
    first = first_layer_of(truth)
    if first is None:
        return {}
    u = row_basis(first)
    v = np.asarray(artifact.data["basis"], dtype=np.float64).reshape(-1, u.shape[1] if len(u) else 1)
    out = {"true_rank": float(len(u)), "input_dim": float(info.dim)}
    out.update(compare_subspaces(v, u))
    return out
