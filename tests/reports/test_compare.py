"""reports.compare / reports.plots on hand-built reports, checked against brute-force expectations."""

import itertools
import json

import pytest

from reports import compare as C
from reports.plots import all_plots, png_description

LEVELS = ("low", "medium", "high")


def report(acc, eps, budget, risks, fail_on="high", gamma=None, success=0.5):
    """A report dict like the runner writes, with one attack per entry of `risks`."""
    worst = max(risks, key=LEVELS.index)
    attacks = [{"name": f"atk{i}", "family": "extraction", "status": "ok", "risk": r, "reason": "x",
                "queries": 10, "metrics": {"agreement": success, "queries": 10.0}}
               for i, r in enumerate(risks)]
    return {"scenario": "t", "victim": {"test_accuracy": acc},
            "privacy": None if eps is None else {"epsilon": eps, "delta": 1e-5},
            "query_budget": budget, "attacks": attacks, "policy": {"fail_on": fail_on},
            "risk": worst, "verdict": "fail" if LEVELS.index(worst) >= LEVELS.index(fail_on) else "pass",
            "rero": [] if gamma is None else [{"prior": "p", "eta": 0.1, "kappa": 0.01, "gamma": gamma}]}


def rec(settings, rep, seed=0, run="r"):
    return {"run_id": f"{run}-{seed}", "settings": settings, "seed": seed, "report": rep}


def brute_recommendation(records):
    """Independent: group by settings, a group passes if all seeds pass; max mean accuracy."""
    groups = {}
    for r in records:
        groups.setdefault(json.dumps(r["settings"], sort_keys=True), []).append(r["report"])
    passing = {k: sum(x["victim"]["test_accuracy"] for x in v) / len(v)
               for k, v in groups.items() if all(x["verdict"] == "pass" for x in v)}
    return json.loads(max(passing, key=passing.get)) if passing else None


def test_recommends_most_useful_passing_cell_not_the_most_useful_cell():
    records = [
        rec({"eps": None, "budget": 10000}, report(0.97, None, 10000, ["high"])),    # best, fails
        rec({"eps": None, "budget": 100}, report(0.97, None, 100, ["medium"])),     # same acc, passes
        rec({"eps": 4.0, "budget": 100}, report(0.90, 4.0, 100, ["low"])),
        rec({"eps": 1.0, "budget": 100}, report(0.60, 1.0, 100, ["low"])),
    ]
    cmp = C.compare(records)
    assert cmp["recommended"]["settings"] == brute_recommendation(records) == {"eps": None, "budget": 100}
    assert cmp["message"].startswith("recommended: eps=none, budget=100")
    # Pareto (utility up, risk down): 0.97/medium and 0.90/low; 0.97/high is dominated, 0.60/low too
    assert set(cmp["pareto"]) == {"eps=none, budget=100", "eps=4, budget=100"}


def test_seeds_form_one_cell_that_passes_only_if_every_seed_passes():
    records = [
        rec({"eps": 8.0}, report(0.95, 8.0, None, ["low"]), seed=0),
        rec({"eps": 8.0}, report(0.96, 8.0, None, ["high"]), seed=1),   # one seed fails
        rec({"eps": 2.0}, report(0.80, 2.0, None, ["low"]), seed=0),
        rec({"eps": 2.0}, report(0.82, 2.0, None, ["medium"]), seed=1),
    ]
    cmp = C.compare(records)
    assert len(cmp["cells"]) == 2
    c8 = next(c for c in cmp["cells"] if c["settings"]["eps"] == 8.0)
    assert c8["verdict"] == "fail" and c8["risk"] == "high" and c8["seeds"] == [0, 1]
    assert c8["utility"] == pytest.approx(0.955)
    assert cmp["recommended"]["settings"] == brute_recommendation(records) == {"eps": 2.0}
    assert cmp["recommended"]["utility"] == pytest.approx(0.81)


def test_ties_go_to_lower_risk_then_bigger_budget():
    records = [rec({"b": b}, report(0.9, None, b, [r])) for b, r in [(100, "medium"), (50, "low"),
                                                                      (10, "low")]]
    assert C.compare(records)["recommended"]["settings"] == {"b": 50}


def test_none_passes_names_the_closest():
    records = [
        rec({"k": 1}, report(0.99, None, 1, ["high", "high"])),
        rec({"k": 2}, report(0.70, None, 2, ["high", "low"])),
        rec({"k": 3}, report(0.80, None, 3, ["low", "high"])),
    ]
    cmp = C.compare(records)
    assert cmp["recommended"] is None and brute_recommendation(records) is None
    # all worst-risk high; k=2 and k=3 have one failing attack each; k=3 is more useful
    assert cmp["closest"]["settings"] == {"k": 3}
    assert cmp["message"].startswith("none passes the policy (fail_on: high); closest: k=3")


def test_pareto_matches_brute_force_on_random_cells():
    import random

    rng = random.Random(0)
    records = [rec({"i": i}, report(round(rng.random(), 2), None, i, [rng.choice(LEVELS)]))
               for i in range(12)]
    cmp = C.compare(records)
    pts = [(r["report"]["victim"]["test_accuracy"], LEVELS.index(r["report"]["risk"])) for r in records]
    expect = {f"i={i}" for i, (u, k) in enumerate(pts)
              if not any(u2 >= u and k2 <= k and (u2, k2) != (u, k) for u2, k2 in pts)}
    assert set(cmp["pareto"]) == expect


def test_outputs_table_markdown_json_and_gamma_column():
    records = [rec({"defenses.dp_sgd.epsilon": e, "defenses.query_budget": b},
                   report(0.9 if e is None else 0.5, e, b, ["low" if b == 8 else "high"],
                          gamma=None if e is None else 0.15))
               for e, b in itertools.product([1.0, None], [8, 200])]
    cmp = C.compare(records)
    table = C.to_table(cmp)
    assert "ReRo γ" in table and "agreement=0.5" in table and "* epsilon=none, query_budget=8" in table
    md = C.to_markdown(cmp)
    assert md.count("\n| ") == 5 and "**recommended: epsilon=none, query_budget=8" in md
    back = json.loads(C.to_json(cmp))
    assert back["recommended"]["settings"] == {"defenses.dp_sgd.epsilon": None, "defenses.query_budget": 8}
    assert [c["rero_gamma"] for c in back["cells"]] == [0.15, 0.15, None, None]


def test_key_metric_and_success():
    assert C.key_metric({"queries": 3.0, "success_rate": 0.2, "agreement": 0.9}) == "success_rate"
    assert C.key_metric({"queries": 3.0, "zeta": 1.0}) == "zeta"
    assert C.key_metric({"queries": 3.0}) is None
    assert C.success_of({"recovered_rank": 8.0, "true_rank": 16.0}) == 0.5
    assert C.success_of({"max_rel_error": 1e-9}) is None


def test_plots_are_written_as_png(tmp_path):
    records = [rec({"eps": e, "budget": b}, report(0.9 if e is None else 0.5, e, b, ["low"], gamma=0.2))
               for e, b in itertools.product([1.0, 4.0, None], [8, 200])]
    cmp = C.compare(records)
    curves = {"budget=8": {"surrogate/fidelity": [(1, 0.1), (10, 0.5), (100, 0.9)]},
              "budget=200": {"surrogate/fidelity": [(1, 0.1), (10, 0.6), (100, 0.95), (200, 0.97)]}}
    files = all_plots(cmp, curves, tmp_path)
    assert sorted(p.name for p in files) == ["attack_success_vs_epsilon.png", "fidelity_vs_queries.png",
                                            "utility_vs_epsilon.png"]
    for p in files:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    assert len(all_plots(cmp, {}, tmp_path / "nocurves")) == 2


def test_rero_gamma_is_the_tightest_rigorous_bound_at_the_first_eta():
    rows = [{"eta": 5.0, "bound": "eps_delta_dp", "gamma": 0.22, "rigorous": True, "tightest": False},
            {"eta": 5.0, "bound": "profile", "gamma": 0.12, "rigorous": True, "tightest": True},
            {"eta": 5.0, "bound": "gdp", "gamma": 0.11, "rigorous": False, "tightest": False},
            {"eta": 1.0, "bound": "profile", "gamma": 0.01, "rigorous": True, "tightest": True}]
    assert C.rero_gamma(rows) == 0.12
    plain = [{"eta": 5.0, "bound": "rdp", "gamma": 0.3}, {"eta": 5.0, "bound": "zcdp", "gamma": 0.5}]
    assert C.rero_gamma(plain) == 0.3
    assert C.rero_gamma([]) is None


def test_gamma_column_shows_the_dp_guarantee_and_no_dp_as_such():
    """As harness/rero/product.py writes them: a DP cell's pool-centred estimate carries its
    rigorous γ (shown); a cell without DP has only a `none` row with γ = 1 (no guarantee: 'no DP')."""
    dp = [{"prior": "empirical", "eta": 2.0, "bound": "rdp", "gamma": 0.08, "rigorous": False,
           "gamma_rigorous": 0.31, "tightest": True},
          {"prior": "empirical", "eta": 2.0, "bound": "eps_delta_dp", "gamma": 0.2, "rigorous": False,
           "gamma_rigorous": 0.55},
          {"prior": "empirical", "eta": 2.0, "bound": "check:reconn", "gamma": 0.01}]
    none = [{"prior": "empirical", "eta": 2.0, "bound": "none", "gamma": 1.0, "vacuous": True}]
    assert C.rero_gamma(dp) == 0.31 and C.rero_gamma(none) is None
    records = []
    for e, rows in ((1.0, dp), (None, none)):
        rep = report(0.9, e, 100, ["low"])
        rep["rero"] = rows
        records.append(rec({"defenses.dp_sgd.epsilon": e}, rep))
    head, body = C.rows(C.compare(records))
    col = head.index("ReRo γ")
    assert [r[col] for r in body] == ["0.31", "no DP"]


def test_gamma_is_drawn_only_over_the_attacks_it_bounds_and_curves_get_their_own_axes(tmp_path):
    """γ bounds reconstruction, not span recovery; a rank-vs-samples curve is not a fidelity curve."""
    records = []
    for e in (1.0, None):
        rep = report(0.9, e, 100, ["low", "high"], gamma=None if e is None else 0.2)
        rep["attacks"][0].update(name="reconn", family="reconstruction", metrics={"success_rate": 0.1})
        rep["attacks"][1].update(name="span_nonadaptive", family="span",
                                 metrics={"recovered_rank": 8.0, "true_rank": 16.0})
        records.append(rec({"defenses.dp_sgd.epsilon": e}, rep))
    cmp = C.compare(records)
    curves = {"eps=1": {"span_nonadaptive/recovered_rank_vs_samples": [(16, 4.0), (32, 8.0)],
                        "reconn/reconn_loss": [(0, 1.0), (1, 0.5)]}}
    files = {p.name: png_description(p) for p in all_plots(cmp, curves, tmp_path)}
    recon, other = files["attack_success_vs_epsilon.png"]
    assert "ReRo γ: bound on any reconstruction attack" in recon["series"]
    assert [s.split(" (")[0] for s in recon["series"] if not s.startswith("ReRo")] == ["reconn"]
    assert [s.split(" (")[0] for s in other["series"]] == ["span_nonadaptive"]
    assert not any("ReRo" in s for s in other["series"])
    # no curve over queries: no fidelity plot; each other curve on its own x axis
    assert "fidelity_vs_queries.png" not in files
    (rank,) = files["curve_span_nonadaptive_recovered_rank_vs_samples.png"]
    (loss,) = files["curve_reconn_reconn_loss.png"]
    assert rank["xlabel"] == "gradient samples" and loss["xlabel"] == "reconstructor epoch"
    fid = {"eps=1": {"surrogate/fidelity": [(10, 0.5), (100, 0.9)],
                     "span_nonadaptive/recovered_rank_vs_samples": [(16, 4.0), (32, 8.0)]}}
    (panel,) = png_description(C_plots_fidelity(cmp, fid, tmp_path))
    assert panel["xlabel"] == "queries" and panel["series"] == ["surrogate/fidelity — eps=1"]


def C_plots_fidelity(cmp, curves, tmp_path):
    (p,) = [p for p in all_plots(cmp, curves, tmp_path / "fid") if p.name == "fidelity_vs_queries.png"]
    return p


def test_runs_of_different_models_or_tasks_are_not_ranked_on_one_axis(tmp_path):
    """Accuracy beside R², or one model file's accuracy beside another's: refused in one line
    (exit 2 through the CLI), before anything is written; one model's runs are compared."""
    from harness.core.errors import BadInput
    from harness.sweep.compare import run_compare

    def on(data, task, util, model=None, **kw):
        rep = report(0.9, None, None, ["low"])
        rep["victim"] = {util: 0.9, "data": {"dataset": data, "task": task}}
        return {**rec({"defenses.query_budget": kw.get("budget")}, rep), "model": model}

    same = [on("digits", "multiclass", "test_accuracy", budget=b) for b in (10, 100)]
    assert C.incomparable(same) is None
    mixed = same + [on("diabetes", "regression", "test_r2")]
    why = C.incomparable(mixed)
    assert why.startswith("the runs are of 2 different models or tasks (digits, multiclass, test accuracy: "
                          "2 run(s); diabetes, regression, test R²: 1 run(s))")
    files = [on("digits", "multiclass", "test_accuracy", model=m) for m in ("a.onnx", "b.onnx")]
    assert "a.onnx, digits" in C.incomparable(files) and "b.onnx, digits" in C.incomparable(files)
    with pytest.raises(BadInput, match=r"^compare: the runs are of 2 different"):
        run_compare("sqlite:///unused.db", mixed, {}, tmp_path / "out", None)
    assert not (tmp_path / "out").exists()
    cmp, _, _ = run_compare("sqlite:///unused.db", same, {}, tmp_path / "ok", None)
    assert len(cmp["cells"]) == 2
