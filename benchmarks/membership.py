"""Benchmarks for membership inference and DP auditing (prints tables; ratios measured in one run).

1. speed: 64 reference models of the digits MLP (scenarios/membership-digits.yaml: 128 hidden
   units, 60 epochs of minibatch SGD, ~900 points each) trained as one stacked run, plus LiRA
   scoring, vs the same recipe trained one model at a time (`--loop N` models timed, scaled to 64).
2. anchors: on the same victims, the loss attack vs LiRA (16 reference models) at TPR@0.1% FPR,
   and RMIA vs offline LiRA with 1, 2, 4 reference models each (pool design: every evaluation
   point OUT for every model), on the overfit Gaussian victim and on digits.
3. table: attack × victim (non-private, ε = 8, ε = 1) → AUC, TPR@1%, TPR@0.1%, epsilon_lower
   (threshold audit of that attack's scores; dp_audit: with the one-run canary audit), wall time.

    python benchmarks/membership.py [--only speed|anchors|table] [--loop 8] [--seeds 0]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import torch

from harness.threads import pin_threads

ROOT = Path(__file__).resolve().parents[1]
OVERFIT = {"model": {"arch": "mlp", "hidden": [256]},
           "data": {"dataset": "gaussian", "dim": 20, "labels": "teacher", "task": "multiclass",
                    "n_train": 1000, "n_test": 1000, "attacker_pool": 1000},
           "training": {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "epochs": 60, "batch_size": 50}}


def _scenario(overrides: list[str], victim: dict | None = None, seed: int = 0):
    from harness.scenario import load_scenario

    s = load_scenario(ROOT / "scenarios" / "membership-digits.yaml", overrides + [f"seed={seed}"])
    if victim is not None:
        from harness.scenario.schema import VictimSpec

        s.victim = VictimSpec.model_validate(victim)
    s.tracking.enabled = False
    return s


def speed(n_loop: int) -> None:
    from harness.attacker.membership import MembershipKnowledge
    from harness.attacker.reference_models import reference_phi, train_reference_set
    from harness.attacker.shadows import flatten_state
    from harness.attacks.membership.mia_lira import lira_online
    from harness.oracle import Oracle
    from victims.build import build_victim

    s = _scenario([])
    v = build_victim(s)
    o = Oracle(v.backend, v.info, None, None)
    kn = MembershipKnowledge(s, v, o, "bench", 0, 1)
    ev, recipe = kn.eval_set(), kn.recipe
    t0 = time.perf_counter()
    refs = train_reference_set(recipe, ev, 64, "halves", 1, False, False)
    t_train = time.perf_counter() - t0
    target = v.backend.predict(ev.x, "probabilities")
    from harness.attacker.signals import phi_from_probs

    t1 = time.perf_counter()
    phi = reference_phi(recipe, refs, ev.x, ev.y, v.info.task, "eval")
    scores = lira_online(phi_from_probs(target, ev.y)[:, None], phi, refs.keep_eval, "auto")
    t_score = time.perf_counter() - t1
    rows = refs.keep_eval.shape[1] and int(refs.keep_eval[0].sum() + refs.keep_pool[0].sum())
    t2 = time.perf_counter()
    idx = [r.nonzero()[:, 0] for r in torch.cat([refs.keep_eval, refs.keep_pool], 1)[:n_loop]]
    x_all = torch.cat([ev.x, ev.x_pool])
    y_all = torch.cat([ev.y, ev.y_pool])
    for j, r in enumerate(idx):
        flatten_state(recipe.train(x_all[r], y_all[r], seed=j, init_seed=1000 + j))
    t_loop = (time.perf_counter() - t2) / n_loop * 64
    from harness.scoring.roc import auc, roc

    mem = kn.truth.is_member
    print(f"\n## 1. speed: 64 reference models (digits MLP 64-128-10, {rows} points each, "
          f"{s.victim.training.epochs} epochs, batch {s.victim.training.batch_size}), "
          f"{torch.get_num_threads()} torch thread(s)\n")
    print("| what | seconds |\n|---|---|")
    print(f"| 64 models, stacked (one run) | {t_train:.1f} |")
    print(f"| LiRA scoring (signals of 64 models on {len(ev)} points + Gaussians) | {t_score:.2f} |")
    print(f"| **total** | **{t_train + t_score:.1f}** (target ≤ 120) |")
    print(f"| 64 models one by one (Recipe.train; {n_loop} timed, ×{64 / n_loop:g}) | {t_loop:.1f} |")
    print(f"| ratio one-by-one / stacked | {t_loop / t_train:.1f}× |")
    print(f"\nLiRA online with 64 models on this victim: AUC {auc(roc(scores.numpy(), mem)):.3f}")


def _metrics(rep: dict, name: str) -> dict:
    return next(a for a in rep["attacks"] if a["name"] == name)


def anchors(seeds: list[int]) -> None:
    from harness.runner import run_scenario

    print("\n## 2. anchors\n")
    print("| victim | seed | loss TPR@0.1% | LiRA-16 TPR@0.1% | ratio | loss AUC | LiRA AUC | non-members |")
    print("|---|---|---|---|---|---|---|---|")
    rmia_rows = []
    for vname, victim in (("overfit gaussian", OVERFIT), ("digits", None)):
        for seed in seeds:
            atk = ["attacks=[{name: mia_loss}, {name: mia_lira, params: {shadows: 16, mode: online}}"]
            for k in (1, 2, 4):
                atk[0] += (f", {{name: mia_rmia, params: {{references: {k}}}}}"
                           f", {{name: mia_lira, params: {{shadows: {k}, mode: offline}}}}")
            atk[0] += "]"
            s = _scenario(atk, victim, seed)
            rep = run_scenario(s, out=Path("/tmp") / f"lm-bench-{vname.split()[0]}-{seed}")
            loss = rep["attacks"][0]["metrics"]
            lira = rep["attacks"][1]["metrics"]
            lo, li = loss["tpr_at_fpr_0.001"], lira["tpr_at_fpr_0.001"]
            ratio = f"{li / lo:.1f}×" if lo > 0 else f"∞ (loss: 0 of {int(lira['members'])})"
            print(f"| {vname} | {seed} | {lo:.4f} | {li:.4f} | {ratio} | {loss['auc']:.3f} | "
                  f"{lira['auc']:.3f} | {int(lira['nonmembers'])} |")
            for i, k in enumerate((1, 2, 4)):
                rm = rep["attacks"][2 + 2 * i]["metrics"]
                lf = rep["attacks"][3 + 2 * i]["metrics"]
                rmia_rows.append((vname, seed, k, rm, lf))
    print("\n| victim | seed | refs | RMIA AUC | offline LiRA AUC | RMIA TPR@1% | offline LiRA TPR@1% | "
          "RMIA TPR@0.1% | offline LiRA TPR@0.1% |")
    print("|---|---|---|---|---|---|---|---|---|")
    for vname, seed, k, rm, lf in rmia_rows:
        print(f"| {vname} | {seed} | {k} | {rm['auc']:.3f} | {lf['auc']:.3f} | {rm['tpr_at_fpr_0.01']:.3f} | "
              f"{lf['tpr_at_fpr_0.01']:.3f} | {rm['tpr_at_fpr_0.001']:.4f} | {lf['tpr_at_fpr_0.001']:.4f} |")


def table() -> None:
    from harness.runner import run_scenario

    print("\n## 3. attack × victim (digits MLP, 500 members / 500 non-members, pool 797)\n")
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
    ap.add_argument("--only", choices=["speed", "anchors", "table"])
    ap.add_argument("--loop", type=int, default=8, help="models trained one by one for the ratio")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = ap.parse_args()
    pin_threads()
    warnings.simplefilter("ignore")
    if args.only in (None, "speed"):
        speed(args.loop)
    if args.only in (None, "anchors"):
        anchors(args.seeds)
    if args.only in (None, "table"):
        table()
