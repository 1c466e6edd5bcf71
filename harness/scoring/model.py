"""Scoring extracted models against the victim: exact attacks and query learning (kind
"model") and the surrogate's learning curve (kind "surrogate").

Extraction risk is functional fidelity (what the attacker walks away with), not bit-exactness.
Held-out inputs: the victim's test split when the truth has data ("data"), else uniform random
inputs in the declared input domain ("domain"); N(0, I) inputs ("gaussian", where the exact
attacks search) are scored too but do not set the risk.
Metrics (kind "model"), per set and for the held-out set without suffix:
- output_error: 99th percentile over inputs of the largest output difference — probabilities
  (absolute) for a probability API, else |f̂ − f| relative to the RMS of f (logits and
  regression victims alike; centred logits when the API only revealed those);
- agreement: share of inputs where both predict the same label (classifiers; inputs where the
  victim's own top two outputs tie within 1e-12·RMS count as agreeing);
- max_rel_error: max over inputs and outputs of |f̂ − f| / RMS(f) (the exactness figure), and
  normalized_loss: E[(f − f̂)²] / E[f²] (paper 001's measure);
- exact: 1 when max_rel_error ≤ exact_tolerance = max(1e-6, EXACT_ULPS × the unit roundoff of
  the answers' dtype): a copy exact to the precision the answers have, with a margin (float32:
  1.2e-4, three decades above the 1e-6 its runs reach on either device; float64: 1e-6);
- units_true / units_matched / param_error, where the victim is recognisably Linear-ReLU-Linear
  (TorchScript included): hidden units (Aᵢ, bᵢ)/‖Aᵢ‖ matched up to permutation and scale;
  param_error is the largest distance.
Thresholds (harness/scoring/fidelity.py): high when output_error ≤ 1e-2 (a stolen
model, whatever its parameter error) or agreement ≥ 0.95; medium when output_error ≤ 0.1 or
agreement ≥ 0.8; else low. TorchScript victims are scored the same way (the truth model is
callable even when its structure is not recognisable).
"""

from __future__ import annotations

import json

import numpy as np
import torch
from torch import nn

from harness.core.answers import api_labels
from harness.scoring import deep_params, scorer

N_GAUSS = 2000
N_DATA = 2000
EXACT_FLOOR = 1e-6  # the exactness line of float64 answers
EXACT_ULPS = 1000   # float32 and below: this many units of roundoff


def exact_tolerance(dtype: torch.dtype) -> float:
    """The max_rel_error under which an extracted model counts as exact for answers of `dtype`."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else torch.finfo(torch.float64).eps
    return max(EXACT_FLOOR, EXACT_ULPS * eps)


def _eval(model, x: torch.Tensor) -> torch.Tensor:
    """Raw outputs (N, K) of a torch module or callable, float64, in chunks."""
    outs = []
    with torch.no_grad():
        for i in range(0, len(x), 4096):
            xi = x[i : i + 4096]
            if isinstance(model, nn.Module):
                p = next(iter(model.parameters()), None)
                if p is None:
                    p = next(iter(model.buffers()), None)
                if p is not None:
                    xi = xi.to(p.device, p.dtype)
            outs.append(torch.as_tensor(model(xi)).reshape(len(xi), -1).to(torch.float64).cpu())
    return torch.cat(outs)


def eval_sets(truth, info) -> dict[str, torch.Tensor]:
    """Held-out inputs: the victim's test data (else uniform inputs in the declared domain) and
    seeded Gaussian inputs."""
    gen = torch.Generator().manual_seed(12345)
    sets = {"gaussian": torch.randn(N_GAUSS, info.dim, generator=gen, dtype=torch.float64)}
    data = getattr(truth, "data", None)
    if data is not None and len(data.x_test):
        x = torch.as_tensor(data.x_test[:N_DATA], dtype=torch.float64)
        sets["data"] = x.reshape(len(x), -1)
    else:
        lo, hi = float(getattr(info, "input_low", -1.0)), float(getattr(info, "input_high", 1.0))
        if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
            lo, hi = -1.0, 1.0
        sets["domain"] = lo + (hi - lo) * torch.rand(N_DATA, info.dim, generator=gen,
                                                     dtype=torch.float64)
    return sets


def api_outputs(f: torch.Tensor, output: str) -> torch.Tensor | None:
    """What a probability API returns for raw outputs f (softmax; one logit: sigmoid), else None."""
    if output != "probabilities":
        return None
    if f.shape[1] == 1:
        p = torch.sigmoid(f)
        return torch.cat([1 - p, p], 1)
    return torch.softmax(f, 1)


def in_space(f: torch.Tensor, space: str) -> torch.Tensor:
    """Raw outputs (N, K) in the space an extraction reveals them: `raw`; `centered` (logits
    minus their mean: a K ≥ 3 probability API); `difference` (l₁ − l₀, one column: a 2-class
    probability API, whose centred logits are ±(l₁ − l₀)/2). An artifact already in the space
    (one column for `difference`) is returned as it is."""
    if space == "centered":
        return f - f.mean(1, keepdim=True)
    if space == "difference" and f.shape[1] == 2:
        return f[:, 1:] - f[:, :1]
    return f


def cohen_kappa(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cohen's κ of two labelings (N,): agreement beyond what labelings with the same label
    frequencies reach by chance; 0 when it is undefined (both constant and equal)."""
    from sklearn.metrics import cohen_kappa_score

    k = float(cohen_kappa_score(a.cpu().numpy(), b.cpu().numpy()))
    return k if np.isfinite(k) else 0.0


def compare_outputs(f: torch.Tensor, g: torch.Tensor, space: str, task: str,
                    output: str = "logits") -> dict[str, float]:
    """Error metrics of predicted outputs g against true outputs f (both (N, K), or f (N, 2)
    and g (N, 1) in the `difference` space)."""
    f, g = in_space(f, space), in_space(g, space)
    rms = float(f.pow(2).mean().sqrt()) or 1e-300
    pf, pg = api_outputs(f, output), api_outputs(g, output)
    per = (pf - pg).abs().amax(1) if pf is not None else (f - g).abs().amax(1) / rms
    per = torch.nan_to_num(per, nan=float("inf"))
    a, b = (pf, pg) if pf is not None else (f, g)
    spread = float((a - a.mean(0, keepdim=True)).pow(2).sum())
    out = {"max_rel_error": float((f - g).abs().max()) / rms,
           "output_error": float(torch.quantile(per, 0.99)) if len(per) else float("inf"),
           "output_r2": 1.0 - float((a - b).pow(2).sum()) / spread if spread > 0 else 0.0,
           "normalized_loss": float((f - g).pow(2).mean() / f.pow(2).mean().clamp_min(1e-300))}
    if task != "regression":
        lf, lg = api_labels(f, "logits"), api_labels(g, "logits")
        same = lf == lg
        if f.shape[1] > 1:  # the victim's own ties (e.g. all units off, outputs all 0) agree
            top2 = f.topk(2, dim=1).values
            same |= (top2[:, 0] - top2[:, 1]) <= 1e-12 * rms
        else:
            same |= f[:, 0].abs() <= 1e-12 * rms
        out["agreement"] = float(same.double().mean())
        out["kappa"] = cohen_kappa(lf, torch.where(same, lf, lg))
        from harness.scoring.bounds import label_bounds

        b = label_bounds(lf, torch.where(same, lf, lg), out["kappa"])  # a sample's 95% lower bounds
        out.update({k: b[k] for k in ("n_probes", "agreement_lower", "kappa_lower")})
        out["majority_share"] = float(torch.bincount(lf).max()) / max(len(lf), 1)
    return out


def layer_kinds(model) -> list[tuple[str, nn.Module]]:
    """(kind, module) of every leaf module; TorchScript modules by their original class name."""
    if not isinstance(model, nn.Module):
        return []
    mods = [m for m in model.modules() if not list(m.children())]
    return [(getattr(m, "original_name", type(m).__name__), m) for m in mods]


def two_layer(model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(A, b, W) of a Linear-ReLU-Linear victim (eager or TorchScript), else None."""
    leaves = [(k, m) for k, m in layer_kinds(model) if k not in ("Flatten", "Identity", "Dropout")]
    if [k for k, _ in leaves] != ["Linear", "ReLU", "Linear"]:
        return None
    a, w = leaves[0][1], leaves[2][1]
    b = a.bias if a.bias is not None else torch.zeros(a.weight.shape[0], dtype=a.weight.dtype)
    return a.weight.detach().double().cpu(), b.detach().double().cpu(), w.weight.detach().double().cpu()


def match_units(a, b, w, normals, offsets) -> dict[str, float]:
    """Match true hidden units (with a nonzero output weight) to recovered hyperplanes."""
    live = w.abs().amax(dim=0) > 1e-12 * (w.abs().max() + 1e-300)
    a, b = a[live], b[live]
    norm = a.norm(dim=1, keepdim=True).clamp_min(1e-300)
    true = torch.cat([a / norm, b[:, None] / norm], 1)
    rec = torch.cat([normals, offsets[:, None]], 1).double()
    if len(rec) == 0:
        return {"units_true": float(len(true)), "units_matched": 0.0, "param_error": float("inf")}
    exact = "donot_use_mm_for_euclid_dist"  # the matmul shortcut loses distances below ~1e-8
    dist = torch.minimum(torch.cdist(true, rec, compute_mode=exact),
                         torch.cdist(true, -rec, compute_mode=exact))
    best = dist.min(dim=1).values
    tol = 1e-4
    return {"units_true": float(len(true)), "units_matched": float((best < tol).sum()),
            "param_error": float(best.max()) if len(best) else 0.0}


@scorer("model")
def score_model(artifact, truth, info) -> dict[str, float]:
    if truth.model is None or artifact.data.get("model") is None:
        return {}
    net, space = artifact.data["model"], artifact.data.get("space", "raw")
    out: dict[str, float] = {}
    worst = 0.0
    sets = eval_sets(truth, info)
    for name, x in sets.items():
        m = compare_outputs(_eval(truth.model, x), _eval(net, x), space, info.task, info.output)
        for key, val in m.items():
            out[f"{key}_{name}"] = val
        worst = max(worst, m["max_rel_error"])
    held = "data" if "data" in sets else "domain"
    out["max_rel_error"] = worst
    out["exact_tolerance"] = exact_tolerance(getattr(info, "dtype", torch.float64))
    out["exact"] = float(worst <= out["exact_tolerance"])
    out["output_error"] = out[f"output_error_{held}"]
    out["output_r2"] = out[f"output_r2_{held}"]
    for key in ("agreement", "kappa", "majority_share", "n_probes", "agreement_lower", "kappa_lower"):
        if f"{key}_{held}" in out:
            out[key] = out[f"{key}_{held}"]
    parts = two_layer(truth.model)
    if parts is not None and artifact.data.get("normals") is not None:
        out.update(match_units(*parts, artifact.data["normals"], artifact.data["offsets"]))
    elif artifact.data.get("layers"):  # a deep network (harness/scoring/deep_params.py)
        out.update(deep_params.score_layers(truth.model, artifact.data["layers"], space == "centered",
                                            torch.cat(list(sets.values()))))
    return {k: float(v) for k, v in out.items() if np.isfinite(v) or k == "param_error"}


# --------------------------------------------------------------------------- surrogate


def fidelity_accuracy(f: torch.Tensor, g: torch.Tensor, y, task: str) -> tuple[float, float]:
    """Fidelity (same label as the victim; regression: 1 − normalised square loss) and the
    surrogate's accuracy against the true labels (regression: its R² against the targets)."""
    if task == "regression":
        fid = 1.0 - float((f - g).pow(2).mean() / f.var().clamp_min(1e-300))
        yt = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
        acc = 1.0 - float((g[:, 0] - yt).pow(2).mean() / yt.var().clamp_min(1e-300))
        return fid, acc
    lf, lg = api_labels(f, "logits"), api_labels(g, "logits")
    acc = float((lg == torch.as_tensor(y).reshape(-1).long()).double().mean()) if y is not None else 0.0
    return float((lf == lg).double().mean()), acc


def first_reaching(curve: list[tuple[int, float]], level: float) -> float | None:
    """Queries of the first snapshot at or above `level` (None if never)."""
    return next((float(q) for q, v in curve if v >= level), None)


def plot_curves(curves: dict[str, list[tuple[int, float]]], path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for key, pts in curves.items():
        ax.plot([q for q, _ in pts], [v for _, v in pts], marker="o", ms=3, label=key)
    ax.set_xscale("log")
    ax.set_xlabel("oracle queries")
    ax.set_ylim(0, 1.02)
    ax.axhline(0.9, color="grey", lw=0.5, ls="--")
    ax.axhline(0.95, color="grey", lw=0.5, ls=":")
    ax.set_title(title)
    ax.legend()
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.14, top=0.91)  # fixed size: no tight_layout
    fig.savefig(path, dpi=110)
    plt.close(fig)


@scorer("surrogate")
def score_surrogate(artifact, truth, info) -> dict[str, float]:
    """Fidelity/accuracy curve over the snapshots (held-out victim data), the queries to 90%
    and 95% fidelity, and a PNG plot; the curves go to artifact.data["curves"]."""
    if truth.model is None or truth.data is None or not len(truth.data.x_test):
        return {}
    x = torch.as_tensor(truth.data.x_test[:N_DATA], dtype=torch.float64)
    x = x.reshape(len(x), -1)
    y = truth.data.y_test[:N_DATA]
    f = _eval(truth.model, x)
    fid_curve, acc_curve = [], []
    g = f
    for queries, _points, net in artifact.data["snapshots"]:
        g = _eval(net, x)
        fid, acc = fidelity_accuracy(f, g, y, info.task)
        fid_curve.append((int(queries), fid))
        acc_curve.append((int(queries), acc))
    curves = {"fidelity": fid_curve, "accuracy": acc_curve}
    if artifact.data.get("curves", {}).get("heldout_agreement"):  # the attacker's own measure
        curves["heldout_agreement"] = artifact.data["curves"]["heldout_agreement"]
    artifact.data["curves"] = curves
    out = {"fidelity": fid_curve[-1][1], "accuracy": acc_curve[-1][1]}
    if info.task != "regression":
        from harness.scoring.bounds import label_bounds

        lf, lg = api_labels(f, "logits"), api_labels(g, "logits")
        out["kappa"] = cohen_kappa(lf, lg)
        b = label_bounds(lf, lg, out["kappa"])  # the test split is a sample: its 95% lower bounds
        out.update({k: b[k] for k in ("n_probes", "agreement_lower", "kappa_lower")})
        out["majority_share"] = float(torch.bincount(api_labels(f, "logits")).max()) / max(len(f), 1)
    for level, key in ((0.9, "queries_to_90"), (0.95, "queries_to_95")):
        q = first_reaching(fid_curve, level)
        out[f"reached_{key[-2:]}"] = float(q is not None)
        if q is not None:
            out[key] = q
    outdir = artifact.data.get("outdir")
    if outdir is not None:
        path = outdir / "surrogate_curve.png"
        loss = "gradients + predictions" if artifact.data.get("joint") else "predictions only"
        plot_curves(curves, path, f"surrogate ({loss}, {artifact.data.get('source')} queries)")
        artifact.files["surrogate_curve"] = path
        table = outdir / "surrogate_curve.json"
        table.write_text(json.dumps(curves))
        artifact.files["surrogate_curve_json"] = table
    return out
