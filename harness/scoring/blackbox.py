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
  (regression: `blackbox_r2` of the surrogate's output against the endpoint's), the probes'
  number `n_probes` and one-sided 95% lower bounds `agreement_lower`, `kappa_lower` (`r2_lower`;
  harness/scoring/bounds.py). The judge decides on the bounds; while the bounds straddle a risk
  level, probes are added (doubling from 256 up to 2048, or until the scan's row cap or the
  held-out inputs run out), so a few probes more or less cannot move a verdict;
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

from harness.core.answers import api_labels
from harness.core.errors import BudgetExhausted
from harness.scoring import scorer
from harness.scoring.model import cohen_kappa
from victims.http.client import EndpointError

SPAN_PROBES = 8  # held-out gradient points
MODEL_PROBES = 256  # held-out points for surrogate agreement, at first
MAX_PROBES = 2048  # ... and at most, while the bounds straddle a risk level

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
    from harness.core.gradients import gradient_rows

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


def _probe_chunk(truth: Any, info: Any, start: int, n: int) -> torch.Tensor:
    """Probes start … start + n: the named dataset's test inputs (in distribution, never queried
    by an attack; none beyond them), else seeded N(0, I) clipped to the declared input domain."""
    held = getattr(truth, "x_heldout", None)
    if held is not None and len(held):
        return held[start : start + n].to(torch.float64).reshape(-1, info.dim)
    gen = _probe_gen(truth, 2)
    x = torch.randn(start + n, info.dim, generator=gen, dtype=torch.float64)[start:]
    return x.clamp(info.input_low, info.input_high)


def _levels(m: dict[str, float], regression: bool) -> tuple[str, str]:
    """(risk level at the lower bounds, at the upper bounds) of a black-box judgment."""
    from harness.scoring.fidelity import label_level, r2_level

    if regression:
        return r2_level(m["r2_lower"]), r2_level(m["r2_upper"])
    return (label_level(m["agreement_lower"], m["kappa_lower"]),
            label_level(m["agreement_upper"], m["kappa_upper"]))


def _judge_sample(y_api: torch.Tensor, y_sur: torch.Tensor, info: Any, seed: int) -> dict[str, float]:
    """Point estimates and one-sided 95% bounds on the probes answered so far."""
    from harness.scoring.bounds import label_bounds, r2_bounds

    if info.task == "regression":
        a, b = y_api.reshape(-1).double(), y_sur.reshape(len(y_sur), -1)[:, 0]
        ss = float(((a - a.mean()) ** 2).sum()) or 1.0
        lo, hi = r2_bounds(a, b, seed)
        return {"blackbox_r2": 1.0 - float(((a - b) ** 2).sum()) / ss, "r2_lower": lo, "r2_upper": hi,
                "n_probes": float(len(a))}
    # surrogates output raw (or centred) logits: one column is thresholded at 0
    mine, theirs = api_labels(y_sur, "logits"), api_labels(y_api, info.output)
    kappa = cohen_kappa(theirs, mine)
    return {"blackbox_agreement": float((mine == theirs).double().mean()), "blackbox_kappa": kappa,
            **label_bounds(theirs, mine, kappa)}


@scorer("surrogate", blackbox=True)
@scorer("model", blackbox=True)
def surrogate_agreement(artifact: Any, truth: Any, info: Any) -> dict[str, float]:
    """Agreement of the extracted surrogate with the endpoint on held-out probes, with one-sided
    95% bounds; while the bounds straddle a risk level, more probes (doubling, up to MAX_PROBES
    in all or the scan's row cap) narrow them."""
    model = artifact.data.get("model", artifact.data.get("surrogate"))
    if model is None or not callable(model):
        return {}
    dtype = next((p.dtype for p in getattr(model, "parameters", list)()), torch.float64)
    before = truth.endpoint.stats.rows_sent
    xs, ys, want, m = [], [], MODEL_PROBES, {}
    while True:
        x = _probe_chunk(truth, info, sum(len(v) for v in xs), want - sum(len(v) for v in xs))
        if len(x) == 0:
            if xs:
                artifact.notes.append(f"verification: the held-out probe points ran out at "
                                      f"{sum(len(v) for v in xs)} while the bounds straddled a level")
            break
        try:
            y = truth.probe_predict(x)
        except (BudgetExhausted, EndpointError) as exc:
            if not xs:
                unverified(artifact, exc)
                return {"blackbox_probes": 0.0, "blackbox_unverified": 1.0}
            artifact.notes.append(f"verification stopped adding probes at {sum(len(v) for v in xs)}: "
                                  f"{type(exc).__name__}: {exc}"[:300])
            break
        xs.append(x)
        ys.append(y.to(torch.float64).cpu())
        xa = torch.cat(xs)
        with torch.no_grad():
            y_sur = model(xa.to(dtype)).detach().to(torch.float64).cpu()
        m = _judge_sample(torch.cat(ys), y_sur, info, int(truth.seed))
        lo, hi = _levels(m, info.task == "regression")
        if lo == hi or len(xa) >= MAX_PROBES:
            break
        want = min(2 * len(xa), MAX_PROBES)
    m.pop("agreement_upper", None), m.pop("kappa_upper", None), m.pop("r2_upper", None)
    return {"blackbox_probes": float(truth.endpoint.stats.rows_sent - before), **m}
