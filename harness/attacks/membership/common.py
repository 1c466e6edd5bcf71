"""What the membership attacks share: the evaluation set and the target's signals through the
oracle, the artifact they return, and one judge.

Risk levels (scored against the true membership; `lr_low` is the largest ratio TPR_low / FPR_high
at the thresholds where the measured FPR is ≤ 1% and ≤ 0.1%, each rate bounded one-sided by
Clopper–Pearson, the two thresholds Bonferroni-corrected — a likelihood ratio at 95% confidence):
- high: lr_low ≥ 5 and TPR_low ≥ 1%: at a threshold flagging at most ~1% of non-members, an
  attacker flags at least five times as many members, i.e. a "member" claim is right ≥ 5:1 —
  members are identifiable, not just statistically distinguishable (LiRA on CIFAR-10 without DP:
  TPR 8% at 0.1% FPR, a ratio of 80);
- medium: leakage a re-draw would not undo — members score higher than non-members with a
  one-sided Mann–Whitney p < MEDIUM_P (z ≥ MEDIUM_Z), or lr_low ≥ MEDIUM_RATIO: no confident
  identification at low FPR, but leakage shown;
- low: neither — what an (ε ≈ 0)-DP model or a well-generalising one shows. Where the evidence is
  suggestive but not decisive (p < SUGGESTIVE_P) the reason says so, with its p-value and the
  AUC's 95% interval.

Why MEDIUM_Z (issue 34): a judgment is drawn once, from one victim, one set of references and
probes; a re-draw of them (another seed, another device's rounding) moves the test statistic z by
about √2 standard units around the one seen (its sampling error twice: the effect measured here is
itself an estimate). A "medium" at z only just above the 1% line is undone by half of all re-draws
(the shipped dp-audit-digits and dp-digits-rero sat there: p 0.004–0.02 over three victim seeds).
MEDIUM_Z = z(1%) + z(90%)·√2 ≈ 4.14 (p ≈ 1.7e-5): a re-draw as variable as this one still shows
p < 1% in at least 90% of draws. The likelihood-ratio route needs a 2:1 bound for the same reason
(a 95% bound just above 1 is one re-draw from below it).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import torch
from pydantic import Field, field_validator
from scipy import stats

from harness.attacker.membership import StandInFamily
from harness.attacker.signals import correct_from_labels, phi_from_api, phi_from_logits
from harness.attacks.base import Artifact, Params
from harness.core.errors import AttackSkipped

HIGH_RATIO = 5.0
HIGH_TPR = 0.01
REPLICATE_ALPHA, REPLICATE_POWER = 0.01, 0.9
MEDIUM_Z = float(stats.norm.isf(REPLICATE_ALPHA) + stats.norm.isf(1 - REPLICATE_POWER) * math.sqrt(2))
MEDIUM_P = float(stats.norm.sf(MEDIUM_Z))  # ≈ 1.7e-5
MEDIUM_RATIO = 2.0
SUGGESTIVE_P = 0.01


def knowledge(ctx) -> Any:
    """The membership knowledge handle, or AttackSkipped with why there is none."""
    kn = ctx.knowledge
    if kn is None or getattr(kn, "kind", None) != "membership" or not kn.available:
        raise AttackSkipped("membership inference needs the victim's members and non-members "
                            "(a locally trained victim, or a model file with its data)")
    return kn


def needs_scores(info) -> str | None:
    """Why a real-valued-signal attack cannot run on this API (None when it can)."""
    if info.interface != "whitebox" and info.output == "label":
        return "needs real-valued outputs (probabilities or logits) or weights; the API returns labels"
    return None


class StandInParams(Params):
    """A user-named stand-in family for reference models on a model file without `spec:`."""

    stand_in: StandInFamily | None = None  # None: the default (harness/attacker/membership.py)
    stand_in_hidden: list[Annotated[int, Field(ge=1)]] | None = None  # the mlp stand-in's widths

    @field_validator("stand_in_hidden")
    @classmethod
    def _hidden_is_for_mlp(cls, v, info):
        if v and info.data.get("stand_in") == "logistic":
            raise ValueError("sets an mlp stand-in's widths; stand_in: logistic has none")
        return v


def reference_recipe(kn, params: Any = None) -> tuple[Any, list[str]]:
    """(the training recipe reference models are trained with, notes), or AttackSkipped when
    unknown. A stand-in family named in `params` replaces the default stand-in; where the
    victim's own recipe is known (leakmeter trained it, or `spec:`) it is used and the name is
    noted as ignored."""
    from harness.attacker.membership import with_stand_in

    if kn.recipe is None:
        raise AttackSkipped("reference models need the victim's architecture (a model file "
                            "needs `spec:`)")
    named = params is not None and (params.stand_in is not None or params.stand_in_hidden is not None)
    if not named:
        return kn.recipe, []
    if not kn.recipe.stand_in:
        return kn.recipe, ["stand_in ignored: the victim's own training recipe is known"]
    return with_stand_in(kn.recipe, params.stand_in or "mlp", params.stand_in_hidden), []


def paid_points(oracle, n: int, per_point: int = 1) -> int:
    """How many of the n evaluation points (from the start of the secret order) are scored: all
    from released weights, else as many as the budget pays for (a budget stop when none)."""
    if oracle.offers("weights"):
        return n
    k = oracle.affordable(n * per_point) // per_point
    if k == 0:
        raise oracle.cannot_pay(per_point, "queries of one evaluation point")
    return k


def target_phi(oracle, kn, x: torch.Tensor, y: torch.Tensor,
               shifts: tuple[tuple[int, int], ...] = ((0, 0),)) -> torch.Tensor:
    """(n, A) φ of the deployed model on x (and shifted copies): exact logits from the released
    weights when white-box and the model can be rebuilt, else the API's answers (queries)."""
    from harness.attacker.reference_models import shifted

    info = oracle.info
    shape = info.input_shape
    if oracle.offers("weights") and kn.recipe is not None and not kn.recipe.stand_in:
        w = oracle.weights()  # a stand-in's architecture is not the released weights
        flat = torch.cat([v.reshape(-1) for v in w.values()]).to(info.device, info.dtype)
        cols = [phi_from_logits(kn.recipe.outputs_many(flat[None], shifted(x, shape, s))[0], y, info.task)
                for s in shifts]
        return torch.stack(cols, -1)
    if info.output == "label":
        raise AttackSkipped(needs_scores(info))
    cols = [phi_from_api(oracle.predict(shifted(x, shape, s)), y, info.task, info.output)
            for s in shifts]
    return torch.stack(cols, -1)


def target_correct(oracle, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """1[label right] from a label-only API."""
    return correct_from_labels(oracle.predict(x), y)


def scores_artifact(scores: torch.Tensor, n_eval: int, ctx, metrics: dict[str, float],
                    notes: list[str], title: str, curves: dict[str, Any] | None = None) -> Artifact:
    """The membership_scores artifact (scores for the first len(scores) evaluation points)."""
    s = scores.detach().double().cpu().numpy()
    art = Artifact("membership_scores", data={"scores": s, "outdir": ctx.outdir, "title": title},
                   metrics={**metrics, "evaluated": float(len(s)), "eval_set": float(n_eval)},
                   notes=notes)
    if curves:
        art.data["roc_scores"] = {k: v.detach().double().cpu().numpy() for k, v in curves.items()}
    if len(s) < n_eval:
        art.stopped_by = "budget"
        art.reason = f"the query budget paid for {len(s)} of {n_eval} evaluation points"
        art.progress = f"{len(s)} of {n_eval} points scored"
    return art


def judge_membership(m: dict[str, float]) -> tuple[str, str]:
    """Risk from the scored ROC measures (see the module docstring); the reason states only
    what the numbers show."""
    if "auc" not in m:
        return None, "membership scores made; no truth to score them (not verified)"
    n0 = int(m["nonmembers"])
    t1 = m["tpr_at_fpr_0.01"]
    t01 = m["tpr_at_fpr_0.001"]
    floor = "" if m["tpr_at_fpr_0.001_measured"] else f" (at 0 of {n0} false positives: 0.1% is below 1/{n0})"
    facts = (f"AUC {m['auc']:.3f}, TPR {t1:.3f} at 1% FPR, {t01:.4f} at 0.1% FPR{floor}; "
             f"likelihood ratio ≥ {m['lr_low']:.1f} at 95%")
    tpr_low = max(m["tpr_at_fpr_0.01_tpr_low"], m["tpr_at_fpr_0.001_tpr_low"])
    p = m["mannwhitney_p"]
    if "auc_ci_low" in m:
        facts += f"; AUC 95% interval [{m['auc_ci_low']:.3f}, {m['auc_ci_high']:.3f}]"
    if m["lr_low"] >= HIGH_RATIO and tpr_low >= HIGH_TPR:
        return "high", f"members identifiable at low FPR: {facts}"
    if p < MEDIUM_P:
        return "medium", (f"members score higher than non-members beyond what a re-draw undoes "
                          f"(one-sided Mann–Whitney p {p:.2g} < {MEDIUM_P:.2g}), without confident "
                          f"identification: {facts}")
    if m["lr_low"] >= MEDIUM_RATIO:
        return "medium", (f"at low FPR members are flagged at least {MEDIUM_RATIO:g}× as often as "
                          f"non-members (95% lower bound on the likelihood ratio {m['lr_low']:.2f}), "
                          f"though the overall score difference stays short of the re-draw line "
                          f"(Mann–Whitney p {p:.2g}): {facts}")
    if p < SUGGESTIVE_P or m["lr_low"] > 1.0:
        return "low", (f"suggestive but not decisive (Mann–Whitney p {p:.2g}, above the {MEDIUM_P:.2g} "
                       f"a re-draw of the victim would not undo; likelihood ratio ≥ {m['lr_low']:.2f} "
                       f"at 95%, below {MEDIUM_RATIO:g}): no membership leakage shown: {facts}")
    return "low", f"no membership leakage shown (Mann–Whitney p {p:.2g}): {facts}"
