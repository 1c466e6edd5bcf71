"""Calibration: leakmeter's verdict beside plain attackers built outside leakmeter.

A panel of deployments of the kinds people ship (a digits MLP behind probabilities, gradients or
labels; a tanh net; rounded, top-1 and noisy outputs; Opacus DP-SGD at ε 1 and 8; a false DP
claim; query budgets; a small CNN; an overfit white-box release; a user's own model file; a
2-logit binary classifier). For each, leakmeter runs the scenario (no MLflow), and this script
measures, with its own code and through the same API (leakmeter's oracle with the scenario's
output defenses and budget — the API, not leakmeter's attacks):

- thief: two plain thieves on the API's answers to the attacker's pool plus Gaussian jitter (0.5
  per-feature std), at the run's query count (as many queries as leakmeter's surrogate asked,
  else as many as one attacker may ask: the budget, else 2000):
  scikit-learn's MLPClassifier on the answers' labels (MLPRegressor for regression), and a small
  PyTorch MLP on the whole answers (KL to the returned probabilities); the better one's agreement
  with the victim and Cohen's κ on the victim's test split (the split leakmeter's scorer uses).
  A model leak: agreement ≥ 0.95 with κ ≥ 0.9. Only where leakmeter ran an extraction attack.
- membership: a loss-threshold test (Yeom et al.) on up to 500 members and as many non-members,
  the loss from the API's answers (correctness for a label API; the released model's logits for
  a white-box release). Identifiable members: at the threshold with FPR ≤ 1%, the 95%
  Clopper–Pearson lower bound on TPR over the upper bound on FPR ≥ 5 with TPR ≥ 1%. A DP claim is
  violated when ε ≥ log((TPR_low − δ)/FPR_high) exceeds it at one of four thresholds (Bonferroni).
- span: gradients at 2d + 20 Gaussian points (exact from a gradient API; central differences of
  log-probabilities or logits from a clean, unbudgeted prediction API), their numerical rank by
  NumPy's SVD against the true first layer: a span leak when the rank equals the first layer's,
  which is below the input dimension, within 1°.

A deployment leaks when an independent check of a family leakmeter ran shows it (a list of span
attacks says nothing about theft). A **false pass** is a pass where it leaks; a **false fail** is
a fail on which no independent check of the failing attacks' families agrees (families without
an independent check here — reconstruction — make it "unchecked"); "missed" is inconclusive
where a plain attacker leaks. A fail whose failing attacks are all extractions with a copy scored
against the victim itself (on its test split) at the leak bar is "stronger": leakmeter's thief
out-stole the plain ones, and the evidence is ground truth, not a judge's reading.

    python benchmarks/calibration.py [--only NAME ...] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("LEAKMETER_THREADS", "1")
os.environ.setdefault("LEAKMETER_PROGRESS", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy import stats  # noqa: E402

from defenses.output import OutputDefenses  # noqa: E402
from harness.core.oracle import Oracle  # noqa: E402
from harness.run.runner import run_scenario  # noqa: E402
from harness.scenario import scenario_from_dict  # noqa: E402
from victims.build import build_victim  # noqa: E402

THIEF_QUERIES = 2000
MAX_THIEF = 20000
MIA_POINTS = 500

DIGITS = {"dataset": "digits", "n_train": 1000}
SGD = {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "epochs": 30, "batch_size": 64}


@dataclass
class Deployment:
    name: str
    what: str
    victim: dict[str, Any]
    interface: dict[str, Any]
    defenses: dict[str, Any] = field(default_factory=dict)
    attacks: Any = "all"
    attacker: dict[str, Any] = field(default_factory=dict)
    quick: bool = False
    prepare: Any = None  # callable(workdir) -> victim dict (a user's own model file)


def mlp(hidden=(32,), **extra):
    return {"model": {"arch": "mlp", "hidden": list(hidden), **extra.pop("model", {})},
            "data": {**DIGITS, **extra.pop("data", {})}, "training": {**SGD, **extra.pop("training", {})},
            **extra}


def own_file(workdir: Path) -> dict[str, Any]:
    """A user's own model: a 64-32-10 ReLU MLP trained here with plain PyTorch, saved as a
    state_dict, with its data as an .npz."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(x))
    tr, te, pool = idx[:1000], idx[1000:1500], idx[1500:]
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    xt, yt = torch.as_tensor(x[tr]), torch.as_tensor(y[tr])
    for _ in range(300):
        loss = torch.nn.functional.cross_entropy(net(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save(net.state_dict(), workdir / "own.pt")
    np.savez(workdir / "own.npz", x_train=x[tr], y_train=y[tr], x_test=x[te], y_test=y[te],
             x_pool=x[pool], y_pool=y[pool])
    return {"model": {"arch": "file", "path": str(workdir / "own.pt"),
                      "spec": {"arch": "mlp", "hidden": [32]}},
            "data": {"dataset": "npz", "path": str(workdir / "own.npz"), "standardize": "none"}}


PANEL = [
    Deployment("mlp-probabilities", "digits MLP [32] behind probabilities", mlp(),
               {"kind": "prediction", "output": "probabilities"}),
    Deployment("mlp2-probabilities", "digits MLP [64, 32] behind probabilities", mlp((64, 32)),
               {"kind": "prediction", "output": "probabilities"}),
    Deployment("mlp-gradient", "digits MLP [32] behind a gradient API", mlp(),
               {"kind": "gradient", "output": "probabilities"}),
    Deployment("mlp-labels", "digits MLP [32] behind labels", mlp(),
               {"kind": "prediction", "output": "label"}),
    Deployment("tanh-probabilities", "digits tanh MLP [32] behind probabilities",
               mlp(model={"activation": "tanh"}), {"kind": "prediction", "output": "probabilities"}),
    Deployment("rounded", "probabilities rounded to 2 decimals", mlp(),
               {"kind": "prediction", "output": "probabilities"}, {"rounding": {"decimals": 2}}),
    Deployment("top1", "top-1 score only", mlp(), {"kind": "prediction", "output": "probabilities"},
               {"top_k": 1}),
    Deployment("noisy-logits", "logits with Gaussian noise σ = 0.5", mlp(),
               {"kind": "prediction", "output": "logits"}, {"output_noise": {"sigma": 0.5}}),
    Deployment("dp-eps1", "Opacus DP-SGD ε = 1", mlp(training={"epochs": 15}),
               {"kind": "prediction", "output": "probabilities"},
               {"dp_sgd": {"epsilon": 1.0, "delta": 1e-5, "max_grad_norm": 1.0}}),
    Deployment("dp-eps8", "Opacus DP-SGD ε = 8", mlp(training={"epochs": 15}),
               {"kind": "prediction", "output": "probabilities"},
               {"dp_sgd": {"epsilon": 8.0, "delta": 1e-5, "max_grad_norm": 1.0}}),
    Deployment("false-claim", "an overfit MLP claiming ε = 0.5", mlp(
        (128,), data={"n_train": 200}, training={"epochs": 300, "batch_size": 32},
        claimed_privacy={"epsilon": 0.5, "delta": 1e-5}),
        {"kind": "prediction", "output": "probabilities"}),
    Deployment("budget500-gradient", "gradient API, budget 500, gradient_exact only", mlp(),
               {"kind": "gradient", "output": "probabilities"}, {"query_budget": 500},
               [{"name": "gradient_exact"}]),  # budget2000-fde covers a budget stop in the quick panel
    Deployment("budget2000-fde", "probabilities, budget 2000, finite_difference_exact only", mlp(),
               {"kind": "prediction", "output": "probabilities"}, {"query_budget": 2000},
               [{"name": "finite_difference_exact"}], quick=True),
    Deployment("wide-first-layer", "a first layer wider than the input (96 > 64), gradient API",
               mlp((96,)), {"kind": "gradient", "output": "probabilities"}, {},
               [{"name": "span_nonadaptive"}, {"name": "obfuscation"}], quick=True),
    Deployment("cnn", "a small CNN behind probabilities",
               {"model": {"arch": "cnn", "channels": [8, 16], "hidden": [32]}, "data": DIGITS,
                "training": {**SGD, "epochs": 15}}, {"kind": "prediction", "output": "probabilities"}),
    Deployment("whitebox-overfit", "an overfit white-box release", mlp(
        (128,), data={"n_train": 200}, training={"epochs": 300, "batch_size": 32}),
        {"kind": "whitebox", "output": "logits"}),
    Deployment("own-model-file", "a user's own state_dict + .npz behind a gradient API", {},
               {"kind": "gradient", "output": "logits"}, prepare=own_file),
    Deployment("binary-2-logits", "breast_cancer, a 2-output softmax behind probabilities",
               {"model": {"arch": "mlp", "hidden": [16]},
                "data": {"dataset": "breast_cancer", "n_train": 300, "task": "multiclass"},
                "training": SGD}, {"kind": "prediction", "output": "probabilities"}),
]


def scenario(dep: Deployment, workdir: Path):
    victim = dep.prepare(workdir) if dep.prepare else dep.victim
    return scenario_from_dict({
        "name": dep.name, "seed": 0, "device": "cpu", "victim": victim,
        "attacker": {"pool": 200, **dep.attacker}, "interface": dep.interface,
        "defenses": dep.defenses, "attacks": dep.attacks, "tracking": {"enabled": False}})


def oracle_of(s, victim) -> Oracle:
    """The API as one plain attacker meets it: the scenario's output defenses and budget."""
    return Oracle(victim.backend, victim.info, OutputDefenses.from_spec(s.defenses),
                  s.defenses.query_budget, seed=12345)


def api_labels(y: torch.Tensor, output: str) -> np.ndarray:
    if output == "label" or y.dim() == 1:
        return y.long().reshape(-1).cpu().numpy()
    y = y.reshape(len(y), -1)
    if y.shape[1] == 1:
        return (y[:, 0] > (0.5 if output == "probabilities" else 0.0)).long().cpu().numpy()
    return y.argmax(1).cpu().numpy()


def thief(s, victim, queries: int | None = None) -> dict[str, float]:
    """Plain thieves on the API's answers (as many queries as leakmeter's surrogate asked, else
    the budget, else 2000): agreement and κ on the test split."""
    from sklearn.metrics import cohen_kappa_score
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    info = victim.info
    n = queries or (s.defenses.query_budget if s.defenses.query_budget is not None else THIEF_QUERIES)
    pool = info.x_pool.reshape(len(info.x_pool), -1).double().cpu()
    gen = torch.Generator().manual_seed(7)
    x = pool[torch.randperm(len(pool), generator=gen)][:n]
    if n > len(x):
        i = torch.randint(0, len(pool), (n - len(x),), generator=gen)
        x = torch.cat([x, pool[i] + 0.5 * pool.std(0) * torch.randn(len(i), pool.shape[1], generator=gen,
                                                                     dtype=torch.float64)])
    y = oracle_of(s, victim).view("thief").predict(x)
    xt = torch.as_tensor(victim.truth.data.x_test, dtype=torch.float64)
    xt = xt.reshape(len(xt), -1)
    with torch.no_grad():
        f = victim.truth.model(xt.to(next(victim.truth.model.parameters()).dtype)).double()
    if info.task == "regression":
        m = MLPRegressor(max_iter=1000, random_state=0).fit(x.numpy(), y.reshape(len(x), -1)[:, 0].numpy())
        g = m.predict(xt.numpy())
        r2 = 1 - float(((g - f[:, 0].numpy()) ** 2).mean() / f[:, 0].numpy().var())
        return {"thief_queries": float(n), "thief_r2": r2, "thief_leak": float(r2 >= 0.99)}
    m = MLPClassifier(max_iter=500, random_state=0).fit(x.numpy(), api_labels(y, info.output))
    lf = api_labels(f, "logits")
    out = {"thief_queries": float(n)}
    for name, lg in (("sk", m.predict(xt.numpy())), ("soft", soft_thief(x, y, xt, info.output))):
        out[f"thief_{name}_agreement"] = float((lf == lg).mean())
        out[f"thief_{name}_kappa"] = float(cohen_kappa_score(lf, lg))
    best = max(("sk", "soft"), key=lambda k: out[f"thief_{k}_kappa"])
    out["thief_agreement"], out["thief_kappa"] = out[f"thief_{best}_agreement"], out[f"thief_{best}_kappa"]
    out["thief_leak"] = float(out["thief_agreement"] >= 0.95 and out["thief_kappa"] >= 0.9)
    return out


def soft_thief(x: torch.Tensor, y: torch.Tensor, xt: torch.Tensor, output: str) -> np.ndarray:
    """A plain PyTorch thief on the API's whole answers: a 128-unit ReLU MLP, 1500 full-batch Adam
    steps (lr 1e-3, weight decay 1e-4) on the KL divergence to the returned probabilities (a
    softmax of returned logits; one-hot labels). Its labels on xt."""
    y = y.reshape(len(y), -1).double() if output != "label" else y.long()
    k = int(y.max()) + 1 if output == "label" else max(2, y.shape[1])
    if output == "label":
        target = torch.nn.functional.one_hot(y, k).double()
    elif y.shape[1] == 1:
        p = torch.sigmoid(y) if output == "logits" else y
        target = torch.cat([1 - p, p], 1).clamp_min(0)
    else:
        target = torch.softmax(y, 1) if output == "logits" else y.clamp_min(0)
    target = target / target.sum(1, keepdim=True).clamp_min(1e-12)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, target.shape[1])).double()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, weight_decay=1e-4)
    for _ in range(1500):
        loss = -(target * torch.log_softmax(net(x), 1)).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return net(xt).argmax(1).numpy()


def _cp(k: int, n: int, alpha: float, upper: bool) -> float:
    if upper:
        return 1.0 if k >= n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))
    return 0.0 if k <= 0 else float(stats.beta.ppf(alpha, k, n - k + 1))


def membership(s, victim) -> dict[str, float]:
    """A plain loss-threshold test through the API; identifiable members and a claim check."""
    from sklearn.metrics import roc_auc_score, roc_curve

    info = victim.info
    if info.task == "regression":
        return {}
    data = victim.truth.data
    n = min(MIA_POINTS, len(data.x_train), len(data.x_test))
    if s.defenses.query_budget is not None:
        n = min(n, s.defenses.query_budget // 2)
    if n < 20:
        return {}
    x = np.concatenate([data.x_train[:n], data.x_test[:n]]).reshape(2 * n, -1)
    y = np.concatenate([data.y_train[:n], data.y_test[:n]]).astype(int)
    member = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    ans = oracle_of(s, victim).view("mia").predict(torch.as_tensor(x, dtype=torch.float64))
    if info.output == "label":
        score = (api_labels(ans, "label") == y).astype(float)
    else:
        a = ans.reshape(len(ans), -1).double()
        p = torch.softmax(a, 1) if info.output == "logits" else a.clamp_min(0)
        if p.shape[1] == 1:
            p = torch.cat([1 - p, p], 1)
        score = np.log(p[torch.arange(len(p)), torch.as_tensor(y)].clamp_min(1e-300).numpy())
    auc = float(roc_auc_score(member, score))
    fpr, tpr, thr = roc_curve(member, score)
    out = {"mia_auc": auc}
    delta = 1e-5
    claim = s.victim.claimed_privacy
    best_lr, best_eps, tpr1 = 0.0, 0.0, 0.0
    for target in (0.01, 0.05, 0.1, 0.2):
        i = int(np.nonzero(fpr <= target)[0].max())
        fp, tp = int(round(fpr[i] * n)), int(round(tpr[i] * n))
        t_low, f_high = _cp(tp, n, 0.05 / 4, False), _cp(fp, n, 0.05 / 4, True)
        if target == 0.01:
            tpr1 = tpr[i]
            best_lr = t_low / f_high if t_low >= 0.01 else 0.0
        if t_low - delta > 0:
            best_eps = max(best_eps, float(np.log((t_low - delta) / f_high)))
    out.update(mia_tpr_at_1pct=float(tpr1), mia_lr_low=best_lr, mia_eps_lower=best_eps,
               mia_leak=float(best_lr >= 5.0))
    if claim is not None:
        out["claim_violated"] = float(best_eps > claim.epsilon)
    return out


def span(s, victim) -> dict[str, float]:
    """A plain span attacker: NumPy's SVD of API gradients against the true first layer."""
    info, model = victim.info, victim.truth.model
    first = next((m for m in model.modules() if isinstance(m, torch.nn.Linear)), None)
    if first is None or any(isinstance(m, torch.nn.Conv2d) for m in model.modules()):
        return {}
    d = info.dim
    n = 2 * d + 20
    clean = not s.defenses.model_dump(exclude_none=True, exclude_defaults=True)
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    view = oracle_of(s, victim).view("span")
    if info.interface in ("gradient", "smoothgrad"):
        g = view.explain(x).numpy()
    elif info.interface == "prediction" and info.output != "label" and clean:
        h = 1e-5
        xs = torch.cat([x[:, None, :] + h * torch.eye(d)[None], x[:, None, :] - h * torch.eye(d)[None]], 1)
        ys = view.predict(xs.reshape(-1, d)).reshape(n, 2 * d, -1).double()
        if info.output == "probabilities":
            ys = torch.log(ys.clamp_min(1e-300))
        ys = ys - ys.mean(-1, keepdim=True)
        g = ((ys[:, :d] - ys[:, d:]) / (2 * h)).permute(0, 2, 1).reshape(-1, d).numpy()
    else:
        return {}
    w = first.weight.detach().double().numpy()
    k = int(np.linalg.matrix_rank(w))
    sv = np.linalg.svd(g, compute_uv=False)
    r = int((sv > 1e-6 * sv[0]).sum()) if len(sv) and sv[0] > 0 else 0
    angle = 90.0
    if 0 < r <= k:
        v = np.linalg.svd(g, full_matrices=False)[2][:r]
        u = np.linalg.svd(w, full_matrices=False)[2][:k]
        resid = v - (v @ u.T) @ u
        angle = float(np.degrees(np.arcsin(min(1.0, np.linalg.svd(resid, compute_uv=False)[0]))))
    return {"span_rank": float(r), "span_true_rank": float(k), "span_angle": angle,
            "span_leak": float(r == k < d and angle < 1.0)}


CHECK_FAMILY = {"thief_leak": "extraction", "mia_leak": "membership", "claim_violated": "membership",
                "span_leak": "span"}


def evaluate(dep: Deployment, workdir: Path) -> dict[str, Any]:
    """leakmeter's verdict and the independent checks for one deployment. Only checks of the
    families leakmeter ran count: a list of span attacks says nothing about theft."""
    s = scenario(dep, workdir)
    victim = build_victim(s)
    t0 = time.perf_counter()
    rep = run_scenario(s, out=workdir / dep.name, victim=victim)
    wall = time.perf_counter() - t0
    sur = next((a for a in rep["attacks"] if a["name"] == "surrogate" and a["status"] != "skipped"), None)
    ran = {a["family"] for a in rep["attacks"] if a["status"] != "skipped"}
    ind: dict[str, float] = {}
    if "extraction" in ran:  # elsewhere a thief's verdict would not count (CHECK_FAMILY below)
        ind.update(thief(s, victim, min(int(sur["queries_sent"]), MAX_THIEF) if sur else None))
    for check in (membership, span):
        ind.update(check(s, victim))
    leaks = [k for k, fam in CHECK_FAMILY.items() if ind.get(k) and fam in ran]
    failing = [a for a in rep["attacks"] if a.get("risk") == "high"]
    fams = {a["family"] for a in failing}
    checked = {CHECK_FAMILY[k] for k in CHECK_FAMILY if k in ind}
    if rep["verdict"] == "pass" and leaks:
        call = "FALSE PASS"
    elif rep["verdict"] == "fail" and not any(CHECK_FAMILY[k] in fams for k in leaks):
        call = "FALSE FAIL" if fams <= checked else "unchecked"
        if call == "FALSE FAIL" and fams == {"extraction"} and all(_scored_copy(a) for a in failing):
            # every failing attack's copy was scored against the victim itself on the test split at
            # the leak bar: leakmeter's thief out-stole the plain ones, the evidence is ground truth
            call = "stronger"
    elif rep["verdict"] in ("inconclusive", "error") and leaks:
        call = "missed"
    else:
        call = "ok"
    return {"name": dep.name, "what": dep.what, "verdict": rep["verdict"], "wall_s": wall,
            "failing": [a["name"] for a in failing], "leaks": leaks, "call": call, **ind,
            "copies": ", ".join(_copy_text(a) for a in failing if a.get("family") == "extraction"),
            "statuses": {a["name"]: (a["status"], a.get("risk")) for a in rep["attacks"]}}


def _scored_copy(a: dict[str, Any]) -> bool:
    """An extraction entry whose copy agrees with the victim on its test split at the leak bar
    (agreement ≥ 0.95, κ ≥ 0.9), or reproduces it (output R² ≥ 0.99)."""
    m = a.get("metrics") or {}
    agreement = m.get("fidelity", m.get("agreement", 0))  # the surrogate's name, the exact attacks'
    return (agreement >= 0.95 and m.get("kappa", 0) >= 0.9) or m.get("output_r2", 0) >= 0.99


def _copy_text(a: dict[str, Any]) -> str:
    m = a.get("metrics") or {}
    agreement = m.get("fidelity", m.get("agreement", float("nan")))
    return f"{a['name']} {agreement:.3f}/{m.get('kappa', float('nan')):.2f}"


def table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'deployment':22s} {'leakmeter':13s} {'thief agr/κ (q)':22s} {'MIA AUC, LR':14s} "
          f"{'span r/k':9s} {'independent':22s} {'call':10s}")
    for r in rows:
        th = (f"{r['thief_agreement']:.3f}/{r['thief_kappa']:.2f} ({int(r['thief_queries'])})"
              if "thief_agreement" in r else f"R² {r['thief_r2']:.3f}" if "thief_r2" in r else "-")
        mia = f"{r['mia_auc']:.3f}, {r['mia_lr_low']:.1f}" if "mia_auc" in r else "-"
        sp = f"{int(r['span_rank'])}/{int(r['span_true_rank'])}" if "span_rank" in r else "-"
        print(f"{r['name']:22s} {r['verdict']:13s} {th:22s} {mia:14s} {sp:9s} "
              f"{','.join(r['leaks']) or 'none':22s} {r['call']:10s}")
        if r["failing"]:
            print(f"{'':22s}   fails on: {', '.join(r['failing'])}")
        if r["call"] == "stronger":
            print(f"{'':22s}   leakmeter's copies, scored against the victim: {r['copies']}")
    fp = sum(r["call"] == "FALSE PASS" for r in rows)
    ff = sum(r["call"] == "FALSE FAIL" for r in rows)
    missed = sum(r["call"] == "missed" for r in rows)
    stronger = sum(r["call"] == "stronger" for r in rows)
    print(f"\nfalse passes: {fp}   false fails: {ff}   inconclusive where a plain attacker leaks: "
          f"{missed}   fails where leakmeter's scored copy out-stole the plain thieves: {stronger}"
          f"   (of {len(rows)} deployments)")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="deployment names")
    ap.add_argument("--quick", action="store_true", help="the fast part only (the default suite's)")
    args = ap.parse_args(argv)
    panel = [d for d in PANEL if (not args.only or d.name in args.only) and (d.quick or not args.quick)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="leakmeter-calibration-") as tmp:
        for dep in panel:
            print(f"calibration: {dep.name} ...", file=sys.stderr, flush=True)
            rows.append(evaluate(dep, Path(tmp)))
            r = rows[-1]
            print(f"calibration: {dep.name}: {r['verdict']}, {r['call']} ({r['wall_s']:.0f} s; "
                  f"{', '.join(f'{k} {v[0]}/{v[1]}' for k, v in r['statuses'].items())})",
                  file=sys.stderr, flush=True)
    table(rows)
    return rows


if __name__ == "__main__":
    main()
