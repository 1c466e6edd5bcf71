"""mia_lira — the Likelihood Ratio Attack (Carlini, Chien, Nasr, Song, Terzis, Tramèr 2022,
"Membership Inference Attacks From First Principles", Sec. IV, Alg. 1).

For each evaluation point (x, y) the attacker models the target's logit-scaled confidence
φ = log(p_y/(1 − p_y)) under two hypotheses with Gaussians fitted on reference models:
- online: models trained WITH (x, y) (IN) and WITHOUT it (OUT): score = log N(φ; μ_in, σ_in²) −
  log N(φ; μ_out, σ_out²). Reference models train on random halves of the evaluation set ∪ the
  attacker's pool (the paper's design: each point IN for half of them), with the victim's
  declared recipe, in one batched run (harness/attacker/reference_models.py);
- offline: OUT models only, a one-sided test: score = (φ − μ_out)/σ_out (Sec. IV-C, Eq. 4).
  Reference models train on random halves of the attacker's pool (every evaluation point OUT);
  without a pool, the OUT models of the `halves` design.
Variances: per point with ≥ 32 models per side, else one pooled (within-point) variance per side
("fixed variance", Sec. VI-B: better with few models). `augment: shift` queries the target on
the point and four 1-pixel shifts (images) and sums the per-augmentation log-likelihoods (the
paper's mirror/shift augmentations, Sec. VI-C). Risk levels: harness/attacks/membership/common.py.
"""

from __future__ import annotations

from typing import Literal

import torch

from harness.attacker.reference_models import SHIFTS, reference_phi, shared_reference_set
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
from harness.errors import AttackSkipped

PER_POINT_MIN = 32  # models per side before per-point variances beat one pooled variance


class LiraParams(Params):
    shadows: int = 16  # reference models (the paper: 16-256; 64 for the figures)
    mode: Literal["online", "offline", "both"] = "both"  # both: online scores, offline beside
    variance: Literal["auto", "global", "per_example"] = "auto"
    augment: Literal["none", "shift"] = "none"
    max_members: int | None = None
    known_init: bool = False  # reference models start from the victim's initialisation
    slow_recipes: bool = False  # train one by one when the recipe cannot be batched


def gaussian_fit(phi: torch.Tensor, mask: torch.Tensor, variance: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-point means (n, A) and standard deviations of φ (K, n, A) over the models in mask (K, n)."""
    w = mask.to(phi)[..., None]
    cnt = w.sum(0)
    mu = (w * phi).sum(0) / cnt.clamp_min(1)
    sq = (w * (phi - mu) ** 2).sum(0)
    per = (sq / (cnt - 1).clamp_min(1)).sqrt()
    pooled = (sq.sum(0) / (cnt - 1).clamp_min(0).sum(0).clamp_min(1)).sqrt()  # (A,)
    use_per = variance == "per_example" or (variance == "auto" and int(cnt.min()) >= PER_POINT_MIN)
    sd = per if use_per else pooled.expand_as(mu)
    return mu, sd.clamp_min(1e-6)


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


def offline_design(kn_pool: int, k: int) -> str:
    """Offline reference models: on the pool when it exists, else the OUT half of `halves`."""
    return "pool" if kn_pool >= 2 else "halves"


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
        recipe = reference_recipe(kn)
        ev = kn.eval_set(params.max_members)
        shifts = SHIFTS if params.augment == "shift" and len(oracle.info.input_shape) >= 2 else ((0, 0),)
        n = paid_points(oracle, len(ev), len(shifts))
        target = target_phi(oracle, kn, ev.x[:n], ev.y[:n], shifts)
        seed = ctx.threat.seed * 1009 + 13 if ctx.threat else ctx.seed  # shared by the run
        notes, metrics, curves = [], {"shadows": float(params.shadows)}, {}
        online = offline = None
        try:
            if params.mode in ("online", "both"):
                refs = shared_reference_set(kn, ev, params.shadows, "halves", seed, params.known_init,
                                            params.slow_recipes)
                phi = reference_phi(recipe, refs, ev.x, ev.y, oracle.info.task, "eval", shifts)[:, :n]
                online = lira_online(target, phi, refs.keep_eval[:, :n], params.variance)
                metrics["shadow_seconds"] = refs.seconds
                notes.append(f"online: {len(refs)} reference models on halves of the evaluation set "
                             f"∪ pool ({'batched' if refs.batched else 'one by one'}, {refs.seconds:.1f} s)")
            if params.mode in ("offline", "both"):
                design = offline_design(len(ev.x_pool), params.shadows)
                refs = shared_reference_set(kn, ev, params.shadows, design, seed + 1, params.known_init,
                                            params.slow_recipes)
                phi = reference_phi(recipe, refs, ev.x, ev.y, oracle.info.task, "eval", shifts)[:, :n]
                offline = lira_offline(target, phi, refs.keep_eval[:, :n], params.variance)
                metrics["offline_shadow_seconds"] = refs.seconds
                notes.append(f"offline: {len(refs)} reference models on halves of the "
                             f"{'attacker pool' if design == 'pool' else 'evaluation set (OUT only)'}")
        except NotImplementedError:
            raise AttackSkipped("the training recipe cannot be batched (SGD on models leakmeter "
                                "builds can): set params.slow_recipes: true to train reference "
                                "models one by one") from None
        main = online if online is not None else offline
        if online is not None and offline is not None:
            curves = {"LiRA online": online, "LiRA offline": offline}
        art = scores_artifact(main, len(ev), ctx, metrics, notes,
                              f"mia_lira ({params.shadows} reference models)", curves)
        if offline is not None and online is not None:
            art.data["extra_scores"] = {"offline": offline.detach().double().cpu().numpy()}
        return art

    def judge(self, m, artifact):
        return judge_membership(m)
