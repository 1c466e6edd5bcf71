"""Regression-scan logic (harness/scan/baseline.py): baseline choice and refusal, the diff, tolerances."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from conftest import message_lines

from harness.cli import main
from harness.core.errors import BadInput
from harness.scan.baseline import Tolerance, compare, direction, find_baseline, parse_tolerances
from harness.scenario import scenario_from_dict


def report(risk: str, angle: float, rank: float = 16.0, queries: float = 3000.0) -> dict:
    return {"risk": risk, "attacks": [
        {"name": "span_nonadaptive", "status": "ok", "risk": risk,
         "metrics": {"recovered_rank": rank, "max_principal_angle_deg": angle, "queries": queries,
                     "spectral_gap": 3.0}},
        {"name": "skipped_one", "status": "skipped", "risk": None, "metrics": {}},
    ]}


def statuses(rows) -> dict:
    return {(r["attack"], r["metric"]): r["status"] for r in rows}


def test_directions_of_known_metrics():
    assert direction("recovered_rank") == 1 and direction("blackbox_agreement") == 1
    assert direction("max_principal_angle_deg") == -1 and direction("blackbox_heldout_angle_deg") == -1
    assert direction("queries") == 0 and direction("true_rank") == 0 and direction("spectral_gap") == 0


def test_compare_flags_rising_risk_and_metrics_beyond_tolerance_only():
    base = report("medium", angle=10.0)
    assert not any(r["status"] == "regressed" for r in compare(base, base, Tolerance()))
    st = statuses(compare(report("medium", angle=9.6, queries=10.0), base, Tolerance(rel=0.05)))
    assert st[("span_nonadaptive", "max_principal_angle_deg")] == "same"  # 4 % < 5 %
    assert ("span_nonadaptive", "queries") not in st and ("span_nonadaptive", "spectral_gap") not in st
    st = statuses(compare(report("medium", angle=9.0), base, Tolerance(rel=0.05)))
    assert st[("span_nonadaptive", "max_principal_angle_deg")] == "regressed"  # the angle fell 10 %
    st = statuses(compare(report("medium", angle=11.0), base, Tolerance(rel=0.05)))
    assert st[("span_nonadaptive", "max_principal_angle_deg")] == "improved"
    st = statuses(compare(report("high", angle=10.0), base, Tolerance()))
    assert st[("(overall)", "risk")] == st[("span_nonadaptive", "risk")] == "regressed"
    st = statuses(compare(report("low", angle=10.0), base, Tolerance()))
    assert st[("(overall)", "risk")] == "improved"


def test_tolerances_parse_and_apply():
    tol = parse_tolerances(["0.2", "max_principal_angle_deg=3", "floor=0.5"])
    assert tol.rel == 0.2 and tol.floor == 0.5
    assert tol.allowed("span_nonadaptive", "max_principal_angle_deg", 10.0) == 3.0
    assert tol.allowed("span_nonadaptive", "recovered_rank", 1.0) == 0.5  # the floor
    st = statuses(compare(report("medium", angle=7.5), report("medium", angle=10.0), tol))
    assert st[("span_nonadaptive", "max_principal_angle_deg")] == "same"  # 2.5 < 3 absolute
    with pytest.raises(BadInput, match="--tolerance"):
        parse_tolerances(["lots"])
    with pytest.raises(BadInput, match="must be >= 0"):
        parse_tolerances(["-1"])


def _scenario(name="scan-t", sigma=0.0):
    d = {"name": name, "device": "cpu", "tracking": {"experiment": "scans"},
         "victim": {"endpoint": {"url": "http://127.0.0.1:9/invocations", "input_dim": 4}},
         "defenses": {"output_noise": {"sigma": sigma}} if sigma else {}}
    return scenario_from_dict(d)


def _run(client, exp, s, verdict: str) -> str:
    tags = {"leakmeter.scenario": s.name, "leakmeter.fingerprint": s.fingerprint(), "verdict": verdict}
    run = client.create_run(exp, tags=tags)
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


def test_baseline_choice_and_refusal_of_incomparable_runs(tracking_uri):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = client.create_experiment("scans")
    s, other_fp, other_name = _scenario(), _scenario(sigma=0.1), _scenario(name="another")
    assert find_baseline(s, tracking_uri, "last-pass") is None
    old_pass = _run(client, exp, s, "pass")
    last_fail = _run(client, exp, s, "fail")
    foreign = _run(client, exp, other_fp, "pass")
    stranger = _run(client, exp, other_name, "pass")
    assert find_baseline(s, tracking_uri, "last-pass").info.run_id == old_pass
    assert find_baseline(s, tracking_uri, "last").info.run_id == last_fail
    assert find_baseline(s, tracking_uri, old_pass).info.run_id == old_pass
    assert find_baseline(s, tracking_uri, "none") is None
    with pytest.raises(BadInput, match="fingerprint.*incomparable"):
        find_baseline(s, tracking_uri, foreign)
    with pytest.raises(BadInput, match="scenario 'another'.*incomparable"):
        find_baseline(s, tracking_uri, stranger)
    with pytest.raises(BadInput, match="no MLflow run"):
        find_baseline(s, tracking_uri, "0" * 32)
    with pytest.raises(BadInput, match="not a run id"):
        find_baseline(s, tracking_uri, "yesterday")


def test_cli_scan_refuses_an_incomparable_baseline_before_any_query(tmp_path, tracking_uri):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = client.create_experiment("scans")
    foreign = _run(client, exp, _scenario(sigma=0.1), "pass")
    f = tmp_path / "s.yaml"
    f.write_text("name: scan-t\ndevice: cpu\ntracking: {experiment: scans}\n"
                 "victim: {endpoint: {url: 'http://127.0.0.1:9/invocations', input_dim: 4}}\n")
    res = CliRunner().invoke(main, ["scan", str(f), "--tracking-uri", tracking_uri, "--baseline", foreign])
    assert res.exit_code == 2 and "refusing to compare incomparable runs" in res.output
    # as `run`: the first stage line says what loads, before torch; the refusal comes after it
    first = res.stderr.splitlines()[0]
    loading = rf"leakmeter: \[ *\d+\.\d s\] loading scan-t \({re.escape(str(f))}\): importing"
    assert re.match(loading, first), first
    res = CliRunner().invoke(main, ["scan", str(f), "--tolerance", "x=y"])
    assert res.exit_code == 2 and "--tolerance" in res.output
    assert res.stderr.strip().splitlines() == message_lines(res.stderr)  # refused before that line
