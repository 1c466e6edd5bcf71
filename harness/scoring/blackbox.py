"""Scoring without ground truth: what can be measured against a remote endpoint alone.

When the victim is an endpoint and no model file is named (`BlackBoxTruth`: no model, no data),
the truth scorers have nothing to compare with. These scorers probe the endpoint itself on
*held-out* points the attack never asked about. The probes are the scorer's own verification
allowance, not an attacker's: they never count against `defenses.query_budget`, they do count in
the run's rows sent (`queries_sent_total`) and against the scan's cap `victim.endpoint.max_rows`.
When the probes cannot be sent or answered (the cap, the endpoint's own quota, faults), no
verification metric is reported and the judges leave the attack `incomplete`, never low:

- model and surrogate artifacts (an extracted model in `data["model"]`): `blackbox_agreement`,
  the fraction of fresh probes (the named dataset's test inputs, else N(0, I) in the input domain)
  on which it and the endpoint predict the same label, with Cohen's κ `blackbox_kappa`
  (regression: `blackbox_r2` of the surrogate's output against the endpoint's);
- subspace artifacts: `blackbox_span_rank` and its stability on fresh gradients,
  `blackbox_heldout_angle_deg` (the largest angle between a held-out gradient and the recovered
  span; ~0 when the span is right) and `blackbox_heldout_energy` (mean fraction of a held-out
  gradient's energy inside the span; 1 when right).

Each also reports `blackbox_probes` (queries spent). The report says `truth_available: false`.

They are registered with `@scorer(kind, blackbox=True)`: `harness.scoring.score` picks them
whenever the truth is only an endpoint (`is_blackbox`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from harness.attacks.gradients import api_labels
from harness.errors import BudgetExhausted
from harness.scoring import scorer
from harness.scoring.model import cohen_kappa
from victims.http.client import EndpointError

SPAN_PROBES = 8  # held-out gradient points
MODEL_PROBES = 256  # held-out points for surrogate agreement

def _probe_gen(truth: Any, salt: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(int(truth.seed) * 1000003 + salt)


def unverified(artifact: Any, exc: Exception) -> None:
    """Record why no probe verified the artifact: the scan's row cap (`cap`) or the endpoint
    (refusals, faults: `endpoint`); the runner reports it as the attack's stopped_by."""
    artifact.data["unverified_by"] = getattr(exc, "stopped_by", None) if isinstance(
        exc, BudgetExhausted) and getattr(exc, "stopped_by", None) == "cap" else "endpoint"
    artifact.notes.append(f"verification probes failed: {type(exc).__name__}: {exc}"[:300])


def probe_points(truth: Any, info: Any) -> torch.Tensor:
    """Held-out points for model agreement: the named dataset's test inputs (in distribution,
    never queried by an attack), else N(0, I) clipped to the declared input domain."""
    held = getattr(truth, "x_heldout", None)
    if held is not None and len(held):
        return held[:MODEL_PROBES].to(torch.float64)
    x = torch.randn(MODEL_PROBES, info.dim, generator=_probe_gen(truth, 2), dtype=torch.float64)
    return x.clamp(info.input_low, info.input_high)


class _ProbeOracle:
    """The oracle-like handle attacks' gradient helpers expect, over held-out probes."""

    def __init__(self, truth: Any):
        self.truth = truth
        self.output = truth.info.output
        self.info = truth.info

    def offers(self, method: str) -> bool:
        return method == "explain" and self.info.interface in ("gradient", "smoothgrad")

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.truth.probe_predict(x).to(torch.float64)

    def explain(self, x: torch.Tensor) -> torch.Tensor:
        return self.truth.probe_explain(x).to(torch.float64)


@scorer("subspace", blackbox=True)
def span_stability(artifact: Any, truth: Any, info: Any) -> dict[str, float]:
    """Rank of the recovered span and how well it holds fresh gradients."""
    from harness.attacks.gradients import gradient_rows

    basis = torch.as_tensor(np.asarray(artifact.data.get("basis", np.zeros((0, info.dim)))),
                            dtype=torch.float64).reshape(-1, info.dim)
    out = {"blackbox_span_rank": float(len(basis)), "blackbox_probes": 0.0, "input_dim": float(info.dim)}
    if len(basis) == 0 or (info.interface == "prediction" and info.output == "label"):
        return out
    q = torch.linalg.qr(basis.T).Q.T  # orthonormal rows spanning the recovered span
    oracle = _ProbeOracle(truth)
    before = truth.endpoint.stats.rows_sent
    x = torch.randn(SPAN_PROBES, info.dim, generator=_probe_gen(truth, 1), dtype=torch.float64)
    try:
        rows, _ = gradient_rows(oracle, x, 1e-3)
    except (BudgetExhausted, EndpointError) as exc:
        out["blackbox_unverified"] = 1.0
        unverified(artifact, exc)
        return out
    out["blackbox_probes"] = float(truth.endpoint.stats.rows_sent - before)
    rows = rows[rows.norm(dim=1) > 0]
    if len(rows) == 0:
        return out
    inside = (rows @ q.T).norm(dim=1) ** 2 / rows.norm(dim=1) ** 2
    inside = inside.clamp(0.0, 1.0)
    out["blackbox_heldout_energy"] = float(inside.mean())
    out["blackbox_heldout_angle_deg"] = math.degrees(math.asin(math.sqrt(float(1 - inside.min()))))
    return out


@scorer("surrogate", blackbox=True)
@scorer("model", blackbox=True)
def surrogate_agreement(artifact: Any, truth: Any, info: Any) -> dict[str, float]:
    """Agreement of the extracted surrogate with the endpoint on held-out probes."""
    model = artifact.data.get("model", artifact.data.get("surrogate"))
    if model is None or not callable(model):
        return {}
    x = probe_points(truth, info)
    before = truth.endpoint.stats.rows_sent
    try:
        y_api = truth.probe_predict(x)
    except (BudgetExhausted, EndpointError) as exc:
        unverified(artifact, exc)
        return {"blackbox_probes": 0.0, "blackbox_unverified": 1.0}
    out = {"blackbox_probes": float(truth.endpoint.stats.rows_sent - before)}
    dtype = next((p.dtype for p in getattr(model, "parameters", list)()), torch.float64)
    with torch.no_grad():
        y_sur = model(x.to(dtype)).detach().to(torch.float64).cpu()
    if info.task == "regression":
        a, b = y_api.reshape(-1).double(), y_sur.reshape(len(x), -1)[:, 0]
        ss = float(((a - a.mean()) ** 2).sum()) or 1.0
        out["blackbox_r2"] = 1.0 - float(((a - b) ** 2).sum()) / ss
        return out
    # surrogates output raw (or centred) logits: one column is thresholded at 0
    mine, theirs = api_labels(y_sur, "logits"), api_labels(y_api, info.output)
    out["blackbox_agreement"] = float((mine == theirs).double().mean())
    out["blackbox_kappa"] = cohen_kappa(theirs, mine)
    return out
