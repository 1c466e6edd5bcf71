"""Span recovery benchmark (paper 003): prints four tables.

1. Recovered rank vs gradient samples (span_nonadaptive, gradient API) for the paper's Fig. 2
   architectures 784→80→[40,30,20,10] and Fig. 1 thin ones (784→80→6→3 …), random (Gaussian
   inputs, several seeds) and trained on Fashion-MNIST.
2. span_threshold on random thresholded tanh nets: vectors found, min energy in span(A), queries,
   and the ratio to span_nonadaptive through finite differences on probabilities (same net).
3. The cost of output defenses (noise, rounding, label-only) on span recovery of one net.
4. Obfuscation on trained digits / Fashion-MNIST nets: predictions kept vs noise-to-signal, with
   the unprojected-noise baseline.

    python benchmarks/span.py            # everything (a few minutes on 2 cores)
    python benchmarks/span.py --quick    # fewer seeds, no Fashion-MNIST training
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LEAKMETER_THREADS", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import harness  # noqa: E402,F401
from harness.run.runner import run_scenario  # noqa: E402
from harness.scenario import Scenario  # noqa: E402
from victims.data.datasets import fashion_mnist_dir  # noqa: E402

OUT = Path(tempfile.mkdtemp(prefix="leakmeter-bench-span-"))
STEPS = (25, 50, 100, 200, 400)


def run(victim, attacks, interface, defenses=None, seed=0):
    """The attack entries of one scenario run (no tracking)."""
    s = Scenario.model_validate({
        "name": "bench-span", "seed": seed, "device": "auto", "victim": victim,
        "interface": interface, "defenses": defenses or {}, "attacks": attacks,
        "tracking": {"enabled": False}})
    rep = run_scenario(s, out=OUT / f"r{time.perf_counter_ns()}")
    return rep, {a["name"]: a for a in rep["attacks"]}


def gaussian(hidden, dim=784, task="regression", bias=True, init_std=None, act="relu"):
    model = {"arch": "mlp", "hidden": hidden, "bias": bias, "activation": act}
    if init_std is not None:
        model["init_std"] = init_std
    return {"model": model, "training": {"dtype": "float64"},
            "data": {"dataset": "gaussian", "dim": dim, "labels": "victim", "task": task,
                     "n_train": 50, "n_test": 200, "attacker_pool": 64}}


def fashion(hidden, epochs=5):
    return {"model": {"arch": "mlp", "hidden": hidden},
            "data": {"dataset": "fashion_mnist", "n_train": 5000, "n_test": 1000,
                     "attacker_pool": 200},
            "training": {"epochs": epochs, "lr": 0.05, "momentum": 0.9, "dtype": "float64"}}


def table_ranks(quick: bool) -> None:
    print("\n## 1. Recovered rank vs gradient samples (span_nonadaptive; paper Fig. 1-2)")
    print(f"{'architecture':<34}{'weights':<24}" + "".join(f"{n:>6}" for n in STEPS) + "  true")
    seeds = (0,) if quick else (0, 1, 2)
    archs = [([80, 40], {}), ([80, 40, 30], {}), ([80, 40, 30, 20], {}),
             ([80, 40, 30, 20, 10], {}), ([80, 6], {}), ([80, 6, 3], {}),
             ([80, 3, 3, 3], {"bias": False, "init_std": 1.0}),
             ([80, 4, 4, 4, 4, 4], {"bias": False, "init_std": 1.0})]
    for hidden, kw in archs:
        rows = []
        for seed in seeds:
            curve, _, true = curve_via_metrics(gaussian(hidden, **kw), seed)
            rows.append(curve)
        mean = [sum(c[i] for c in rows) / len(rows) for i in range(len(STEPS))]
        label = "random" + (" (Gauss, no bias)" if kw else " (default init)")
        print(f"{'784→' + '→'.join(map(str, hidden)) + '→1':<34}{label:<24}"
              + "".join(f"{v:>6.1f}" for v in mean) + f"{true:>6.0f}")
    if quick or fashion_mnist_dir() is None:
        print("(trained Fashion-MNIST rows skipped" + (": --quick)" if quick else ": not installed)"))
        return
    for hidden in ([80, 40, 30, 20, 10], [80, 6, 3]):
        curve, acc, true = curve_via_metrics(fashion(hidden), 0,
                                             {"kind": "gradient", "output": "logits",
                                              "gradient_of": "class"})
        print(f"{'784→' + '→'.join(map(str, hidden)) + '→10':<34}{f'Fashion (acc {acc:.2f})':<24}"
              + "".join(f"{v:>6.0f}" for v in curve) + f"{true:>6.0f}")


def curve_via_metrics(victim, seed, interface=None):
    """Rank at each of STEPS: one run per sample count (the attack's own stop rule disabled)."""
    out, acc, true = [], None, None
    for n in STEPS:
        params = {"max_samples": n, "batch": 25, "patience": 10**6}
        rep, a = run(victim, [{"name": "span_nonadaptive", "params": params}],
                     interface or {"kind": "gradient", "output": "logits"}, seed=seed)
        m = a["span_nonadaptive"]["metrics"]
        out.append(m.get("recovered_rank", 0.0) or m.get("numerical_rank", 0.0))
        acc, true = rep["victim"].get("test_accuracy"), m.get("true_rank")
        if out[-1] >= (true or 1e9):
            out += [out[-1]] * (len(STEPS) - len(out))
            break
    return out, acc, true


def table_threshold(quick: bool) -> None:
    print("\n## 2. span_threshold on random thresholded tanh nets (label = 1[f(x) > 0])")
    print(f"{'n':>4}{'k':>4}{'seed':>6}{'found':>7}{'min energy':>13}{'max angle°':>12}"
          f"{'0/1 queries':>13}{'per vector':>12}{'FD queries':>12}{'ratio':>8}")
    cases = [(32, 4), (48, 6), (64, 8)] if quick else [(32, 4), (40, 6), (48, 6), (64, 4), (64, 8)]
    for n, k in cases:
        for seed in ((0,) if quick else (0, 1)):
            v = gaussian([k], dim=n, task="binary", act="tanh")
            _, a = run(v, [{"name": "span_threshold"}], {"kind": "prediction", "output": "label"},
                       seed=seed)
            _, b = run(v, [{"name": "span_nonadaptive"}],
                       {"kind": "prediction", "output": "probabilities"}, seed=seed)
            m, mb = a["span_threshold"]["metrics"], b["span_nonadaptive"]["metrics"]
            print(f"{n:>4}{k:>4}{seed:>6}{m['recovered_rank']:>5.0f}/{k:<1}"
                  f"{m.get('min_energy_in_span', 0):>13.7f}{m.get('max_principal_angle_deg', 90):>12.4f}"
                  f"{m['queries']:>13.0f}{m['queries_per_vector']:>12.0f}{mb['queries']:>12.0f}"
                  f"{m['queries'] / max(mb['queries'], 1):>8.1f}")


def table_defenses() -> None:
    print("\n## 3. Output defenses vs span recovery (gaussian 48→16→10 net, true rank 16)")
    print(f"{'interface / defense':<50}{'attack':<18}{'status':<11}{'rank':>6}{'angle°':>9}"
          f"{'queries':>9}  reason")
    v = gaussian([16], dim=48, task="multiclass")
    grad = {"kind": "gradient", "output": "probabilities"}
    prob = {"kind": "prediction", "output": "probabilities"}
    cases = [("gradient, none", grad, {}),
             ("gradient, explanation_noise 1e-6", grad, {"explanation_noise": {"sigma": 1e-6}}),
             ("gradient, explanation_noise 1e-4", grad, {"explanation_noise": {"sigma": 1e-4}}),
             ("gradient, explanation_noise 1e-2", grad, {"explanation_noise": {"sigma": 1e-2}}),
             ("probabilities, none", prob, {}),
             ("probabilities, output_noise 1e-6", prob, {"output_noise": {"sigma": 1e-6}}),
             ("probabilities, output_noise 1e-4", prob, {"output_noise": {"sigma": 1e-4}}),
             ("probabilities, output_noise 1e-2", prob, {"output_noise": {"sigma": 1e-2}}),
             ("probabilities, rounding 6 decimals", prob, {"rounding": {"decimals": 6}}),
             ("probabilities, rounding 3 decimals", prob, {"rounding": {"decimals": 3}}),
             ("probabilities, rounding 2 decimals", prob, {"rounding": {"decimals": 2}}),
             ("label only", {"kind": "prediction", "output": "label"}, {}),
             ("probabilities, rounding 2 decimals (0/1 attack)", prob, {"rounding": {"decimals": 2}}),
             ("probabilities, output_noise 1e-2 (0/1 attack)", prob, {"output_noise": {"sigma": 1e-2}})]
    for label, iface, dfn in cases:
        name = "span_threshold" if iface["output"] == "label" or "0/1" in label else "span_nonadaptive"
        _, a = run(v, [{"name": name}], iface, dfn)
        e = a[name]
        m = e["metrics"]
        why = (e.get("stop_reason") or "")[:60]
        status = e["status"] + (f"/{e['stopped_by']}" if e.get("stopped_by") else "")
        print(f"{label:<50}{name:<18}{status:<11}{m.get('recovered_rank', 0):>6.0f}"
              f"{m.get('max_principal_angle_deg', 90):>9.3f}{e['queries']:>9}  {why}")


def table_obfuscation(quick: bool) -> None:
    print("\n## 4. Obfuscation: predictions kept vs noise-to-signal (noise ⊥ recovered span)")
    digits = {"model": {"arch": "mlp", "hidden": [32]},
              "data": {"dataset": "digits", "n_train": 1000, "attacker_pool": 200},
              "training": {"epochs": 30, "lr": 0.1, "momentum": 0.9, "dtype": "float64"}}
    victims = [("digits 64→32→10", digits)]
    if not quick and fashion_mnist_dir() is not None:
        victims.append(("Fashion 784→80→40→10", fashion([80, 40], epochs=8)))
    ratios = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]
    print(f"{'victim':<26}{'acc':>6}{'rank':>6}" + "".join(f"{'×' + format(r, 'g'):>8}" for r in ratios)
          + f"{'random@max':>12}{'truth kept':>12}")
    for label, v in victims:
        rep, a = run(v, [{"name": "obfuscation", "params": {"images": 100, "ratios": ratios}}],
                     {"kind": "gradient", "output": "probabilities"})
        m = a["obfuscation"]["metrics"]
        kept = [m[f"kept_at_{r:g}".replace(".", "_")] for r in ratios]
        print(f"{label:<26}{rep['victim']['test_accuracy']:>6.3f}{m['recovered_rank']:>6.0f}"
              + "".join(f"{k:>8.2f}" for k in kept)
              + f"{m['random_noise_kept']:>12.2f}{m.get('truth_prediction_kept', float('nan')):>12.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", choices=["ranks", "threshold", "defenses", "obfuscation"])
    args = ap.parse_args()
    t0 = time.perf_counter()
    tables = {"ranks": lambda: table_ranks(args.quick),
              "threshold": lambda: table_threshold(args.quick),
              "defenses": table_defenses,
              "obfuscation": lambda: table_obfuscation(args.quick)}
    for name, fn in tables.items():
        if args.only in (None, name):
            fn()
    print(f"\n(total {time.perf_counter() - t0:.0f} s; scratch output in {OUT})")


if __name__ == "__main__":
    main()
