"""The ReRo section in the product: a real DP-SGD victim (Opacus), the report rows, MLflow metrics,
the γ-vs-ε plot, the bound-vs-measurement check, and `leakmeter bound`."""

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from harness.rero import accounting as A
from harness.rero import priors as P
from harness.rero.product import check_rows, rero_section
from harness.scenario import scenario_from_dict
from tests.conftest import make_scenario

DP = {"dp_sgd": {"noise_multiplier": 1.0, "delta": 1e-5, "max_grad_norm": 1.0}}
RERO = {"priors": [{"kind": "empirical"}, {"kind": "gaussian"}, {"kind": "uniform_ball"},
                   {"kind": "finite", "size": 10}]}


@pytest.fixture(scope="module")
def dp_victim():
    from victims.build import build_victim

    s = scenario_from_dict(make_scenario(defenses=DP, rero=RERO, attacks=[{"name": "span_nonadaptive"}]))
    s.victim.training.epochs = 2
    return s, build_victim(s)


def _attack(name, measured, lo, hi, eta, comparable=1.0):
    return {"name": name, "status": "ok", "metrics": {"success_rate_eta": measured, "success_eta_ci_low": lo,
                                                      "success_eta_ci_high": hi, "eta": eta,
                                                      "rero_comparable": comparable}}


def test_rows_from_the_victims_own_accounting(dp_victim, tmp_path):
    s, v = dp_victim
    rec = v.truth.train_record.dp
    rows = rero_section(s, v, [], tmp_path)
    pool = v.info.x_pool.double().numpy()
    eta = float(np.median(P.nn_distances(pool)))
    emp = {r["bound"]: r for r in rows if r["prior"] == "empirical"}
    assert emp["rdp"]["eta"] == pytest.approx(eta)
    k = float(P.kappa_empirical(pool, [eta])[0])
    assert emp["rdp"]["kappa"] == k
    # γ recomputed independently of the product code from the record
    o, r = A.rdp_curve(rec.noise_multiplier, rec.sample_rate, rec.steps)
    o, r = np.asarray(o, dtype=float), np.asarray(r, dtype=float)  # Thm. 2 written out here
    by_hand = math.exp(float(np.min((o - 1) / o * (math.log(k) + r))))
    assert emp["rdp"]["gamma"] == pytest.approx(min(1.0, max(k, by_hand)), rel=1e-12)
    assert emp["eps_delta_dp"]["gamma"] == pytest.approx(min(1.0, k * math.exp(rec.epsilon) + rec.delta))
    assert sum(r.get("tightest", False) for r in emp.values()) == 1
    # κ centred on pool points estimates the sup over all centres: γ is labelled not rigorous,
    # and the same bound with the conservative κ (2η) rides along as the guarantee
    assert not any(r["rigorous"] for r in emp.values())
    assert all(r["gamma_rigorous"] is None or r["gamma_rigorous"] >= r["gamma"] for r in emp.values())
    fin = {r["bound"]: r for r in rows if r["prior"] == "finite"}
    assert fin["rdp"]["kappa"] == 0.1 and fin["rdp"]["eta"] is None
    for r in rows:
        assert r["kappa"] <= r["gamma"] <= 1.0 and r["vacuous"] == (r["gamma"] >= 1.0)
        assert r["metric"].startswith(f"rero_gamma_{r['prior']}_{r['bound']}")
    assert (tmp_path / "rero_gamma_vs_epsilon.png").stat().st_size > 10_000


def test_measured_above_bound_is_a_violation(dp_victim):
    s, v = dp_victim
    eta = 0.5
    entries = [_attack("reconn", 0.0, 0.0, 0.05, eta), _attack("broken", 1.0, 0.99, 1.0, eta),
               _attack("kkt", 1.0, 0.99, 1.0, eta, comparable=0.0)]  # best-of-many: not checked
    ok, bad = check_rows(s, v, entries, A.Privacy.from_record(v.truth.train_record.dp))
    assert not ok["violation"] and ok["within_bound"] and ok["gamma"] < 0.99
    assert bad["violation"] and "ReRo bound violated: broken" in bad["message"]
    assert bad["kappa_upper"] >= bad["kappa"]


def test_no_dp_means_no_guarantee(tmp_path):
    from victims.build import build_victim

    s = scenario_from_dict(make_scenario(rero={"priors": [{"kind": "gaussian"}], "eta": [1.0, 2.0]}))
    s.victim.training.epochs = 1
    rows = rero_section(s, build_victim(s), [_attack("reconn", 1.0, 0.9, 1.0, 1.0)], tmp_path)
    assert [r["bound"] for r in rows] == ["none", "none", "check:reconn"]
    assert all(r["gamma"] == 1.0 and r["vacuous"] and "no guarantee" in r["note"] for r in rows)
    assert not rows[-1]["violation"]


def test_run_logs_rero_to_mlflow(tracking_uri, tmp_path):
    import mlflow

    from harness.run.runner import run_scenario

    s = scenario_from_dict(make_scenario(defenses=DP, rero={"priors": [{"kind": "empirical"}]},
                                         attacks=[{"name": "span_nonadaptive"}],
                                         tracking={"enabled": True, "experiment": "rero"}))
    s.victim.training.epochs = 2
    rep = run_scenario(s, tracking_uri=tracking_uri, out=tmp_path / "out")
    assert rep["rero"] and "rero_violations" not in rep
    run = mlflow.MlflowClient(tracking_uri).get_run(rep["mlflow_run_id"])
    logged = {k: v for k, v in run.data.metrics.items() if k.startswith("rero_gamma_")}
    assert logged == {r["metric"]: pytest.approx(r["gamma"]) for r in rep["rero"] if "metric" in r}
    arts = [a.path for a in mlflow.MlflowClient(tracking_uri).list_artifacts(rep["mlflow_run_id"])]
    assert "rero_gamma_vs_epsilon.png" in arts


def test_cli_bound_json_and_errors():
    from harness.cli import main

    r = CliRunner().invoke(main, ["bound", "--epsilon", "8", "--delta", "1e-5", "--prior", "uniform-ball",
                                  "--dim", "64", "--radius", "1", "--eta", "0.5", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["kappa"] == pytest.approx(0.5**64, rel=1e-12)
    assert out["gamma"] == pytest.approx(0.5**64 * math.exp(8) + 1e-5, rel=1e-12)
    r = CliRunner().invoke(main, ["bound", "--noise-multiplier", "1.1", "--sample-rate", "0.064",
                                  "--steps", "470", "--prior", "gaussian", "--dim", "64", "--sigma", "1",
                                  "--eta", "4", "--json"])
    out = json.loads(r.output)
    kinds = {b["kind"]: b for b in out["bounds"]}
    assert set(kinds) == {"rdp", "zcdp", "profile", "gdp"} and not kinds["gdp"]["rigorous"]
    assert out["gamma"] == min(b["gamma"] for b in out["bounds"] if b["rigorous"])
    assert out["kappa_closed_form"] >= out["kappa"]
    r = CliRunner().invoke(main, ["bound", "--prior", "finite", "--size", "10"])
    assert r.exit_code == 0 and "no guarantee" in r.output
    r = CliRunner().invoke(main, ["bound", "--prior", "gaussian", "--dim", "3", "--eta", "1",
                                  "--epsilon", "1"])
    assert r.exit_code == 2 and "--sigma" in r.output
    r = CliRunner().invoke(main, ["bound", "--noise-multiplier", "1", "--kappa", "0.1"])
    assert r.exit_code == 2 and "go together" in r.output
