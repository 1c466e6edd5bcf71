"""obfuscation — paper 003 (Jayaram, Woodruff, Zhang, ICLR 2020), Sec. 5 (Fig. 3).

The harm a span leak enables: once the row span V of the first layer is known, noise n in the
orthogonal complement of V leaves the first layer's output A(x + n) = Ax unchanged, so an input
can be drowned in noise — made unrecognisable to a person — while the model answers exactly as
before. The attack recovers the span through the same oracle (span_nonadaptive for gradients or
real-valued outputs, span_threshold for label-only APIs), then adds Gaussian noise projected onto
V⊥ to the attacker's own inputs at growing noise-to-signal ratios ‖n‖/‖x‖ (measured in the
API's input space; inputs are not clipped to the data range, which would move noise into V).

Reported: the largest ratio at which at least `keep_target` of predictions stay unchanged
(`noise_to_signal`) and the fraction kept there (`prediction_kept`), both measured through the
API's own predictions, plus the same noise *without* the projection as a baseline
(`random_noise_kept`). Beyond the paper: the ratio sweep, the baseline, and a PNG grid of
original / obfuscated inputs with their predicted labels.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.gradients import api_labels
from harness.attacks.span.nonadaptive import SpanNonAdaptive, SpanParams
from harness.attacks.span.threshold import SpanThreshold, ThresholdParams
from harness.errors import AssumptionViolated, AttackStopped


class ObfuscationParams(Params):
    recovery: Literal["auto", "nonadaptive", "threshold"] = "auto"  # auto: threshold for labels
    recovery_params: dict[str, Any] = Field(default_factory=dict)  # that attack's params
    images: int = Field(default=32, ge=1)  # inputs from the attacker's pool to obfuscate
    ratios: list[float] = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]  # noise-to-signal ratios tried
    keep_target: float = 0.99  # the fraction of predictions that must stay unchanged
    plot: bool = True  # write obfuscation.png (image-shaped inputs only)


class Reserved:
    """An oracle view that keeps `reserve` queries of the budget back for later."""

    def __init__(self, oracle: Any, reserve: int):
        self._view = oracle
        self._reserve = reserve

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)

    @property
    def remaining(self) -> int | None:
        rem = self._view.remaining
        return None if rem is None else max(0, rem - self._reserve)

    def affordable(self, n: int) -> int:
        rem = self.remaining
        return n if rem is None else max(0, min(n, rem))


def complement_noise(basis: torch.Tensor, x: torch.Tensor, ratio: float,
                     gen: torch.Generator, project: bool = True) -> torch.Tensor:
    """Gaussian noise, projected onto span(basis)⊥ when `project`, with ‖nᵢ‖ = ratio·‖xᵢ‖."""
    g = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(x.device)
    if project and len(basis):
        g = g - (g @ basis.T) @ basis
    g = g / g.norm(dim=1, keepdim=True).clamp_min(1e-300)
    return ratio * x.norm(dim=1, keepdim=True) * g


@register
class Obfuscation(Attack):
    name = "obfuscation"
    family = "span"
    needs = frozenset({"prediction", "gradient", "smoothgrad", "whitebox"})
    paper = "003 Sec. 5, Fig. 3"
    summary = "noise orthogonal to the recovered span: unrecognisable inputs, unchanged predictions"
    Params = ObfuscationParams

    def skip_reason(self, info):
        if info.task == "regression":
            return "needs a classifier: 'prediction unchanged' is defined for labels only"
        return super().skip_reason(info)

    def _recover(self, oracle, p: ObfuscationParams, ctx) -> tuple[str, Artifact]:
        kind = p.recovery
        if kind == "auto":
            kind = "threshold" if oracle.output == "label" and oracle.interface == "prediction" \
                else "nonadaptive"
        atk = SpanThreshold() if kind == "threshold" else SpanNonAdaptive()
        reason = atk.skip_reason(oracle.info)
        if reason:
            raise AssumptionViolated(f"span recovery ({atk.name}) cannot run here: {reason}")
        cls = ThresholdParams if kind == "threshold" else SpanParams
        try:
            params = cls.model_validate(p.recovery_params)
        except Exception as exc:  # noqa: BLE001 - a bad nested param is an honest failure
            raise AssumptionViolated(f"recovery_params for {atk.name}: {exc}") from None
        try:
            return atk.name, atk.run(oracle, params, ctx)
        except AttackStopped as exc:
            art = exc.artifact or ctx.best
            if art is None:
                raise
            art.stopped_by, art.reason = exc.stopped_by, str(exc)
            return atk.name, art

    def run(self, oracle, params: ObfuscationParams, ctx) -> Artifact:
        pool = oracle.info.x_pool
        if pool is None or len(pool) == 0:
            raise AssumptionViolated("the attacker has no inputs of its own to obfuscate (empty pool)")
        x = pool[: params.images].to(oracle.device, torch.float64).reshape(-1, oracle.info.dim)
        ratios = sorted(params.ratios)
        reserve = len(x) * (1 + 2 * len(ratios))
        if oracle.affordable(reserve) < reserve:
            raise AssumptionViolated(f"the budget cannot pay for the {reserve} prediction queries",
                                     stopped_by="budget")
        q0 = oracle.queries
        name, span = self._recover(Reserved(oracle, reserve), params, ctx)
        recovery_queries = oracle.queries - q0
        basis = span.data.get("basis", torch.zeros(0, oracle.info.dim)).to(oracle.device,
                                                                            torch.float64)
        if len(basis) == 0:
            raise AttackStopped(f"span recovery ({name}) found no direction: {span.reason}",
                                stopped_by=span.stopped_by or "assumption")
        noisy = [complement_noise(basis, x, r, ctx.gen, project=pr) for pr in (True, False)
                 for r in ratios]
        y = api_labels(oracle.predict(torch.cat([x, *[x + n for n in noisy]])), oracle.output)
        base, rest = y[: len(x)], y[len(x):].reshape(2 * len(ratios), len(x))
        kept = (rest == base).double().mean(dim=1).cpu()
        kept_proj, kept_rand = kept[: len(ratios)], kept[len(ratios):]
        ok = [i for i, k in enumerate(kept_proj) if float(k) >= params.keep_target]
        i = max(ok) if ok else 0
        chosen = ratios[i]
        metrics = {
            "prediction_kept": float(kept_proj[i]),
            "noise_to_signal": float(chosen) if ok else 0.0,
            "random_noise_kept": float(kept_rand[i]),
            "recovered_rank": float(len(basis)),
            "images": float(len(x)),
            "recovery_queries": float(recovery_queries),
        }
        for r, kp in zip(ratios, kept_proj, strict=True):
            metrics[f"kept_at_{r:g}".replace(".", "_")] = float(kp)
        x_obf = x + noisy[i]
        art = Artifact("obfuscation", metrics=metrics, notes=[f"span recovered by {name}"])
        art.notes += [f"recovery: {m}" for m in span.notes]
        art.data = {"basis": basis.cpu(), "x": x.cpu(), "x_obfuscated": x_obf.cpu(),
                    "noise_to_signal": chosen, "labels": base.cpu(),
                    "labels_obfuscated": rest[i].cpu(),
                    "curves": {"obfuscation_kept_vs_ratio_pct": [
                        (int(round(100 * r)), float(k)) for r, k in zip(ratios, kept_proj, strict=True)]}}
        if span.stopped_by is not None:
            art.stopped_by = span.stopped_by
            art.reason = f"span recovery stopped ({span.reason})"
        if not ok:
            art.notes.append(f"no ratio kept {params.keep_target:.0%} of predictions "
                             f"(at {ratios[0]:g}: {float(kept_proj[0]):.0%})")
        if params.plot and len(oracle.info.input_shape) >= 2:
            art.files["obfuscation.png"] = plot_grid(
                x.cpu(), x_obf.cpu(), base.cpu(), rest[i].cpu(), oracle.info.input_shape, chosen,
                ctx.outdir / "obfuscation.png")
        elif params.plot:
            art.notes.append("no image grid: the inputs are not image-shaped")
        return art

    def judge(self, m, artifact):
        kept, nsr = m.get("prediction_kept", 0.0), m.get("noise_to_signal", 0.0)
        rnd = m.get("random_noise_kept", float("nan"))
        plain = (f"noise {nsr:g}× as large as the input, orthogonal to the leaked span, left "
                 f"{kept:.0%} of predictions unchanged (the same noise unprojected: {rnd:.0%}) — "
                 "an attacker can make inputs unrecognisable while the model answers as before")
        if nsr >= 1.0 and kept >= 0.99 and rnd <= kept - 0.1:
            return "high", plain
        if nsr >= 1.0 and kept >= 0.99:
            return "medium", (f"noise {nsr:g}× the input kept {kept:.0%} of predictions, but "
                              f"unprojected noise kept {rnd:.0%} too: the model shrugs off this "
                              "noise anyway, the leaked span adds little here")
        if nsr >= 0.5 and kept >= 0.9:
            return "medium", plain
        return "low", (f"obfuscation did not work: at noise-to-signal {nsr:g} only {kept:.0%} of "
                       "predictions were kept")


def plot_grid(x, x_obf, y, y_obf, shape, ratio: float, path, cols: int = 8):
    """Two rows (original / obfuscated) of up to `cols` images with their predictions; returns path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h, w = shape[-2], shape[-1]
    c = min(cols, len(x))
    fig, axes = plt.subplots(2, c, figsize=(1.3 * c, 3.4), squeeze=False)
    for j in range(c):
        for row, (imgs, labs) in enumerate(((x, y), (x_obf, y_obf))):
            ax = axes[row][j]
            img = imgs[j].reshape(-1, h, w)[0].numpy()
            ax.imshow(img, cmap="gray")
            ax.set_title(f"pred {int(labs[j])}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    axes[0][0].set_ylabel("original", fontsize=8)
    axes[1][0].set_ylabel(f"noise ×{ratio:g}", fontsize=8)
    fig.suptitle(f"noise orthogonal to the recovered span (noise-to-signal {ratio:g})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
