"""leakmeter's surrogate beside a plain scikit-learn thief on the same queries (issue 30), one run:

1. raw tabular inputs: breast_cancer's 30 raw features, victims trained outside leakmeter the way
   teams train them (StandardScaler + MLPClassifier(16), StandardScaler + LogisticRegression; the
   scaler folded into a torch state_dict so the model file takes raw rows), answered as
   probabilities; 85 queries (the attacker's pool) and 2000 (pool + jitter). The thief:
   StandardScaler + MLPClassifier / LogisticRegression on the same queries and the answers' labels
   (it standardises with its pool's statistics).
2. noisy probabilities: digits [32] MLP, output noise σ 0.15 / 0.2 / 0.3, query budget 1500; the
   thief: MLPClassifier on the same queries and the top class of each noisy answer.

Agreement with the victim on its test split, mean ± sd over seeds.

    python benchmarks/raw_thief.py [--seeds 3] [--only raw|noisy] [--sigmas 0.15 0.2 0.3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LEAKMETER_THREADS", "1")
os.environ.setdefault("LEAKMETER_PROGRESS", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from extraction import Recorder  # noqa: E402  (the same query recorder as the extraction benchmark)

from harness.run.runner import run_scenario  # noqa: E402
from harness.scenario import scenario_from_dict  # noqa: E402

OUT = Path(tempfile.mkdtemp(prefix="leakmeter-raw-thief-"))
DATA = {"dataset": "breast_cancer", "standardize": "none", "task": "binary", "n_train": 398}



def team_model(kind: str, seed: int) -> tuple[Path, list[int]]:
    """A scikit-learn pipeline fitted on the victim's raw training split, saved as a state_dict
    (one logit) that takes raw rows; returns (path, hidden widths)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    from harness.scenario.schema import DataSpec
    from victims.data.datasets import load_dataset

    d = load_dataset(DataSpec(**DATA), seed)
    sc = StandardScaler().fit(d.x_train)
    z = sc.transform(d.x_train)
    if kind == "mlp":
        m = MLPClassifier((16,), max_iter=2000, random_state=seed).fit(z, d.y_train)
        ws, bs = [w.T for w in m.coefs_], list(m.intercepts_)
    else:
        m = LogisticRegression(max_iter=2000).fit(z, d.y_train)
        ws, bs = [m.coef_], [m.intercept_]
    w0 = ws[0] / sc.scale_[None, :]  # fold the scaler into the first layer
    b0 = bs[0] - w0 @ sc.mean_
    ws, bs = [w0, *ws[1:]], [b0, *bs[1:]]
    sd = {}
    for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
        sd[f"{2 * i}.weight"] = torch.as_tensor(np.asarray(w), dtype=torch.float64)
        sd[f"{2 * i}.bias"] = torch.as_tensor(np.asarray(b), dtype=torch.float64)
    path = OUT / f"{kind}-{seed}.pt"
    torch.save(sd, path)
    return path, [16] if kind == "mlp" else []


def thieves(x, y, xt, truth, seed) -> dict[str, float]:
    """Plain scikit-learn thieves (scaled with the queries' own statistics) on (x, labels y)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    out = {}
    for name, est in (("mlp", MLPClassifier(max_iter=2000, random_state=seed)),
                      ("logreg", LogisticRegression(max_iter=2000))):
        if len(np.unique(y)) < 2:
            out[name] = float((truth == y[0]).mean())
            continue
        m = make_pipeline(StandardScaler(), est).fit(x, y)
        out[name] = float((m.predict(xt) == truth).mean())
    return out


def surrogate_run(s, seed):
    """(surrogate fidelity, its κ, recorded queries, victim) of one surrogate run."""
    from victims.build import build_victim

    victim = build_victim(s)
    rec = Recorder(victim.backend)
    victim.backend = rec
    e = run_scenario(s, out=OUT / f"run-{time.time_ns()}", victim=victim)["attacks"][0]
    x = torch.cat(rec.asked).numpy() if rec.asked else np.zeros((0, 1))
    return e, x, rec, victim


def raw_table(seeds: int) -> None:
    print("\n## raw tabular inputs: breast_cancer 30 raw features, probabilities API "
          "(agreement with the victim on its test split; mean ± sd over seeds)")
    print(f"{'victim':8s} {'queries':>7s} {'leakmeter':>15s} {'thief MLP':>15s} {'thief logreg':>15s}")
    for kind in ("mlp", "logreg"):
        for queries in (85, 2000):
            ours, t_mlp, t_lr = [], [], []
            for seed in range(seeds):
                path, hidden = team_model(kind, seed)
                s = scenario_from_dict({
                    "name": "bench-raw", "seed": seed, "device": "cpu",
                    "victim": {"model": {"arch": "file", "path": str(path),
                                         "spec": {"arch": "mlp", "hidden": hidden}}, "data": DATA},
                    "attacker": {"pool": 85},  # the 171 held-out rows: 85 for the attacker, 86 to test
                    "interface": {"kind": "prediction", "output": "probabilities"},
                    "attacks": [{"name": "surrogate", "params": {"max_queries": queries}}],
                    "tracking": {"enabled": False}})
                e, x, rec, victim = surrogate_run(s, seed)
                ours.append(e["metrics"]["fidelity"])
                y = rec.backend.predict(torch.as_tensor(x), "label").numpy()
                xt = np.asarray(victim.truth.data.x_test, dtype=np.float64)
                truth = rec.backend.predict(torch.as_tensor(xt), "label").numpy()
                t = thieves(x, y, xt, truth, seed)
                t_mlp.append(t["mlp"])
                t_lr.append(t["logreg"])
                print(f"  seed {seed}: {kind} {queries}: leakmeter {ours[-1]:.4f}, thief MLP {t['mlp']:.4f}, "
                      f"logreg {t['logreg']:.4f}", flush=True)
            print(f"{kind:8s} {queries:7d} {_ms(ours):>15s} {_ms(t_mlp):>15s} {_ms(t_lr):>15s}", flush=True)


def noisy_table(seeds: int, sigmas=(0.15, 0.2, 0.3)) -> None:
    from sklearn.neural_network import MLPClassifier

    print("\n## noisy probabilities: digits [32] MLP, output noise σ, budget 1500 (agreement on the "
          "victim's test split; thief: MLPClassifier on the answers' top class)")
    print(f"{'sigma':>6s} {'leakmeter':>15s} {'risk':>18s} {'thief MLP':>15s}")
    for sigma in sigmas:
        ours, theirs, risks = [], [], []
        for seed in range(seeds):
            s = scenario_from_dict({
                "name": "bench-noisy", "seed": seed, "device": "cpu",
                "victim": {"model": {"arch": "mlp", "hidden": [32]},
                           "data": {"dataset": "digits", "n_train": 1000},
                           "training": {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "epochs": 30,
                                        "batch_size": 64, "dtype": "float64"}},
                "attacker": {"pool": 500},
                "interface": {"kind": "prediction", "output": "probabilities"},
                "defenses": {"output_noise": {"sigma": sigma}, "query_budget": 1500},
                "attacks": [{"name": "surrogate"}], "tracking": {"enabled": False}})
            e, x, rec, victim = surrogate_run(s, seed)
            ours.append(e["metrics"]["fidelity"])
            risks.append(e.get("risk") or "-")
            # the thief sees the same noisy answers: replay them through the oracle's noise
            y_noisy = victim_noisy_labels(victim, x, sigma, seed)
            xt = np.asarray(victim.truth.data.x_test, dtype=np.float64).reshape(-1, x.shape[1])
            truth = rec.backend.predict(torch.as_tensor(xt), "label").numpy()
            m = MLPClassifier(max_iter=500, random_state=seed).fit(x, y_noisy)
            theirs.append(float((m.predict(xt) == truth).mean()))
            print(f"  seed {seed}: σ {sigma}: leakmeter {ours[-1]:.4f} ({risks[-1]}), thief {theirs[-1]:.4f}",
                  flush=True)
        print(f"{sigma:6.2f} {_ms(ours):>15s} {'/'.join(risks):>18s} {_ms(theirs):>15s}", flush=True)


def victim_noisy_labels(victim, x, sigma, seed) -> np.ndarray:
    """The top class of each answer with the API's output noise (σ on each probability), drawn
    afresh: what the thief's own queries would have returned."""
    p = victim.backend.backend.predict(torch.as_tensor(x), "probabilities").numpy()
    rng = np.random.default_rng(seed + 99)
    return (p + sigma * rng.standard_normal(p.shape)).argmax(1)


def _ms(v) -> str:
    return f"{np.mean(v):.4f}±{np.std(v):.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--only", choices=["raw", "noisy"], default=None)
    ap.add_argument("--sigmas", type=float, nargs="+", default=[0.15, 0.2, 0.3])
    a = ap.parse_args()
    t0 = time.time()
    if a.only in (None, "raw"):
        raw_table(a.seeds)
    if a.only in (None, "noisy"):
        noisy_table(a.seeds, a.sigmas)
    print(f"\n(total {time.time() - t0:.0f} s; scratch output in {OUT})")


if __name__ == "__main__":
    main()
