"""mia_loss — the loss-threshold membership attack (Yeom, Giacomelli, Fredrikson, Jha 2018,
"Privacy Risk in Machine Learning", Sec. 3.2, Adversary 2; Shokri et al. 2017's baseline).

A member tends to have a lower loss than a non-member. The score of an evaluation point is the
logit-scaled confidence of its true label, φ = log(p_y/(1 − p_y)), a monotone function of −loss
for cross-entropy (and the negative squared error for regression): every threshold on the loss is
a threshold on φ, so the ROC is the loss attack's. Yeom et al. threshold at the mean training
loss; the scorer sweeps every threshold, the usual practice since Carlini et al. 2022.
A label-only API reveals only whether the prediction is right: the score is then 1[ŷ = y]
(Yeom's gap attack, Sec. 3.1). No reference models: one query per evaluation point.
Risk levels: harness/attacks/membership/common.py.
"""

from __future__ import annotations

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.membership.common import (
    judge_membership,
    knowledge,
    paid_points,
    scores_artifact,
    target_correct,
    target_phi,
)


class LossParams(Params):
    max_members: int | None = None  # cap on members (and non-members) evaluated; None = all


@register
class MiaLoss(Attack):
    name = "mia_loss"
    family = "membership"
    needs = frozenset({"prediction", "gradient", "smoothgrad", "whitebox"})
    paper = "Yeom et al. 2018 Sec. 3"
    summary = "loss-threshold membership inference (the baseline)"
    Params = LossParams

    def run(self, oracle, params: LossParams, ctx) -> Artifact:
        kn = knowledge(ctx)
        ev = kn.eval_set(params.max_members)
        n = paid_points(oracle, len(ev))
        x, y = ev.x[:n], ev.y[:n]
        label_only = oracle.info.output == "label" and not (oracle.offers("weights") and kn.recipe
                                                         and not kn.recipe.stand_in)
        score = target_correct(oracle, x, y) if label_only else target_phi(oracle, kn, x, y)[:, 0]
        notes = ["score: 1[prediction right] (label-only API)" if label_only else "score: φ (−loss)"]
        return scores_artifact(score, len(ev), ctx, {}, notes, "mia_loss (Yeom et al. 2018)")

    def judge(self, m, artifact):
        return judge_membership(m)
