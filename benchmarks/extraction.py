"""Extraction benchmark, measured in one run and printed as tables:

1. gradient_exact and finite_difference_exact vs hidden width h (d = 64) and input dim d
   (h = 16): success rate (max_rel_error ≤ 1e-6), mean queries, mean wall time.
2. IBM ART's FunctionallyEquivalentExtraction (benchmark-only dependency, extra `bench`) on the
   same random d → h → K nets as ours: success rate, fidelity, queries, time. ART runs in a
   subprocess with a timeout (it can loop forever).
3. surrogate on digits (and Fashion-MNIST with --fmnist): queries to 90% / 95% fidelity with
   gradients vs labels only, and the ratio; Gaussian queries: what labels reach at 5,000
   queries and when gradients first match it.
4. the surrogate beside a plain scikit-learn MLPClassifier thief trained on the same queries
   (digits [32] behind probabilities at 300 and 2,000 queries; labels at 500).

    python benchmarks/extraction.py [--seeds 10] [--art-timeout 120] [--fmnist] [--quick] [--only thief]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LEAKMETER_THREADS", "1")
os.environ.setdefault("LEAKMETER_PROGRESS", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from harness.run.runner import run_scenario  # noqa: E402
from harness.scenario import scenario_from_dict  # noqa: E402

OUT = Path(tempfile.mkdtemp(prefix="leakmeter-bench-"))


def net_scenario(d, h, k, seed, attack, interface="gradient", params=None):
    task = "regression" if k == 1 else "multiclass"
    return scenario_from_dict({
        "name": "bench", "seed": seed, "device": "cpu",
        "victim": {"model": {"arch": "mlp", "hidden": [h], "bias": [True, True]},
                   "data": {"dataset": "gaussian", "dim": d, "labels": "victim", "task": task,
                            "n_train": 50, "n_test": 1000, "attacker_pool": 20},
                   "training": {"dtype": "float64"}},
        "interface": {"kind": interface, "output": "logits", "gradient_of": "sum"},
        "attacks": [{"name": attack, "params": params or {}}], "tracking": {"enabled": False}})


def run(s):
    rep = run_scenario(s, out=OUT / f"{time.time_ns()}")
    return rep["attacks"][0]


def exact_table(seeds: int, quick: bool) -> None:
    print("\n## Exact attacks (random d→h→1 nets with biases, float64; success = max_rel_error ≤ 1e-6)")
    print(f"{'attack':26s} {'d':>4s} {'h':>4s} {'success':>9s} {'queries':>9s} {'wall_s':>7s}")
    grid = [(64, 4), (64, 16), (64, 64), (8, 16), (784, 16)]
    if quick:
        grid = [(64, 4), (64, 16)]
    for attack, iface in (("gradient_exact", "gradient"), ("finite_difference_exact", "prediction")):
        for d, h in grid:
            ok, qs, ws = 0, [], []
            for seed in range(seeds):
                e = run(net_scenario(d, h, 1, seed, attack, iface))
                ok += e["status"] == "ok" and e["metrics"].get("max_rel_error", 1) <= 1e-6
                qs.append(e["queries"]), ws.append(e["wall_s"])
            print(f"{attack:26s} {d:4d} {h:4d} {ok:>4d}/{seeds:<4d} {np.mean(qs):9.0f} {np.mean(ws):7.2f}")


ART_SCRIPT = r"""
import json, sys, time, numpy as np
from art.attacks.extraction import FunctionallyEquivalentExtraction
from art.estimators.classification import BlackBoxClassifierNeuralNetwork
w = np.load(sys.argv[1])
a1, b1, a2, b2 = w["a1"], w["b1"], w["a2"], w["b2"]
count = [0]
def f(x):
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    count[0] += len(x)
    return np.maximum(x @ a1.T + b1, 0) @ a2.T + b2
d, h, k = a1.shape[1], a1.shape[0], a2.shape[0]
clf = BlackBoxClassifierNeuralNetwork(f, input_shape=(d,), nb_classes=k)
rng = np.random.default_rng(0)
t = time.time()
fee = FunctionallyEquivalentExtraction(classifier=clf, num_neurons=h)
ext = fee.extract(rng.standard_normal((100, d)), delta_0=0.05, fraction_true=0.3)
q = count[0]
xt = rng.standard_normal((1000, d))
ft, fe = f(xt), ext.predict(xt)
err = float(np.abs(ft - fe).max() / np.sqrt((ft ** 2).mean()))
fid = float((ft.argmax(1) == fe.argmax(1)).mean())
print(json.dumps({"queries": q, "wall_s": time.time() - t, "fidelity": fid, "max_rel_error": err}))
"""


def art_row(d, h, k, seed, timeout):
    """ART on the victim of one seed (subprocess); None when ART is missing."""
    from victims.build import build_victim

    v = build_victim(net_scenario(d, h, k, seed, "gradient_exact"))
    lins = [m for m in v.truth.model.modules() if isinstance(m, torch.nn.Linear)]
    path = OUT / f"w{d}_{h}_{seed}.npz"
    np.savez(path, a1=lins[0].weight.numpy(), b1=lins[0].bias.numpy(),
             a2=lins[1].weight.numpy(), b2=lins[1].bias.numpy())
    try:
        r = subprocess.run([sys.executable, "-c", ART_SCRIPT, str(path)], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "wall_s": timeout}
    if r.returncode != 0:
        if "No module named 'art'" in r.stderr:
            return None
        why = r.stderr.strip().splitlines()[-1][:80] if r.stderr else ""
        return {"status": "error", "why": why, "wall_s": float("nan")}
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["status"] = "ok" if out["max_rel_error"] <= 1e-6 else "wrong"
    return out


def art_table(seeds: int, timeout: float, quick: bool) -> None:
    print("\n## ART FunctionallyEquivalentExtraction vs gradient_exact / finite_difference_exact "
          "(random d→h→10 nets, logits; success = max_rel_error ≤ 1e-6)")
    print(f"{'method':26s} {'d':>4s} {'h':>3s} {'success':>8s} {'fidelity':>8s} {'queries':>9s} "
          f"{'wall_s':>7s}  notes")
    for d, h in ([(50, 4)] if quick else [(50, 4), (784, 4)]):
        rows = [art_row(d, h, 10, s, timeout) for s in range(seeds)]
        if rows[0] is None:
            print("ART is not installed: pip install 'adversarial-robustness-toolbox==1.20.1' packaging")
            return
        ok = [r for r in rows if r["status"] == "ok"]
        fid = np.mean([r["fidelity"] for r in rows if "fidelity" in r] or [np.nan])
        q = np.mean([r["queries"] for r in rows if "queries" in r] or [np.nan])
        w = np.nanmean([r.get("wall_s", np.nan) for r in rows])
        stat = {s: sum(r["status"] == s for r in rows) for s in ("wrong", "timeout", "error")}
        why = next((r["why"] for r in rows if r["status"] == "error"), "")
        print(f"{'ART FEE':26s} {d:4d} {h:3d} {len(ok):>3d}/{seeds:<4d} {fid:8.3f} {q:9.0f} {w:7.1f}  "
              f"{stat} {why}")
        for attack, iface in (("gradient_exact", "gradient"), ("finite_difference_exact", "prediction")):
            es = [run(net_scenario(d, h, 10, s, attack, iface)) for s in range(seeds)]
            ok = sum(e["status"] == "ok" and e["metrics"].get("max_rel_error", 1) <= 1e-6 for e in es)
            fid = np.mean([e["metrics"].get("agreement", np.nan) for e in es])
            print(f"{attack:26s} {d:4d} {h:3d} {ok:>3d}/{seeds:<4d} {fid:8.3f} "
                  f"{np.mean([e['queries'] for e in es]):9.0f} {np.mean([e['wall_s'] for e in es]):7.2f}")


def surrogate_scenario(dataset, loss, output, interface, pool, max_queries, seed=0, steps=150):
    data = ({"dataset": "digits", "n_train": 1000, "attacker_pool": 500} if dataset == "digits" else
            {"dataset": "fashion_mnist", "n_train": 10000, "n_test": 2000, "attacker_pool": 5000})
    model = {"arch": "mlp", "hidden": [32] if dataset == "digits" else [64]}
    training = ({"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "epochs": 30, "batch_size": 64,
                 "dtype": "float64"} if dataset == "digits" else
                {"optimizer": "adam", "lr": 0.001, "epochs": 5, "batch_size": 128})
    return scenario_from_dict({
        "name": "bench-sur", "seed": seed, "device": "cpu",
        "victim": {"model": model, "data": data, "training": training},
        "interface": {"kind": interface, "output": output},
        "attacks": [{"name": "surrogate", "params": {"loss": loss, "pool": pool, "steps": steps,
                                                     "max_queries": max_queries}}],
        "tracking": {"enabled": False}})


def surrogate_table(fmnist: bool, quick: bool) -> None:
    print("\n## surrogate: queries (oracle queries; a gradient point costs 2) to 90% / 95% fidelity")
    print(f"{'dataset':13s} {'pool':8s} {'loss':22s} {'q→90':>6s} {'q→95':>6s} {'final fid':>9s} {'acc':>6s}")
    sets = ["digits"] + (["fashion_mnist"] if fmnist else [])
    for ds in sets:
        for pool in ("data", "gaussian"):
            if quick and pool == "gaussian":
                continue
            lim_l = 500 if pool == "data" and ds == "digits" else 5000
            lim_g = 1000 if pool == "data" else 5000
            rows = {}
            for label, loss, out, iface, lim in (
                    ("gradients+probabilities", "joint", "probabilities", "gradient", lim_g),
                    ("smoothgrad+probabilities", "joint", "probabilities", "smoothgrad", lim_g),
                    ("labels only", "membership", "label", "prediction", lim_l),
                    ("probabilities only", "membership", "probabilities", "prediction", lim_l)):
                if quick and label.startswith("smooth"):
                    continue
                e = run(surrogate_scenario(ds, loss, out, iface, pool, lim))
                m = e["metrics"]
                rows[label] = e
                q90, q95 = m.get("queries_to_90"), m.get("queries_to_95")
                print(f"{ds:13s} {pool:8s} {label:22s} {q90 or float('nan'):6.0f} "
                      f"{q95 or float('nan'):6.0f} {m['fidelity']:9.3f} {m['accuracy']:6.3f}")
            g, lab = rows["gradients+probabilities"]["metrics"], rows["labels only"]["metrics"]
            for lvl in ("90", "95"):
                a, b = g.get(f"queries_to_{lvl}"), lab.get(f"queries_to_{lvl}")
                if a and b:
                    print(f"  ratio labels/gradients to {lvl}%: {b / a:.1f}x ({b:.0f} vs {a:.0f} queries)")
                elif a:
                    print(f"  labels never reached {lvl}% within their budget; gradients took {a:.0f}")
            if pool == "gaussian":
                curve_lab = curves_of(rows["labels only"])
                target = curve_lab[-1][1]
                first = next((q for q, v in curves_of(rows["gradients+probabilities"]) if v >= target), None)
                print(f"  labels reach fidelity {target:.3f} at {curve_lab[-1][0]} queries; gradients "
                      f"match it at {first} queries")


class Recorder:
    """A victim backend that keeps every batch the attacker asked (to hand the same queries to a
    plain thief)."""

    def __init__(self, backend):
        self.backend, self.asked = backend, []

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def predict(self, x, kind):
        self.asked.append(x.detach().cpu().clone())
        return self.backend.predict(x, kind)


def thief_table(seeds: int, quick: bool) -> None:
    """leakmeter's surrogate beside scikit-learn's MLPClassifier trained on the same queries and
    the same answers' labels (issue 22: leakmeter's thief must be at least as strong)."""
    from sklearn.neural_network import MLPClassifier

    from victims.build import build_victim

    print("\n## surrogate vs a plain scikit-learn thief on the same queries (digits [32] ReLU MLP;"
          " agreement with the victim on its test split, mean over victim seeds)")
    print(f"{'API':14s} {'pool':>5s} {'queries':>8s} {'leakmeter':>10s} {'sklearn':>8s} {'seeds':>6s}")
    cases = [("probabilities", 200, 300), ("probabilities", 200, 2000), ("label", 500, 500)]
    for output, pool, queries in cases:
        ours, theirs = [], []
        for seed in range(1 if quick else min(seeds, 3)):
            s = surrogate_scenario("digits", "membership", output, "prediction", "data", queries,
                                   seed=seed, steps=300)
            s.attacks[0].params.pop("steps")
            s.attacker.pool = pool
            victim = build_victim(s)
            rec = Recorder(victim.backend)
            victim.backend = rec
            e = run_scenario(s, out=OUT / f"thief-{time.time_ns()}", victim=victim)["attacks"][0]
            ours.append(e["metrics"]["fidelity"])
            x = torch.cat(rec.asked).numpy()
            y = rec.backend.predict(torch.as_tensor(x), "label").numpy()
            xt = np.asarray(victim.truth.data.x_test, dtype=np.float64)
            xt = xt.reshape(len(xt), -1)
            truth = rec.backend.predict(torch.as_tensor(xt), "label").numpy()
            m = MLPClassifier(max_iter=500, random_state=0).fit(x, y)
            theirs.append(float((m.predict(xt) == truth).mean()))
        print(f"{output:14s} {pool:5d} {queries:8d} {np.mean(ours):10.4f} {np.mean(theirs):8.4f} "
              f"{len(ours):6d}")


def curves_of(entry):
    """The fidelity curve of a surrogate run (re-read from its report)."""
    return json.loads(Path(entry["artifacts"]["surrogate_curve_json"]).read_text())["fidelity"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--art-timeout", type=float, default=120.0)
    ap.add_argument("--fmnist", action="store_true", help="also the Fashion-MNIST surrogate rows")
    ap.add_argument("--quick", action="store_true", help="a small subset (smoke run)")
    ap.add_argument("--only", choices=["exact", "art", "surrogate", "thief"], default=None)
    a = ap.parse_args()
    t0 = time.time()
    if a.only in (None, "exact"):
        exact_table(a.seeds, a.quick)
    if a.only in (None, "art"):
        art_table(a.seeds, a.art_timeout, a.quick)
    if a.only in (None, "surrogate"):
        surrogate_table(a.fmnist, a.quick)
    if a.only in (None, "thief"):
        thief_table(a.seeds, a.quick)
    print(f"\n(total {time.time() - t0:.0f} s; scratch output in {OUT})")


if __name__ == "__main__":
    main()
