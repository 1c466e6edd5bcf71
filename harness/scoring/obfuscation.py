"""Scoring an obfuscation artifact: the truth model's own predictions on the original and the
obfuscated inputs, how much of the added noise hit the true first-layer span, and the recovered
span against the true one."""

from __future__ import annotations

import numpy as np
import torch

from harness.core.answers import api_labels
from harness.scoring import scorer
from harness.scoring.subspace import compare_subspaces, first_layer_of, row_basis


def truth_labels(model, x: torch.Tensor) -> np.ndarray:
    """Labels the truth model gives a flat batch."""
    p = next(model.parameters(), None)
    dev, dt = (p.device, p.dtype) if p is not None else (torch.device("cpu"), torch.float64)
    with torch.no_grad():
        z = model(x.to(dev, dt)).reshape(len(x), -1)
    return api_labels(z, "logits").cpu().numpy()


@scorer("obfuscation")
def score_obfuscation(artifact, truth, info) -> dict[str, float]:
    out: dict[str, float] = {}
    x, x_obf = artifact.data["x"], artifact.data["x_obfuscated"]
    if truth.model is not None:
        a, b = truth_labels(truth.model, x), truth_labels(truth.model, x_obf)
        out["truth_prediction_kept"] = float((a == b).mean())
    first = first_layer_of(truth)
    if first is not None:
        u = row_basis(first)
        noise = (x_obf - x).double().numpy()
        inside = ((noise @ u.T) ** 2).sum(axis=1) / np.maximum((noise**2).sum(axis=1), 1e-300)
        out["noise_in_span"] = float(inside.mean())
        v = np.asarray(artifact.data["basis"], dtype=np.float64).reshape(-1, u.shape[1])
        out["true_rank"] = float(len(u))
        out.update(compare_subspaces(v, u))
    return out
