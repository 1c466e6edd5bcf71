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
API's own predictions, plus the same noise *without* the projection as a control
(`random_noise_kept`), and the noise actually added (`noise_added`: the measured ‖n‖/‖x‖ after
the projection). Beyond the paper, so that a finding means something: the judge tests fixed ratios
(1 for high, 0.5 for medium) on at least 300 inputs (`images`; the pool may hold fewer, then n is
said), with a one-sided 95% Clopper–Pearson lower bound on the fraction kept and an exact McNemar
test against the unprojected control on the same inputs (`kept_low_at_*`, `control_p_at_*`). A
recovered span that is the whole input space leaves no orthogonal noise to add: the attack is
`skipped` with that reason when the recovery showed it, and stops (`incomplete`, the recovery's
`stopped_by`) when the whole space is only what a noisy spectrum could not narrow (a guess).
Also the ratio sweep and a PNG grid of original / obfuscated inputs
with their predicted labels.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.span.nonadaptive import SpanNonAdaptive, SpanParams
from harness.attacks.span.threshold import SpanThreshold, ThresholdParams
from harness.core.answers import api_labels
from harness.core.errors import AssumptionViolated, AttackSkipped, AttackStopped


class ObfuscationParams(Params):
    recovery: Literal["auto", "nonadaptive", "threshold"] = "auto"  # auto: threshold for labels
    recovery_params: dict[str, Any] = Field(default_factory=dict)  # that attack's params
    images: int = Field(default=300, ge=1)  # inputs from the attacker's pool to obfuscate
    ratios: list[float] = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]  # noise-to-signal ratios tried (0.5, 1 always)
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


TESTED = (0.5, 1.0)  # the ratios the judge tests: medium at 0.5, high at 1
ALPHA = 0.05


def kept_test(proj: torch.Tensor, rand: torch.Tensor, key: str) -> dict[str, float]:
    """At one ratio, per input 1[prediction kept] with projected and with unprojected noise:
    the one-sided 95% Clopper–Pearson lower bound on the projected kept fraction, and the exact
    McNemar p-value that projected noise keeps more predictions than unprojected noise does."""
    from scipy.stats import binomtest

    from harness.scoring.audit import cp_lower

    n, k = len(proj), int(proj.sum())
    b = int((proj & ~rand).sum())  # kept only when projected
    c = int((rand & ~proj).sum())  # kept only when not projected
    p = binomtest(b, b + c, 0.5, alternative="greater").pvalue if b + c else 1.0
    return {f"kept_low_at_{key}": cp_lower(k, n, ALPHA) if k else 0.0,
            f"random_kept_at_{key}": float(rand.double().mean()), f"control_p_at_{key}": float(p)}


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
    assumes = frozenset({"network"})
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
        ratios = sorted(set(params.ratios) | set(TESTED))
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
        if len(basis) >= oracle.info.dim and span.stopped_by is not None:
            # a whole-space span that was not shown (noise, no clear gap) is a guess: the attack
            # cannot say whether orthogonal noise exists, so it stops rather than skips
            raise AttackStopped(f"the span recovery ({name}) could not measure the span (rank "
                                f"{len(basis)} of {oracle.info.dim} is a guess: {span.reason})",
                                stopped_by=span.stopped_by)
        if len(basis) >= oracle.info.dim:
            raise AttackSkipped(f"the recovered span ({name}) is the whole input space (rank "
                                f"{len(basis)} of {oracle.info.dim}): there is no orthogonal noise "
                                "to add, so nothing can be obfuscated")
        noisy = [complement_noise(basis, x, r, ctx.gen, project=pr) for pr in (True, False)
                 for r in ratios]
        added = [float((n.norm(dim=1) / x.norm(dim=1).clamp_min(1e-300)).median()) for n in noisy]
        if max(added[: len(ratios)]) <= 1e-9:
            raise AttackSkipped(f"the noise orthogonal to the recovered span ({name}, rank "
                                f"{len(basis)}) is zero on these inputs: nothing to add")
        y = api_labels(oracle.predict(torch.cat([x, *[x + n for n in noisy]])), oracle.output)
        base, rest = y[: len(x)], y[len(x):].reshape(2 * len(ratios), len(x))
        same = (rest == base).cpu()
        kept = same.double().mean(dim=1)
        kept_proj, kept_rand = kept[: len(ratios)], kept[len(ratios):]
        ok = [i for i, k in enumerate(kept_proj) if float(k) >= params.keep_target]
        i = max(ok) if ok else 0
        chosen = ratios[i]
        metrics = {
            "prediction_kept": float(kept_proj[i]),
            "noise_to_signal": float(chosen) if ok else 0.0,
            "noise_added": added[i],
            "random_noise_kept": float(kept_rand[i]),
            "recovered_rank": float(len(basis)),
            "images": float(len(x)),
            "recovery_queries": float(recovery_queries),
        }
        for j, (r, kp) in enumerate(zip(ratios, kept_proj, strict=True)):
            key = f"{r:g}".replace(".", "_")
            metrics[f"kept_at_{key}"] = float(kp)
            if r in TESTED:
                metrics.update(kept_test(same[j], same[len(ratios) + j], key))
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
        return judge_obfuscation(m, self.Params().keep_target)


def judge_obfuscation(m: dict[str, float], bar: float = 0.99) -> tuple[str, str]:
    """high: at noise as large as the input (ratio 1), the 95% lower bound on the kept fraction
    reaches `bar` and projected noise keeps significantly more predictions than unprojected noise
    (McNemar p < 0.05); medium: the same at ratio 0.5 with a bar of 0.9; low otherwise, saying
    which part was not shown."""
    n = int(m.get("images", 0))
    for key, ratio, level, need in (("1", 1.0, "high", bar), ("0_5", 0.5, "medium", 0.9)):
        kept, low = m.get(f"kept_at_{key}"), m.get(f"kept_low_at_{key}")
        rand, p = m.get(f"random_kept_at_{key}"), m.get(f"control_p_at_{key}")
        if None in (kept, low, rand, p):
            continue
        if low >= need and p < ALPHA:
            short = "" if level == "high" else (
                f"; at noise as large as the input {m.get('kept_at_1', 0.0):.1%} were kept (95% lower "
                f"bound {m.get('kept_low_at_1', 0.0):.1%}, below the {bar:.0%} bar"
                + (f": {n} inputs cannot show it, 300 all kept can)" if n < 300 else ")"))
            return level, (f"noise {ratio:g}× as large as the input, orthogonal to the leaked span, "
                           f"left {kept:.1%} of {n} predictions unchanged (95% lower bound "
                           f"{low:.1%}); the same noise unprojected kept {rand:.1%} (McNemar p "
                           f"{p:.2g}) — inputs can be made unrecognisable while the model answers "
                           f"as before{short}")
    kept, low = m.get("kept_at_1", 0.0), m.get("kept_low_at_1", 0.0)
    rand, p = m.get("random_kept_at_1", float("nan")), m.get("control_p_at_1", 1.0)
    if kept >= bar and p >= ALPHA:
        why = (f"unprojected noise kept {rand:.1%} too (McNemar p {p:.2g}): the model ignores this "
               "noise anyway, the leaked span adds nothing")
    elif kept >= bar:
        why = (f"{n} inputs with this many kept cannot show {bar:.0%} at 95% confidence (lower "
               f"bound {low:.1%}; 300 inputs, all kept, can)")
    else:
        why = "the span did not protect the predictions"
    return "low", (f"obfuscation not shown: noise as large as the input kept {kept:.1%} of {n} "
                   f"predictions; {why}")


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
    width, height = fig.get_size_inches()  # margins in inches: tight_layout measured every axes
    fig.subplots_adjust(left=0.3 / width, right=1 - 0.05 / width, bottom=0.05 / height,
                        top=1 - 0.55 / height, wspace=0.1, hspace=0.3)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
