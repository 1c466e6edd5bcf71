"""Benchmarks for issue 5 (prints two tables; ratios are measured in the same run).

1. Shadow-model training (reconn, paper 004 Sec. IV-B): one model at a time (Recipe.train) vs
   stacked parameters (victims/shadows.py), on the reconn digits recipe (64-10-10 ELU,
   |D₋| = 500, 100 full-batch SGD-momentum steps).
2. GLM reconstruction of the missing row (informed adversary, paper 004 Thm. 1): our closed
   form vs IBM ART's DatabaseReconstruction (which refits the model inside L-BFGS with numeric
   gradients), on the same sklearn LogisticRegression (breast_cancer, first d features, n = 100).
   ART runs in a subprocess with a timeout (`pip install adversarial-robustness-toolbox==1.20.1`).

    python benchmarks/reconstruction.py [--art-timeout 120] [--dims 2 5 10 30]
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

import harness  # noqa: F401  (pins threads)

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


def shadow_table(n_loop: int, n_batch: int) -> None:
    from bench_recipes import recipe_and_data

    r, xm, ym, xe, ye = recipe_and_data()
    t = time.perf_counter()
    for k in range(n_loop):
        r.train(torch.cat([xm, xe[k : k + 1]]), torch.cat([ym, ye[k : k + 1]]))
    loop = (time.perf_counter() - t) / n_loop
    t = time.perf_counter()
    r.train_many(xm, ym, xe[:n_batch], ye[:n_batch])
    batch = (time.perf_counter() - t) / n_batch
    print("\nShadow training, 64-10-10 ELU, |D₋| = 500, 100 full-batch steps, device", r.device)
    print(f"{'method':<28}{'models':>8}{'ms / shadow':>14}")
    print(f"{'loop (Recipe.train)':<28}{n_loop:>8}{1e3 * loop:>14.2f}")
    print(f"{'batched (torch.func vmap)':<28}{n_batch:>8}{1e3 * batch:>14.2f}")
    print(f"speed-up of batching: {loop / batch:.2f}x")


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
    a = ap.parse_args()
    shadow_table(a.loop, a.batch)
    glm_table(a.dims, a.art_timeout)
