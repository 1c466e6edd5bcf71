"""Deep cryptanalytic extraction benchmark (issue 27), measured in one run and printed as tables.

Per network of Carlini, Jagielski & Mironov (CRYPTO 2020) Table 1 (random float64 nets, several
seeds each, as Foerster et al. (NeurIPS 2024) advise) and per interface (values only: finite
differences; gradients: `explain`):
- success: seeds whose extracted network reaches max relative error ≤ 1e-6 on the scorer's held-out
  and Gaussian inputs; `ε ≤ 1e-6`: those that also stay within 1e-6 on the large Gaussian sample
  (a neuron active on a few inputs in 10⁴, never met by the scorer's, shows only there);
- log2(queries): mean and range over seeds, beside the paper's published count;
- wall time (s) and the cores used (torch threads / machine cores), and per-layer queries;
- (ε, δ) sampled functional equivalence: ε = the largest |f̂ − f| / RMS(f) over N Gaussian inputs
  (δ is certified only to ~3/N by that sample, the rule of three — the paper's 10⁻⁹ would need
  ~3·10⁹ inputs), and the worst case found by a local search from the worst samples;
- output bits needed: the significant bits of the answers the attack reports it needs (replayed
  on its own copy behind an API rounding to b bits) and, for one seed, the bits at which it stops
  on the real victim (its answers rounded the same way: the measurement on the real API).
A 64-32-16-10 MLP trained on digits behind the gradient API is extracted last.

    python benchmarks/deep_extraction.py [--seeds 5] [--samples 1048576] [--nets 10-20-20-1,...]
                                         [--no-real-bits] [--quick]

--quick runs 10-10-10-1 and 10-20-20-1 on two seeds, with 2^16 samples.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LEAKMETER_THREADS", "1")
os.environ.setdefault("LEAKMETER_PROGRESS", "0")
ROOT = Path(__file__).resolve().parents[1]
# the checkout first: tests/victims/ (no __init__) must not shadow the victims package
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import torch  # noqa: E402
from attack_direct import rounded_victim, run_direct  # noqa: E402

from harness.core.threads import pin_threads  # noqa: E402
from harness.scenario import scenario_from_dict  # noqa: E402

pin_threads()  # one torch thread (LEAKMETER_THREADS): two cost ~7× one on these tiny matmuls here

OUT = Path(tempfile.mkdtemp(prefix="leakmeter-deep-"))
PAPER = {"10-10-10-1": 16.0, "10-20-20-1": 17.1, "40-20-10-10-1": 17.8, "80-40-20-1": 18.5}


def net(sizes: str, seed: int, interface: str, measure_bits: bool, defenses=None, seconds=600.0):
    dims = [int(v) for v in sizes.split("-")]
    return scenario_from_dict({
        "name": "deep-bench", "seed": seed, "device": "cpu",
        "victim": {"model": {"arch": "mlp", "hidden": dims[1:-1], "bias": True},
                   "data": {"dataset": "gaussian", "dim": dims[0], "labels": "victim",
                            "task": "regression", "n_train": 50, "n_test": 1000, "attacker_pool": 20},
                   "training": {"dtype": "float64"}},
        "interface": {"kind": interface, "output": "logits"}, "defenses": defenses or {},
        "attacks": [{"name": "cryptanalytic", "params": {"measure_bits": measure_bits,
                                                         "max_seconds": seconds}}],
        "tracking": {"enabled": False}})


def functional_equivalence(victim, model, samples: int, seed: int) -> tuple[float, float]:
    """(ε over `samples` Gaussian inputs, worst relative error found by a local search)."""
    gen = torch.Generator().manual_seed(seed)
    truth = victim.truth.model
    worst, worst_x, rms_acc, n_acc = 0.0, None, 0.0, 0
    with torch.no_grad():
        for i in range(0, samples, 65536):
            x = torch.randn(min(65536, samples - i), victim.info.dim, generator=gen, dtype=torch.float64)
            f, g = truth(x).double(), model(x)
            rms_acc, n_acc = rms_acc + float(f.pow(2).sum()), n_acc + f.numel()
            err = (f - g).abs().amax(1)
            j = int(err.argmax())
            if float(err[j]) > worst:
                worst, worst_x = float(err[j]), x[j].clone()
    rms = math.sqrt(rms_acc / max(n_acc, 1)) or 1.0
    found = worst
    if worst_x is not None:  # random local search around the worst sample
        for scale in (1e-1, 1e-2, 1e-3):
            for _ in range(20):
                y = worst_x + scale * torch.randn(64, victim.info.dim, generator=gen, dtype=torch.float64)
                with torch.no_grad():
                    err = (truth(y).double() - model(y)).abs().amax(1)
                j = int(err.argmax())
                if float(err[j]) > found:
                    found, worst_x = float(err[j]), y[j].clone()
    return worst / rms, found / rms


def stop_bits(sizes: str, seed: int, interface: str) -> float | None:
    """The fewest significant bits of the answers (12..53) at which the attack still extracts the
    real victim exactly."""
    from victims.build import build_victim

    s = net(sizes, seed, interface, False, seconds=30.0)  # as the attack's own replay: 30 s a try
    base = build_victim(s)

    def ok(bits: int) -> bool:
        r = run_direct(s, OUT / f"bits-{time.time_ns()}", victim=rounded_victim(base, bits))
        return r.status == "ok" and r.stopped_by is None and r.metrics.get("max_rel_error", 1) <= 1e-6

    lo, hi = 12, 53
    if not ok(hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return float(hi)


def table(sizes_list, seeds: int, samples: int, real_bits: bool) -> None:
    cores = f"{torch.get_num_threads()}/{os.cpu_count()}"
    print("\n## Deep extraction (random float64 nets; success = max_rel_error ≤ 1e-6 on the scorer's "
          f"held-out and Gaussian inputs; ε over {samples} Gaussian inputs, relative to RMS(f); "
          "wall and CPU s of one attack, bits measured apart)")
    print(f"{'net':16s} {'iface':10s} {'success':>8s} {'ε ≤ 1e-6':>8s} {'log2 q':>14s} {'paper':>6s} "
          f"{'wall s':>7s} "
          f"{'cpu s':>6s} {'cores':>6s} {'ε (median)':>11s} {'worst found':>11s} {'bits (att.)':>11s} "
          f"{'bits (real)':>11s}  per-layer log2 q (seed 0)")
    for sizes in sizes_list:
        for iface in ("prediction", "gradient"):
            ok, ok_eps, qs, ws, cs, eps, worst, layers = 0, 0, [], [], [], [], [], []
            for seed in range(seeds):
                s = net(sizes, seed, iface, False)
                t0, c0 = time.perf_counter(), time.process_time()
                r = run_direct(s, OUT / f"{sizes}-{iface}-{seed}")
                ws.append(time.perf_counter() - t0)
                cs.append(time.process_time() - c0)
                m = r.metrics
                good = r.status == "ok" and r.stopped_by is None and m.get("max_rel_error", 1) <= 1e-6
                ok += good
                qs.append(math.log2(max(r.queries, 1)))
                layers.append([math.log2(max(m[k], 1)) for k in sorted(m) if k.endswith("_queries")
                               and k.startswith("layer")])
                e = w = float("nan")
                if r.artifact is not None and r.artifact.data.get("model") is not None:
                    e, w = functional_equivalence(r.victim, r.artifact.data["model"], samples, seed)
                    eps.append(e)
                    worst.append(w)
                ok_eps += good and e <= 1e-6  # exact on the large sample too (a rare neuron shows there)
                print(f"  {sizes} {iface} seed {seed}: {r.status}"
                      f"{'' if r.stopped_by is None else ' (' + r.stopped_by + ')'}, log2 q "
                      f"{qs[-1]:.2f}, max_rel_error {m.get('max_rel_error', float('nan')):.1e}, units "
                      f"{int(m.get('units_matched', 0))}/{int(m.get('units_true', 0))} (found "
                      f"{int(m.get('units_found', 0))}), ε {e:.1e}, worst found {w:.1e}, "
                      f"{ws[-1]:.1f} s wall, {cs[-1]:.1f} s CPU", flush=True)
            r0 = run_direct(net(sizes, 0, iface, True), OUT / f"{sizes}-{iface}-bits")
            bits = r0.metrics.get("output_bits_needed")
            real = stop_bits(sizes, 0, iface) if real_bits else None
            per_layer = " ".join(f"{v:.1f}" for v in layers[0]) if layers and layers[0] else "-"
            print(f"{sizes:16s} {iface:10s} {ok:>4d}/{seeds:<3d} {ok_eps:>4d}/{seeds:<3d} "
                  f"{statistics.mean(qs):5.1f} "
                  f"[{min(qs):.1f}-{max(qs):.1f}] {PAPER.get(sizes, float('nan')):6.1f} "
                  f"{statistics.mean(ws):7.1f} {statistics.mean(cs):6.1f} {cores:>6s} "
                  f"{statistics.median(eps) if eps else float('nan'):11.1e} "
                  f"{max(worst) if worst else float('nan'):11.1e} "
                  f"{bits if bits else float('nan'):11.0f} {real if real else float('nan'):11.0f}"
                  f"  {per_layer}", flush=True)


def digits_row() -> None:
    s = scenario_from_dict({
        "name": "deep-digits", "seed": 0, "device": "cpu",
        "victim": {"model": {"arch": "mlp", "hidden": [32, 16]},
                   "data": {"dataset": "digits", "n_train": 1000, "attacker_pool": 200},
                   "training": {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "epochs": 30,
                                "batch_size": 64, "dtype": "float64"}},
        "interface": {"kind": "gradient", "output": "logits"},
        "attacks": [{"name": "cryptanalytic"}], "tracking": {"enabled": False}})
    t0 = time.perf_counter()
    r = run_direct(s, OUT / "digits")
    m = r.metrics
    print("\n## 64-32-16-10 MLP trained on digits, gradient API (logits)")
    print(f"status {r.status}, max_rel_error {m.get('max_rel_error', float('nan')):.1e}, units "
          f"{int(m.get('units_matched', 0))}/{int(m.get('units_true', 0))}, queries 2^"
          f"{math.log2(max(r.queries, 1)):.1f}, {time.perf_counter() - t0:.1f} s (output bits measured too), "
          f"output bits needed "
          f"{m.get('output_bits_needed', float('nan')):g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--samples", type=int, default=2**20)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nets", default=",".join(PAPER), help="comma-separated sizes (d-h1-...-1)")
    ap.add_argument("--no-real-bits", action="store_true",
                    help="skip the bisection of the output bits on the real victim (6 extractions)")
    a = ap.parse_args()
    sizes = a.nets.split(",")
    if a.quick:
        sizes, a.seeds, a.samples = sizes[:2], min(a.seeds, 2), 2**16
    table(sizes, a.seeds, a.samples, not a.no_real_bits)
    digits_row()


if __name__ == "__main__":
    main()
