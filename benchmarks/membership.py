"""Benchmarks for membership inference and DP auditing (prints tables; ratios measured in one run).

1. speed: 64 reference models of the digits MLP (scenarios/membership-digits.yaml: 128 hidden
   units, 60 epochs of minibatch SGD, 500 points each: the victim's size) trained as one stacked
   run, plus LiRA scoring (target: ≤ 30 s on 2 cores), vs the same recipe trained one model at a
   time (`--loop N` models timed, scaled to 64).
2. executors: wall time of 64 and 256 reference models trained here vs in Ray tasks (a local Ray
   of `--ray-workers` workers, started before the clock runs; its start-up is shown apart), same
   seeds; the parameters are compared (they must be identical).
3. anchors: digits (500 members / 500 non-members) and the overfit Gaussian (1,000 / 1,000), each
   seed one run of the real attacks: leakmeter's LiRA with 64 reference models beside a short
   independent LiRA inside this script (its own Gaussian fit with numpy/scipy — means, and
   per-example or fixed variances as the paper, Sec. IV-B and VI-B — and sklearn's ROC) on the
   same signals; then the paper's relative claims on the means over seeds: online > offline,
   4 → 16 → 64 reference models non-decreasing, RMIA with 1–4 references ≥ offline LiRA with the
   same references, the loss attack at 0.1% FPR near chance.
4. table: attack × victim (non-private, ε = 8, ε = 1) → AUC, TPR@1%, TPR@0.1%, epsilon_lower,
   wall time.

    python benchmarks/membership.py [--only speed|executors|anchors|table] [--loop 8]
        [--seeds 0 1 2] [--ray-workers 2]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from harness.core.threads import pin_threads

ROOT = Path(__file__).resolve().parents[1]
OVERFIT = {"model": {"arch": "mlp", "hidden": [256]},
           "data": {"dataset": "gaussian", "dim": 20, "labels": "teacher", "task": "multiclass",
                    "n_train": 1000, "n_test": 1000, "attacker_pool": 1000},
           "training": {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "epochs": 60, "batch_size": 50}}
VICTIMS = (("digits", None), ("overfit gaussian", OVERFIT))


def _scenario(overrides: list[str], victim: dict | None = None, seed: int = 0):
    from harness.scenario import load_scenario

    s = load_scenario(ROOT / "scenarios" / "membership-digits.yaml", overrides + [f"seed={seed}"])
    if victim is not None:
        from harness.scenario.schema import VictimSpec

        s.victim = VictimSpec.model_validate(victim)
    s.tracking.enabled = False
    return s


def _load() -> str:
    return "load average {:.2f} {:.2f} {:.2f} (1/5/15 min) on {} CPUs".format(*os.getloadavg(),
                                                                           os.cpu_count())


def _knowledge(s, v):
    from harness.attacker.membership import MembershipKnowledge
    from harness.core.oracle import Oracle

    kn = MembershipKnowledge(s, v, Oracle(v.backend, v.info, None, None), "bench", 0, 1)
    return kn, kn.eval_set(), kn.recipe


def speed(n_loop: int) -> None:
    from harness.attacker.reference_models import reference_phi, train_reference_set
    from harness.attacker.shadows import flatten_state
    from harness.attacker.signals import phi_from_probs
    from harness.attacks.membership.mia_lira import lira_online
    from harness.scoring.roc import auc, roc
    from victims.build import build_victim

    s = _scenario([])
    v = build_victim(s)
    kn, ev, recipe = _knowledge(s, v)
    t0 = time.perf_counter()
    refs = train_reference_set(recipe, ev, 64, "halves", 1, False, False)
    t_train = time.perf_counter() - t0
    target = v.backend.predict(ev.x, "probabilities")
    t1 = time.perf_counter()
    phi = reference_phi(recipe, refs, ev.x, ev.y, v.info.task, "eval")
    scores = lira_online(phi_from_probs(target, ev.y)[:, None], phi, refs.keep_eval, "auto")
    t_score = time.perf_counter() - t1
    keep = torch.cat([refs.keep_eval, refs.keep_pool], 1)
    x_all, y_all = torch.cat([ev.x, ev.x_pool]), torch.cat([ev.y, ev.y_pool])
    t2 = time.perf_counter()
    for j, r in enumerate(keep[:n_loop]):
        idx = r.nonzero()[:, 0]
        flatten_state(recipe.train(x_all[idx], y_all[idx], seed=j, init_seed=1000 + j))
    t_loop = (time.perf_counter() - t2) / n_loop * 64
    print(f"\n## 1. speed: 64 reference models (digits MLP 64-128-10, {refs.train_size} points each, "
          f"{s.victim.training.epochs} epochs, batch {s.victim.training.batch_size}), "
          f"{torch.get_num_threads()} torch thread(s); {_load()}\n")
    print("| what | seconds |\n|---|---|")
    print(f"| 64 models, stacked (one run, incl. screening for failed models) | {t_train:.1f} |")
    print(f"| LiRA scoring (signals of 64 models on {len(ev)} points + Gaussians) | {t_score:.2f} |")
    print(f"| **total** | **{t_train + t_score:.1f}** (target ≤ 30) |")
    print(f"| 64 models one by one (Recipe.train; {n_loop} timed, ×{64 / n_loop:g}) | {t_loop:.1f} |")
    print(f"| ratio one-by-one / stacked | {t_loop / t_train:.1f}× |")
    a = auc(roc(scores.numpy(), kn.truth.is_member))
    print(f"\nLiRA online with 64 models on this victim: AUC {a:.3f}; "
          f"{len(refs.dropped)} of {refs.trained} models dropped as failed to train")


def executors(workers: int) -> None:
    from harness.attacker import reference_executors as rx
    from harness.attacker.reference_models import train_reference_set
    from victims.build import build_victim

    s = _scenario([])
    v = build_victim(s)
    _, ev, recipe = _knowledge(s, v)
    ray_exec = rx.RayExecutor(None, workers, None)
    t0 = time.perf_counter()
    rx.session(None, workers)
    t_start = time.perf_counter() - t0
    print(f"\n## 2. executors: reference models of the digits MLP here ({torch.get_num_threads()} torch "
          f"thread(s)) vs in Ray tasks (a local Ray of {workers} workers, one thread each); {_load()}\n")
    print(f"Ray start-up (not in the times below): {t_start:.1f} s. The first Ray call also starts "
          "its worker processes (they import torch): `Ray, cold`.\n")
    print("| models | local s | Ray s, cold | Ray s | local / Ray | parameters identical |")
    print("|---|---|---|---|---|---|")
    try:
        for k in (64, 256):
            t0 = time.perf_counter()
            a = train_reference_set(recipe, ev, k, "halves", 1, False, False)
            t_local = time.perf_counter() - t0
            cold = ""
            if k == 64:
                t0 = time.perf_counter()
                train_reference_set(recipe, ev, k, "halves", 1, False, False, ray_exec)
                cold = f"{time.perf_counter() - t0:.1f}"
            t0 = time.perf_counter()
            b = train_reference_set(recipe, ev, k, "halves", 1, False, False, ray_exec)
            t_ray = time.perf_counter() - t0
            same = torch.equal(a.flat, b.flat) and torch.equal(a.keep_eval, b.keep_eval)
            print(f"| {k} | {t_local:.1f} | {cold or '-'} | {t_ray:.1f} | {t_local / t_ray:.2f}× | "
                  f"{'yes' if same else 'NO'} |")
    finally:
        rx.close()


# --------------------------------------------------------------------------- anchors


def independent_lira(target: np.ndarray, ref: np.ndarray, keep: np.ndarray, per_example: bool):
    """(online, offline) scores from φ of the target (n,) and of K reference models (K, n) with
    IN mask keep (K, n): Gaussians by numpy/scipy — means, standard deviations per example or
    one fixed (pooled over all points) per side — the offline score one-sided (log CDF)."""
    from scipy.stats import norm

    def fit(mask):
        vals = np.where(mask, ref, np.nan)
        mu = np.nanmean(vals, 0)
        if per_example:
            sd = np.nanstd(vals, 0, ddof=1)
        else:
            dev = vals - mu
            sd = np.full_like(mu, np.sqrt(np.nansum(dev**2) / (np.sum(mask) - mask.shape[1])))
        return mu, np.maximum(sd, 1e-6)

    mu_in, sd_in = fit(keep)
    mu_out, sd_out = fit(~keep)
    online = norm.logpdf(target, mu_in, sd_in) - norm.logpdf(target, mu_out, sd_out)
    return online, norm.logcdf(target, mu_out, sd_out)


def sk_metrics(scores: np.ndarray, is_member: np.ndarray) -> tuple[float, float, float]:
    """(AUC, TPR at FPR ≤ 1%, TPR at FPR ≤ 0.1%) by sklearn."""
    from sklearn.metrics import roc_auc_score, roc_curve

    fpr, tpr, _ = roc_curve(is_member, scores)
    return (float(roc_auc_score(is_member, scores)), float(tpr[fpr <= 0.01].max()),
            float(tpr[fpr <= 0.001].max()))


def _fmt(t) -> str:
    return f"{t[0]:.3f} / {t[1]:.3f} / {t[2]:.3f}"


def anchors(seeds: list[int]) -> None:
    from harness.attacker.membership import _SHARED
    from harness.attacker.signals import phi_from_probs
    from harness.run.runner import run_scenario
    from victims.build import build_victim

    specs = [("mia_loss", "{name: mia_loss}")]
    for k in (64, 16, 4):
        specs.append((f"lira{k}", f"{{name: mia_lira, params: {{shadows: {k}, mode: both}}}}"))
    for k in (2, 1):
        specs.append((f"lira{k}", f"{{name: mia_lira, params: {{shadows: {k}, mode: offline}}}}"))
    for k in (1, 2, 4):
        specs.append((f"rmia{k}", f"{{name: mia_rmia, params: {{references: {k}}}}}"))
    attacks = "attacks=[" + ", ".join(a for _, a in specs) + "]"
    print(f"\n## 3. anchors (seeds {seeds}); {_load()}\n")
    print("LiRA with 64 reference models: leakmeter's attack (`variance: auto`) beside an independent "
          "LiRA on the same signals\n(numpy/scipy fit, sklearn ROC). Cells: AUC / TPR@1% / TPR@0.1%.\n")
    print("| victim | seed | leakmeter online | independent online (per-example σ) | independent online "
          "(fixed σ) | leakmeter offline | independent offline (per-example σ) | dropped | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    means: dict[str, dict[str, list]] = {}
    for vname, victim in VICTIMS:
        rows = means.setdefault(vname, {})
        for seed in seeds:
            s = _scenario([attacks], victim, seed)
            v = build_victim(s)
            t0 = time.perf_counter()
            rep = run_scenario(s, out=Path("/tmp") / f"lm-bench-{vname.split()[-1]}-{seed}", victim=v)
            wall = time.perf_counter() - t0
            got = {name: a["metrics"] for (name, _), a in zip(specs, rep["attacks"], strict=True)}
            for name, m in got.items():
                rows.setdefault(name, []).append(m)
            kn, ev, _ = _knowledge(s, v)
            mem = kn.truth.is_member
            refs = _SHARED[id(v.truth)][("halves", 64, False, len(ev.x), len(ev.x_pool))]
            ref = refs.signals[("eval", ((0, 0),))][..., 0].numpy()
            keep = refs.keep_eval.numpy()
            target = phi_from_probs(v.backend.predict(ev.x, "probabilities"), ev.y).numpy()
            on_pe, off_pe = independent_lira(target, ref, keep, True)
            on_fx, _ = independent_lira(target, ref, keep, False)
            ind = (sk_metrics(on_pe, mem), sk_metrics(on_fx, mem), sk_metrics(off_pe, mem))
            rows.setdefault("independent", []).append(ind)
            m = got["lira64"]
            lm_on = (m["auc"], m["tpr_at_fpr_0.01"], m["tpr_at_fpr_0.001"])
            lm_off = (m["offline_auc"], m["offline_tpr_at_fpr_0.01"], m["offline_tpr_at_fpr_0.001"])
            print(f"| {vname} | {seed} | {_fmt(lm_on)} | {_fmt(ind[0])} | {_fmt(ind[1])} | {_fmt(lm_off)} | "
                  f"{_fmt(ind[2])} | {int(m['references_dropped'])} | {wall:.0f} |")
            _SHARED.pop(id(v.truth), None)
        r = rows["lira64"]
        mean = lambda key, rr=r: float(np.mean([x[key] for x in rr]))  # noqa: E731
        ind = np.mean(np.array(rows["independent"]), 0)
        print(f"| {vname} | **mean** | **{mean('auc'):.3f} / {mean('tpr_at_fpr_0.01'):.3f} / "
              f"{mean('tpr_at_fpr_0.001'):.3f}** | {_fmt(ind[0])} | {_fmt(ind[1])} | "
              f"{mean('offline_auc'):.3f} / {mean('offline_tpr_at_fpr_0.01'):.3f} / "
              f"{mean('offline_tpr_at_fpr_0.001'):.3f} | {_fmt(ind[2])} | | |")
    d = means["digits"]["lira64"]
    auc_d = float(np.mean([x["auc"] for x in d]))
    tpr_d = float(np.mean([x["tpr_at_fpr_0.01"] for x in d]))
    print(f"\nTargets (digits, 64 references, mean of {len(seeds)} seeds): online AUC {auc_d:.3f} "
          f"(≥ 0.66: {'met' if auc_d >= 0.66 else 'NOT met'}), TPR@1% {tpr_d:.3f} "
          f"(≥ 0.10: {'met' if tpr_d >= 0.10 else 'NOT met'})")
    claims(means, len(seeds))


def claims(means: dict, n_seeds: int) -> None:
    """The paper's relative claims on the means over seeds (AUC; TPR@1% beside it)."""
    def mm(rows, key):
        return float(np.mean([x[key] for x in rows]))

    print(f"\nRelative claims (means over {n_seeds} seeds; AUC, TPR@1% in brackets):\n")
    print("| victim | claim | numbers | holds |\n|---|---|---|---|")
    for vname, r in means.items():
        def on(k, key="auc", r=r):
            return mm(r[f"lira{k}"], key)

        def off(k, key="auc", r=r):
            return mm(r[f"lira{k}"], f"offline_{key}" if k >= 4 else key)

        for k in (4, 16, 64):
            t1 = "tpr_at_fpr_0.01"
            print(f"| {vname} | online > offline, {k} references | {on(k):.3f} ({on(k, t1):.3f}) "
                  f"vs {off(k):.3f} ({off(k, t1):.3f}) | {'yes' if on(k) > off(k) else 'NO'} |")
        seq = [on(k) for k in (4, 16, 64)]
        tp = [on(k, "tpr_at_fpr_0.01") for k in (4, 16, 64)]
        print(f"| {vname} | online 4 → 16 → 64 references non-decreasing | "
              f"{' → '.join(f'{x:.3f}' for x in seq)} ({' → '.join(f'{x:.3f}' for x in tp)}) | "
              f"{'yes' if seq[0] <= seq[1] <= seq[2] else 'NO'} |")
        for k in (1, 2, 4):
            rm, rt = mm(r[f"rmia{k}"], "auc"), mm(r[f"rmia{k}"], "tpr_at_fpr_0.01")
            print(f"| {vname} | RMIA ≥ offline LiRA, {k} reference(s) | {rm:.3f} ({rt:.3f}) vs "
                  f"{off(k):.3f} ({off(k, 'tpr_at_fpr_0.01'):.3f}) | {'yes' if rm >= off(k) else 'NO'} |")
        lo = mm(r["mia_loss"], "tpr_at_fpr_0.001")
        li = mm(r["lira64"], "tpr_at_fpr_0.001")
        bar = chance_tpr(r["mia_loss"][0], 0.001)
        print(f"| {vname} | loss attack at 0.1% FPR near chance (≤ {bar:.3f}, a random ranking's 95% "
              f"point) | {lo:.4f} (LiRA-64: {li:.4f}) | {'yes' if lo <= bar else 'NO'} |")


def chance_tpr(m: dict, fpr: float) -> float:
    """The 95% point of the TPR a random ranking shows at the threshold that allows ⌊fpr·n0⌋ false
    positives: the members ranked above the (⌊fpr·n0⌋ + 1)-th non-member, a negative
    hypergeometric count (with 500 non-members, 0.1% FPR is 0 false positives)."""
    from scipy.stats import nhypergeom

    n1, n0 = int(m["members"]), int(m["nonmembers"])
    return float(nhypergeom(n0 + n1, n1, int(fpr * n0 + 1e-9) + 1).ppf(0.95)) / n1


def table() -> None:
    from harness.run.runner import run_scenario

    print(f"\n## 4. attack × victim (digits MLP, 500 members / 500 non-members, pool 797); {_load()}\n")
    print("| victim | test acc | attack | AUC | TPR@1% | TPR@0.1% | epsilon_lower | ε (accounted) | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    attacks = ("attacks=[{name: mia_loss}, {name: mia_lira, params: {shadows: 16}}, "
               "{name: mia_rmia, params: {references: 2}}, {name: dp_audit, params: {shadows: 16}}]")
    for label, extra in (("non-private", []), ("ε = 8", ["defenses.dp_sgd={epsilon: 8}"]),
                         ("ε = 1", ["defenses.dp_sgd={epsilon: 1}"])):
        s = _scenario([attacks] + extra)
        rep = run_scenario(s, out=Path("/tmp") / f"lm-bench-table-{label[-1]}")
        acc = rep["victim"].get("test_accuracy", float("nan"))
        eps = rep["privacy"]["epsilon"] if rep.get("privacy") else None
        for a in rep["attacks"]:
            m = {k: a["metrics"].get(k, float("nan"))
                 for k in ("auc", "tpr_at_fpr_0.01", "tpr_at_fpr_0.001", "epsilon_lower")}
            print(f"| {label} | {acc:.3f} | {a['name']} | {m['auc']:.3f} | {m['tpr_at_fpr_0.01']:.3f} | "
                  f"{m['tpr_at_fpr_0.001']:.4f} | {m['epsilon_lower']:.3f} | "
                  f"{'-' if eps is None else f'{eps:.2f}'} | {a['wall_s']:.1f} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["speed", "executors", "anchors", "table"])
    ap.add_argument("--loop", type=int, default=8, help="models trained one by one for the ratio")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--ray-workers", type=int, default=2)
    args = ap.parse_args()
    pin_threads()
    warnings.simplefilter("ignore")
    if args.only in (None, "speed"):
        speed(args.loop)
    if args.only in (None, "executors"):
        executors(args.ray_workers)
    if args.only in (None, "anchors"):
        anchors(args.seeds)
    if args.only in (None, "table"):
        table()
