"""Scoring reconstructions against the real training points.

Two settings share one artifact kind, "reconstruction":

* informed (paper 004): the truth is the release's `InformedTruth`; reconstruction t is compared
  with target t. The non-member baseline of target t is its nearest point (MSE) in everything the
  adversary already had, D₋ ∪ pool: the nearest-neighbour oracle of Sec. V-B.
* untargeted (paper 002, `kkt`): the truth is the victim's; candidates are matched to each
  training point (App. B.3, see `match_candidates`), and the baseline is the nearest point of the
  held-out non-members (attacker pool ∪ test split).

A target counts as reconstructed only when its reconstruction is strictly closer to it than its
baseline (it then carries information unique to that record). `success_rate` is the fraction
reconstructed with a 95% Clopper–Pearson interval; `success_rate_eta` is the fraction within ℓ2
distance `eta` (the scenario's `rero.eta[0]`, else the median NN-oracle ℓ2 distance) for the
ReRo comparison (`rero_comparable` = 1 only when each target got one guess, not a best-of-many
picked with the truth as in kkt's matching or Thm. 8's two candidates).
Images: SSIM with a 3×3 Gaussian window (σ = 1.5, valid region, data range 1)
on images min-max scaled to [0, 1]; NCC = Pearson correlation of the flattened inputs.
For untargeted matching on images every point (candidate, training point, non-member) is first
put back in pixel space (a subtracted data mean added back) and min-max scaled per image (App.
B.3's scaling), so distances compare like with like. Best-of-many matching with the truth can
beat the NN oracle by chance (and the App. B.3 vote, averaging several candidates, more so), so
the untargeted scorer also runs the matching against as many held-out non-members
(`control_hits`) and tests members against them (one-sided Fisher exact test, `p_value`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.scoring import scorer
from harness.scoring.audit import clopper_pearson

ALPHA = 0.05


# --------------------------------------------------------------------------- basic measures
def pairwise_mse(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(len(a), len(b)) mean squared errors between rows."""
    a, b = a.double(), b.double()
    d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
    return d2.clamp_min(0) / a.shape[1]


def pairwise_ncc(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(len(a), len(b)) normalised cross-correlations (Pearson) between rows."""
    a = a.double() - a.double().mean(1, keepdim=True)
    b = b.double() - b.double().mean(1, keepdim=True)
    a = a / a.norm(dim=1, keepdim=True).clamp_min(1e-12)
    b = b / b.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return a @ b.T


def minmax_rows(x: torch.Tensor) -> torch.Tensor:
    """Each row linearly stretched to [0, 1] (App. B.3 'scaling')."""
    x = x.double()
    lo, hi = x.min(1, keepdim=True).values, x.max(1, keepdim=True).values
    return (x - lo) / (hi - lo).clamp_min(1e-12)


def is_image(shape: tuple[int, ...]) -> bool:
    return len(shape) >= 2 and shape[-1] >= 3 and shape[-2] >= 3


def ssim_pairs(a: torch.Tensor, b: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """SSIM of row pairs (a_i, b_i): 3×3 Gaussian window σ=1.5, valid region, range 1."""
    h, w = shape[-2], shape[-1]
    c = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    x = minmax_rows(a).reshape(-1, c, h, w)
    y = minmax_rows(b).reshape(-1, c, h, w)
    g = torch.exp(-torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64) / (2 * 1.5**2))
    k2 = (g[:, None] * g[None, :]) / (g.sum() ** 2)
    k = k2.to(x.device).expand(c, 1, 3, 3)

    def f(t):
        return torch.nn.functional.conv2d(t, k, groups=c)

    mx, my = f(x), f(y)
    sxx, syy, sxy = f(x * x) - mx**2, f(y * y) - my**2, f(x * y) - mx * my
    c1, c2 = 0.01**2, 0.03**2
    m = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx**2 + my**2 + c1) * (sxx + syy + c2))
    return m.flatten(1).mean(1)


def nn_baseline(targets: torch.Tensor, pool: torch.Tensor, chunk: int = 512
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per target: MSE to its nearest pool point, and that point's index."""
    if len(pool) == 0:
        inf = torch.full((len(targets),), float("inf"), dtype=torch.float64)
        return inf, torch.zeros(len(targets), dtype=torch.long)
    best, idx = [], []
    for i in range(0, len(targets), chunk):
        m = pairwise_mse(targets[i : i + chunk], pool)
        v, j = m.min(1)
        best.append(v)
        idx.append(j)
    return torch.cat(best), torch.cat(idx)


def match_candidates(cands: torch.Tensor, points: torch.Tensor, vote: float | None = 0.9,
                     by: str = "ncc") -> tuple[torch.Tensor, torch.Tensor]:
    """App. B.3 matching: for each point, its best candidate by NCC (or by MSE for non-image
    data, `by="mse"`, where NCC of a few coordinates means little); with `vote`, the mean of all
    candidates whose NCC is at least `vote` × the best one's. Returns (reconstructions, best NCC)."""
    if by == "mse":
        j = pairwise_mse(points, cands).argmin(1)
        return cands[j].double(), pairwise_ncc(points, cands)[torch.arange(len(points)), j]
    ncc = pairwise_ncc(points, cands)  # (n, m)
    best, j = ncc.max(1)
    if vote is None:
        return cands[j].double(), best
    w = (ncc >= vote * best[:, None]) & (best[:, None] > 0)
    w = w.double()
    w[torch.arange(len(points)), j] = 1.0
    rec = (w @ cands.double()) / w.sum(1, keepdim=True)
    return rec, best


# --------------------------------------------------------------------------- image grids
def save_grid(rows: list[tuple[str, torch.Tensor]], shape: tuple[int, ...], path: Path,
              max_cols: int = 16, titles: list[str] | None = None) -> Path | None:
    """A PNG grid: one row per (label, images) pair; returns the path (None if not images)."""
    if not is_image(shape):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = min(max_cols, max(len(r[1]) for r in rows))
    fig, axes = plt.subplots(len(rows), n, figsize=(0.9 * n + 1.2, 1.0 * len(rows) + 0.3),
                             squeeze=False)
    h, w = shape[-2], shape[-1]
    for r, (label, imgs) in enumerate(rows):
        for c in range(n):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c < len(imgs):
                img = minmax_rows(imgs[c : c + 1].reshape(1, -1)).reshape(-1, h, w)[0]
                ax.imshow(img.cpu().numpy(), cmap="gray", vmin=0, vmax=1)
                if titles and r == 0 and c < len(titles):
                    ax.set_title(titles[c], fontsize=6)
            else:
                ax.axis("off")
        axes[r][0].set_ylabel(label, fontsize=7)
    # margins in inches (the grid's size follows its rows and columns); tight_layout measured
    # every one of its axes
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=0.3 / width, right=1 - 0.05 / width, bottom=0.05 / height,
                        top=1 - (0.2 if titles else 0.05) / height, wspace=0.1, hspace=0.15)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- the metrics
def success_metrics(rec_mse: torch.Tensor, base_mse: torch.Tensor, l2: torch.Tensor,
                    eta: float) -> dict[str, float]:
    """NN-oracle and ℓ2-η success rates with Clopper–Pearson intervals."""
    n = len(rec_mse)
    k = int((rec_mse < base_mse).sum())
    lo, hi = clopper_pearson(k, n)
    ke = int((l2 <= eta).sum())
    elo, ehi = clopper_pearson(ke, n)
    return {"reconstructed": float(k), "success_rate": k / n if n else 0.0,
            "success_ci_low": lo, "success_ci_high": hi, "eta": float(eta),
            "success_rate_eta": ke / n if n else 0.0, "success_eta_ci_low": elo,
            "success_eta_ci_high": ehi}


def _eta(info_eta: Any, base_l2: torch.Tensor) -> float:
    if info_eta:
        return float(info_eta[0])
    finite = base_l2[torch.isfinite(base_l2)]
    return float(finite.median()) if len(finite) else 0.0


def score_informed(art: Any, truth: Any, eta_spec: Any) -> dict[str, float]:
    """Metrics of informed reconstructions (one per released model) against the targets."""
    x = truth.targets.detach().cpu().double()
    xh = torch.as_tensor(art.data["x_hat"]).detach().cpu().double()
    picked_by_truth = xh.dim() == 3
    if picked_by_truth:  # several candidates per target (Thm. 8): score the best one
        d = ((xh - x[:, None, :]) ** 2).mean(2)
        xh = xh[torch.arange(len(x)), d.argmin(1)]
    mse = ((xh - x) ** 2).mean(1)
    l2 = (xh - x).norm(dim=1)
    base, base_idx = nn_baseline(x, truth.adversary_x.detach().cpu().double())
    base_l2 = (base * x.shape[1]).sqrt()
    out: dict[str, float] = {"targets": float(len(x)), "mse_mean": float(mse.mean()),
                             "mse_median": float(mse.median()),
                             "nn_mse_median": float(base.median())}
    rel = l2 / x.norm(dim=1).clamp_min(1e-300)
    out["rel_error_max"] = float(rel.max())
    out["rel_error_median"] = float(rel.median())
    ncc = (pairwise_ncc(xh, x).diagonal())
    out["ncc_mean"] = float(ncc.mean())
    shape = tuple(truth.input_shape)
    if is_image(shape):
        out["ssim_mean"] = float(ssim_pairs(xh, x, shape).mean())
    out.update(success_metrics(mse, base, l2, _eta(eta_spec, base_l2)))
    # one guess per target (no truth-picked best of several): comparable with a ReRo bound
    out["rero_comparable"] = 0.0 if picked_by_truth else 1.0
    if "y_hat" in art.data and art.data["y_hat"] is not None:
        yh = torch.as_tensor(art.data["y_hat"]).detach().cpu().double().reshape(len(x), -1)
        y = truth.target_y.detach().cpu().double().reshape(-1, 1)
        if art.data.get("y_kind") == "regression":
            out["label_error_max"] = float((yh - y).abs().min(1).values.max())
        else:
            out["label_accuracy"] = float((yh.round() == y).any(1).double().mean())
    if truth.grad_norms:
        out["release_grad_norm_max"] = float(max(truth.grad_norms))
    outdir = art.data.get("outdir")
    if outdir is not None:
        pool = truth.adversary_x.detach().cpu().double()
        p = save_grid([("target", x), ("reconstruction", xh), ("NN oracle", pool[base_idx])],
                      shape, Path(outdir) / "reconstructions.png",
                      titles=["✓" if m < b else "✗" for m, b in zip(mse, base, strict=True)])
        if p:
            art.files["reconstructions"] = p
    return out


def score_untargeted(art: Any, truth: Any, eta_spec: Any) -> dict[str, float]:
    """Metrics of untargeted candidates (kkt) against every training point (App. B.3), and the
    same matching against held-out non-members (`control_*`): its false-positive rate."""
    data = truth.data
    shape = tuple(data.input_shape)
    offset = None if data.offset is None else torch.as_tensor(data.offset).double().reshape(1, -1)

    def canon(t: torch.Tensor) -> torch.Tensor:  # pixel space (mean added back), then App. B.3
        t = t.double().reshape(len(t), -1)
        t = t + offset if offset is not None else t
        return minmax_rows(t) if is_image(shape) else t

    xtr = canon(torch.as_tensor(data.x_train))
    nonmem = canon(torch.cat([torch.as_tensor(data.x_pool), torch.as_tensor(data.x_test)]))
    n_pool = len(data.x_pool)
    vote = art.data.get("vote")
    by = "ncc" if is_image(shape) else "mse"
    base, base_idx = nn_baseline(xtr, nonmem)
    base_l2 = (base * xtr.shape[1]).sqrt()
    eta = _eta(eta_spec, base_l2)
    out: dict[str, float] = {"targets": float(len(xtr)), "nn_mse_median": float(base.median())}
    recs: dict[str, torch.Tensor] = {}
    for prefix, key in (("", "candidates"), ("weights_", "baseline_candidates")):
        c = art.data.get(key)
        if c is None or len(c) == 0:
            continue
        c = canon(torch.as_tensor(c).detach().cpu())
        rec, best_ncc = match_candidates(c, xtr, vote, by)
        rec = minmax_rows(rec) if by == "ncc" else rec  # a voted mean, rescaled
        mse = ((rec - xtr) ** 2).mean(1)
        l2 = (rec - xtr).norm(dim=1)
        m = success_metrics(mse, base, l2, eta)
        m["ncc_mean"] = float(best_ncc.mean())
        m["rero_comparable"] = 0.0  # candidates were matched to the targets using the truth
        m["mse_median"] = float(mse.median())
        if is_image(shape):
            ss = ssim_pairs(rec, xtr, shape)
            m["ssim_mean"] = float(ss.mean())
            m["ssim_ge_05"] = float((ss >= 0.5).double().mean())
        out.update({f"{prefix}{k}": v for k, v in m.items()})
        recs[prefix] = rec
        if not prefix:
            ok = mse < base
            out.update(_control(c, nonmem, n_pool, len(xtr), vote, by, int(ok.sum())))
            margins = _margins(truth, data)
            if margins is not None:
                out["margin_median_all"] = float(margins.median())
                if ok.any():
                    out["margin_median_reconstructed"] = float(margins[ok].median())
            order = torch.argsort(mse / base.clamp_min(1e-300))
            outdir = art.data.get("outdir")
            if outdir is not None:
                p = save_grid([("training point", xtr[order]), ("reconstruction", rec[order]),
                               ("nearest non-member", nonmem[base_idx[order]])], shape,
                              Path(outdir) / "reconstructions.png", max_cols=20,
                              titles=["✓" if ok[i] else "✗" for i in order.tolist()])
                if p:
                    art.files["reconstructions"] = p
    if "" in recs and "weights_" in recs:
        out["beats_weight_rows"] = float(out["success_rate"] > out["weights_success_rate"] or (
            out["success_rate"] == out["weights_success_rate"]
            and out.get("ssim_mean", -out["mse_median"]) > out.get("weights_ssim_mean",
                                                                   -out["weights_mse_median"])))
    return out


def _control(cands: torch.Tensor, nonmem: torch.Tensor, n_pool: int, n: int, vote: Any,
             by: str, hits: int) -> dict[str, float]:
    """The same matching run against held-out test points (never training points), as many as
    the members where the test split allows, each judged against its nearest other non-member:
    how often best-of-many candidates beat the NN oracle by chance. `p_value`: one-sided Fisher
    exact test that members are rebuilt more often than these non-members."""
    from scipy.stats import fisher_exact

    test = nonmem[n_pool:]
    k = min(n, len(test) if n_pool else len(test) - 1)
    if k < 1:
        return {}
    targets, rest = test[:k], torch.cat([nonmem[:n_pool], test[k:]])
    base, _ = nn_baseline(targets, rest)
    rec, _ = match_candidates(cands, targets, vote, by)
    if by == "ncc":
        rec = minmax_rows(rec)
    ctrl = int((((rec - targets) ** 2).mean(1) < base).sum())
    lo, hi = clopper_pearson(ctrl, k)
    p = float(fisher_exact([[hits, n - hits], [ctrl, k - ctrl]], alternative="greater")[1])
    return {"control_targets": float(k), "control_reconstructed": float(ctrl),
            "control_rate": ctrl / k, "control_ci_high": hi, "hits": float(hits),
            "control_hits": float(ctrl), "p_value": p}


def _margins(truth: Any, data: Any) -> torch.Tensor | None:
    """y·Φ(x) of every training point divided by the smallest (1 = on the margin)."""
    model = truth.model
    if model is None or data.task != "binary":
        return None
    p = next(model.parameters())
    with torch.no_grad():
        z = model(torch.as_tensor(data.x_train, dtype=p.dtype, device=p.device)).reshape(-1)
    y = torch.as_tensor(data.y_train, device=z.device).double() * 2 - 1
    m = (z.double() * y).cpu()
    return m / m.min().clamp_min(1e-300) if m.min() > 0 else m


@scorer("reconstruction")
def score_reconstruction(art, truth, info) -> dict[str, float]:
    eta = art.data.get("eta_spec")
    if hasattr(truth, "targets"):
        return score_informed(art, truth, eta)
    if getattr(truth, "data", None) is None:
        return {}
    return score_untargeted(art, truth, eta)
