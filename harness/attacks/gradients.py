"""Input gradients as an attacker gets them: from `explain` when the API offers it, else by
forward finite differences through `predict` (d + 1 queries per point, all in one batch).

Probabilities are turned back into logit differences before differencing: centred
log-probabilities log p − mean(log p) equal the logits minus their mean, so their gradients
lie in the same span as the logits' gradients (for a binary API, log(p₁/p₀) is the logit).
"""

from __future__ import annotations

import torch

from harness.errors import AttackFailed


def logit_signals(y: torch.Tensor, output: str) -> torch.Tensor:
    """Map predict outputs (N, C) to logit-like signals (N, K'): logits as they are,
    probabilities to centred log-probabilities (binary: the single logit)."""
    if output == "label":
        raise AttackFailed("the API returns labels only: no finite differences possible")
    y = y.reshape(len(y), -1)
    if output == "logits":
        return y
    logp = torch.log(y.clamp_min(1e-300))
    if y.shape[1] == 2:
        return (logp[:, 1] - logp[:, 0])[:, None]
    return logp - logp.mean(dim=1, keepdim=True)


def fd_cost(dim: int) -> int:
    """Queries per gradient by forward differences."""
    return dim + 1


def finite_difference_gradients(oracle, x: torch.Tensor, step: float) -> torch.Tensor:
    """Forward-difference gradients of every logit signal at each point: (N, K', d).

    One predict call of N·(d+1) queries: the points, then each point plus `step`·e_j.
    """
    n, d = x.shape
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    shifted = (x[:, None, :] + step * eye[None]).reshape(n * d, d)
    out = logit_signals(oracle.predict(torch.cat([x, shifted])), oracle.output)
    base, moved = out[:n], out[n:].reshape(n, d, -1)
    return ((moved - base[:, None, :]) / step).permute(0, 2, 1)


def gradient_rows(oracle, x: torch.Tensor, fd_step: float) -> tuple[torch.Tensor, str]:
    """Gradient rows at x through the best path the API offers; returns (rows, path)."""
    if oracle.offers("explain"):
        return oracle.explain(x), "explain"
    g = finite_difference_gradients(oracle, x, fd_step)
    return g.reshape(-1, g.shape[-1]), "finite_differences"


def cost_per_point(oracle) -> int:
    """Queries one gradient point costs on this API."""
    return 1 if oracle.offers("explain") else fd_cost(oracle.info.dim)
