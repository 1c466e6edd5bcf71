"""Scoring a recovered final layer on an endpoint, without truth: `subspace_residual`, the share of
fresh prompts' centred logit vectors (prompts the attack never asked) outside the recovered span,
the vectors rebuilt through the endpoint the way the attack rebuilt its own (full logprobs, or
top-K with logit bias). Probes are the scorer's verification allowance (`SCORING`): they count in
the run's rows and against `victim.endpoint.max_rows`, never an attacker's budget. A binary-search
path is not re-run to verify (its cost is the attack's): the artifact stays unverified."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from defenses.budget import SCORING
from harness.core.errors import BudgetExhausted
from harness.core.logprob_sources import FullSource, TopKSource
from harness.scoring import scorer
from harness.scoring.blackbox import unverified
from harness.scoring.logits import fresh_inputs, residual
from victims.http.client import EndpointError

FRESH_ENDPOINT = 8  # fresh prompts asked of an endpoint


class _Probe:
    """What a source needs of an oracle, answered by the endpoint as scoring probes."""

    def __init__(self, truth: Any):
        self.t, self.device = truth, torch.device("cpu")

    def logprobs(self, prompts: torch.Tensor, bias: Any = None) -> Any:
        ep = self.t.endpoint
        ep.billing_as = SCORING
        try:
            ep.bill(len(prompts))
            return ep.complete(prompts.cpu(), bias, int(self.t.info.top_logprobs or 0))
        finally:
            ep.billing_as = None


@scorer("final_layer", blackbox=True)
def score_final_layer_blackbox(artifact, truth, info) -> dict[str, float]:
    w_hat, path = artifact.data.get("basis"), artifact.data.get("path")
    if w_hat is None or info.task != "lm" or path not in ("full", "top-k + logit_bias"):
        return {}
    vocab = int(info.n_outputs)
    probe = _Probe(truth)
    src = FullSource(probe, vocab, "logprobs") if path == "full" else \
        TopKSource(probe, vocab, int(info.top_logprobs), artifact.data.get("bias", 40.0))
    x = fresh_inputs(info, int(truth.seed) + 1, int(artifact.data.get("prompt_len", 8)), FRESH_ENDPOINT)
    try:
        z = src.vectors(x).numpy()
    except (BudgetExhausted, EndpointError) as exc:
        unverified(artifact, exc)
        return {}
    if not np.isfinite(z).all():
        return {}
    return {"subspace_residual": residual(np.asarray(w_hat, dtype=np.float64), z),
            "blackbox_probes": float(src.cost(FRESH_ENDPOINT))}
