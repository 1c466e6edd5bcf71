"""CPU vs CUDA per attack: wall time and the scored figure on both devices, measured in one run.

    python benchmarks/gpu.py [--dim 128] [--hidden 32]

Each attack runs against the same random float64 d → h → 1 ReLU network (span attacks: a
binary tanh net for span_threshold) on the CPU and, when a CUDA device is present, on it; the
table shows wall seconds, the speed-up and the scored figure on each device (they must agree:
every solver takes the same float64 path on both). Without a GPU the CPU half is printed and
the table says so.
"""

from __future__ import annotations

import argparse
import os
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
from attack_direct import run_direct  # noqa: E402

from harness.scenario import scenario_from_dict  # noqa: E402

OUT = Path(tempfile.mkdtemp(prefix="leakmeter-gpu-"))
ATTACKS = [("gradient_exact", "gradient", "logits", "regression", "output_error"),
           ("finite_difference_exact", "prediction", "logits", "regression", "output_error"),
           ("query_learning", "prediction", "logits", "regression", "output_error"),
           ("span_nonadaptive", "prediction", "logits", "regression", "max_principal_angle_deg"),
           ("span_threshold", "prediction", "label", "binary", "min_energy_in_span"),
           ("surrogate", "gradient", "logits", "multiclass", "fidelity")]


def scenario(attack, interface, output, task, d, h, device):
    act = "tanh" if attack == "span_threshold" else "relu"
    return scenario_from_dict({
        "name": "gpu", "seed": 0, "device": device,
        "victim": {"model": {"arch": "mlp", "hidden": [h], "activation": act, "bias": True},
                   "data": {"dataset": "gaussian", "dim": d, "labels": "victim", "task": task,
                            "n_train": 200, "n_test": 500, "attacker_pool": 100},
                   "training": {"dtype": "float64"}},
        "interface": {"kind": interface, "output": output},
        "attacks": [{"name": attack}], "tracking": {"enabled": False}})


def measure(attack, interface, output, task, key, d, h, device):
    s = scenario(attack, interface, output, task, d, h, device)
    t0 = time.perf_counter()
    r = run_direct(s, OUT / f"{attack}-{device}")
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, r.metrics.get(key, float("nan")), r.queries


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=32)
    args = ap.parse_args()
    gpu = torch.cuda.is_available()
    print(f"# CPU vs CUDA, d = {args.dim}, h = {args.hidden} "
          f"({torch.cuda.get_device_name(0) if gpu else 'no GPU at hand: CPU half only'})")
    print(f"{'attack':26s} {'queries':>9s} {'cpu_s':>8s} {'cuda_s':>8s} {'speed-up':>9s} "
          f"{'figure':>24s} {'cpu':>10s} {'cuda':>10s}")
    for attack, iface, out, task, key in ATTACKS:
        cpu_s, cpu_v, q = measure(attack, iface, out, task, key, args.dim, args.hidden, "cpu")
        if gpu:
            cuda_s, cuda_v, _ = measure(attack, iface, out, task, key, args.dim, args.hidden, "cuda")
            extra = f"{cuda_s:8.2f} {cpu_s / cuda_s:9.2f} {key:>24s} {cpu_v:10.3g} {cuda_v:10.3g}"
        else:
            extra = f"{'-':>8s} {'-':>9s} {key:>24s} {cpu_v:10.3g} {'-':>10s}"
        print(f"{attack:26s} {q:9d} {cpu_s:8.2f} {extra}", flush=True)


if __name__ == "__main__":
    main()
