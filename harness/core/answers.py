"""What an API's answers say, as both the attacks and the scorers read them: class labels from any
output kind, logit-like signals from probabilities (centred log-probabilities), and the decimal
grid that rounded answers lie on. Kept below both, so scoring never imports an attack module."""

from __future__ import annotations

import torch

from harness.core.errors import AssumptionViolated


def logit_signals(y: torch.Tensor, output: str) -> torch.Tensor:
    """Map predict outputs (N, C) to logit-like signals (N, K'): logits as they are,
    probabilities to centred log-probabilities (binary: the single logit)."""
    if output == "label":
        raise AssumptionViolated("the API returns labels only: no finite differences possible")
    y = y.reshape(len(y), -1)
    if output == "logits":
        return y
    logp = torch.log(y.clamp_min(1e-300))
    if y.shape[1] == 2:
        return (logp[:, 1] - logp[:, 0])[:, None]
    return logp - logp.mean(dim=1, keepdim=True)


def api_labels(y: torch.Tensor, output: str) -> torch.Tensor:
    """Class labels (N,) from API outputs: labels as they are; one column thresholded (logits at
    0, probabilities at 0.5); several columns by argmax."""
    if output == "label" or y.dim() == 1:
        return y.long().reshape(-1)
    y = y.reshape(len(y), -1)
    if y.shape[1] == 1:
        return (y[:, 0] > (0.5 if output == "probabilities" else 0.0)).long()
    return y.argmax(dim=1)


def decimal_grid(y: torch.Tensor) -> float | None:
    """The step 10⁻ᵏ (k ≤ 8) of a decimal grid every answer lies on, else None."""
    y = y[torch.isfinite(y)]
    if len(y) == 0:
        return None
    for k in range(9):
        if bool(torch.all(torch.round(y, decimals=k) == y)):
            return 10.0**-k
    return None
