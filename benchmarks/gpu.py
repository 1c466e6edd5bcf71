"""CPU vs CUDA per attack and for the work that is big on a GPU: wall time and a figure on both
devices, measured in one run.

    python benchmarks/gpu.py [--dim 128] [--hidden 32] [--only attacks|big|cnn|lm] [--threads 8]
        [--refs 256] [--ref-epochs 10] [--surrogate-queries 20000] [--reconn-epochs 10]
        [--cnn-train 10000] [--cnn-epochs 2] [--cnn-refs 64] [--cnn-queries 5000]
        [--lm-vocab 8192] [--lm-hidden 256] [--lm-layers 6] [--lm-prompts 1024] [--quick]
        [--surrogate-steps N]

`attacks`: each attack runs against the same random float64 d → h → 1 ReLU network (span
attacks: a binary tanh net for span_threshold) on the CPU and, when a CUDA device is present, on
it; the figure is the scored one (they must agree: every solver takes the same float64 path).
`big` (issue 34's targets, ≥ 5× on one H100 against 16 CPU cores):
- reference_models: `--refs` digits MLPs (64 → 128 → 10, scenarios/membership-digits.yaml's
  recipe: minibatch SGD, 500 points each) trained stacked (harness/attacker/stacked_training.py)
  for `--ref-epochs` epochs; figure: the RMS of their parameters (equal on both devices to ~1e-6);
- surrogate: the surrogate attack on a digits MLP victim (hidden 128) at `--surrogate-queries`
  queries (min_queries the same: the whole curve; the attack alone, not the victim's training);
  figure: its scored fidelity;
- reconn_training: reconn's reconstructor (harness/attacks/reconstruction/reconn.py `_fit`) at
  scenarios/reconstruction-reconn-digits.yaml's size (1,500 shadows' 760 weights → 64 pixels,
  hidden 1000, batch 64) for `--reconn-epochs` epochs; figure: its final training loss.
`cnn` (a CNN victim on Fashion-MNIST: channels 16, 32, hidden 128, minibatch SGD):
- cnn_victim: the victim's training (`--cnn-train` images, `--cnn-epochs` epochs, batch 128; its
  train_seconds: loading the dataset not counted); figure: its test accuracy;
- cnn_reference_models: `--cnn-refs` CNNs of its recipe trained stacked on 1,000 images each
  (`--cnn-epochs` epochs); figure: the RMS of their parameters;
- cnn_surrogate: the surrogate attack on the trained CNN at `--cnn-queries` queries (the attack only;
  the victim is the cnn_victim row's); figure: its scored fidelity.
`lm` (the `arch: lm` victim, GPT-2's shape: `--lm-vocab`, `--lm-hidden`, `--lm-layers`, 8 heads,
context 64; victims/models/lm.py):
- lm_forward: next-token logprobs of `--lm-prompts` distinct 64-token prompts (the backend's own
  batches); figure: their mean logprob;
- lm_logit_subspace: logit_subspace through top-20 logprobs + logit_bias (vLLM's defaults: ~V/19
  biased queries per prompt, answered in batches); figure: final_layer_rel_error.
`--surrogate-steps N`: both surrogate rows' Adam steps per snapshot (the attack's default: 300).
`--quick` sizes every row down so the CPU half fits the issue's 2 minutes on 8 threads (QUICK: 64
reference models × 5 epochs, surrogates at 1,000 queries (300 on the CNN) with 50 steps per
snapshot, reconn 2 epochs, a 3,000-image CNN for 1 epoch and 4 reference CNNs, a 2-layer decoder
of vocab 2048 and width 128, attack rows at d = 64, h = 16; an explicit flag wins); the default
sizes are the issue's targets (256 models, a surrogate at 20,000 queries) and take far longer on
a CPU (the surrogate's snapshots dominate: 300 Adam steps at each of ~20 sizes).
Each row runs under `device: cpu` and `device: cuda` (the policy's explicit modes: the row says
what the GPU gives where `auto` would send the work; victims/devices.py). Without a GPU the CPU
half is printed and the table says so.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from functools import partial
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


def scenario(attack, interface, output, task, d, h, device, params=None):
    act = "tanh" if attack == "span_threshold" else "relu"
    return scenario_from_dict({
        "name": "gpu", "seed": 0, "device": device,
        "victim": {"model": {"arch": "mlp", "hidden": [h], "activation": act, "bias": True},
                   "data": {"dataset": "gaussian", "dim": d, "labels": "victim", "task": task,
                            "n_train": 200, "n_test": 500, "attacker_pool": 100},
                   "training": {"dtype": "float64"}},
        "interface": {"kind": interface, "output": output},
        "attacks": [{"name": attack, "params": params or {}}], "tracking": {"enabled": False}})


def measure(attack, interface, output, task, key, d, h, device, params=None):
    s = scenario(attack, interface, output, task, d, h, device, params)
    t0, c0 = time.perf_counter(), time.process_time()
    r = run_direct(s, OUT / f"{attack}-{device}")
    if device == "cuda":
        torch.cuda.synchronize()
    PROC.append(time.process_time() - c0)
    return time.perf_counter() - t0, r.metrics.get(key, float("nan")), r.queries


def timed(fn, device):
    """(seconds, (figure, n)) of fn(device), the GPU synchronised before the clock stops; a row
    that returns a third value times its own part (its set-up not counted)."""
    from victims import devices

    devices.activate(device)
    t0, c0 = time.perf_counter(), time.process_time()
    v = fn(device)
    if device == "cuda":
        torch.cuda.synchronize()
    PROC.append(time.process_time() - c0)  # CPU seconds of all threads (a shared machine's wall lies)
    return (v[2] if len(v) > 2 else time.perf_counter() - t0), v[:2]


def reference_models(args, device):
    from harness.attacker.informed import Recipe
    from harness.attacker.stacked_training import train_stacked
    from victims.data.datasets import load_dataset

    s = scenario_from_dict({
        "name": "refs", "seed": 0, "device": device,
        "victim": {"model": {"arch": "mlp", "hidden": [128], "activation": "relu"},
                   "data": {"dataset": "digits", "n_train": 500, "n_test": 500},
                   "training": {"optimizer": "sgd", "lr": 0.5, "epochs": args.ref_epochs,
                                "batch_size": 64}},
        "interface": {"kind": "prediction", "output": "probabilities"},
        "attacks": [{"name": "mia_loss"}], "tracking": {"enabled": False}})
    d = load_dataset(s.victim.data, 0)
    recipe = Recipe(s, d.task, d.input_shape, d.n_outputs, torch.device(device), torch.float32)
    x, y = torch.as_tensor(d.x_pool, dtype=torch.float32), torch.as_tensor(d.y_pool)
    gen = torch.Generator().manual_seed(0)
    idx = torch.stack([torch.randperm(len(x), generator=gen)[:500] for _ in range(args.refs)])
    flat = train_stacked(recipe, x, y, idx, seed=1)
    return float(flat.double().pow(2).mean().sqrt()), args.refs


def surrogate(args, device):
    s = scenario_from_dict({
        "name": "surrogate", "seed": 0, "device": device,
        "victim": {"model": {"arch": "mlp", "hidden": [128], "activation": "relu"},
                   "data": {"dataset": "digits", "n_train": 1000, "n_test": 797}},
        "attacker": {"pool": 400},
        "interface": {"kind": "prediction", "output": "probabilities"},
        "attacks": [{"name": "surrogate", "params": {"max_queries": args.surrogate_queries,
                                                     "min_queries": args.surrogate_queries,
                                                     **surrogate_steps(args)}}],
        "tracking": {"enabled": False}})
    from victims.build import build_victim

    v = build_victim(s)  # the victim's training is not the row's work
    t0 = time.perf_counter()
    r = run_direct(s, OUT / f"surrogate-{device}", victim=v)
    if device == "cuda":
        torch.cuda.synchronize()
    return r.metrics.get("fidelity", float("nan")), r.queries, time.perf_counter() - t0


def surrogate_steps(args) -> dict:
    """The surrogate's Adam steps per snapshot and after the last (None: the attack's own 300)."""
    return {} if args.surrogate_steps is None else {"steps": args.surrogate_steps,
                                                    "final_steps": args.surrogate_steps}


def reconn_training(args, device):
    from harness.attacks.reconstruction.reconn import Reconn, ReconnParams

    gen = torch.Generator().manual_seed(0)
    f = torch.randn(1500, 760, generator=gen).to(device)
    x = torch.rand(1500, 64, generator=gen).to(device)
    p = ReconnParams(hidden=1000, epochs=args.reconn_epochs, batch=64)
    _, curve = Reconn._fit(f, x, 0.0, 1.0, p, torch.Generator().manual_seed(1))
    return curve[-1][1], 1500


PROC: list[float] = []  # CPU seconds (all threads) of the last timed row half
_CNN: dict[str, object] = {}  # the cnn_victim row's trained victim per device (the other rows reuse it)


def cnn_scenario(args, device, attacks):
    return scenario_from_dict({
        "name": "cnn", "seed": 0, "device": device,
        "victim": {"model": {"arch": "cnn", "channels": [16, 32], "hidden": [128], "activation": "relu"},
                   "data": {"dataset": "fashion_mnist", "n_train": args.cnn_train, "n_test": 2000,
                            "attacker_pool": 1000},
                   "training": {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9,
                                "epochs": args.cnn_epochs, "batch_size": 128}},
        "interface": {"kind": "prediction", "output": "probabilities"},
        "attacks": attacks, "tracking": {"enabled": False}})


def cnn_victim(args, device):
    """(test accuracy, images, seconds of the training alone: not the dataset's loading)."""
    from victims.build import build_victim

    v = build_victim(cnn_scenario(args, device, [{"name": "mia_loss"}]))
    _CNN[device] = v
    return v.utility["test_accuracy"], args.cnn_train, v.record["train_seconds"]


def cnn_reference_models(args, device):
    from harness.attacker.informed import Recipe
    from harness.attacker.stacked_training import train_stacked
    from victims.data.datasets import load_dataset

    s = cnn_scenario(args, device, [{"name": "mia_loss"}])
    d = load_dataset(s.victim.data, 0)
    recipe = Recipe(s, d.task, d.input_shape, d.n_outputs, torch.device(device), torch.float32)
    x, y = torch.as_tensor(d.x_train, dtype=torch.float32), torch.as_tensor(d.y_train)
    gen = torch.Generator().manual_seed(0)
    n = min(1000, len(x))
    idx = torch.stack([torch.randperm(len(x), generator=gen)[:n] for _ in range(args.cnn_refs)])
    flat = train_stacked(recipe, x, y, idx, seed=1)
    return float(flat.double().pow(2).mean().sqrt()), args.cnn_refs


def cnn_surrogate(args, device):
    """(fidelity, queries, seconds of the attack alone): the victim is the cnn_victim row's."""
    v = _CNN.get(device) or (cnn_victim(args, device), _CNN[device])[1]
    s = cnn_scenario(args, device, [{"name": "surrogate", "params": {
        "max_queries": args.cnn_queries, "min_queries": args.cnn_queries, **surrogate_steps(args)}}])
    t0 = time.perf_counter()
    r = run_direct(s, OUT / f"cnn-surrogate-{device}", victim=v)
    if device == "cuda":
        torch.cuda.synchronize()
    return r.metrics.get("fidelity", float("nan")), r.queries, time.perf_counter() - t0


def lm_scenario(args, device, iface, attacks):
    return scenario_from_dict({
        "name": "lm", "seed": 0, "device": device,
        "victim": {"model": {"arch": "lm", "vocab": args.lm_vocab, "hidden": args.lm_hidden,
                             "layers": args.lm_layers, "heads": 8, "context": 64}},
        "interface": {"kind": "prediction", "output": "logprobs", **iface},
        "attacks": attacks, "tracking": {"enabled": False}})


def lm_forward(args, device):
    from victims.build import build_victim

    v = build_victim(lm_scenario(args, device, {}, [{"name": "logit_subspace"}]))
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, args.lm_vocab, (args.lm_prompts, 64), generator=gen)
    lp = v.backend.predict(prompts, "logprobs")
    return float(lp.double().mean()), args.lm_prompts


def lm_logit_subspace(args, device):
    s = lm_scenario(args, device, {"top_logprobs": 20, "logit_bias": True},
                    [{"name": "logit_subspace"}])
    r = run_direct(s, OUT / f"lm-{device}")
    return r.metrics.get("final_layer_rel_error", float("nan")), r.queries


BIG = [("reference_models", reference_models, "param_rms"),
       ("surrogate", surrogate, "fidelity"),
       ("reconn_training", reconn_training, "final_loss")]
CNN = [("cnn_victim", cnn_victim, "test_accuracy"),
       ("cnn_reference_models", cnn_reference_models, "param_rms"),
       ("cnn_surrogate", cnn_surrogate, "fidelity")]
LM = [("lm_forward", lm_forward, "mean_logprob"),
      ("lm_logit_subspace", lm_logit_subspace, "final_layer_rel_error")]
ROWS = {"big": BIG, "cnn": CNN, "lm": LM}
QUICK = {"refs": 64, "ref_epochs": 5, "surrogate_queries": 1000, "surrogate_steps": 50, "reconn_epochs": 2,
         "cnn_train": 3000, "cnn_epochs": 1, "cnn_refs": 4, "cnn_queries": 300, "lm_layers": 2,
         "lm_prompts": 256, "lm_hidden": 128, "lm_vocab": 2048, "dim": 64, "hidden": 16}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--only", choices=["attacks", "big", "cnn", "lm"])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--refs", type=int, default=256)
    ap.add_argument("--ref-epochs", type=int, default=10)
    ap.add_argument("--surrogate-queries", type=int, default=20000)
    ap.add_argument("--reconn-epochs", type=int, default=10)
    ap.add_argument("--surrogate-steps", type=int, default=None)
    ap.add_argument("--cnn-train", type=int, default=10000)
    ap.add_argument("--cnn-epochs", type=int, default=2)
    ap.add_argument("--cnn-refs", type=int, default=64)
    ap.add_argument("--cnn-queries", type=int, default=5000)
    ap.add_argument("--lm-vocab", type=int, default=8192)
    ap.add_argument("--lm-hidden", type=int, default=256)
    ap.add_argument("--lm-layers", type=int, default=6)
    ap.add_argument("--lm-prompts", type=int, default=1024)
    ap.add_argument("--quick", action="store_true", help="every row about a tenth of its default size")
    args = ap.parse_args()
    if args.quick:  # explicit sizes win over --quick's
        given = {a.split("=")[0].lstrip("-").replace("-", "_") for a in sys.argv[1:]}
        for k, v in QUICK.items():
            if k not in given:
                setattr(args, k, v)
    if args.threads:
        from harness.core.threads import pin_threads

        pin_threads(args.threads)
    gpu = torch.cuda.is_available()
    print(f"# CPU ({torch.get_num_threads()} threads) vs CUDA, d = {args.dim}, h = {args.hidden} "
          f"({torch.cuda.get_device_name(0) if gpu else 'no GPU at hand: CPU half only'})")
    print(f"{'attack':26s} {'queries':>9s} {'cpu_s':>8s} {'cuda_s':>8s} {'speed-up':>9s} "
          f"{'figure':>24s} {'cpu':>10s} {'cuda':>10s} {'cpu_proc_s':>10s}")
    t_all, cpu_total = time.perf_counter(), 0.0
    for group, rows in ROWS.items():
        for name, fn, key in rows if args.only in (None, group) else []:
            cpu_s, (cpu_v, n) = timed(partial(fn, args), "cpu")
            cpu_total, proc = cpu_total + cpu_s, PROC[-1]
            if gpu:
                cuda_s, (cuda_v, _) = timed(partial(fn, args), "cuda")
                extra = f"{cuda_s:8.2f} {cpu_s / cuda_s:9.2f} {key:>24s} {cpu_v:10.4g} {cuda_v:10.4g}"
            else:
                extra = f"{'-':>8s} {'-':>9s} {key:>24s} {cpu_v:10.4g} {'-':>10s}"
            print(f"{name:26s} {n:9d} {cpu_s:8.2f} {extra} {proc:10.1f}", flush=True)
    for attack, iface, out, task, key in ATTACKS if args.only in (None, "attacks") else []:
        # --quick: the surrogate row at --surrogate-queries (not until its curve is flat)
        extra_p = {**surrogate_steps(args), "max_queries": args.surrogate_queries} \
            if attack == "surrogate" and args.quick else {}
        cpu_s, cpu_v, q = measure(attack, iface, out, task, key, args.dim, args.hidden, "cpu", extra_p)
        cpu_total, proc = cpu_total + cpu_s, PROC[-1]
        if gpu:
            cuda_s, cuda_v, _ = measure(attack, iface, out, task, key, args.dim, args.hidden, "cuda",
                                        extra_p)
            extra = f"{cuda_s:8.2f} {cpu_s / cuda_s:9.2f} {key:>24s} {cpu_v:10.3g} {cuda_v:10.3g}"
        else:
            extra = f"{'-':>8s} {'-':>9s} {key:>24s} {cpu_v:10.3g} {'-':>10s}"
        print(f"{attack:26s} {q:9d} {cpu_s:8.2f} {extra} {proc:10.1f}", flush=True)
    print(f"# total {time.perf_counter() - t_all:.1f} s (CPU half {cpu_total:.1f} s, "
          f"{sum(PROC[::2] if gpu else PROC):.1f} CPU seconds of its threads)")


if __name__ == "__main__":
    main()
