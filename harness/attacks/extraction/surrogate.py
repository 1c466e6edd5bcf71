"""surrogate — paper 000 (Milli et al., FAT* 2019), Sec. 4–5 and App. D.

Train a surrogate f̂ on the attacker's own queries and record its learning curve. Queries come
from the attacker's pool (same distribution as the victim's data, disjoint from its training
set: Sec. 4) or from N(0, I) (the unknown-distribution case, Sec. 5.3). Losses (Sec. 4):
membership only, ℓ_M = cross-entropy against the returned probabilities (or labels; squared
error for regression), or, when the API explains, the joint ℓ_G + λ·ℓ_M with
ℓ_G = ‖∇f(x) − ∇f̂(x)‖² matched by double backprop on the same output the API explains
(`gradient_of`: predicted class, a fixed class, or the sum). SmoothGrad explanations are
matched as if they were raw gradients (App. D: the paper sees no loss from it).

The surrogate class is an MLP: the victim's widths when the attacker is declared to know the
architecture (`attacker.knows_architecture`, or a white-box release; "same class"), else
`hidden` (the paper's "unknown model class", Sec. 5.2). Snapshots are taken at 1, 2, 3, 5, 7,
10, 15, 20, 30, 50, 70, 100, … points (warm-started, `steps` full-batch Adam steps each); the
scorer turns them into the fidelity/accuracy curve vs oracle queries. Beyond the paper: ℓ_G is
normalised by the mean squared gradient norm so λ is scale-free, and queries are counted as the
oracle counts them (a point with its explanation costs 2).
"""

from __future__ import annotations

import copy
from typing import Literal

import torch
from torch import nn

from harness.attacks import register
from harness.attacks.base import Artifact, Attack, Params
from harness.attacks.gradients import api_labels
from harness.errors import AssumptionViolated

GRID = (1, 2, 3, 5, 7)


class SurrogateParams(Params):
    pool: Literal["data", "gaussian"] = "data"
    loss: Literal["auto", "membership", "joint"] = "auto"  # auto: joint when the API explains
    lam: float = 1.0  # weight of ℓ_M in ℓ_G + λ·ℓ_M
    hidden: list[int] | None = None  # surrogate widths; None: the victim's (MLP) or [64]
    max_queries: int = 400  # the curve stops here or at the budget
    steps: int = 80  # Adam steps per snapshot (warm start)
    lr: float = 1e-2
    weight_decay: float = 0.0
    batch: int = 2048  # points per optimizer step (full batch below this)


def checkpoints(limit: int) -> list[int]:
    """1, 2, 3, 5, 7, 10, 15, … up to limit (points), always ending at limit."""
    out, scale = [], 1
    while True:
        for g in GRID + ((15,) if scale == 1 else ()):
            if g * scale > limit:
                return sorted(set(out + [limit])) if limit >= 1 else []
            out.append(g * scale)
        scale *= 10


def build_mlp(d: int, k: int, hidden: list[int]) -> nn.Sequential:
    """A ReLU MLP d → hidden… → k in float64."""
    layers: list[nn.Module] = []
    widths = [d, *hidden]
    for a, b in zip(widths[:-1], widths[1:], strict=True):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], k))
    return nn.Sequential(*layers).double()


def gradient_target(out: torch.Tensor, of: str, cls: int, pred: torch.Tensor) -> torch.Tensor:
    """The scalar per input whose input gradient the API explains."""
    if out.shape[1] == 1:
        return out[:, 0]
    if of == "sum":
        return out.sum(1)
    if of == "class":
        return out[:, cls]
    return out.gather(1, pred[:, None])[:, 0]


def membership_loss(out: torch.Tensor, y: torch.Tensor, output: str, task: str) -> torch.Tensor:
    """ℓ_M: cross-entropy against labels or returned probabilities; squared error (regression)."""
    if task == "regression":
        return (out[:, 0] - y.reshape(-1)).pow(2).mean()
    if out.shape[1] == 1:  # binary, one logit
        target = y.float().double() if output == "label" else (
            y[:, 1] if output == "probabilities" else torch.sigmoid(y[:, 0]))
        return nn.functional.binary_cross_entropy_with_logits(out[:, 0], target.reshape(-1))
    if output == "label":
        return nn.functional.cross_entropy(out, y)
    target = y if output == "probabilities" else torch.softmax(y, 1)
    return -(target * torch.log_softmax(out, 1)).sum(1).mean()


@register
class Surrogate(Attack):
    name = "surrogate"
    family = "extraction"
    needs = frozenset({"prediction", "gradient", "smoothgrad", "whitebox"})
    paper = "000 Sec. 4-5, App. D"
    summary = "train a surrogate on queries (membership or joint gradient loss): learning curve"
    Params = SurrogateParams

    def run(self, oracle, p: SurrogateParams, ctx) -> Artifact:
        info, dev = oracle.info, oracle.device
        joint = p.loss == "joint" or (p.loss == "auto" and oracle.offers("explain"))
        if joint and not oracle.offers("explain"):
            raise AssumptionViolated("loss: joint needs an explanation API; this one only predicts")
        cost = 2 if joint else 1
        limit = p.max_queries if oracle.remaining is None else min(p.max_queries, oracle.remaining)
        n_max = limit // cost
        notes = [f"loss {'joint ℓ_G + λ·ℓ_M' if joint else 'membership ℓ_M'}",
                 f"queries per point: {cost}"]
        pool = info.x_pool.reshape(len(info.x_pool), info.dim) if info.x_pool is not None else None
        source = p.pool
        if source == "data" and (pool is None or len(pool) == 0):
            source = "gaussian"
            notes.append("no attacker pool: Gaussian queries instead")
        if source == "data":
            perm = torch.randperm(len(pool), generator=ctx.gen)
            x_all = pool[perm.to(pool.device)][:n_max].to(dev, torch.float64)
            if len(x_all) < n_max:
                notes.append(f"the attacker pool holds {len(x_all)} points: the curve stops there")
        else:
            x_all = torch.randn(n_max, info.dim, generator=ctx.gen, dtype=torch.float64).to(dev)
        n_max = len(x_all)
        if n_max == 0:
            raise AssumptionViolated(f"the budget ({oracle.remaining}) allows no surrogate query",
                                     stopped_by="budget")
        hidden = p.hidden or self._victim_widths(ctx)
        k = max(1, info.n_outputs)
        torch.manual_seed(ctx.seed)
        net = build_mlp(info.dim, k, hidden).to(dev)
        opt = torch.optim.Adam(net.parameters(), lr=p.lr, weight_decay=p.weight_decay)
        xs, ys, gs = [], [], []
        snaps: list[tuple[int, int, nn.Module]] = []
        have = 0
        of, cls = info.gradient_of, info.gradient_class  # what the API documents it explains
        bar = ctx.progress("surrogate: snapshots", len(checkpoints(n_max))) if ctx.progress else None
        for n in checkpoints(n_max):
            new = x_all[have:n]
            xs.append(new)
            ys.append(oracle.predict(new))
            if joint:
                gs.append(oracle.explain(new))
            have = n
            x, y = torch.cat(xs), torch.cat(ys)
            g = torch.cat(gs) if joint else None
            self._train(net, opt, x, y, g, p, info, of, cls, joint)
            snaps.append((n * cost, n, copy.deepcopy(net).eval()))
            ctx.keep(Artifact("surrogate", data={"snapshots": list(snaps), "model": snaps[-1][2],
                                                 "outdir": ctx.outdir, "joint": joint,
                                                 "source": source, "task": info.task},
                              metrics={"points": float(n)},
                              progress=f"trained on {n} of {n_max} points"))
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        stopped, reason = None, ""
        if n_max * cost < p.max_queries and n_max * cost < limit - cost + 1:
            notes.append(f"the attacker pool held only {n_max} points ({n_max * cost} queries)")
        elif oracle.remaining is not None and n_max * cost < p.max_queries:
            stopped, reason = "budget", f"query budget allowed {n_max * cost} of {p.max_queries}"
        data = {"snapshots": snaps, "model": snaps[-1][2], "outdir": ctx.outdir,
                "joint": joint, "source": source, "task": info.task}
        metrics = {"points": float(n_max), "queries_per_point": float(cost),
                   "surrogate_params": float(sum(q.numel() for q in net.parameters()))}
        return Artifact("surrogate", data=data, metrics=metrics, stopped_by=stopped, reason=reason,
                        notes=notes + [f"surrogate MLP {hidden}, queries from {source}"],
                        progress=f"trained on {n_max} points")

    @staticmethod
    def _victim_widths(ctx) -> list[int]:
        spec = ctx.threat.architecture if ctx.threat is not None else None  # declared only
        if spec is not None and spec.arch == "mlp":
            return list(spec.hidden)
        return [64]

    @staticmethod
    def _train(net, opt, x, y, g, p, info, of, cls, joint) -> None:
        """`steps` Adam steps on (mini-)batches of everything queried so far."""
        task, output = info.task, info.output
        pred = api_labels(y, output) if task != "regression" else None
        gscale = g.pow(2).sum(1).mean().clamp_min(1e-12) if joint else None
        gen = torch.Generator(device="cpu").manual_seed(len(x))
        for _ in range(p.steps):
            idx = torch.randperm(len(x), generator=gen)[: p.batch].to(x.device)
            xb = x[idx].detach().requires_grad_(joint)
            out = net(xb)
            loss = membership_loss(out, y[idx], output, task)
            if joint:
                pb = pred[idx] if pred is not None else torch.zeros(len(xb), dtype=torch.long)
                target = gradient_target(out, of, cls, pb.to(xb.device))
                (gx,) = torch.autograd.grad(target.sum(), xb, create_graph=True)
                lg = (gx - g[idx]).pow(2).sum(1).mean() / gscale
                loss = lg + p.lam * loss
            opt.zero_grad()
            loss.backward()
            opt.step()

    def judge(self, m, artifact):
        q = int(m.get("queries", 0))
        if "fidelity" not in m:
            from harness.attacks.extraction.fidelity import judge_fidelity

            return judge_fidelity(m, "surrogate")
        fid = m["fidelity"]
        if fid >= 0.95:
            q95 = int(m.get("queries_to_95", q))
            return "high", (f"the surrogate agrees with the victim on {fid:.1%} of inputs; "
                            f"95% took {q95} queries")
        if fid >= 0.9:
            q90 = int(m.get("queries_to_90", q))
            return "medium", f"the surrogate reached {fid:.1%} agreement; 90% took {q90} queries"
        return "low", f"the surrogate reached {fid:.1%} agreement in {q} queries"
