"""dp_audit — an empirical lower bound on ε at 95% confidence, checked against the DP claim.

Two audits, each at α = 2.5% so that their maximum, `epsilon_lower`, holds at 95%
(harness/scoring/audit.py has the math and its sources):
1. Threshold audit on the evaluation set (Jagielski, Ullman, Oprea 2020; Nasr, Song, Thakurta,
   Papernot, Carlini 2021): the membership attacks named in `attacks` (default LiRA online and
   the loss attack; α split between them) score the victim's members and non-members; for each
   threshold of a grid fixed from the scores alone (quantiles, denser in the tails),
   Clopper–Pearson upper bounds on FPR and FNR give
   ε ≥ log((1 − δ − FNR_hi)/FPR_hi) (and the symmetric form); Bonferroni over the grid — unlike
   taking the best of a grid uncorrected.
2. One-run audit (Steinke, Nasr, Jagielski 2023, Alg. 1, Thm. 3.1) for victims leakmeter
   trains: m mislabeled canaries, each included by a secret fair coin, one training run with the
   victim's recipe; the canaries are scored by the target's φ against reference models trained
   on the known base data (offline LiRA), the attacker guesses "in" for the k₊ highest and "out"
   for the k₋ lowest over a small grid (Bonferroni), and the binomial bound turns correct guesses
   into ε.
3. White-box gradient canaries (Nasr et al. 2023, Dirac canaries) for victims leakmeter trains with DP-SGD:
   Dirac canaries in the recipe's own Opacus steps, each in the run by a secret coin
   (harness/attacker/gradient_canaries.py); scored per canary from every privatised step (or
   the final displacement); independent trials, so Clopper–Pearson is exact for them. Beside it,
   `epsilon_ceiling_whitebox`: what the optimal test on the accountant's own mechanism would show
   with as many canaries (harness/scoring/audit_ceiling.py).
4. Black-box with a worst-case initialisation (Annamalai & De Cristofaro 2024;
   `blackbox_runs`): N stacked DP-SGD runs from the base data's non-private fit, a mislabeled
   target in each by a secret coin, scored from the final weights (harness/attacker/
   worst_case_init.py).
`analysis: gdp | fdp` adds the Gaussian-curve estimates of the same guesses (harness/scoring/
fdp.py; Mahloujifar et al. 2025 for one-run guesses); they never decide.
Beside `epsilon_lower` the report gives δ (`audit_delta`: the claim's, else the DP spec's, else
1e-5), `epsilon_perfect` (what an attack that is never wrong would have shown with as many
samples: ε_lower ≪ ε_perfect reads "private", a small ε_perfect reads "too few samples to tell"),
the accountant's ε and the claimed one.

Risk levels, where privacy is claimed (`victim.claimed_privacy`) or the victim trains with DP:
high — the recipe's own accountant exceeds the claimed ε (no audit needed), or `epsilon_lower`
exceeds the claimed ε, else an audit's bound exceeds the accountant's ε of the runs it audited:
"DP claim violated"; low — the claim stands and some audit could have shown a violation;
incomplete — no audit that ran could have exceeded the ε under test (ε_perfect ≤ it).
Where nothing is claimed, the audit judges the deployment it is given: the deployed model's own
members and non-members on the membership family's scale (`judge_membership`, the same judge
as mia_*), with the ε bounds beside it; the one-run audit retrains the *recipe* with canaries, so
it is reported as the recipe's and decides nothing there.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from harness.attacker.signals import phi_from_api, phi_from_logits
from harness.attacker.stacked_training import stackable, train_stacked
from harness.attacks import register, registry
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.membership.common import judge_membership, knowledge, needs_scores
from harness.attacks.membership.mia_lira import lira_offline
from harness.core.errors import AttackStopped
from harness.scoring.audit import threshold_grid

DEFAULT_DELTA = 1e-5


class AuditParams(Params):
    # membership attacks whose scores the threshold audit tests (α split between them); the first
    # one's ROC is reported. LiRA's calibrated scores and the raw loss catch different tails:
    # misclassified points are surely non-members, which only the loss shows.
    attacks: list[Literal["mia_lira", "mia_rmia", "mia_loss"]] = ["mia_lira", "mia_loss"]
    shadows: int = 16  # reference models of mia_lira / mia_rmia
    thresholds: int = 64  # grid size of the threshold audit
    one_run: bool = True  # the one-run canary audit (only for victims leakmeter trains)
    canaries: int = 256  # its canaries
    canary_references: int = 8  # reference models on the base data that calibrate canary scores
    whitebox: bool = True  # gradient canaries in the recipe's DP-SGD (victims leakmeter trains with DP)
    whitebox_runs: int = 1  # training runs of the white-box audit (its canaries add up)
    gradient_canaries: int = 5000  # Dirac canaries per white-box run (capped at one per parameter)
    whitebox_view: Literal["updates", "final"] = "updates"  # every privatised step, or the final model
    blackbox_runs: int = 0  # final-model runs from a worst-case initialisation (0 = off)
    analysis: Literal["clopper-pearson", "fdp", "gdp"] = "clopper-pearson"  # guesses → ε
    max_members: int | None = None
    delta: float | None = None  # None: the claim's δ, else the DP spec's, else 1e-5
    slow_recipes: bool = False


def guess_grid(m: int) -> list[tuple[int, int]]:
    """(k₊, k₋) guess counts for the one-run audit: both tails, then the top only."""
    both = [(max(1, round(f * m / 2)),) * 2 for f in (0.04, 0.1, 0.2, 0.5, 1.0)]
    top = [(max(1, round(f * m)), 0) for f in (0.02, 0.05, 0.1)]
    return sorted(set(both + top))


@register
class DpAudit(Attack):
    name = "dp_audit"
    family = "membership"
    needs = frozenset({"prediction", "gradient", "smoothgrad", "whitebox"})
    paper = ("Jagielski et al. 2020; Nasr et al. 2021; Steinke et al. 2023; Nasr et al. 2023; "
             "Mahloujifar et al. 2025")  # and Annamalai & De Cristofaro 2024 (docs/papers.md)
    summary = "ε lower bound (95%): membership outcomes, one-run, gradient and worst-case-init canaries"
    Params = AuditParams

    def skip_reason(self, info):
        return needs_scores(info) or super().skip_reason(info)

    def run(self, oracle, params: AuditParams, ctx) -> Artifact:
        kn = knowledge(ctx)
        claim = ctx.threat.claimed_privacy if ctx.threat is not None else None
        dp = ctx.threat.declared_dp if ctx.threat is not None else None
        delta = params.delta if params.delta is not None else (
            claim.delta if claim is not None else dp.delta if dp is not None else DEFAULT_DELTA)
        notes: list[str] = []
        data: dict = {"delta": delta, "alpha": 0.05, "outdir": ctx.outdir, "analysis": params.analysis,
                      "title": f"dp_audit: {params.attacks[0]} on the evaluation set"}
        names = list(dict.fromkeys(params.attacks))
        runs = {name: self._scores(oracle, name, params, ctx) for name in names}
        main = runs[names[0]]
        data.update(scores=np.asarray(main.data["scores"], dtype=np.float64),
                    audit_scores={k: np.asarray(a.data["scores"], dtype=np.float64) for k, a in runs.items()})
        data["thresholds"] = {k: threshold_grid(v, params.thresholds)
                              for k, v in data["audit_scores"].items()}
        for name, inner in runs.items():
            notes += [f"threshold audit: {name} scores on {len(inner.data['scores'])} evaluation points"]
            notes += inner.notes
        metrics = {"epsilon_claimed": float(claim.epsilon) if claim is not None else float("nan")}
        cut: AttackStopped | None = None
        if params.one_run and kn.trained_here:
            try:
                cs, grid, cnotes = self._one_run(oracle, kn, params, ctx)
                data.update(canary_scores=cs, guess_grid=grid)
                notes += cnotes
            except AttackStopped as exc:  # the threshold audit already scored stays the artifact
                cut = exc
                notes.append(f"one-run audit not done: {exc}")
        elif params.one_run:
            notes.append("one-run audit skipped: the victim is not trained by leakmeter")
        runs_done = 1 + int("canary_scores" in data)
        for what, wanted in (("whitebox", params.whitebox), ("blackbox", params.blackbox_runs > 0)):
            if not wanted:
                continue
            if not (kn.trained_here and dp is not None):
                notes.append(f"{what} audit skipped: it retrains the recipe's DP-SGD (victims leakmeter "
                             "trains with defenses.dp_sgd)")
                continue
            try:
                runs_done += self._whitebox(kn, params, ctx, data, notes) if what == "whitebox" else \
                    self._blackbox(kn, params, ctx, data, notes)
            except AttackStopped as exc:
                cut = cut or exc
                notes.append(f"{what} audit not done: {exc}")
        data["runs"] = runs_done
        if "whitebox_poisson" in data:  # what the white-box auditor saw of the recipe's sampler
            metrics["whitebox_poisson_sampling"] = float(data["whitebox_poisson"])
        if claim is None:
            metrics.pop("epsilon_claimed")
        art = Artifact("dp_audit", data=data, metrics=metrics, notes=notes)
        partial = next((a for a in runs.values() if a.stopped_by is not None), None)
        if partial is not None:
            art.reason, art.stopped_by = partial.reason, partial.stopped_by
        elif cut is not None:
            art.reason, art.stopped_by = f"an audit not done: {cut}", cut.stopped_by
        return art

    @staticmethod
    def _scores(oracle, name: str, params: AuditParams, ctx) -> Artifact:
        """Run one membership attack on the evaluation set (its artifact holds the scores)."""
        sub = registry()[name]
        kw: dict = {"max_members": params.max_members}
        if name == "mia_lira":
            kw.update(shadows=params.shadows, mode="online", slow_recipes=params.slow_recipes)
        elif name == "mia_rmia":
            kw.update(references=params.shadows, slow_recipes=params.slow_recipes)
        return sub().run(oracle, sub.Params(**kw), ctx)

    @staticmethod
    def _whitebox(kn, params: AuditParams, ctx, data: dict, notes: list[str]) -> int:
        """Gradient canaries (harness/attacker/gradient_canaries.py), scored per canary."""
        from harness.attacker.gradient_canaries import canary_scores

        got, wnotes = kn.whitebox_run(params.gradient_canaries, params.whitebox_runs, ctx.seed + 36)
        sets = [canary_scores(r["obs"], r["q"], r["sigma"], r["per_epoch"], params.whitebox_view)
                for r in got]
        scores = {k: np.concatenate([s[k] for s in sets]) for k in sets[0]}
        m = len(next(iter(scores.values())))
        data.update(whitebox_scores=scores, whitebox_guess_grid=guess_grid(m),
                    whitebox_poisson=all(r.get("poisson", True) for r in got))
        if not data["whitebox_poisson"]:
            notes.append("white-box audit: the recipe's private loader draws shuffled fixed-size batches, "
                         "not Poisson samples, while its Opacus accountant assumes Poisson sampling")
        how = ("the likelihood ratio over every step" if params.whitebox_view == "updates"
               else "the final displacement")
        notes += [*wnotes, f"white-box scores: {how} of each canary's coordinate"]
        return len(got)

    @staticmethod
    def _blackbox(kn, params: AuditParams, ctx, data: dict, notes: list[str]) -> int:
        """Final models from a worst-case initialisation (harness/attacker/worst_case_init.py)."""
        scores, bnotes = kn.blackbox_run(params.blackbox_runs, ctx.seed + 37)
        data.update(blackbox_scores=np.asarray(scores, dtype=np.float64))
        notes += bnotes
        return len(scores)

    def _one_run(self, oracle, kn, params: AuditParams, ctx):
        """Canary scores from one training run (Steinke et al. Alg. 1) and the guess grid."""
        seed = ctx.seed
        run = kn.canary_run(params.canaries, seed)
        info = oracle.info
        m = len(run.x)
        if not run.view.offers("weights") and run.view.affordable(m) < m:
            raise run.view.cannot_pay(m, "canary queries")
        if run.view.offers("weights"):
            w = run.view.weights()
            flat = torch.cat([v.reshape(-1) for v in w.values()]).to(info.device, info.dtype)
            phi = phi_from_logits(run.recipe.outputs_many(flat[None], run.x)[0], run.y, info.task)
        else:
            phi = phi_from_api(run.view.predict(run.x), run.y, info.task, info.output)
        notes = list(run.notes)
        k = params.canary_references
        if k >= 2 and stackable(run.recipe):
            n = len(run.x_base)
            idx = torch.arange(n)[None].expand(k, n)
            flat = train_stacked(run.recipe, run.x_base, run.y_base, idx, seed=seed * 13 + 5)
            ref = phi_from_logits(run.recipe.outputs_many(flat, run.x), run.y, info.task)
            keep = torch.zeros(k, m, dtype=torch.bool, device=ref.device)
            score = lira_offline(phi[:, None], ref[..., None], keep, "global")
            notes.append(f"canary scores: offline LiRA against {k} models trained on the base data")
        else:
            score = phi
            notes.append("canary scores: φ of the audited model (no reference models)")
        return score.detach().double().cpu().numpy(), guess_grid(m), notes

    def judge(self, m, artifact):
        claimed, acc = m.get("epsilon_claimed"), m.get("epsilon_accountant")
        delta = m.get("audit_delta", DEFAULT_DELTA)
        if claimed is not None and acc is not None and acc > claimed * (1 + 1e-6):
            shown = (f"; the audits show ε ≥ {m['epsilon_lower']:.3g} at 95%" if "epsilon_lower" in m else "")
            return "high", (f"DP claim violated: the recipe's own accountant gives ε = {acc:.3g} "
                            f"(δ = {delta:g}) > claimed ε = {claimed:.3g}, no audit needed{shown}")
        if "epsilon_lower" not in m:
            return None, "audit outcomes made; no truth to score them (not verified)"
        lo, perfect = m["epsilon_lower"], m["epsilon_perfect"]
        checks = []  # (what, its ε, the bound that tests it, what a perfect attack could show)
        if claimed is not None:
            checks.append(("claimed", claimed, lo, perfect))
        else:
            for part, key in (("threshold", "epsilon_accounted"),
                              ("one_run", "epsilon_accounted_canary_run"),
                              ("whitebox", "epsilon_accounted_whitebox_run"),
                              ("blackbox", "epsilon_accounted_blackbox_run")):
                if key in m and f"epsilon_lower_{part}" in m:
                    what = "accounted" if part == "threshold" else f"accounted ({part} runs)"
                    checks.append((what, m[key], m[f"epsilon_lower_{part}"],
                                   m.get(f"epsilon_perfect_{part}", perfect)))
        if not checks:  # no privacy claimed: the deployed model's own members decide
            return judge_deployment(m)
        facts = f"ε ≥ {lo:.3g} at 95% (δ = {delta:g}; a perfect attack could show ε ≥ {perfect:.3g})"
        est = {k: v for k, v in m.items() if k.startswith(("epsilon_gdp_", "epsilon_fdp_"))}
        if est:  # Gaussian-curve figures: estimates, never the evidence of a violation
            k = max(est, key=est.get)
            facts += (f"; {k.split('_')[1].upper()} estimate ε ≈ {est[k]:.3g} ({k.split('_', 2)[2]}; "
                      "assumes a Gaussian trade-off curve, which DP-SGD's accountant does not promise)")
        ceil = [m[k] for k in ("epsilon_ceiling_whitebox", "epsilon_ceiling_blackbox") if k in m]
        if ceil:  # what the optimal test would show were the mechanism exactly the accounted one
            facts += (f"; the optimal test on the accountant's own mechanism would show ε ≥ {max(ceil):.3g} "
                      "with these trials")
        for kind, eps, shown, _ in checks:
            if shown > eps:
                return "high", f"DP claim violated: {facts} > {kind} ε = {eps:.3g}"
        if m.get("whitebox_poisson_sampling") == 0.0:  # a configuration finding, not a measurement
            return "high", ("DP claim unsupported: the recipe trains on shuffled fixed-size batches while "
                            "its accountant assumes Poisson sampling, so the accounted ε is no guarantee "
                            "for it (Chua et al., ICML 2024: shuffled DP-SGD can leak more than the "
                            f"Poisson accountant says); no violation measured: {facts}")
        if all(p <= eps for _, eps, _, p in checks):  # no outcome could have shown a violation
            kind, eps, _, _ = checks[0]
            return None, (f"the {kind} ε = {eps:.3g} is untested: {facts}; no outcome of these "
                          "audits could have exceeded it (raise canaries, whitebox canaries, "
                          "blackbox_runs or max_members)")
        kind, eps, _, _ = checks[0]
        return "low", f"the {kind} ε = {eps:.3g} stands: {facts}"


def judge_deployment(m: dict[str, float]) -> tuple[str, str]:
    """Without a privacy claim: the deployed model's members against its non-members, judged on
    the membership family's one scale (judge_membership); the ε bounds are reported beside it,
    the one-run canary audit as the training recipe's (it retrains the recipe with canaries)."""
    risk, why = judge_membership(m)
    extra = []
    if "epsilon_lower_threshold" in m:
        extra.append(f"the deployed model's threshold audit shows ε ≥ "
                     f"{m['epsilon_lower_threshold']:.3g} at 95%")
    if "epsilon_lower_one_run" in m:
        extra.append(f"the training recipe, retrained with {int(m.get('canaries', 0))} canaries, "
                     f"shows ε ≥ {m['epsilon_lower_one_run']:.3g} (the recipe's, not this model's)")
    return risk, f"no DP claim: {why}" + (f"; {'; '.join(extra)}" if extra else "")
