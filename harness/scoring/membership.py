"""Scoring the informed membership game (paper 004 Alg. 2) against the secret bits.

success_rate with a 95% Clopper–Pearson interval; for a DP victim also `dp_bound` =
e^ε/(1+e^ε) + δ (no adversary may exceed it) and `epsilon_lower` = log(p_low/(1 − p_low)), the
ε the measured interval's lower end implies (δ ignored; 0 when p_low ≤ 0.5).
"""

from __future__ import annotations

import math

import torch

from harness.scoring import scorer
from harness.scoring.reconstruction import clopper_pearson


@scorer("membership")
def score_membership(art, truth, info) -> dict[str, float]:
    b = getattr(truth, "choice", None)
    if b is None:
        return {}
    guess = torch.as_tensor(art.data["guess"]).cpu()
    b = b.cpu()[: len(guess)]
    k, n = int((guess == b).sum()), len(guess)
    lo, hi = clopper_pearson(k, n)
    out = {"games": float(n), "success_rate": k / n if n else 0.0, "success_ci_low": lo,
           "success_ci_high": hi, "epsilon_lower": math.log(lo / (1 - lo)) if lo > 0.5 else 0.0}
    rec = getattr(getattr(truth, "base", None), "train_record", None)
    dp = getattr(rec, "dp", None)
    if dp is not None:
        e = math.exp(min(dp.epsilon, 700.0))
        out["dp_bound"] = min(1.0, e / (1 + e) + dp.delta)
    return out
