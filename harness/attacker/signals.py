"""Membership signals: what an attacker reads from a model's answer on a labelled point.

- `phi`: the logit-scaled confidence of the true label, φ = log(p_y / (1 − p_y)) (LiRA, Carlini
  et al. 2022, Sec. IV-C: approximately Gaussian across models, unlike p_y or the loss). From
  logits it is z_y − logsumexp_{j≠y} z_j (no cancellation when p_y ≈ 1); from probabilities,
  log p_y − log Σ_{j≠y} p_j; a one-logit binary model gives ±z; a regression model gives the
  negative squared error.
- `prob_true`: p_y (RMIA, Zarifzadeh et al. 2024, uses Pr(x|θ) = p_θ(y|x)).
- `correct`: 1[prediction = y], all a label-only API reveals (Yeom et al. 2018's gap attack).

Every function maps answers of shape (..., N, C) and labels (N,) to (..., N) float64 tensors, so
the same code reads one target model and a stack of K reference models.
"""

from __future__ import annotations

import torch

TINY = 1e-300


def phi_from_logits(z: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    """φ from raw outputs z (..., N, C)."""
    z = z.double()
    if task == "regression":
        return -((z[..., 0] - y.to(z)) ** 2)
    if z.shape[-1] == 1:  # binary, one logit: log(p_y / (1 − p_y)) = ±z
        sign = 2.0 * y.to(z) - 1.0
        return sign * z[..., 0]
    yi = y.long().reshape(*([1] * (z.dim() - 2)), -1, 1).expand(*z.shape[:-1], 1)
    zy = z.gather(-1, yi)[..., 0]
    others = z.scatter(-1, yi, float("-inf"))
    return zy - torch.logsumexp(others, -1)


def phi_from_probs(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """φ from probabilities p (..., N, C) (a binary API's two columns included)."""
    p = p.double().clamp_min(0.0)
    yi = y.long().reshape(*([1] * (p.dim() - 2)), -1, 1).expand(*p.shape[:-1], 1)
    py = p.gather(-1, yi)[..., 0]
    rest = p.scatter(-1, yi, 0.0).sum(-1)
    return torch.log(py.clamp_min(TINY)) - torch.log(rest.clamp_min(TINY))


def prob_true(phi: torch.Tensor) -> torch.Tensor:
    """p_y from φ (the logistic function)."""
    return torch.sigmoid(phi)


def correct_from_labels(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """1.0 where the predicted label is the true one."""
    return (pred.long() == y.long().to(pred.device)).double()


def phi_from_api(answer: torch.Tensor, y: torch.Tensor, task: str, output: str) -> torch.Tensor:
    """φ from what a prediction API returned (`output`: probabilities or logits)."""
    if output == "logits" or task == "regression":
        return phi_from_logits(answer, y, task)
    if output == "probabilities":
        return phi_from_probs(answer, y)
    raise ValueError("φ needs real-valued outputs (probabilities or logits), not labels")
