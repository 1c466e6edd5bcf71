"""mia_rmia — Robust Membership Inference (Zarifzadeh, Liu, Mireshghallah, Shokri 2024,
"Low-Cost High-Power Membership Inference Attacks", ICML, Sec. 3–4).

RMIA compares the target's likelihood of x with that of population points z:
LR(x, z) = [Pr(x|θ)/Pr(x)] / [Pr(z|θ)/Pr(z)], with Pr(x|θ) = p_θ(y|x) and Pr(x) the average of
Pr(x|θ') over reference models θ'; score(x) = Pr_z[LR(x, z) ≥ γ] over population points z.
- Online, Pr(x) is the mean over all reference models, IN and OUT (each point is IN for half).
- Offline (each point scored against the models that did not train on it), Pr(x) comes from the
  OUT models by the paper's linear fit Pr(x) ≈ ½((1 + a)·Pr_OUT(x) + (1 − a)) (Sec. 4, "offline";
  Pr_IN ≈ a·Pr_OUT + 1 − a). `a` is chosen by the attacker on its own models: each of up to four
  reference models in turn plays the target, the others are its references, its known IN/OUT
  points score each a of the grid 0, 0.1, ..., 1, and the a with the best mean AUC wins; a = 0.3
  with a single model, which leaves none to tune on.
- Population z: attacker-pool points, never members of the target, whose Pr(z) is estimated as a
  non-member's Pr(x) is (offline: from the models that did not train on z; points every model
  trained on are left out); points no reference model trained on first (the paper's population).
Reference models follow the paper's layout (harness/attacker/reference_models.py): each evaluation
point IN for a random half of the models, training sets of the victim's size; offline attacks read
each point's OUT models (`offline_references: pool`: models on the attacker's pool alone; one
model: always the pool, which leaves every point OUT). Models that failed to train are dropped and
counted.

With one population set for every x, Pr_z[LR(x, z) ≥ γ] is a non-decreasing function of
Pr(x|θ)/Pr(x): the ROC is that ratio's. Points that beat every z (a tie at score 1) are ordered
by the ratio, so low-FPR thresholds stay resolvable; the population fraction is kept as
`rmia_fraction` data. The paper's claim: with 1–4 reference models RMIA beats LiRA (which needs
many models to fit its Gaussians). Risk levels: harness/attacks/membership/common.py.
"""

from __future__ import annotations

from typing import Literal

import torch

from harness.attacker.reference_models import (
    offline_design,
    reference_phi,
    shared_reference_set,
    unscored,
)
from harness.attacker.signals import prob_true
from harness.attacks import register
from harness.attacks.base import Artifact, Attack
from harness.attacks.membership.common import (
    StandInParams,
    judge_membership,
    knowledge,
    needs_scores,
    paid_points,
    reference_recipe,
    scores_artifact,
    target_phi,
)
from harness.core.errors import AssumptionViolated, AttackSkipped
from harness.scoring.roc import auc, roc

A_GRID = tuple(i / 10 for i in range(11))
A_SINGLE = 0.3  # one reference model leaves none to tune a on (measured: 0.3 within 0.015 AUC of the best)
A_TARGETS = 4  # reference models that take turns as the target when tuning a


class RmiaParams(StandInParams):
    references: int = 2  # reference models (the paper: 1-4 offline)
    mode: Literal["offline", "online"] = "offline"
    a: float | None = None  # offline Pr(x) fit; None = tuned on the attacker's own models
    offline_references: Literal["halves", "pool"] = "halves"  # see the module docstring
    gamma: float = 1.0  # LR threshold against population points
    population: int = 1000  # pool points z queried on the target (0 = skip the fraction)
    max_members: int | None = None
    known_init: bool = False
    slow_recipes: bool = False


def pr_x(p_ref: torch.Tensor, keep: torch.Tensor, mode: str, a: float) -> torch.Tensor:
    """Pr(x) (n,) from references' p(y|x) (K, n) and their IN mask (K, n)."""
    if mode == "online":
        return p_ref.mean(0)
    out = (~keep).to(p_ref)
    p_out = (out * p_ref).sum(0) / out.sum(0).clamp_min(1)
    return 0.5 * ((1 + a) * p_out + (1 - a))


def tune_a(p_ref: torch.Tensor, keep: torch.Tensor) -> float:
    """a for offline RMIA: each of up to A_TARGETS reference models in turn plays the target on
    the points it knows (its IN and OUT points with an OUT model among the others), the others
    are its references; the a of the grid with the best mean AUC (paper Sec. 4)."""
    k = len(p_ref)
    if k < 2:
        return A_SINGLE
    best, best_auc = A_SINGLE, -1.0
    for a in A_GRID:
        aucs = []
        for t in range(min(k, A_TARGETS)):
            rest = torch.arange(k, device=keep.device) != t
            known = (~keep[rest]).any(0)
            if known.sum() < 2 or keep[t][known].all() or not keep[t][known].any():
                continue
            ratio = p_ref[t] / pr_x(p_ref[rest], keep[rest], "offline", a).clamp_min(1e-300)
            aucs.append(auc(roc(ratio[known].cpu().numpy(), keep[t][known].cpu().numpy())))
        if aucs and sum(aucs) / len(aucs) > best_auc:
            best, best_auc = a, sum(aucs) / len(aucs)
    return best


def population(keep_pool: torch.Tensor, mode: str, limit: int) -> torch.Tensor:
    """Indices of the pool points used as population z (at most `limit`): points whose Pr(z) is
    estimated as a non-member's Pr(x) is — offline, from reference models that did not train on
    z (points every model trained on are left out); online, from all of them. Points no model
    trained on come first (the paper's population: OUT for every model)."""
    out = (~keep_pool).sum(0)
    usable = out > 0 if mode == "offline" else torch.ones_like(out, dtype=torch.bool)
    order = torch.argsort(-(out == len(keep_pool)).to(torch.int8), stable=True)
    return order[usable[order]][:limit].cpu()


def rmia_scores(p_target: torch.Tensor, pr: torch.Tensor, p_pop: torch.Tensor | None,
                pr_pop: torch.Tensor | None, gamma: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(ranking score, population fraction): log(p/Pr(x)) and Pr_z[LR(x, z) ≥ γ]."""
    log_ratio = torch.log(p_target.clamp_min(1e-300)) - torch.log(pr.clamp_min(1e-300))
    if p_pop is None or len(p_pop) == 0:
        return log_ratio, None
    z = torch.sort(torch.log(p_pop.clamp_min(1e-300)) - torch.log(pr_pop.clamp_min(1e-300))).values
    # LR(x, z) ≥ γ  ⇔  log ratio_z ≤ log ratio_x − log γ
    frac = torch.searchsorted(z, log_ratio - torch.log(torch.tensor(gamma)).to(z), right=True) / len(z)
    return log_ratio, frac.to(log_ratio)


@register
class MiaRmia(Attack):
    name = "mia_rmia"
    family = "membership"
    needs = frozenset({"prediction", "gradient", "smoothgrad", "whitebox"})
    paper = "Zarifzadeh et al. 2024 Sec. 3-4"
    summary = "RMIA: likelihood ratio against population points, few reference models"
    Params = RmiaParams

    def skip_reason(self, info):
        if info.task == "regression":
            return "RMIA needs class probabilities (a classifier)"
        return needs_scores(info) or super().skip_reason(info)

    def run(self, oracle, params: RmiaParams, ctx) -> Artifact:
        kn = knowledge(ctx)
        recipe, named = reference_recipe(kn, params)
        ev = kn.eval_set(params.max_members)
        n = paid_points(oracle, len(ev))
        task = oracle.info.task
        p_t = prob_true(target_phi(oracle, kn, ev.x[:n], ev.y[:n])[:, 0])
        seed = ctx.threat.seed * 1009 + 13 if ctx.threat else ctx.seed  # shared by the run
        why = ""
        if params.mode == "online":
            design = "halves"
        else:
            design, why = offline_design(params.offline_references, params.references, len(ev.x_pool))
        try:
            refs = shared_reference_set(kn, ev, params.references, design,
                                        seed if design == "halves" else seed + 1, params.known_init,
                                        params.slow_recipes, recipe)
        except NotImplementedError:
            raise AttackSkipped("the training recipe cannot be batched: set params.slow_recipes: "
                                "true to train reference models one by one") from None
        p_ref = prob_true(reference_phi(recipe, refs, ev.x, ev.y, task, "eval")[..., 0])[:, :n]
        keep = refs.keep_eval[:, :n]
        a = params.a
        if params.mode == "offline" and a is None:
            if design == "pool":
                p_known = prob_true(reference_phi(recipe, refs, ev.x_pool, ev.y_pool, task, "pool")[..., 0])
                a = tune_a(p_known, refs.keep_pool)
            else:
                a = tune_a(prob_true(reference_phi(recipe, refs, ev.x, ev.y, task, "eval")[..., 0]),
                           refs.keep_eval)
        a = A_SINGLE if a is None else a
        pr = pr_x(p_ref, keep, params.mode, a)
        p_pop = pr_pop = None
        z = population(refs.keep_pool, params.mode, params.population)
        n_pop = len(z)
        if not oracle.offers("weights"):
            n_pop = min(n_pop, oracle.affordable(n_pop))
            z = z[:n_pop]
        if n_pop > 0:
            p_pop = prob_true(target_phi(oracle, kn, ev.x_pool[z], ev.y_pool[z])[:, 0])
            pz = prob_true(reference_phi(recipe, refs, ev.x_pool, ev.y_pool, task, "pool")[..., 0])[:, z]
            pr_pop = pr_x(pz, refs.keep_pool[:, z], params.mode, a)
        score, frac = rmia_scores(p_t, pr, p_pop, pr_pop, params.gamma)
        lack = unscored(keep, params.mode == "online")
        score = torch.where(lack, torch.zeros_like(score), score)  # no model behind it: no evidence
        fit = ""
        if params.mode == "offline":
            tuned = " (tuned on the reference models)" if params.a is None and len(refs) > 1 else ""
            fit = f"; a = {a:g}{tuned}"
        notes = [f"{params.mode}: {refs.describe()}{f' ({why})' if why else ''}{fit}; "
                 f"{n_pop} population points z"]
        metrics = {"references": float(len(refs)), "a": float(a), "population": float(n_pop),
                   "references_dropped": float(len(refs.dropped))}
        notes += [f"dropped: {line}" for line in refs.dropped]
        if recipe.stand_in:  # a model file of unknown architecture: a stand-in family, said so
            notes.append(recipe.stand_in)
            metrics["stand_in"] = 1.0
        notes += named
        art = scores_artifact(score, len(ev), ctx, metrics,
                              notes, f"mia_rmia ({params.mode}, {len(refs)} reference models)")
        if frac is not None:
            art.data["rmia_fraction"] = frac.detach().cpu().numpy()
        if lack.any():  # incomplete, not low
            raise AssumptionViolated(f"{int(lack.sum())} points left unscored, with no reference model "
                                     "on a side their score needs (too few models, or models that "
                                     "failed to train)", artifact=art)
        return art

    def judge(self, m, artifact):
        return judge_membership(m)
