"""mia_rmia — Robust Membership Inference (Zarifzadeh, Liu, Mireshghallah, Shokri 2024,
"Low-Cost High-Power Membership Inference Attacks", ICML, Sec. 3–4).

RMIA compares the target's likelihood of x with that of population points z:
LR(x, z) = [Pr(x|θ)/Pr(x)] / [Pr(z|θ)/Pr(z)], with Pr(x|θ) = p_θ(y|x) and Pr(x) the average of
Pr(x|θ') over reference models θ'; score(x) = Pr_z[LR(x, z) ≥ γ] over population points (the
attacker's pool). Offline (reference models never trained on x), Pr(x) is approximated from the
OUT models by the paper's linear fit Pr(x) ≈ ½((1 + a)·Pr_OUT(x) + (1 − a)) (Sec. 4, "offline"),
with a chosen by the attacker on its own models (one reference model plays the target, its known
IN/OUT points score each a in a grid; the best AUC wins; a = 0.3 with a single model, which
leaves none to tune on). Online,
Pr(x) is the mean over IN and OUT models.

With one population set for every x, Pr_z[LR(x, z) ≥ γ] is a non-decreasing function of
Pr(x|θ)/Pr(x): the ROC is that ratio's. Points that beat every z (a tie at score 1) are ordered
by the ratio, so low-FPR thresholds stay resolvable; the population fraction is kept as
`rmia_fraction` data. The paper's claim: with 1–4 reference models RMIA beats LiRA (which needs
many models to fit its Gaussians). Risk levels: harness/attacks/membership/common.py.
"""

from __future__ import annotations

from typing import Literal

import torch

from harness.attacker.reference_models import reference_phi, shared_reference_set
from harness.attacker.signals import prob_true
from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.membership.common import (
    judge_membership,
    knowledge,
    needs_scores,
    paid_points,
    reference_recipe,
    scores_artifact,
    target_phi,
)
from harness.attacks.membership.mia_lira import offline_design
from harness.errors import AttackSkipped
from harness.scoring.roc import auc, roc

A_GRID = tuple(i / 10 for i in range(11))
A_SINGLE = 0.3  # one reference model leaves none to tune a on (measured: 0.3 within 0.015 AUC of the best)


class RmiaParams(Params):
    references: int = 2  # reference models (the paper: 1-4 offline)
    mode: Literal["offline", "online"] = "offline"
    a: float | None = None  # offline Pr(x) fit; None = tuned on the attacker's own models
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
    """a for offline RMIA: reference model 0 plays the target on the points it knows (its IN
    and OUT points), the others are the references; the a with the best AUC (paper Sec. 4)."""
    if len(p_ref) < 2:
        return A_SINGLE
    target, rest, member = p_ref[0], p_ref[1:], keep[0]
    known = (~keep[1:]).any(0)  # points with at least one OUT reference among the rest
    best, best_auc = 1.0, -1.0
    for a in A_GRID:
        ratio = target / pr_x(rest, keep[1:], "offline", a).clamp_min(1e-300)
        r = roc(ratio[known].cpu().numpy(), member[known].cpu().numpy())
        if auc(r) > best_auc:
            best, best_auc = a, auc(r)
    return best


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
        recipe = reference_recipe(kn)
        ev = kn.eval_set(params.max_members)
        n = paid_points(oracle, len(ev))
        task = oracle.info.task
        p_t = prob_true(target_phi(oracle, kn, ev.x[:n], ev.y[:n])[:, 0])
        seed = ctx.threat.seed * 1009 + 13 if ctx.threat else ctx.seed  # shared by the run
        design = "halves" if params.mode == "online" else offline_design(len(ev.x_pool), params.references)
        try:
            refs = shared_reference_set(kn, ev, params.references, design,
                                        seed if design == "halves" else seed + 1, params.known_init,
                                        params.slow_recipes)
        except NotImplementedError:
            raise AttackSkipped("the training recipe cannot be batched: set params.slow_recipes: "
                                "true to train reference models one by one") from None
        p_ref = prob_true(reference_phi(recipe, refs, ev.x, ev.y, task, "eval")[..., 0])[:, :n]
        keep = refs.keep_eval[:, :n]
        a = params.a
        if params.mode == "offline" and a is None:
            src = "pool" if design == "pool" else "eval"
            xs, ys = (ev.x_pool, ev.y_pool) if src == "pool" else (ev.x, ev.y)
            p_known = prob_true(reference_phi(recipe, refs, xs, ys, task, src)[..., 0])
            a = tune_a(p_known, refs.keep_pool if src == "pool" else refs.keep_eval)
        a = A_SINGLE if a is None else a
        pr = pr_x(p_ref, keep, params.mode, a)
        p_pop = pr_pop = None
        n_pop = min(params.population, len(ev.x_pool))
        if not oracle.offers("weights"):
            n_pop = min(n_pop, oracle.affordable(n_pop))
        if n_pop > 0:
            zx, zy = ev.x_pool[:n_pop], ev.y_pool[:n_pop]
            p_pop = prob_true(target_phi(oracle, kn, zx, zy)[:, 0])
            pz = prob_true(reference_phi(recipe, refs, ev.x_pool, ev.y_pool, task, "pool")[..., 0])[:, :n_pop]
            pr_pop = pr_x(pz, refs.keep_pool[:, :n_pop], params.mode, a)
        score, frac = rmia_scores(p_t, pr, p_pop, pr_pop, params.gamma)
        notes = [f"{params.mode}: {len(refs)} reference models ({design} design, "
                 f"{'batched' if refs.batched else 'one by one'}, {refs.seconds:.1f} s); a = {a:g}; "
                 f"{n_pop} population points"]
        art = scores_artifact(score, len(ev), ctx, {"references": float(len(refs)), "a": float(a),
                                                    "population": float(n_pop)},
                              notes, f"mia_rmia ({params.mode}, {len(refs)} reference models)")
        if frac is not None:
            art.data["rmia_fraction"] = frac.detach().cpu().numpy()
        return art

    def judge(self, m, artifact):
        return judge_membership(m)
