"""Gradient queries per second through the oracle: one batched call vs a Python loop of
single-query calls (and a torch.func vmap(grad) reference), measured in one run.

    python benchmarks/oracle_throughput.py [--n 4096] [--hidden 64] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096, help="queries in the batched call")
    ap.add_argument("--loop", type=int, default=400, help="queries in the per-query loop")
    ap.add_argument("--hidden", type=int, nargs="+", default=[64])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    os.environ["LEAKMETER_THREADS"] = str(args.threads)
    from harness.core.threads import pin_threads

    pin_threads(args.threads)
    import torch
    from torch.func import grad, vmap

    from defenses.output import OutputDefenses
    from harness.core.oracle import Oracle
    from harness.scenario import scenario_from_dict
    from victims.build import build_victim

    s = scenario_from_dict({
        "name": "bench", "device": "cpu",
        "victim": {"model": {"arch": "mlp", "hidden": args.hidden},
                   "data": {"dataset": "digits", "n_train": 500, "attacker_pool": 10},
                   "training": {"epochs": 3}},
        "interface": {"kind": "gradient"}, "tracking": {"enabled": False},
    })
    v = build_victim(s)
    oracle = Oracle(v.backend, v.info, OutputDefenses(), None)
    x = torch.randn(args.n, v.info.dim, dtype=torch.float64)
    view = oracle.view("bench")

    def timed(fn):
        fn()  # warm-up
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out

    t_batch, g_batch = timed(lambda: view.explain(x))
    t_loop, g_loop = timed(lambda: torch.cat([view.explain(x[i : i + 1]) for i in range(args.loop)]))

    model = v.truth.model

    def predicted_logit(xi):
        out = model(xi[None].to(v.info.dtype))[0]
        mask = (out == out.max()).to(out.dtype).detach()
        return (out * mask).sum()

    t_vmap, g_vmap = timed(lambda: vmap(grad(predicted_logit))(x))
    assert torch.allclose(g_batch[: args.loop], g_loop, atol=1e-6)
    assert torch.allclose(g_batch, g_vmap.double(), atol=1e-6)

    rows = [
        ("oracle.explain, one batched call", args.n, t_batch),
        ("torch.func vmap(grad), direct", args.n, t_vmap),
        ("oracle.explain, loop of single queries", args.loop, t_loop),
    ]
    base = args.loop / t_loop
    print(f"gradient queries per second (digits MLP 64-{'-'.join(map(str, args.hidden))}-10, "
          f"{args.threads} thread)")
    print(f"{'method':<42}{'queries':>9}{'seconds':>10}{'queries/s':>12}{'vs loop':>9}")
    for name, n, t in rows:
        print(f"{name:<42}{n:>9}{t:>10.4f}{n / t:>12.0f}{(n / t) / base:>8.1f}x")


if __name__ == "__main__":
    main()
