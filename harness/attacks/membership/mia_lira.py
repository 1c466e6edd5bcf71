"""mia_lira — the Likelihood Ratio Attack (Carlini, Chien, Nasr, Song, Terzis, Tramèr 2022,
"Membership Inference Attacks From First Principles", Sec. IV, Alg. 1).

For each evaluation point (x, y) the attacker models the target's logit-scaled confidence
φ = log(p_y/(1 − p_y)) under two hypotheses with Gaussians fitted on reference models:
- online: models trained WITH (x, y) (IN) and WITHOUT it (OUT): score = log N(φ; μ_in, σ_in²) −
  log N(φ; μ_out, σ_out²);
- offline: OUT models only, a one-sided test: score = (φ − μ_out)/σ_out (Sec. IV-C, Eq. 4).
Reference models follow the paper's layout (Sec. IV-B; harness/attacker/reference_models.py):
each evaluation point IN for a random half of the models, drawn per point, every model trained on
as many points as the victim with the victim's declared recipe, in batches. Online and offline
read the same models (offline: each point's OUT models), as in the paper's comparison; with
`offline_references: pool` the offline models train on the attacker's pool alone (every
evaluation point OUT: an attacker who never trains on the evaluation points, a weaker one).
Models that failed to train are dropped and counted (`references_dropped`).
Variances, one rule for both sides: `per_example` (Sec. IV-B), `global` (one pooled within-point
variance per side, "fixed variance", Sec. VI-B: better with few models), or `auto`: each point's
variance shrunk toward the pooled one, σ²_i = (SS_i + ν₀·s²_pooled)/(df_i + ν₀) with ν₀ = 8 prior
degrees of freedom (the moderated variance of Smyth 2004, empirical Bayes): close to per-point with
many models, to the pooled one with few, and without the cliff of a switch when a model is dropped.
`augment: shift` queries the target on the point and four 1-pixel shifts (images) and sums the
per-augmentation log-likelihoods (the paper's mirror/shift augmentations, Sec. VI-C).
Risk levels: harness/attacks/membership/common.py.
"""

from __future__ import annotations

from typing import Literal

import torch

from harness.attacker.reference_models import (
    SHIFTS,
    offline_design,
    reference_phi,
    shared_reference_set,
    unscored,
)
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

PRIOR_DF = 8.0  # `auto`: ν₀, the pooled variance's weight in degrees of freedom (measured: 4-16 alike)


class LiraParams(StandInParams):
    shadows: int = 16  # reference models (the paper: 16-256; 64 for the figures)
    mode: Literal["online", "offline", "both"] = "both"  # both: online scores, offline beside
    variance: Literal["auto", "global", "per_example"] = "auto"
    offline_references: Literal["halves", "pool"] = "halves"  # see the module docstring
    augment: Literal["none", "shift"] = "none"
    max_members: int | None = None
    known_init: bool = False  # reference models start from the victim's initialisation
    slow_recipes: bool = False  # train one by one when the recipe cannot be batched


def gaussian_fit(phi: torch.Tensor, mask: torch.Tensor, variance: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-point means (n, A) and standard deviations of φ (K, n, A) over the models in mask (K, n):
    `per_example`, `global` (pooled within-point) or `auto` (shrunk toward the pooled, PRIOR_DF)."""
    w = mask.to(phi)[..., None]
    cnt = w.sum(0)
    mu = (w * phi).sum(0) / cnt.clamp_min(1)
    sq = (w * (phi - mu) ** 2).sum(0)
    df = (cnt - 1).clamp_min(0)
    pooled = sq.sum(0) / df.sum(0).clamp_min(1)  # (A,)
    if variance == "per_example":
        var = sq / df.clamp_min(1)
    elif variance == "global":
        var = pooled.expand_as(mu)
    else:
        var = (sq + PRIOR_DF * pooled) / (df + PRIOR_DF)
    return mu, var.sqrt().clamp_min(1e-6)


def _log_normal(v, mu, sd):
    return -0.5 * ((v - mu) / sd) ** 2 - torch.log(sd)


def lira_online(target: torch.Tensor, phi: torch.Tensor, keep: torch.Tensor, variance: str) -> torch.Tensor:
    """Online LiRA scores (n,) from the target's φ (n, A), references' φ (K, n, A), IN mask (K, n)."""
    mu_in, sd_in = gaussian_fit(phi, keep, variance)
    mu_out, sd_out = gaussian_fit(phi, ~keep, variance)
    return (_log_normal(target, mu_in, sd_in) - _log_normal(target, mu_out, sd_out)).sum(-1)


def lira_offline(target: torch.Tensor, phi: torch.Tensor, keep: torch.Tensor, variance: str) -> torch.Tensor:
    """Offline LiRA scores (n,): the one-sided z-score of φ against the OUT Gaussian."""
    mu_out, sd_out = gaussian_fit(phi, ~keep, variance)
    return ((target - mu_out) / sd_out).sum(-1)


def neutral(scores: torch.Tensor, keep: torch.Tensor, online: bool) -> torch.Tensor:
    """Scores with 0 (no evidence either way) where a point has no model on a side it needs."""
    return torch.where(unscored(keep, online), torch.zeros_like(scores), scores)


@register
class MiaLira(Attack):
    name = "mia_lira"
    family = "membership"
    needs = frozenset({"prediction", "gradient", "smoothgrad", "whitebox"})
    paper = "Carlini et al. 2022 Sec. IV"
    summary = "LiRA: per-example Gaussian likelihood ratio on reference models"
    Params = LiraParams

    def skip_reason(self, info):
        return needs_scores(info) or super().skip_reason(info)

    def run(self, oracle, params: LiraParams, ctx) -> Artifact:
        kn = knowledge(ctx)
        recipe, named = reference_recipe(kn, params)
        ev = kn.eval_set(params.max_members)
        shifts = SHIFTS if params.augment == "shift" and len(oracle.info.input_shape) >= 2 else ((0, 0),)
        n = paid_points(oracle, len(ev), len(shifts))
        target = target_phi(oracle, kn, ev.x[:n], ev.y[:n], shifts)
        seed = ctx.threat.seed * 1009 + 13 if ctx.threat else ctx.seed  # shared by the run
        notes, metrics, curves = [], {"shadows": float(params.shadows)}, {}
        if recipe.stand_in:  # a model file of unknown architecture: a stand-in family, said so
            notes.append(recipe.stand_in)
            metrics["stand_in"] = 1.0
        notes += named
        online = offline = None
        lacking: list[str] = []
        seen: dict[int, int] = {}  # reference sets used: id → models dropped

        def refs_for(design: str):
            try:
                refs = shared_reference_set(kn, ev, params.shadows, design,
                                            seed if design == "halves" else seed + 1,
                                            params.known_init, params.slow_recipes, recipe)
            except NotImplementedError:
                raise AttackSkipped("the training recipe cannot be batched (SGD on models leakmeter "
                                    "builds can): set params.slow_recipes: true to train reference "
                                    "models one by one") from None
            if id(refs) not in seen:
                seen[id(refs)] = len(refs.dropped)
                notes.extend(f"dropped: {line}" for line in refs.dropped)
            phi = reference_phi(recipe, refs, ev.x, ev.y, oracle.info.task, "eval", shifts)[:, :n]
            return refs, phi, refs.keep_eval[:, :n]

        if params.mode in ("online", "both"):
            refs, phi, keep = refs_for("halves")
            online = neutral(lira_online(target, phi, keep, params.variance), keep, True)
            metrics["shadow_seconds"] = refs.seconds
            notes.append(f"online: {refs.describe()}")
            if unscored(keep, True).any():
                lacking.append(f"online: {int(unscored(keep, True).sum())} points without an IN or "
                               "OUT model")
        if params.mode in ("offline", "both"):
            design, why = offline_design(params.offline_references, params.shadows, len(ev.x_pool))
            refs, phi, keep = refs_for(design)
            offline = neutral(lira_offline(target, phi, keep, params.variance), keep, False)
            metrics["offline_shadow_seconds"] = refs.seconds
            notes.append(f"offline: each point against its OUT models of {refs.describe()}"
                         + (f" ({why})" if why else ""))
            if unscored(keep, False).any():
                lacking.append(f"offline: {int(unscored(keep, False).sum())} points without an OUT model")
        metrics["references_dropped"] = float(sum(seen.values()))
        main = online if online is not None else offline
        if online is not None and offline is not None:
            curves = {"LiRA online": online, "LiRA offline": offline}
        art = scores_artifact(main, len(ev), ctx, metrics, notes,
                              f"mia_lira ({params.shadows} reference models)", curves)
        if offline is not None and online is not None:
            art.data["extra_scores"] = {"offline": offline.detach().double().cpu().numpy()}
        if lacking:  # a Gaussian with no model behind it is no score: incomplete, not low
            raise AssumptionViolated("points left unscored, with no reference model on a side their "
                                     "score needs (too few models, or models that failed to train): "
                                     + "; ".join(lacking), artifact=art)
        return art

    def judge(self, m, artifact):
        return judge_membership(m)
