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


def api_labels(y: torch.Tensor, output: str) -> torch.Tensor:
    """Class labels (N,) from API outputs: labels as they are; one column thresholded (logits at
    0, probabilities at 0.5); several columns by argmax."""
    if output == "label" or y.dim() == 1:
        return y.long().reshape(-1)
    y = y.reshape(len(y), -1)
    if y.shape[1] == 1:
        return (y[:, 0] > (0.5 if output == "probabilities" else 0.0)).long()
    return y.argmax(dim=1)


def answers_precision(y: torch.Tensor) -> str:
    """"float32" when every answer is exactly representable in float32 (a float32 model or
    endpoint), else "float64". An attacker can read this off the answers themselves."""
    y = y.reshape(-1)
    return "float32" if bool(torch.all(y.float().double() == y)) else "float64"


def auto_step(precision: str) -> float:
    """Finite-difference step for answers of this precision (inputs of unit scale).

    Small steps rarely cross a ReLU kink (a crossing corrupts one coordinate of the estimate);
    the step must still be large against the answers' rounding error.
    """
    return 1e-3 if precision == "float32" else 1e-7


def finite_difference_gradients(oracle, x: torch.Tensor, step: float | None = None) -> torch.Tensor:
    """Forward-difference gradients of every logit signal at each point: (N, K', d).

    Two batched predict calls, N·(d+1) queries: the points, then each point plus `step`·e_j.
    `step=None` picks it from the precision of the first answers (see `auto_step`).
    """
    n, d = x.shape
    raw = oracle.predict(x)
    if step is None:
        step = auto_step(answers_precision(raw))
    base = logit_signals(raw, oracle.output)
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    shifted = (x[:, None, :] + step * eye[None]).reshape(n * d, d)
    moved = logit_signals(oracle.predict(shifted), oracle.output).reshape(n, d, -1)
    return ((moved - base[:, None, :]) / step).permute(0, 2, 1)


def gradient_rows(oracle, x: torch.Tensor, fd_step: float | None) -> tuple[torch.Tensor, str]:
    """Gradient rows at x through the best path the API offers; returns (rows, path)."""
    if oracle.offers("explain"):
        return oracle.explain(x), "explain"
    g = finite_difference_gradients(oracle, x, fd_step)
    return g.reshape(-1, g.shape[-1]), "finite_differences"


def cost_per_point(oracle) -> int:
    """Queries one gradient point costs on this API."""
    return 1 if oracle.offers("explain") else fd_cost(oracle.info.dim)
