"""cryptanalytic — exact extraction of deep ReLU networks: Carlini, Jagielski & Mironov,
"Cryptanalytic Extraction of Neural Network Models", CRYPTO 2020, Sec. 4 (the differential
attack: critical points found on lines by bisection, the signature of each neuron of a layer from
the gradient jump at its critical points, the layer's signs, the layer peeled off and the next
one extracted the same way, the output layer by least squares; Table 1 gives the sizes), with
the boundary following of Rolnick & Kording, "Reverse-Engineering Deep ReLU Networks", ICML 2020
(a later-layer boundary bends where it crosses an earlier layer's, and the bend is the weight
between them) to collect each neuron's critical points across regions, and signs recovered in
polynomial time (the goal of Canales-Martínez et al., EUROCRYPT 2024) by linear algebra on the
next layer.

The attacker knows nothing of the architecture (a declared one only tells it when a layer is
complete). Layer 1: critical points on a long Gaussian line and their gradient jumps — the rows
themselves. Layer m + 1: with layers 1..m known, each unexplained critical point is followed
along its surface from region to region (a short line search and a check — 6 values, or the
2-query gradient jump — per boundary crossed); the surface of a layer-(m + 1) neuron is a
hyperplane in the features (ReLU(u_m), u_m or h_{m−1}, 1), whose coefficients are the neuron's
row and, in the linear block, the signature of layer m's orientations. The layer is then peeled
off (its signs fixed), and the next one is sought among the critical points that were not. The
output layer is fitted by least squares and the whole network is checked on fresh queries
(harness/attacks/extraction/cryptanalysis/deep_extract.py).

Interfaces: `predict` with logits or probabilities (centred logits then), and the gradient
interfaces, whose exact gradients give each jump in 2 queries instead of 2(d + 1)
finite-difference values. Honest outside its assumptions: answers that are not float64-clean
(float32 arithmetic, rounding, noise) end with `stopped_by: precision` and the partial network
(scored like any other, never a pass); a declared non-ReLU activation or non-MLP architecture,
or outputs that are not piecewise linear, are `skipped` with the reason.
"""

from __future__ import annotations

import math

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.extraction.cryptanalysis.deep_extract import DeepExtraction
from harness.attacks.extraction.cryptanalysis.exact import check_tolerance, extract, gradient_tolerance
from harness.attacks.extraction.cryptanalysis.piecewise import linear_pieces_test
from harness.attacks.extraction.cryptanalysis.precision_bits import bits_needed
from harness.attacks.extraction.gradient_exact import GradientExactParams
from harness.core.errors import AssumptionViolated, AttackSkipped, AttackStopped, PrecisionLimit
from harness.core.gradients import estimate_noise
from harness.scoring.fidelity import judge_fidelity


class CryptanalyticParams(Params):
    span: float = 1e4  # lines are searched on t ∈ [−span, span] (sinh-spaced grid)
    grid: int = 65  # initial points of a line
    max_units: int = 4096  # more critical points than this on a line: not a ReLU network
    quiet_lines: int = 3  # a layer is complete after this many lines bring no new neuron
    max_lines: int = 12  # lines per layer at most
    recover_lines: int = 3  # lines through the worst check point when a layer looks complete
    recover_walks: int = 8  # critical points nearest the worst check point followed on each
    max_rebuilds: int = 3  # times a neuron found missing below makes the layers above be redone
    max_depth: int = 8  # hidden layers at most
    check_points: int = 2048  # fresh queries of the final self-check (256 for a first one)
    check_tol: float | None = None  # self-check max relative error; None: from the answers' noise
    max_seconds: float = 600.0  # the attack's own time limit (stopped_by: time, partial network)
    coarse_lines: int = 2  # lines for the first layer when the answers are not float64-clean
    exact_noise: float = 1e-12  # answers noisier than this (relative) take the coarse path
    measure_bits: bool = True  # replay on the extracted copy to measure the output bits needed


@register
class Cryptanalytic(Attack):
    name = "cryptanalytic"
    family = "extraction"
    needs = frozenset({"prediction", "gradient", "smoothgrad", "whitebox"})
    paper = "Carlini et al. 2020 Sec. 4"
    summary = "exact layer-by-layer extraction of deep ReLU networks (critical points, signatures, signs)"
    assumes = frozenset({"relu_network"})
    Params = CryptanalyticParams

    def skip_reason(self, info):
        if info.output == "label":
            return "needs real-valued predictions (logits or probabilities); the API returns labels"
        return super().skip_reason(info)

    def run(self, oracle, params: CryptanalyticParams, ctx) -> Artifact:
        declared = getattr(getattr(ctx, "threat", None), "architecture", None)
        if declared is not None:
            why = architecture_skip(declared)
            if why:
                raise AttackSkipped(why)
        noise = estimate_noise(oracle, ctx.gen)
        explain = oracle.interface in ("gradient", "whitebox")
        if explain:
            _, randomized = gradient_tolerance(oracle, ctx.gen)
            explain = not randomized
        why = linear_pieces_test(oracle, noise, ctx.gen)
        if why:  # a measured guess, not a declared fact: the attack stops, it does not decline
            raise AssumptionViolated(why)
        if noise.rel >= params.exact_noise or noise.randomized:
            return coarse_answers(oracle, ctx, params, noise, explain)
        check_tol = check_tolerance(noise, params.check_tol, "gradients", oracle.info.dim)
        art = DeepExtraction(oracle, ctx, params, noise, explain, check_tol).run()
        if params.measure_bits and art.stopped_by is None:
            bits = bits_needed(self, params, art.data["model"], oracle, ctx.seed)
            if bits is not None:
                art.metrics["output_bits_needed"] = bits
                art.notes.append(f"replayed on its own copy with rounded answers, the attack needs "
                                 f"{bits:g} bits of output precision (fewer stop it)")
        return art

    def judge(self, m, artifact):
        risk, why = judge_fidelity(m)
        if "output_bits_needed" in m:  # the rounding defense in bits (issue 27, item 6)
            why += (f"; it needs answers with ≥ {int(m['output_bits_needed'])} significant bits "
                    "(rounded coarser, it stops)")
        return risk, why


def coarse_answers(oracle, ctx, params: CryptanalyticParams, noise, explain: bool) -> Artifact:
    """Answers that are not float64-clean (float32 arithmetic, rounding): the layers beyond the
    first need exact critical points, so only the first layer is extracted, as the one-hidden-layer
    attacks do it on coarse answers (exact.py: noise-aware kinks, planes re-measured where they
    are), with a least-squares output layer: the partial network, scored like any other. It is
    the answer only when it matches fresh queries to their own precision (a one-hidden-layer
    victim); otherwise the attack stops with `stopped_by: precision`."""
    # a smooth net that passed the piecewise test shows kinks everywhere: capped, it stops early
    p = GradientExactParams(max_lines=params.coarse_lines, max_units=256)
    search = "gradients" if explain else "values"
    caught: AttackStopped | None = None
    try:
        art = extract(oracle, ctx, p, search)
    except AttackStopped as exc:
        art = exc.artifact or ctx.best
        if art is None or exc.stopped_by not in ("precision", "assumption"):
            raise
        caught = exc  # the kept artifact is an earlier line's: never a normal end
    art.metrics.update(layers_found=1.0, log2_queries=math.log2(max(oracle.queries, 1)))
    art.notes.append(f"{noise.describe()}: only the first layer was sought (a one-hidden-layer "
                     "network fitted); deeper layers need float64-clean answers")
    if caught is None and art.stopped_by in (None, "budget"):
        return art  # matched fresh queries, or the budget stopped it (the runner's surrogate check)
    err = art.metrics.get("self_check_error", float("nan"))
    why = f" ({caught})" if caught is not None else ""
    raise PrecisionLimit(
        f"the answers are not float64-clean ({noise.describe()}): the exact extraction of layers "
        "beyond the first needs exact critical points; the one-hidden-layer approximation it "
        f"kept misses fresh queries (max relative error {err:.3g}){why}", artifact=art)


def architecture_skip(spec) -> str | None:
    """Why a declared architecture is outside the technique (None: a ReLU MLP)."""
    arch = getattr(spec, "arch", None)
    if arch in (None, "file"):  # a user's own model file: its structure is not declared
        return None
    if arch not in ("mlp", "linear", "logistic"):
        return f"declared architecture {arch!r} is not a fully connected network (an MLP)"
    acts = getattr(spec, "activation", "relu")
    acts = acts if isinstance(acts, list) else [acts]
    other = sorted({a for a in acts if a != "relu"})
    if arch == "mlp" and other:
        return f"declared activation {', '.join(other)} is not ReLU: the outputs are not piecewise linear"
    return None

