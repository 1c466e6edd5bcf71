"""Compare runs of one scenario under different settings: a table, the Pareto front, a recommendation.

Input is plain data: one record per run, `{"run_id", "settings": {dotted key: value}, "seed",
"report": <report dict>}`. Runs that differ only by seed form one *cell*: its utility is the
mean test accuracy over seeds, its risk the worst over seeds, and it passes only if every seed
passes. The recommended cell is the most useful one that passes the policy; ties go to the lower
risk, then to the larger query budget (more useful to real users), then to the larger ε (less
noise). When no cell passes, the *closest* is named: lowest worst-risk, then fewest attacks at or
above the failure level, then the most useful.
"""

from __future__ import annotations

import json
import math
from typing import Any

LEVELS = ("low", "medium", "high")
# the metric that says how far each kind of attack got, in order of preference
KEY_METRICS = ("success_rate", "agreement", "fidelity", "recovered_rank", "prediction_kept",
               "normalised_loss", "max_rel_error", "max_principal_angle_deg")
NOT_KEY = {"queries", "wall_s", "samples", "queries_per_gradient"}


def key_metric(metrics: dict[str, Any]) -> str | None:
    """The name of an attack's headline metric among `metrics` (None when it has none)."""
    for k in KEY_METRICS:
        if isinstance(metrics.get(k), int | float):
            return k
    rest = sorted(k for k, v in metrics.items() if k not in NOT_KEY and isinstance(v, int | float))
    return rest[0] if rest else None


def subject(record: dict[str, Any]) -> str:
    """What a run measured utility on, in words: the model file (when given) and the data set, its
    task and the utility metric ("digits, multiclass, test accuracy"). Runs of one subject share a
    utility axis; `record["model"]` (the model file, when the caller knows it) names the model."""
    rep = record.get("report") or {}
    vic = rep.get("victim") or {}
    data = vic.get("data") if isinstance(vic.get("data"), dict) else {}
    kind = "test R²" if "test_r2" in vic else "test accuracy" if "test_accuracy" in vic else "no utility"
    where = data.get("path") or data.get("dataset") or "?"
    parts = [str(record["model"])] if record.get("model") else []
    return ", ".join(parts + [str(where), str(data.get("task") or "?"), kind])


def incomparable(records: list[dict[str, Any]]) -> str | None:
    """Why these runs cannot be ranked on one utility axis (runs of different models, data sets or
    tasks: accuracy beside R², one model's accuracy beside another's), or None when they can."""
    counts: dict[str, int] = {}
    for r in records:
        counts[subject(r)] = counts.get(subject(r), 0) + 1
    if len(counts) < 2:
        return None
    shown = "; ".join(f"{k}: {n} run(s)" for k, n in list(counts.items())[:4]) + (
        f"; and {len(counts) - 4} more" if len(counts) > 4 else "")
    return (f"the runs are of {len(counts)} different models or tasks ({shown}), whose utilities are not "
            "one axis; compare the runs of one model (one experiment per model, as `init` writes it, "
            "or --runs ID ...)")


def success_of(metrics: dict[str, Any]) -> float | None:
    """How much of its goal an attack reached, in [0, 1], when its metrics say so; else None."""
    for k in ("success_rate", "agreement", "fidelity", "prediction_kept"):
        v = metrics.get(k)
        if isinstance(v, int | float) and 0.0 <= v <= 1.0:
            return float(v)
    r, k = metrics.get("recovered_rank"), metrics.get("true_rank")
    if isinstance(r, int | float) and isinstance(k, int | float) and k > 0:
        return min(1.0, float(r) / float(k))
    return None


def utility_of(report: dict[str, Any]) -> float | None:
    """The victim's utility: test accuracy (or test R² for regression), None when unknown."""
    vic = report.get("victim") or {}
    for k in ("test_accuracy", "test_r2"):
        v = vic.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    return None


def _guarantee(row: dict[str, Any]) -> float | None:
    """A bound row's γ as a guarantee: its γ when rigorous, else its `gamma_rigorous` (the same
    bound at the conservative κ, for a pool-centred estimate); None for rows that bound nothing
    (no DP: `none`; skipped priors; checks of measured attacks)."""
    bound = str(row.get("bound", ""))
    if bound in ("none", "skipped") or bound.startswith("check"):
        return None
    g = row.get("gamma") if row.get("rigorous", True) is not False else row.get("gamma_rigorous")
    return float(g) if isinstance(g, int | float) and not isinstance(g, bool) else None


def rero_gamma(rows: list[dict[str, Any]]) -> float | None:
    """The report's headline ReRo γ: the tightest guarantee (smallest rigorous γ) at its first η;
    None without a DP bound (no DP-SGD: there is no guarantee to show)."""
    ok = [(r, g) for r in rows if (g := _guarantee(r)) is not None]
    if not ok:
        return None
    return min(g for r, g in ok if r.get("eta") == ok[0][0].get("eta"))


def _risk_idx(r: str | None) -> int:
    return LEVELS.index(r) if r in LEVELS else -1


def _worst(risks: list[str | None]) -> str | None:
    known = [r for r in risks if r in LEVELS]
    return max(known, key=LEVELS.index) if known else None


def _mean(xs: list[float | None]) -> float | None:
    vals = [float(x) for x in xs
            if isinstance(x, int | float) and not (isinstance(x, float) and math.isnan(x))]
    return sum(vals) / len(vals) if vals else None


def fmt_value(v: Any) -> str:
    """A setting or number as shown in tables ("none" for null)."""
    if v is None:
        return "none"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def short_keys(keys: list[str]) -> dict[str, str]:
    """Dotted keys shortened to their last part where that stays unambiguous."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (s if last.count(s) == 1 else k) for k, s in zip(keys, last, strict=True)}


def label_of(settings: dict[str, Any], names: dict[str, str] | None = None) -> str:
    """A cell's label, e.g. "epsilon=1, query_budget=8"."""
    names = names or short_keys(list(settings))
    return ", ".join(f"{names.get(k, k)}={fmt_value(v)}" for k, v in settings.items()) or "(base)"


def _cell(settings: dict[str, Any], runs: list[dict[str, Any]], fail_on: str) -> dict[str, Any]:
    reports = [r["report"] for r in runs]
    errored = any(rep.get("error") or any(a.get("status") == "error" for a in rep.get("attacks", []))
                  for rep in reports)
    verdicts = [rep.get("verdict") for rep in reports]
    if "fail" in verdicts:  # the contract's precedence: fail > error > inconclusive > pass
        verdict = "fail"
    elif errored or None in verdicts or "error" in verdicts:
        verdict = "error"
    else:
        verdict = "inconclusive" if "inconclusive" in verdicts else "pass"
    eps = [((rep.get("privacy") or {}).get("epsilon")) for rep in reports]
    attacks: dict[str, dict[str, Any]] = {}
    names = []
    for rep in reports:
        for a in rep.get("attacks", []):
            if a["name"] not in names:
                names.append(a["name"])
    for name in names:
        entries = [a for rep in reports for a in rep.get("attacks", []) if a["name"] == name]
        ran = [a for a in entries if a.get("status") == "ok"]
        metric = next((key_metric(a.get("metrics") or {}) for a in ran if key_metric(a.get("metrics") or {})),
                      None)
        attacks[name] = {
            "family": entries[0].get("family"),
            "status": "ok" if ran else entries[0].get("status"),
            "metric": metric,
            "value": _mean([(a.get("metrics") or {}).get(metric) for a in ran]) if metric else None,
            "success": _mean([success_of(a.get("metrics") or {}) for a in ran]),
            "risk": _worst([a.get("risk") for a in ran]),
            "queries": _mean([a.get("queries") for a in ran]),
            "reason": (ran[0] if ran else entries[0]).get("reason", ""),
        }
    gammas = [g for g in (rero_gamma(rep.get("rero") or []) for rep in reports) if g is not None]
    risk = _worst([rep.get("risk") for rep in reports])
    return {
        "settings": settings,
        "seeds": [r.get("seed") for r in runs],
        "runs": [r.get("run_id") for r in runs],
        "utility": _mean([utility_of(rep) for rep in reports]),
        "epsilon": None if any(e is None for e in eps) else _mean(eps),
        "budget": reports[0].get("query_budget"),
        "verdict": verdict,
        "risk": risk,
        "attacks": attacks,
        "rero_gamma": max(gammas) if gammas else None,
        "failing_attacks": sum(1 for a in attacks.values()
                               if fail_on != "never" and _risk_idx(a["risk"]) >= LEVELS.index(fail_on)),
    }


def _usefulness_key(c: dict[str, Any]) -> tuple:
    """Sort key, most useful first: utility, lower risk, bigger budget (None = unlimited), bigger ε."""
    u = c["utility"] if c["utility"] is not None else -math.inf
    b = math.inf if c["budget"] is None else float(c["budget"])
    e = math.inf if c["epsilon"] is None else float(c["epsilon"])
    return (-u, _risk_idx(c["risk"]), -b, -e)


def pareto(cells: list[dict[str, Any]]) -> list[int]:
    """Indices of cells no other cell beats on both utility (higher) and risk (lower)."""
    ok = [i for i, c in enumerate(cells) if c["verdict"] != "error" and c["utility"] is not None]
    front = []
    for i in ok:
        ui, ri = cells[i]["utility"], _risk_idx(cells[i]["risk"])
        dominated = any(
            cells[j]["utility"] >= ui and _risk_idx(cells[j]["risk"]) <= ri
            and (cells[j]["utility"] > ui or _risk_idx(cells[j]["risk"]) < ri)
            for j in ok if j != i)
        if not dominated:
            front.append(i)
    return front


def compare(records: list[dict[str, Any]], fail_on: str | None = None) -> dict[str, Any]:
    """The comparison (plain dict): cells, Pareto front, recommended or closest cell, a message."""
    if not records:
        return {"cells": [], "pareto": [], "recommended": None, "closest": None, "keys": [],
                "message": "no runs to compare"}
    fail_on = fail_on or (records[0]["report"].get("policy") or {}).get("fail_on", "high")
    keys: list[str] = []
    for r in records:
        for k in r["settings"]:
            if k not in keys:
                keys.append(k)
    groups: dict[str, list[dict[str, Any]]] = {}
    order: list[str] = []
    for r in records:
        settings = {k: r["settings"].get(k) for k in keys}
        gk = json.dumps(settings, sort_keys=True, default=str)
        if gk not in groups:
            groups[gk] = []
            order.append(gk)
        groups[gk].append(r)
    names = short_keys(keys)
    cells = []
    for gk in order:
        c = _cell({k: groups[gk][0]["settings"].get(k) for k in keys}, groups[gk], fail_on)
        c["label"] = label_of(c["settings"], names)
        cells.append(c)
    front = pareto(cells)
    for i, c in enumerate(cells):
        c["pareto"] = i in front
    passing = [c for c in cells if c["verdict"] == "pass"]
    rec = min(passing, key=_usefulness_key) if passing else None
    closest = None
    if rec is None:
        cand = [c for c in cells if c["verdict"] != "error"] or cells
        closest = min(cand, key=lambda c: (_risk_idx(c["risk"]), c["failing_attacks"]) + _usefulness_key(c))
    if rec:
        msg = (f"recommended: {rec['label']} (utility {fmt_value(rec['utility'])}, worst risk {rec['risk']}; "
               f"the most useful of {len(passing)} passing cell(s))")
    else:
        msg = (f"none passes the policy (fail_on: {fail_on}); closest: {closest['label']} "
               f"(worst risk {closest['risk']}, utility {fmt_value(closest['utility'])})")
    return {"policy": {"fail_on": fail_on}, "keys": keys, "cells": cells,
            "pareto": [cells[i]["label"] for i in front],
            "recommended": _brief(rec), "closest": _brief(closest), "message": msg}


def _brief(c: dict[str, Any] | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {k: c[k] for k in ("label", "settings", "utility", "epsilon", "budget", "risk", "verdict", "runs")}


def attack_names(cmp: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for c in cmp["cells"]:
        for n in c["attacks"]:
            if n not in names:
                names.append(n)
    return names


def rows(cmp: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the comparison table as strings."""
    atk = attack_names(cmp)
    has_gamma = any(c["rero_gamma"] is not None for c in cmp["cells"])
    head = ["cell", "utility", "ε", "budget"]
    for n in atk:
        head += [f"{n}", f"{n} risk"]
    if has_gamma:
        head.append("ReRo γ")
    head += ["verdict", "pareto"]
    rec = (cmp.get("recommended") or {}).get("label")
    out = []
    for c in cmp["cells"]:
        row = [("* " if c["label"] == rec else "") + c["label"], fmt_value(c["utility"]),
               "none" if c["epsilon"] is None else fmt_value(c["epsilon"]),
               "none" if c["budget"] is None else fmt_value(c["budget"])]
        for n in atk:
            a = c["attacks"].get(n)
            if a is None or a["status"] != "ok":
                row += [a["status"] if a else "-", "-"]
            else:
                row += [f"{a['metric']}={fmt_value(a['value'])}" if a["metric"] else "-", a["risk"] or "-"]
        if has_gamma:
            row.append(fmt_value(c["rero_gamma"]) if c["rero_gamma"] is not None
                       else "no DP" if c["epsilon"] is None else "-")
        row += [c["verdict"], "yes" if c["pareto"] else ""]
        out.append(row)
    return head, out


def to_table(cmp: dict[str, Any]) -> str:
    """The comparison as an aligned terminal table, with the recommendation underneath."""
    head, body = rows(cmp)
    w = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(h.ljust(w[i]) for i, h in enumerate(head)),
             "  ".join("-" * w[i] for i in range(len(head)))]
    lines += ["  ".join(x.ljust(w[i]) for i, x in enumerate(r)) for r in body]
    lines += ["", cmp["message"]]
    return "\n".join(lines) + "\n"


def to_terminal(cmp: dict[str, Any], width: int = 100) -> str:
    """The comparison for a terminal `width` columns wide (rich): one row per cell with the
    columns that tell cells apart — utility, ε, budget, ReRo γ (left out where every cell has the
    same value, or the cell's label already shows it), verdict, worst risk, the attacks at or
    above the failure level — wrapped to fit; every attack's metric stays in compare.md/.txt."""
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    fail_on = (cmp.get("policy") or {}).get("fail_on", "high")
    bar = min(LEVELS.index(fail_on) if fail_on in LEVELS else len(LEVELS), len(LEVELS) - 1)
    rec = (cmp.get("recommended") or {}).get("label")
    keys = " ".join(cmp.get("keys") or [])
    cols: dict[str, list[str]] = {"cell": [], "utility": [], "ε": [], "budget": [], "ReRo γ": [],
                                  "verdict": [], "risk": [], f"attacks ≥ {LEVELS[bar]}": []}
    for c in cmp["cells"]:
        worst = [f"{n} ({a['risk']})" for n, a in c["attacks"].items()
                 if a.get("status") == "ok" and _risk_idx(a.get("risk")) >= bar]
        unfinished = [f"{n} ({a['status']})" for n, a in c["attacks"].items()
                      if a.get("status") in ("incomplete", "error")]
        gamma = (fmt_value(c["rero_gamma"]) if c["rero_gamma"] is not None
                 else "no DP" if c["epsilon"] is None else "-")
        values = [("* " if c["label"] == rec else "") + c["label"] + (" (pareto)" if c["pareto"] else ""),
                  fmt_value(c["utility"]), "none" if c["epsilon"] is None else fmt_value(c["epsilon"]),
                  "none" if c["budget"] is None else fmt_value(c["budget"]), gamma, c["verdict"],
                  c["risk"] or "-", ", ".join(worst + unfinished) or "-"]
        for col, v in zip(cols, values, strict=True):
            cols[col].append(v)
    shown = {"ε": "epsilon" not in keys, "budget": "query_budget" not in keys}
    drop = [k for k in ("ε", "budget", "ReRo γ")
            if len(set(cols[k])) == 1 and len(cols["cell"]) > 1 or not shown.get(k, True)]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for name in (k for k in cols if k not in drop):
        table.add_column(name, overflow="fold", ratio=3 if name == "cell" else 4 if name.startswith("attacks")
                         else None, no_wrap=name in ("utility", "verdict", "risk"))
    for i in range(len(cols["cell"])):
        table.add_row(*(cols[k][i] for k in cols if k not in drop))
    out = io.StringIO()
    console = Console(file=out, width=max(40, width), color_system=None, highlight=False, markup=False)
    console.print(table)
    same = [f"{k} {cols[k][0]}" for k in drop if cols[k] and len(set(cols[k])) == 1 and shown.get(k, True)]
    if same:
        console.print("every cell: " + "; ".join(same))
    console.print(cmp["message"])
    console.print("* recommended; (pareto): on the utility-risk Pareto front; each attack's metric: "
                  "compare.md")
    return "\n".join(ln.rstrip() for ln in out.getvalue().splitlines() if ln.strip()) + "\n"


def to_markdown(cmp: dict[str, Any]) -> str:
    """The comparison as Markdown: the recommendation, then the table and the Pareto front."""
    head, body = rows(cmp)
    esc = [[x.replace("|", "\\|") for x in r] for r in [head, *body]]
    lines = ["# leakmeter comparison", "", f"**{cmp['message']}**", "",
             f"Policy: fail at {cmp.get('policy', {}).get('fail_on')}. Utility = test accuracy (mean over "
             "seeds); risk = worst over attacks and seeds; * marks the recommended cell.", "",
             "| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    lines += ["", "Pareto front (utility vs risk): " + ("; ".join(cmp["pareto"]) or "none")]
    return "\n".join(lines) + "\n"


def to_json(cmp: dict[str, Any]) -> str:
    """The comparison as JSON text (NaN → null)."""
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(cmp), indent=2, default=str)
