"""DP audits on the digits MLP (docs/membership.md): ε ∈ {1, 2, 4, 8} × audit → the 95% lower
bound (Clopper–Pearson: the one that decides), the optimal-test ceiling (what the best attack on
the accountant's own mechanism shows with those trials), the Gaussian-curve estimate of the same
guesses (`analysis: gdp`, the one-run canaries: Mahloujifar et al.'s f-DP), training runs, wall
time; the three bug recipes (defenses/dp_sgd.py `audit_fault`, test/benchmark only) and the
shuffle bug's analysis (the optimal test on shuffled vs Poisson batches, the max test's ε on one
shuffled epoch); violations on correct recipes over seeds (`--audits` with no names: only
those); and, with `--crosscheck`, the estimators against jax_privacy's auditing functions on the
same counts (`pip install jax_privacy`: a bench extra, never a run-time need).

Victim: digits MLP [64], 500 members / 500 non-members, SGD lr 0.5, 30 epochs, batch 64, DP-SGD
to (ε, 10⁻⁵) with C = 1 (scenarios/dp-audit-digits.yaml's recipe with 64 hidden units).

    python benchmarks/dp_audit.py [--eps 1 2 4 8] [--audits threshold one_run wb1 wb2 bb]
        [--blackbox-runs 256] [--canaries 5000] [--seeds 0 1 2 3 4] [--bugs] [--crosscheck]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VICTIM = {"model": {"arch": "mlp", "hidden": [64]},
          "data": {"dataset": "digits", "n_train": 500, "n_test": 500, "attacker_pool": 797},
          "training": {"optimizer": "sgd", "lr": 0.5, "epochs": 30, "batch_size": 64}}
OFF = {"one_run": False, "whitebox": False, "blackbox_runs": 0}


def audit_params(kind: str, args) -> dict:
    wb = {**OFF, "attacks": ["mia_loss"], "whitebox": True, "gradient_canaries": args.canaries}
    return {"threshold": {**OFF, "attacks": ["mia_lira", "mia_loss"], "shadows": 16},
            "one_run": {**OFF, "attacks": ["mia_loss"], "one_run": True, "canaries": 256},
            "wb1": {**wb, "whitebox_runs": 1},
            "wb2": {**wb, "whitebox_runs": 2},
            "wb2_final": {**wb, "whitebox_runs": 2, "whitebox_view": "final"},
            "bb": {**OFF, "attacks": ["mia_loss"], "blackbox_runs": args.blackbox_runs}}[kind]


def run_one(eps: float, params: dict, seed: int = 0, fault: str | None = None, analysis: str = "gdp"):
    from defenses.dp_sgd import audit_fault
    from harness.run.runner import run_scenario
    from harness.scenario import scenario_from_dict

    s = scenario_from_dict({
        "name": "bench-dp-audit", "seed": seed, "device": "auto", "victim": VICTIM,
        "interface": {"kind": "prediction", "output": "probabilities"},
        "defenses": {"dp_sgd": {"epsilon": eps, "delta": 1e-5, "max_grad_norm": 1.0}},
        "attacks": [{"name": "dp_audit", "params": {**params, "analysis": analysis}}],
        "tracking": {"enabled": False}})
    ctx = audit_fault(fault, factor=0.25) if fault else contextlib.nullcontext()
    t0 = time.perf_counter()
    with ctx, tempfile.TemporaryDirectory() as out:
        rep = run_scenario(s, out=Path(out))
    a = rep["attacks"][0]
    return a, time.perf_counter() - t0


PART = {"threshold": "threshold", "one_run": "one_run", "wb1": "whitebox", "wb2": "whitebox",
        "wb2_final": "whitebox", "bb": "blackbox"}


def row(eps, kind, a, wall) -> str:
    m = a.get("metrics", {})
    part = PART[kind]
    lo = m.get(f"epsilon_lower_{part}", float("nan"))
    est = m.get(f"epsilon_gdp_{part}", float("nan"))
    per = m.get(f"epsilon_perfect_{part}", float("nan"))
    ceil = m.get(f"epsilon_ceiling_{part}", float("nan"))
    acc = m.get("epsilon_accountant", float("nan"))
    verdict = a["risk"] if a["status"] == "ok" else a["status"]
    return (f"| {eps:g} | {kind} | {lo:.2f} | {est:.2f} | {ceil:.2f} | {per:.2f} | {acc:.2f} | "
            f"{int(m.get('runs', 0))} | {wall:.0f} | {verdict} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eps", type=float, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--audits", nargs="*", default=["threshold", "one_run", "wb1", "wb2", "bb"])
    ap.add_argument("--blackbox-runs", type=int, default=256)
    ap.add_argument("--canaries", type=int, default=5000)
    ap.add_argument("--seeds", type=int, nargs="*", default=[])
    ap.add_argument("--bugs", action="store_true")
    ap.add_argument("--crosscheck", action="store_true")
    args = ap.parse_args()
    from harness.core.threads import pin_threads

    pin_threads()
    print("| ε | audit | ε_lower (95%, CP) | GDP/f-DP estimate | optimal-test ceiling | ε_perfect "
          "| accountant ε | runs | wall s | result |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for eps in args.eps:
        for kind in args.audits:
            a, wall = run_one(eps, audit_params(kind, args))
            print(row(eps, kind, a, wall), flush=True)
    if args.bugs:
        print("\n| bug (told ε = 2) | ε_lower white-box (2 runs) | accountant ε | result | reason |")
        print("|---|---|---|---|---|")
        for fault in ("low_noise", "no_clipping", "shuffle"):
            a, _ = run_one(2.0, audit_params("wb2", args), fault=fault)
            m = a["metrics"]
            print(f"| {fault} | {m.get('epsilon_lower_whitebox', float('nan')):.2f} "
                  f"(ceiling {m.get('epsilon_ceiling_whitebox', float('nan')):.2f}) | "
                  f"{m.get('epsilon_accountant', float('nan')):.2f} | {a['risk'] or a['status']} | "
                  f"{a['reason'][:90]} |", flush=True)
        shuffle_analysis(args.canaries)
    if args.seeds:
        bad = total = 0
        for seed in args.seeds:
            for eps in args.eps:
                a, _ = run_one(eps, audit_params("wb2", args), seed=seed)
                total += 1
                bad += a["risk"] == "high"
        print(f"\ncorrect recipes (white-box, 2 runs): {bad} violations in {total} audits "
              f"(seeds {args.seeds}, ε {args.eps})")
    if args.crosscheck:
        crosscheck()


def shuffle_analysis(canaries: int) -> None:
    """Could any attack catch the shuffle bug? The optimal test on the *shuffled* mechanism (the
    likelihood ratio over each epoch's steps) with the white-box audit's trials (2 runs × all
    4810 parameters), against the Poisson accountant's ε; and, per epoch, the max test's exact ε
    (Chua et al. 2024) with the probability of the events that carry it."""
    from defenses.dp_sgd import noise_for_epsilon
    from harness.scoring.audit_ceiling import optimal_test_ceiling, shuffle_max_test_epsilon

    n = min(canaries, 4810)  # = 2 runs' canaries split in/out by fair coins
    print("\n| told ε | σ | k batches × epochs | accountant ε | optimal test, shuffled (2 runs) | "
          "optimal test, Poisson | max test ε, 1 shuffled epoch (FPR) | shuffled ε (MC PLD) |")
    print("|---|---|---|---|---|---|---|---|")
    for eps, k, epochs in ((2.0, 8, 30), (8.0, 8, 30), (8.0, 8, 1), (8.0, 50, 1)):
        sigma = noise_for_epsilon(eps, 1e-5, 1 / k, epochs, "rdp")
        sh = optimal_test_ceiling(n, n, sigma, 1 / k, k * epochs, 1e-5, 0.0125, "shuffle", k)
        po = optimal_test_ceiling(n, n, sigma, 1 / k, k * epochs, 1e-5, 0.0125)
        e1, _, fpr, _ = shuffle_max_test_epsilon(sigma, k, 1e-5)
        print(f"| {eps:g} | {sigma:.3g} | {k} × {epochs} | {eps:g} | {sh:.2f} | {po:.2f} | "
              f"{e1:.2f} ({fpr:.1e}) | {shuffled_pld_epsilon(sigma, k, epochs):.2f} |", flush=True)


def shuffled_pld_epsilon(sigma: float, k: int, epochs: int, n: int = 2_000_000) -> float:
    """ε at δ = 1e-5 of `epochs` shuffled epochs (the canary in one of k steps each): the privacy
    loss of one epoch sampled n times in both directions, rounded up to a 1e-3 grid, composed by
    dp_accounting's PLD (a bench extra; NaN without it). A Monte-Carlo estimate: tails below
    ~1/n per epoch are not seen (fine when many epochs compose, rough for one)."""
    try:
        from dp_accounting.pld import pld_pmf
        from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution
    except ImportError:
        return float("nan")
    import numpy as np

    rng = np.random.default_rng(36)
    pmfs = []
    for add in (True, False):
        y = rng.standard_normal((n, k)) * sigma
        if add:  # drawn with the canary in: loss log(P₁/P₀)
            y[np.arange(n), rng.integers(k, size=n)] += 1
        loss = np.logaddexp.reduce((y - 0.5) / sigma**2, axis=1) - np.log(k)
        idx, counts = np.unique(np.ceil((loss if add else -loss) / 1e-3).astype(np.int64), return_counts=True)
        pmfs.append(pld_pmf.create_pmf(dict(zip(idx.tolist(), (counts / n).tolist(), strict=True)), 1e-3, 0.0,
                                       pessimistic_estimate=True))
    return float(PrivacyLossDistribution(*pmfs).self_compose(epochs).get_epsilon_for_delta(1e-5))


def crosscheck() -> None:
    """leakmeter's estimators against jax_privacy.auditing on the same counts."""
    try:
        from jax_privacy import auditing as jp
    except ImportError:
        print("\ncrosscheck: jax_privacy not installed (pip install jax_privacy)")
        return
    import numpy as np

    from harness.scoring.audit import one_run_epsilon
    from harness.scoring.fdp import one_run_fdp_epsilon

    worst = {"one_run": 0.0, "one_run_fdp": 0.0}
    for m, r, v in [(256, 26, 25), (1000, 100, 95), (2000, 300, 290), (4000, 2000, 1500), (500, 50, 40)]:
        for alpha in (0.05, 0.0125):
            worst["one_run"] = max(worst["one_run"], abs(
                one_run_epsilon(m, r, v, 1e-5, alpha) - jp._epsilon_one_run(0, m, r, v, alpha, 1e-5)))
            worst["one_run_fdp"] = max(worst["one_run_fdp"], abs(
                one_run_fdp_epsilon(m, r, v, 1e-5, alpha) - jp._epsilon_one_run_fdp(0, m, r, v, alpha, 1e-5)))
    from harness.scoring.audit_ceiling import perfect_epsilon

    worst["perfect"] = 0.0  # the zero-error bound from jax_privacy's Clopper–Pearson upper bound
    for n_in, n_out, alpha, g in [(128, 128, 0.025, 64), (140, 116, 0.05, 1), (4810, 4810, 0.0125, 64)]:
        p_in, p_out = (float(jp._clopper_pearson_upper(0, n, alpha / (2 * g))) for n in (n_in, n_out))
        theirs = max(np.log((1 - 1e-5 - p_in) / p_out), np.log((1 - 1e-5 - p_out) / p_in))
        worst["perfect"] = max(worst["perfect"], abs(perfect_epsilon(n_in, n_out, 1e-5, alpha, g) - theirs))
    print(f"\ncrosscheck vs jax_privacy {getattr(jp, '__name__', '')}: largest |Δε| over 10 count sets: "
          f"Steinke one-run {worst['one_run']:.1e}, f-DP one-run {worst['one_run_fdp']:.1e}; "
          f"ε_perfect over 3 count sets {worst['perfect']:.1e}")


if __name__ == "__main__":
    main()
