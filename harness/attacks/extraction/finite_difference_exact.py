"""finite_difference_exact — paper 000 (Milli et al., FAT* 2019), App. C (Algorithm 1-MQ).

The exact extraction of `gradient_exact` through `predict` only. The paper replaces every
gradient of Alg. 1a by a forward finite difference (d + 1 queries each, Lemma 7: exact while
all d + 1 points stay in one cell). Here the d + 1 price is paid only where it buys a row:
kinks on the line are found from values (an interval is bisected while its midpoint leaves the
chord of its ends, 1 query per step), located exactly by intersecting the affine pieces on
either side, and the finite-difference Jacobian is taken once per cell between consecutive
kinks ((h + 1)(d + 1) queries); the jump between neighbouring cells is the rank-one wᵢAᵢᵀ, whose
top singular vector is unit i's normal. A kink's position is checked at three points (its own
and the middle of each outer segment: a kink missed nearby bends a piece into a chord), and each
offset is measured again at the plane's point nearest the origin (6 queries): a kink found far
out on the line would carry the normal's error times its distance into the offset.
Total ≈ h·log(1/eps) + (h + 1)(d + 1) + 9h queries instead of the paper's d·h·log(1/eps).
Output layer, multi-output handling, missed rows and the self-check are as in `gradient_exact`.

What the interface must offer: real-valued predictions. Logits are used as they are;
probabilities are turned back into logit differences — centred log-probabilities
log p − mean(log p) equal the logits minus their mean (binary: log(p₁/p₀) is the logit) — so
the model is recovered up to a per-input constant (scored as centred logits).
Precision: the answers' noise σ is estimated from queries (repeats and second differences);
kinks count only where the value leaves the chord by 20σ, brackets stop shrinking where the
bend sinks into the noise, and Jacobian steps grow with σ (cryptanalysis/fd_rows.py).
Where that is not enough (heavy rounding or noise) the self-check stays above the noise and
the attack ends with `stopped_by: precision` and the model it reached, scored as usual.
"""

from __future__ import annotations

from harness.attacks import register
from harness.attacks.base import Artifact, Attack
from harness.attacks.extraction.cryptanalysis.exact import extract
from harness.attacks.extraction.cryptanalysis.fd_rows import FLOAT64_STEP
from harness.attacks.extraction.gradient_exact import GradientExactParams
from harness.scoring.fidelity import judge_fidelity


class FiniteDifferenceParams(GradientExactParams):
    fd_step: float = FLOAT64_STEP  # forward step for float64-clean answers (× max(1, |x|∞))


@register
class FiniteDifferenceExact(Attack):
    name = "finite_difference_exact"
    family = "extraction"
    needs = frozenset({"prediction", "gradient", "smoothgrad", "whitebox"})
    paper = "000 App. C (Alg. 1-MQ), Alg. 1b"
    summary = "exact one-hidden-layer ReLU extraction from predictions (finite differences)"
    assumes = frozenset({"relu_network"})
    Params = FiniteDifferenceParams

    def skip_reason(self, info):
        if info.output == "label":
            return "needs real-valued predictions (logits or probabilities); the API returns labels"
        return super().skip_reason(info)

    def run(self, oracle, params: FiniteDifferenceParams, ctx) -> Artifact:
        return extract(oracle, ctx, params, "values")

    def judge(self, m, artifact):
        return judge_fidelity(m)
