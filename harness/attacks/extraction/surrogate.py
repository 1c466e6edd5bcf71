"""surrogate — paper 000 (Milli et al., FAT* 2019), Sec. 4–5 and App. D.

Train a surrogate f̂ on the attacker's own queries and record its learning curve: the cheapest
extraction, and the one that works on every API (deep nets, CNNs, rounded, top-k, label-only).
Queries come from the attacker's pool (same distribution as the victim's data, disjoint from its
training set: Sec. 4), then from pool points plus Gaussian jitter (`jitter`: 0.5 per-feature
standard deviations, as a plain thief's; clipped to the declared input domain) once the pool is
spent; or from N(0, I) (the unknown-distribution case, Sec. 5.3). Losses (Sec. 4): membership only,
ℓ_M = cross-entropy against the returned probabilities (soft targets; logits through a softmax;
labels one-hot; squared error for regression) — and, beyond the paper, where the answers carry
logits (a logit API, or probabilities with no decimal grid, no negative entry and rows summing to
1), the squared error of the surrogate's logit differences against the answers' (log-probabilities
against the top class), which on a digits MLP takes a 300-query copy from ~96% to ~98.5% agreement;
rounded, noisy or top-k probabilities keep the cross-entropy alone — or, when the API explains, the
joint ℓ_G + λ·ℓ_M with ℓ_G = ‖∇f(x) − ∇f̂(x)‖² matched by double backprop on the output the API
explains (`gradient_of`). SmoothGrad explanations are matched as if they were raw gradients (App.
D).

The surrogate class is a ReLU MLP: the victim's widths when the attacker is declared to know the
architecture (`attacker.knows_architecture`, or a white-box release; "same class"), else `hidden`
(the paper's "unknown model class", Sec. 5.2). Beyond the paper, so that leakmeter's thief is at
least as strong as a plain one: Adam with weight decay (1e-4 on logit targets, 1e-3 on labels or
cross-entropy alone); every 5th answer held out; at each snapshot
(1, 2, 3, 5, 7, 10, 15, 20, 30, 50, … points, warm-started) training runs up to `steps` steps and
keeps the state with the lowest held-out loss, stopping after `patience` steps without a better
one (a snapshot of under 10 points has no held-out answers: `patience` steps); after the last
snapshot the model trains on every answer for `final_steps` more steps. `steps` and `final_steps`
are 300, or 150 with the joint loss (d + 1 targets a point: a copy of the digits quickstart reaches
99.6% in 150). The MLP's layers compute in float32 (the copy takes and returns float64; half the
CPU of float64 a step at the same agreement); a regression copy's output goes through its answers'
mean and std (`AnswerScale`, refitted at every snapshot without changing the function), so its
last bias need not walk to a target of ~150 at Adam's step size.

Inputs as a plain thief takes them: the surrogate's first layer standardises with the attacker
pool's per-feature mean and std (attacker knowledge, reported; identity without a pool), so raw
tabular features (breast_cancer's 30, ranges 0.001…4000) train as well as pre-scaled ones; the
copy still takes the API's inputs as they are. Noisy, rounded or top-k probabilities: a second
copy learns each answer's top class as a hard label beside the soft-target one. Beside the MLP
copies stands a linear one (softmax-linear on the same standardised inputs, trained on the same
losses: a plain thief's logistic regression; least squares for regression; not with the joint
loss), since an MLP fitted to a few hundred answers of a linear model generalises worse than the
linear fit. At every snapshot the copy that agrees with the most held-out answers' top class is
kept, ties going to the lower held-out loss (`hard_labels`, `linear_copy` say which won).

How many queries: the whole query budget when there is one; without one, snapshots continue until
the attacker's own learning curve is flat — held-out agreement with the API (regression: held-out
R²) no better than the snapshot at half as many points, by more than its paired standard error (×2;
for R² from the per-answer squared errors) or 0.5 points — after at least `min_queries`, up to
`cap_queries`. Stopped at the budget: `stopped_by: budget`. Stopped at its own cap (`max_queries`,
`cap_queries`, or a pool without jitter) while the curve still rose: `stopped_by: cap` (incomplete
unless the scored surrogate reaches fail_on) — unless its held-out score plus log₂10 times its last
gain per doubling (+2 s.e.) stays below the next risk level's bar: 10× the queries would not
change its level (concave curves in log-queries), and a note says so. ℓ_G is normalised by the
mean squared gradient norm so λ is scale-free; queries are counted as the oracle counts them (a
point with its explanation costs 2)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from pydantic import Field
from torch import nn

from harness.attacker.compute import place as place_work
from harness.attacker.copy_losses import LogitGap, clean_answers, gradient_target, membership_loss
from harness.attacker.linear_copy import fit_linear
from harness.attacker.scaling import AnswerScale, Cast, PoolScale, refit_answer_scale
from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.core.answers import api_labels
from harness.core.errors import AssumptionViolated
from harness.core.optim import Adam
from harness.scoring.fidelity import next_bar

GRID = (1, 2, 3, 5, 7)
HOLDOUT_EVERY = 5  # every 5th answer is held out (20%)
MIN_HELD = 50  # held-out answers needed before the curve may be called flat
REACH_DOUBLINGS = math.log2(10)  # a curve stopped at its cap is extrapolated to 10× the queries
MLP_DTYPE = torch.float32  # the MLP copies' layers: half the CPU of float64 per step, same agreement


class SurrogateParams(Params):
    pool: Literal["data", "gaussian"] = "data"
    loss: Literal["auto", "membership", "joint"] = "auto"  # auto: joint when the API explains
    lam: float = 1.0  # weight of ℓ_M in ℓ_G + λ·ℓ_M
    hidden: list[int] | None = None  # surrogate widths; None: the victim's (declared MLP) or [128]
    linear: bool = True  # also fit a linear copy; kept where it agrees better on held-out answers
    max_queries: int | None = Field(default=None, ge=1)  # None: the budget, else until flat
    min_queries: int = 2000  # a flat curve ends it only after this many queries (or the budget)
    cap_queries: int = 20000  # without a budget or max_queries: the most it asks
    jitter: float = 0.5  # beyond the pool: pool points + N(0, (jitter·feature std)²); 0: pool only
    steps: int | None = Field(default=None, ge=1)  # Adam steps per snapshot at most (early-stopped);
    #   None: 300, or 150 with the joint loss (its answers carry d + 1 numbers a point)
    final_steps: int | None = Field(default=None, ge=0)  # on every answer after the last snapshot;
    #   None: 300, or 150 with the joint loss
    patience: int = 60  # steps without a better held-out loss before a snapshot stops
    lr: float = 3e-3
    weight_decay: float | None = Field(default=None, ge=0)  # None: 1e-4 on logit targets, else 1e-3
    batch: int = 4096  # points per optimizer step (full batch below this)


def checkpoints(limit: int) -> list[int]:
    """1, 2, 3, 5, 7, 10, 15, … up to limit (points), always ending at limit."""
    out, scale = [], 1
    while True:
        for g in GRID + ((15,) if scale == 1 else ()):
            if g * scale > limit:
                return sorted(set(out + [limit])) if limit >= 1 else []
            out.append(g * scale)
        scale *= 10


def build_mlp(d: int, k: int, hidden: list[int], scale: PoolScale | None = None,
              dtype: torch.dtype = torch.float64, answer_scale: bool = False) -> nn.Sequential:
    """A ReLU MLP d → hidden… → k behind the attacker's input standardisation (float64), its
    layers in `dtype`; it takes and returns float64. `answer_scale`: the output in the answers'
    units through an AnswerScale (regression)."""
    layers: list[nn.Module] = [] if scale is None or scale.identity else [scale.layer()]
    single = dtype != torch.float64
    layers += [Cast(dtype)] if single else []
    widths = [d, *hidden]
    for a, b in zip(widths[:-1], widths[1:], strict=True):
        layers += [nn.Linear(a, b, dtype=dtype), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], k, dtype=dtype))
    tail = [AnswerScale()] if answer_scale else [Cast(torch.float64)] if single else []
    return nn.Sequential(*layers, *tail)


def query_stream(pool: torch.Tensor | None, n: int, jitter: float, low: float, high: float,
                 dim: int, gen: torch.Generator, dev) -> torch.Tensor:
    """n query points: the pool in a random order, then pool points with Gaussian jitter (per
    feature, `jitter` standard deviations, clipped to [low, high]); N(0, I) without a pool."""
    if pool is None or len(pool) == 0:
        return torch.randn(n, dim, generator=gen, dtype=torch.float64).to(dev)
    pool = pool.reshape(len(pool), -1).to(dev, torch.float64)
    x = pool[torch.randperm(len(pool), generator=gen).to(dev)][:n]
    m = n - len(x)
    if m > 0 and jitter > 0:
        i = torch.randint(0, len(pool), (m,), generator=gen).to(dev)
        sd = pool.std(0, keepdim=True) if len(pool) > 1 else torch.ones_like(pool[:1])
        z = torch.randn(m, pool.shape[1], generator=gen, dtype=torch.float64).to(dev)
        extra = pool[i] + jitter * sd * z
        if math.isfinite(low) and math.isfinite(high) and high > low:
            extra = extra.clamp(low, high)
        x = torch.cat([x, extra])
    return x


@dataclass
class Answers:
    """What the attacker holds: query points, the API's answers, explanations (joint loss)."""

    x: torch.Tensor
    y: torch.Tensor
    g: torch.Tensor | None
    gaps: dict = field(default_factory=dict)  # the logit-gap loss prepared for these answers

    def gap(self, output: str, one_logit: bool) -> LogitGap:
        if one_logit not in self.gaps:
            self.gaps[one_logit] = LogitGap(self.y, output, one_logit)
        return self.gaps[one_logit]

    def part(self, mask: torch.Tensor) -> Answers:
        return Answers(self.x[mask], self.y[mask], None if self.g is None else self.g[mask])


def heldout_mask(n: int, dev) -> torch.Tensor:
    """Every 5th answer (none while there are fewer than 10)."""
    m = torch.arange(n, device=dev) % HOLDOUT_EVERY == HOLDOUT_EVERY - 1
    return m & (n >= 10)


def agreement_gain(new: torch.Tensor, old: torch.Tensor, api: torch.Tensor) -> tuple[float, float, float]:
    """(agreement of `new` with the API, its gain over `old`, the paired standard error of the
    gain) on the same held-out answers; labels (N,)."""
    a, b = (new == api).double(), (old == api).double()
    n = max(len(api), 1)
    discordant = float((a != b).double().sum())
    return float(a.mean()), float(a.mean() - b.mean()), math.sqrt(discordant) / n


@register
class Surrogate(Attack):
    name = "surrogate"
    family = "extraction"
    needs = frozenset({"prediction", "gradient", "smoothgrad", "whitebox"})
    paper = "000 Sec. 4-5, App. D"
    summary = "train a surrogate on queries (soft targets, early stopping): learning curve to a plateau"
    Params = SurrogateParams

    def run(self, oracle, p: SurrogateParams, ctx) -> Artifact:
        info = oracle.info
        joint = p.loss == "joint" or (p.loss == "auto" and oracle.offers("explain"))
        if joint and not oracle.offers("explain"):
            raise AssumptionViolated("loss: joint needs an explanation API; this one only predicts")
        cost = 2 if joint else 1
        most, final_steps = self._steps(p, joint)
        limit, limited_by = self._limit(oracle, p)
        n_max = limit // cost
        if n_max == 0:
            raise oracle.cannot_pay(cost, "queries of one surrogate point")
        notes = [f"loss {'joint ℓ_G + λ·ℓ_M' if joint else 'membership ℓ_M'}",
                 f"queries per point: {cost}"]
        pool = info.x_pool if p.pool == "data" else None
        source = "pool" if pool is not None and len(pool) else "gaussian"
        if p.pool == "data" and source == "gaussian":
            notes.append("no attacker pool: Gaussian queries instead")
        hidden = p.hidden if p.hidden is not None else self._victim_widths(ctx)
        dev = self._train_device(info, hidden, p, n_max, joint)  # answers come back to it
        x_all = query_stream(pool, n_max, p.jitter, float(info.input_low), float(info.input_high),
                             info.dim, ctx.gen, dev)
        if len(x_all) < n_max:
            notes.append(f"the attacker pool holds {len(x_all)} points and jitter is off: the curve "
                         "stops there")
            n_max, limited_by = len(x_all), "pool"
        elif source == "pool" and n_max > len(pool):
            notes.append(f"queries beyond the pool's {len(pool)} points: pool points with jitter "
                         f"{p.jitter:g}× the feature std")
        scale = PoolScale.of(pool if source == "pool" else None, info.dim, dev)
        notes.append(scale.describe())
        torch.manual_seed(ctx.seed)
        k = max(1, info.n_outputs)
        net = build_mlp(info.dim, k, hidden, scale, MLP_DTYPE, info.task == "regression").to(dev)
        # the copies, each (linear?, hard labels?, network): noisy, rounded or top-k probabilities
        # add one that learns each answer's top class as a hard label; a linear copy (softmax-linear
        # or linear regression on the same standardised inputs) stands beside the MLP as a plain
        # thief's logistic regression does; the one that agrees best with the held-out answers is
        # the snapshot (`_pick`)
        two = info.output == "probabilities" and info.task != "regression"
        copies = [(False, False, net)] + ([(False, True, copy.deepcopy(net))] if two else [])
        if p.linear and hidden and not joint:
            lin = build_mlp(info.dim, k, [], scale).to(dev)
            copies += [(True, False, lin)] + ([(True, True, copy.deepcopy(lin))] if two else [])
        # the linear copies are fitted by L-BFGS (harness/attacker/linear_copy.py), the MLPs by Adam
        opts = [None if c[0] else Adam(c[2].parameters(), lr=p.lr) for c in copies]
        chosen = 0
        ans = Answers(x_all[:0], None, None)
        snaps: list[tuple[int, int, nn.Module]] = []
        curve: list[tuple[int, float]] = []
        flat, gain, se = False, float("nan"), float("nan")
        stopped, reason = None, ""
        # no total: the curve decides where it stops (flat), at most n_max * cost queries
        bar = ctx.progress("surrogate: queries", None) if ctx.progress else None
        for n in checkpoints(n_max):
            before = len(ans.x)
            ans = self._ask(oracle, ans, x_all[before:n], joint)
            if bar is not None:
                bar.update((n - before) * cost)
                bar.set_postfix_str(f"training on {n} answers (at most {n_max * cost} queries)")
            held = heldout_mask(n, dev)
            clean = clean_answers(ans.y, info.output)
            for c in copies:
                refit_answer_scale(c[2], ans.y[~held])
            live = [i for i, c in enumerate(copies) if not (c[1] and clean)]
            # without held-out answers to stop on (under 10 points) a curve point trains `patience` steps
            steps = most if bool(held.any()) else min(most, p.patience)
            for i in live:
                self._train(copies[i][2], opts[i], ans.part(~held), ans.part(held), p, info, joint,
                            steps, copies[i][1], copies[i][0])
            chosen = self._pick([(i, copies[i][2]) for i in live], ans.part(held), info, clean)
            model = copy.deepcopy(copies[chosen][2]).eval()
            snaps.append((n * cost, n, model))
            if int(held.sum()) >= MIN_HELD:
                score, gain, se = self._progress(model, snaps, ans.part(held), info)
                curve.append((n * cost, score))
                flat = gain < max(0.005, 2 * se)
                if n * cost >= min(p.min_queries, limit) and flat and n < n_max:
                    break
            ctx.keep(self._artifact(snaps, model, ctx, joint, source, info, curve, n, n_max, notes))
        if bar is not None:
            bar.set_postfix_str(f"final training on {len(ans.x)} answers")
        n = snaps[-1][1]
        linear, hard, net = copies[chosen]
        notes += self._form_notes(linear, hard, two and not clean_answers(ans.y, info.output),
                                  any(c[0] for c in copies))
        self._train(net, opts[chosen], ans, None, p, info, joint, final_steps, hard, linear)
        final = copy.deepcopy(net).eval()
        if bar is not None:
            bar.close()
        snaps[-1] = (n * cost, n, final)
        if n >= n_max and not flat:
            if limited_by == "budget":
                stopped, reason = "budget", f"the query budget paid for {n * cost} queries"
            else:
                why = (f"while the held-out agreement still rose ({gain:+.3f}, paired s.e. {se:.3f})"
                       if curve and math.isfinite(gain) else
                       "before its held-out answers could show whether it still improves")
                reason = f"stopped at its own limit ({limited_by}: {n * cost} queries) {why}"
                above = next_bar(curve[-1][1], info.task == "regression") if curve else None
                reach = curve[-1][1] + REACH_DOUBLINGS * (gain + 2 * se) if curve else math.inf
                if above is not None and math.isfinite(gain) and reach < above:
                    notes.append(f"{reason}; at that gain per doubling (+2 s.e.) 10× the queries reach "
                                 f"{reach:.3f}, below the next risk level's {above:g}: the cap hides none")
                else:
                    stopped = "cap"
        elif flat:
            notes.append(f"learning curve flat at {n * cost} queries (held-out gain over half as many "
                         f"points {gain:+.3f}, paired s.e. {se:.3f})")
        art = self._artifact(snaps, final, ctx, joint, source, info, curve, n, n_max, notes)
        art.metrics.update({"queries_per_point": float(cost), "heldout_gain": gain,
                            "surrogate_params": float(sum(q.numel() for q in net.parameters())),
                            "standardised_inputs": float(not scale.identity),
                            "hard_labels": float(hard), "linear_copy": float(linear)})
        what = "linear (softmax-linear; least squares for regression)" if linear else f"MLP {hidden}"
        art.notes.append(f"surrogate {what}, queries from {source}")
        art.stopped_by, art.reason = stopped, reason
        return art

    @staticmethod
    def _train_device(info, hidden: list[int], p: SurrogateParams, n_max: int, joint: bool):
        """Where the surrogate trains (harness/attacker/compute.py): its queries, answers and network
        live there; the oracle answers on the victim's device and the answers are moved."""
        dims = [info.dim, *hidden, max(1, info.n_outputs)]
        fwd = 2.0 * sum(a * b for a, b in zip(dims, dims[1:], strict=False))
        step = (6 if joint else 3) * fwd * min(p.batch, n_max)  # the joint loss: a double backward
        most, final = Surrogate._steps(p, joint)
        steps = most * len(checkpoints(n_max)) + final
        return place_work("surrogate", step * steps, f"{n_max} points, up to {steps} "
                                       "Adam steps", step)

    @staticmethod
    def _steps(p: SurrogateParams, joint: bool) -> tuple[int, int]:
        """(Adam steps per snapshot at most, steps after the last snapshot)."""
        default = 150 if joint else 300
        return (p.steps if p.steps is not None else default,
                p.final_steps if p.final_steps is not None else default)

    @staticmethod
    def _limit(oracle, p: SurrogateParams) -> tuple[int, str]:
        """(queries it may ask, what sets that number: budget | max_queries | cap_queries)."""
        left = oracle.remaining
        want, why = (p.max_queries, "max_queries") if p.max_queries is not None else (
            (left, "budget") if left is not None else (p.cap_queries, "cap_queries"))
        if left is not None and left <= want:
            return left, "budget"
        return want, why

    @staticmethod
    def _ask(oracle, ans: Answers, new: torch.Tensor, joint: bool) -> Answers:
        if len(new) == 0:
            return ans
        y = oracle.predict(new).to(new.device)
        g = oracle.explain(new).to(new.device) if joint else None
        if ans.y is None:
            return Answers(new, y, g)
        return Answers(torch.cat([ans.x, new]), torch.cat([ans.y, y]),
                       torch.cat([ans.g, g]) if joint else None)

    def _progress(self, model, snaps, held: Answers, info) -> tuple[float, float, float]:
        """(held-out score of `model`, its gain over the snapshot at ≤ half the points, paired
        s.e.): agreement with the API's labels, or R² for regression."""
        half = [m for _q, k, m in snaps if k <= snaps[-1][1] // 2]
        old = half[-1] if half else None
        with torch.no_grad():
            new_out = model(held.x)
            old_out = old(held.x) if old is not None else None
        if info.task == "regression":  # R², and its gain's paired s.e. from per-answer squared errors
            y = held.y.reshape(-1).double()
            var = max(float(y.var()) if len(y) > 1 else 0.0, 1e-300)
            new_se = (new_out[:, 0] - y).pow(2) / var
            score = 1.0 - float(new_se.mean())
            if old_out is None:
                return score, float("inf"), 0.0
            diff = (old_out[:, 0] - y).pow(2) / var - new_se
            se = float(diff.std()) / math.sqrt(len(diff)) if len(diff) > 1 else 0.0
            return score, float(diff.mean()), se
        api = api_labels(held.y, info.output)
        new = api_labels(new_out, "logits")
        if old_out is None:
            return float((new == api).double().mean()), float("inf"), 0.0
        return agreement_gain(new, api_labels(old_out, "logits"), api)

    @staticmethod
    def _artifact(snaps, model, ctx, joint, source, info, curve, n, n_max, notes) -> Artifact:
        data = {"snapshots": list(snaps), "model": model, "outdir": ctx.outdir, "joint": joint,
                "source": source, "task": info.task}
        if curve:
            data["curves"] = {"heldout_agreement": list(curve)}
        metrics = {"points": float(n)}
        if curve:
            metrics["heldout_agreement"] = curve[-1][1]
        return Artifact("surrogate", data=data, metrics=metrics, notes=list(notes),
                        progress=f"trained on {n} of {n_max} points")

    @staticmethod
    def _victim_widths(ctx) -> list[int]:
        spec = ctx.threat.architecture if ctx.threat is not None else None  # declared only
        if spec is not None and spec.arch == "mlp":
            return list(spec.hidden)
        return [128]

    @staticmethod
    def _pick(cands: list[tuple[int, nn.Module]], held: Answers, info, clean: bool) -> int:
        """The index of the copy that agrees with the most held-out answers' top class; ties (and
        regression) go to the lower held-out loss against the answers as they came (soft targets,
        logit gaps where they carry logits; squared error), then to the first listed."""
        if len(held.x) == 0:
            return cands[0][0]
        api = api_labels(held.y, info.output) if info.task != "regression" else None
        best, key = cands[0][0], None
        for i, m in cands:
            with torch.no_grad():
                out = m(held.x)
                loss = float(membership_loss(out, held.y, info.output, info.task, clean))
            agree = 0.0 if api is None else float((api_labels(out, "logits") == api).double().mean())
            if key is None or (agree, -loss) > key:
                best, key = i, (agree, -loss)
        return best

    @staticmethod
    def _form_notes(linear: bool, hard: bool, noisy: bool, has_linear: bool) -> list[str]:
        """What the held-out answers chose, in words."""
        notes = []
        if hard:
            notes.append("answers read as hard labels (each answer's top class): they agreed better "
                         "with the held-out answers than soft targets")
        elif noisy:
            notes.append("answers read as soft targets: they agreed at least as well with the "
                         "held-out answers as hard labels")
        if linear:
            notes.append("the linear copy agreed with the held-out answers at least as well as the "
                         "MLP (ties: a lower held-out loss): the surrogate is linear")
        elif has_linear:
            notes.append("the MLP copy agreed with the held-out answers better than a linear copy "
                         "(or as well, at a lower held-out loss)")
        return notes

    @staticmethod
    def _loss(net, a: Answers, info, joint: bool, lam: float, gscale, logits: bool,
              hard: bool = False, train: bool = True) -> torch.Tensor:
        x = a.x.detach().requires_grad_(joint)
        out = net(x)
        gap = (a.gap(info.output, out.shape[1] == 1) if logits and not hard and info.task != "regression"
               and info.output != "label" else None)
        loss = membership_loss(out, a.y, info.output, info.task, logits and not hard, hard, gap)
        if joint:
            pred = (api_labels(a.y, info.output) if info.task != "regression"
                    else torch.zeros(len(x), dtype=torch.long, device=x.device))
            target = gradient_target(out, info.gradient_of, info.gradient_class, pred)
            (gx,) = torch.autograd.grad(target.sum(), x, create_graph=train)
            loss = (gx - a.g).pow(2).sum(1).mean() / gscale + lam * loss
        return loss

    def _train(self, net, opt, train: Answers, held: Answers | None, p: SurrogateParams, info,
               joint: bool, steps: int, hard: bool = False, linear: bool = False) -> None:
        """Up to `steps` Adam steps on (mini-)batches of `train`; with held-out answers, the
        state with the lowest held-out loss (checked every 10 steps) is kept and training stops
        after `patience` steps without improvement. A linear copy: its convex optimum on `train`
        (harness/attacker/linear_copy.py)."""
        if len(train.x) == 0:
            return
        gscale = train.g.pow(2).sum(1).mean().clamp_min(1e-12) if joint else None
        logits = not hard and clean_answers(train.y, info.output) and (
            held is None or len(held.x) == 0 or clean_answers(held.y, info.output))
        if linear:
            fit_linear(net, lambda: self._loss(net, train, info, False, p.lam, None, logits, hard),
                       len(train.x), 1e4 if logits else 1.0)
            return
        for group in opt.param_groups:  # labels and cross-entropy alone overfit sooner
            group["weight_decay"] = p.weight_decay if p.weight_decay is not None else (
                1e-4 if logits else 1e-3)
        gen = torch.Generator(device="cpu").manual_seed(len(train.x))
        watch = held is not None and len(held.x) > 0
        best, state, since = float("inf"), None, 0
        for step in range(steps):
            part = train
            if len(train.x) > p.batch:
                idx = torch.randperm(len(train.x), generator=gen)[: p.batch].to(train.x.device)
                part = Answers(train.x[idx], train.y[idx], None if train.g is None else train.g[idx])
            loss = self._loss(net, part, info, joint, p.lam, gscale, logits, hard)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if watch and step % 10 == 9:
                with torch.enable_grad() if joint else torch.no_grad():
                    h = float(self._loss(net, held, info, joint, p.lam, gscale, logits, hard,
                                         train=False).detach())
                if state is None or h < best - 1e-9 * abs(best):
                    best, state, since = h, copy.deepcopy(net.state_dict()), 0
                else:
                    since += 10
                    if since >= p.patience:
                        break
        if state is not None:
            net.load_state_dict(state)

    def judge(self, m, artifact):
        from harness.scoring.fidelity import judge_agreement, judge_fidelity

        if "fidelity" not in m:
            return judge_fidelity(m, "surrogate")
        return judge_agreement(m, "surrogate", artifact.data.get("task") == "regression")
