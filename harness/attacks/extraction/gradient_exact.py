"""gradient_exact — paper 000 (Milli, Schmidt, Dragan, Hardt, FAT* 2019), Alg. 1, 1a, 1b, App. B.

Exact recovery of a one-hidden-layer ReLU network from input-gradient queries. Along a Gaussian
line u + t·v the gradient is piecewise constant and jumps by ±wᵢAᵢ where the line crosses unit
i's hyperplane (Alg. 1a). All brackets are bisected at once (one explain call per round) down
to a width `eps`·max(1, |t|); every kink then yields one row ±wᵢAᵢ.

Beyond the paper, for what deployed networks have and Alg. 1 leaves out:
- first-layer biases: hyperplanes are affine, so each kink is also *located*: brackets are
  bisected by gradients to 1e-9 of |t| (below float32 input resolution), and with float64-clean
  predictions the two affine pieces on either side are intersected (4 predict queries per
  kink); the offset is then −nᵢ·x* at the kink x*.
- several outputs sharing the hidden layer: the hidden layer is recovered once from the
  gradient the API explains; every output's weights come from one least-squares fit on the
  2h+1 features [ReLU(nᵢ·x+bᵢ), nᵢ·x+bᵢ, 1] (this replaces Alg. 1b's Chebyshev-centre cell and
  2h×2h sign system: the fit needs no cell and also returns the output biases). For one
  output, the output layer also follows from the gradient jumps themselves (unit i's weight is
  its jump, the linear part is one explained gradient minus the active units' jumps) and only
  the output bias needs predictions: rounded or noisy predictions then cost the model no more
  than their own error. The fit that matches fresh queries better is kept.
- gradients of the *predicted* class jump at class boundaries too; such a jump is not a ReLU
  hyperplane, so every candidate is verified by crossing its hyperplane at a second, distant
  point (2 explain queries): the jump there must be parallel to the first.
- rows the line misses (kinks beyond the span, or two kinks in one bracket): the attacker
  checks the model on fresh queries; while it disagrees, a new line is started at the worst
  check point (at most `max_lines`).
What the interface must offer: explanations that are exact gradients (`gradient` or `whitebox`;
any `gradient_of`) and real-valued predictions (logits, or probabilities: then the model is
recovered up to a per-input constant, i.e. centred logits). Randomized explanations stop it
(`stopped_by: assumption`); a self-check that stays above the answers' noise ends it with
`stopped_by: precision` and the model it has (scored like any other). Tolerances come from the
answers (harness/attacks/extraction/cryptanalysis/exact.py), never from the victim's declared dtype.
"""

from __future__ import annotations

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.extraction.cryptanalysis.exact import extract
from harness.scoring.fidelity import judge_fidelity


class GradientExactParams(Params):
    span: float = 1e4  # the line is searched on t ∈ [−span, span] (Cauchy tails: 2/(π·span) missed)
    grid: int = 65  # initial points on the line (sinh-spaced)
    eps: float | None = None  # bracket width (× max(1, |t|)); None: 1e-9 (gradients) / 1e-4 (values)
    tol: float | None = None  # relative gradient change that counts; None: from the answers
    max_lines: int = 4
    max_units: int = 2048  # more changes than this on a line = not a ReLU network
    verify: bool = True
    check_points: int = 32
    check_tol: float | None = None  # self-check max relative error; None: from the answers' noise


@register
class GradientExact(Attack):
    name = "gradient_exact"
    family = "extraction"
    needs = frozenset({"gradient", "whitebox"})
    paper = "000 Alg. 1, 1a, 1b, App. B"
    summary = "exact one-hidden-layer ReLU extraction from input gradients (line search)"
    assumes = frozenset({"relu_network"})
    Params = GradientExactParams

    def skip_reason(self, info):
        if info.output == "label":
            return "needs real-valued predictions (logits or probabilities) to fit the output layer"
        return super().skip_reason(info)

    def run(self, oracle, params: GradientExactParams, ctx) -> Artifact:
        return extract(oracle, ctx, params, "gradients")

    def judge(self, m, artifact):
        return judge_fidelity(m)
