"""Reconstruction benchmarks (prints two tables; ratios are measured in the same run).

1. Shadow-model training (reconn, paper 004 Sec. IV-B): one model at a time (Recipe.train) vs
   stacked parameters (harness/attacker/shadows.py), on the reconn digits recipe (64-10-10 ELU,
   |D₋| = 500, 100 full-batch SGD-momentum steps); and the DP-GD variant (σ = 0.3, C = 16): one
   Opacus run per shadow vs stacked per-example gradients (vmap(vmap(grad))) vs ghost norms.
2. GLM reconstruction of the missing row (informed adversary, paper 004 Thm. 1): our closed
   form vs IBM ART's DatabaseReconstruction (which refits the model inside L-BFGS with numeric
   gradients), on the same sklearn LogisticRegression (breast_cancer, first d features, n = 100).
   ART runs in a subprocess with a timeout (`pip install adversarial-robustness-toolbox==1.20.1`).

    python benchmarks/reconstruction.py [--art-timeout 120] [--dims 2 5 10 30] [--skip-glm]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import torch

from harness.core.threads import pin_threads

ART_CHILD = textwrap.dedent("""
    import json, sys, time, warnings
    import numpy as np
    warnings.simplefilter("ignore")
    from sklearn.linear_model import LogisticRegression
    from art.estimators.classification.scikitlearn import ScikitlearnLogisticRegression
    from art.attacks.inference.reconstruction import DatabaseReconstruction
    a = json.loads(sys.stdin.read())
    xm, ym = np.array(a["xm"]), np.array(a["ym"])
    model = LogisticRegression(C=a["C"], tol=1e-12, max_iter=100000)
    model.fit(np.vstack([xm, [a["x"]]]), np.hstack([ym, [a["y"]]]))
    t = time.perf_counter()
    rec, _ = DatabaseReconstruction(ScikitlearnLogisticRegression(model)).reconstruct(xm, ym)
    print(json.dumps({"x": rec[0].tolist(), "s": time.perf_counter() - t}))
""")


def _per_shadow(fn, n: int) -> float:
    fn(1)  # warm-up (first-call costs: imports, vmap tracing)
    t = time.perf_counter()
    fn(n)
    return (time.perf_counter() - t) / n


def shadow_table(n_loop: int, n_batch: int, n_vmap: int) -> None:
    import warnings

    from bench_recipes import recipe_and_data

    from harness.attacker.shadows import train_many
    from harness.scenario.schema import DPSpec

    warnings.simplefilter("ignore")  # Opacus' secure-RNG and hook warnings
    print("\nShadow training, 64-10-10 ELU, |D₋| = 500, 100 full-batch steps")
    print(f"{'recipe':<8}{'method':<36}{'models':>8}{'ms / shadow':>14}{'vs loop':>9}")
    for dp in (None, {"noise_multiplier": 0.3, "max_grad_norm": 16.0}):
        r, xm, ym, xe, ye = recipe_and_data()
        r.dp = DPSpec(**dp) if dp else None
        name = "DP-GD" if dp else "GD"

        def loop(n, r=r, xm=xm, ym=ym, xe=xe, ye=ye):
            for k in range(n):
                r.train(torch.cat([xm, xe[k : k + 1]]), torch.cat([ym, ye[k : k + 1]]), seed=k)

        rows = [("loop (Recipe.train" + (", Opacus)" if dp else ")"), n_loop, loop)]
        if dp:
            rows += [("batched, per-example grads (vmap)", n_vmap,
                      lambda n, r=r, xm=xm, ym=ym, xe=xe, ye=ye: train_many(
                          r, xm, ym, xe[:n], ye[:n], chunk=64, dp_method="vmap")),
                     ("batched, ghost norms", n_batch,
                      lambda n, r=r, xm=xm, ym=ym, xe=xe, ye=ye: train_many(
                          r, xm, ym, xe[:n], ye[:n], chunk=64, dp_method="ghost"))]
        else:
            rows.append(("batched (torch.func vmap)", n_batch,
                         lambda n, r=r, xm=xm, ym=ym, xe=xe, ye=ye: r.train_many(
                             xm, ym, xe[:n], ye[:n])))
        base = None
        for label, n, fn in rows:
            ms = 1e3 * _per_shadow(fn, n)
            base = base or ms
            print(f"{name:<8}{label:<36}{n:>8}{ms:>14.2f}{base / ms:>8.1f}x")
    print(f"device {r.device}; reconn trains shadows in chunks of 64")


def glm_table(dims: list[int], timeout: float) -> None:
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression

    from harness.attacks.reconstruction.glm_closed_form import closed_form

    xall, yall = load_breast_cancer(return_X_y=True)
    xall = (xall - xall.mean(0)) / xall.std(0)
    n, c = 100, 1.0
    print(f"\nInformed reconstruction of one row, sklearn LogisticRegression(C={c}), n = {n}")
    print(f"{'d':>4}{'ours rel.err':>14}{'ours s':>10}{'ART rel.err':>14}{'ART s':>10}{'ART/ours time':>15}")
    for d in dims:
        x, y = xall[:n, :d], yall[:n]
        xm, ym, xt, yt = x[:-1], y[:-1], x[-1], y[-1]
        model = LogisticRegression(C=c, tol=1e-12, max_iter=100000).fit(x, y)
        t = time.perf_counter()
        w = torch.as_tensor(model.coef_, dtype=torch.float64)
        b = torch.as_tensor(model.intercept_, dtype=torch.float64)
        xh, _ = closed_form(w, b, torch.as_tensor(xm), torch.as_tensor(ym), "binary", 1 / (c * n))
        ours_s = time.perf_counter() - t
        ours = float(np.linalg.norm(xh.numpy() - xt) / np.linalg.norm(xt))
        payload = json.dumps({"xm": xm.tolist(), "ym": ym.tolist(), "x": xt.tolist(),
                              "y": float(yt), "C": c})
        try:
            out = subprocess.run([sys.executable, "-c", ART_CHILD], input=payload, text=True,
                                 capture_output=True, timeout=timeout)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            art_err = float(np.linalg.norm(np.array(res["x"]) - xt) / np.linalg.norm(xt))
            art_s = f"{res['s']:.2f}"
            ratio = f"{res['s'] / ours_s:.0f}x"
            err = f"{art_err:.2e}"
        except subprocess.TimeoutExpired:
            art_s, err, ratio = f">{timeout:.0f}", "timeout", f">{timeout / ours_s:.0f}x"
        except (IndexError, json.JSONDecodeError, KeyError):
            art_s, err, ratio = "error", "error", "-"
        print(f"{d:>4}{ours:>14.2e}{ours_s:>10.4f}{err:>14}{art_s:>10}{ratio:>15}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--art-timeout", type=float, default=120.0)
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 5, 10, 30])
    ap.add_argument("--loop", type=int, default=16)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--vmap", type=int, default=64, help="DP shadows via per-example gradients")
    ap.add_argument("--skip-glm", action="store_true")
    a = ap.parse_args()
    pin_threads()  # torch was imported before harness: pin its pool now (LEAKMETER_THREADS, 1)
    shadow_table(a.loop, a.batch, a.vmap)
    if a.skip_glm:
        sys.exit(0)
    glm_table(a.dims, a.art_timeout)
