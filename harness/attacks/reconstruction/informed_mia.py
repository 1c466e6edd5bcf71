"""informed_mia — paper 004 (Balle, Cherubin, Hayes, S&P 2022), Sec. II-D, Alg. 2.

The informed membership game: the developer trains θ on D₋ ∪ {z_b} for a secret fair bit b; the
adversary knows D₋, the recipe and both candidates z₀, z₁, and guesses b. Here the adversary
retrains `shadows` models per hypothesis with its own seeds (one suffices for a deterministic
recipe: the trivial retrain-and-compare strategy the paper describes) and decides by a diagonal
Gaussian likelihood test on the model representation: the flattened weights (white-box) or the
outputs on a probe set of pool points plus the two candidates (prediction APIs). With one shadow
per hypothesis this is nearest-model matching. Its success rate over T games is the empirical
counterpart of the DP guarantee: an (ε, δ)-DP recipe keeps it ≤ e^ε/(1+e^ε) + δ (scored with a
Clopper–Pearson interval, membership scorer).
"""

from __future__ import annotations

import torch

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.reconstruction.reconn import format_outputs
from harness.core.errors import AttackFailed, AttackSkipped, AttackStopped
from harness.core.threads import work_seconds

GROUP = 8  # games whose shadow models train in one batch (the CPU-time limit is checked between games)


class MIAParams(Params):
    games: int = 10  # released models (one secret bit each)
    shadows: int | None = None  # per hypothesis; None = 1 if the recipe is deterministic, else 8
    probes: int = 50  # pool points whose outputs represent a model (prediction APIs)
    max_seconds: float = 30.0  # work seconds (CPU / threads: load does not move it), per game
    slow_recipes: bool = False  # run even when shadows must be trained one by one


@register
class InformedMIA(Attack):
    name = "informed_mia"
    family = "reconstruction"
    needs = frozenset({"whitebox", "prediction", "gradient", "smoothgrad"})
    paper = "004 Sec. II-D, Alg. 2"
    summary = "informed adversary: which of two candidates was trained on (the DP game)"
    Params = MIAParams

    def skip_reason(self, info):
        if info.interface != "whitebox" and info.output == "label":
            return "needs weights or real-valued outputs; the API returns labels only"
        return super().skip_reason(info)

    def run(self, oracle, params: MIAParams, ctx) -> Artifact:
        kn = ctx.knowledge
        if kn is None or not kn.available:
            raise AttackSkipped("an informed adversary needs a locally trained victim")
        if not params.slow_recipes and not kn.recipe_batchable:
            raise AttackSkipped("the training recipe cannot be batched (only full-batch SGD / DP-GD "
                               "MLPs can): every shadow would be a full training run; set "
                               "params.slow_recipes: true to run anyway")
        games = max(1, min(params.games, kn.max_targets(2)))
        rel = kn.release(games, candidates=2)
        recipe = rel.recipe
        k = params.shadows or (1 if recipe.deterministic else 8)
        white = oracle.offers("weights")
        probe = rel.x_aux[: params.probes]
        info = oracle.info
        guesses, llrs, t0, done, stop = [], [], work_seconds(), 0, None
        trained: dict[int, torch.Tensor] = {}
        for g, view in enumerate(rel.views):
            if work_seconds() - t0 > params.max_seconds and done > 0:
                stop = "time"
                break
            cx = rel.candidates[g]
            if g not in trained:  # the shadows of GROUP games at once: model j of game g keeps its seed
                last = min(len(rel.views), g + GROUP)
                xe = rel.candidates[g:last].repeat_interleave(k, 1).reshape(-1, cx.shape[-1])
                ye = rel.candidate_y[g:last].repeat_interleave(k, 1).reshape(-1)
                flat = recipe.train_many(rel.x_minus, rel.y_minus, xe, ye, seed=ctx.seed * 104729 + g * 2 * k)
                trained.update({g + i: part for i, part in enumerate(flat.split(2 * k))})
            flat = trained.pop(g)
            if white:
                f_sh = flat
                f_rel = torch.cat([v.reshape(-1) for v in view.weights().values()]).to(flat)
            else:
                pts = torch.cat([probe, cx])
                f_sh = format_outputs(recipe.outputs_many(flat, pts), info.task, info.output)
                if oracle.affordable(len(pts)) < len(pts):
                    stop = "budget"
                    break
                f_rel = view.predict(pts).reshape(-1).to(f_sh)
            f_sh = f_sh.double().reshape(2, k, -1)
            mu = f_sh.mean(1)
            var = f_sh.var(1, unbiased=False).mean(0) if k > 1 else torch.zeros_like(mu[0])
            var = var + 1e-12 * float(f_sh.pow(2).mean()) + 1e-300
            d = ((f_rel.double()[None] - mu) ** 2 / var).sum(1)  # −2·log-likelihood (+const)
            llrs.append(float(d[0] - d[1]))
            guesses.append(int(d[1] < d[0]))
            done += 1
        if done == 0:
            raise AttackStopped("no game could be played within the query budget",
                                stopped_by="budget") if stop == "budget" else \
                AttackFailed("no game could be played within the bounds")
        art = Artifact("membership", data={"guess": torch.tensor(guesses), "llr": llrs},
                       metrics={"games_played": float(done), "shadows_per_hypothesis": float(k),
                                "deterministic_recipe": float(recipe.deterministic)},
                       notes=rel.notes + [f"representation: {'weights' if white else 'outputs'}"])
        art.progress = f"{done} of {games} games"
        if done < games:
            art.stopped_by = stop or "time"
            art.reason = f"{done} of {games} games within the {art.stopped_by} limit"
        return art

    def judge(self, m, artifact):
        if "success_rate" not in m:
            return None, "guesses made; no truth to score them (not verified)"
        lo = m["success_ci_low"]
        if lo > 0.5:
            return "high", (f"membership of a chosen record is distinguishable: success "
                            f"{m['success_rate']:.2f} (95% CI low {lo:.2f} > 0.5)")
        return "low", f"no better than guessing (success {m['success_rate']:.2f}, CI low {lo:.2f})"
