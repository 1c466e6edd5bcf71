"""Scoring a recovered final layer (`logit_subspace`'s `final_layer` artifact, docs/contract.md
"LLM logit APIs").

With the truth (a model built here): `hidden_dim_true`, the rank of the centred image of the
final layer (a TinyLM: C·W·[diag(γ)P, β]; a classifier's last Linear: C·[W, b]);
`final_layer_rel_error` = ‖Ŵ·A − W_c‖_F / ‖W_c‖_F, W_c = C·W the true final layer centred over the
vocabulary and A = argmin ‖Ŵ·A − W_c‖ (least squares, the h×h map the attack cannot know); and
`subspace_residual`, the share of fresh prompts' centred logit vectors (exact, from the model)
outside the recovered span. On an endpoint (no truth) the residual is measured on fresh prompts
the attack never used, asked through the endpoint (harness/scoring/logits_blackbox.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from harness.scoring import scorer

FRESH = 64  # fresh prompts for the residual
RANK_RTOL = 1e-9


def centred_truth(model: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """(image, W_c): a matrix spanning the centred logit vectors, and the centred final layer."""
    if hasattr(model, "centred_image"):
        w = model.final_layer().numpy()
        return model.centred_image().numpy(), w - w.mean(axis=0, keepdims=True)
    last = None
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            last = m
    if last is None:
        return None
    w = last.weight.detach().double().cpu().numpy()
    b = (last.bias.detach().double().cpu().numpy() if last.bias is not None else np.zeros(len(w)))
    img = np.concatenate([w, b[:, None]], axis=1)
    return img - img.mean(axis=0, keepdims=True), w - w.mean(axis=0, keepdims=True)


def rank(a: np.ndarray, rtol: float = RANK_RTOL) -> int:
    s = np.linalg.svd(a, compute_uv=False)
    return int((s > rtol * s[0]).sum()) if len(s) and s[0] > 0 else 0


def rel_error(w_hat: np.ndarray, w_c: np.ndarray) -> float:
    if w_hat.shape[1] == 0:
        return 1.0
    a, *_ = np.linalg.lstsq(w_hat, w_c, rcond=None)
    return float(np.linalg.norm(w_hat @ a - w_c) / np.linalg.norm(w_c))


def residual(w_hat: np.ndarray, z: np.ndarray) -> float:
    """Share (Frobenius) of centred vectors z (rows) outside the column span of w_hat."""
    zc = z - z.mean(axis=1, keepdims=True)
    if w_hat.shape[1] == 0:
        return 1.0
    qb, _ = np.linalg.qr(w_hat)
    out = zc - (zc @ qb) @ qb.T
    return float(np.linalg.norm(out) / max(np.linalg.norm(zc), 1e-300))


def fresh_inputs(info: Any, seed: int, prompt_len: int, n: int = FRESH) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000003 + 4099)
    if info.task == "lm":
        return torch.randint(0, int(info.n_outputs), (n, min(prompt_len, info.dim)), generator=g)
    u = torch.rand(n, info.dim, generator=g, dtype=torch.float64)
    return info.input_low + (info.input_high - info.input_low) * u


@scorer("final_layer")
def score_final_layer(artifact, truth, info) -> dict[str, float]:
    model = getattr(truth, "model", None)
    w_hat = artifact.data.get("basis")
    if model is None or w_hat is None:
        return {}
    got = centred_truth(model)
    if got is None:
        return {}
    img, w_c = got
    w_hat = np.asarray(w_hat, dtype=np.float64)
    if w_hat.shape[0] != w_c.shape[0] or w_c.shape[0] < 3:  # e.g. a binary model's two probabilities
        return {}
    x = fresh_inputs(info, 0, int(artifact.data.get("prompt_len", 8)))
    p = next(model.parameters())
    with torch.no_grad():
        z = model(x.to(p.device, torch.long if info.task == "lm" else p.dtype)).double().cpu().numpy()
    return {"hidden_dim_true": float(rank(img)), "final_layer_rel_error": rel_error(w_hat, w_c),
            "subspace_residual": residual(w_hat, z.reshape(len(z), -1))}
