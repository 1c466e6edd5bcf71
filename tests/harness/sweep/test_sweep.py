"""Sweeps: the grid, `none`, a small real sweep with its CI outputs, and (slow) a real 2×2 digits
sweep that is killed, resumed and compared."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, make_scenario

from harness.core.errors import BadInput
from harness.scenario import scenario_from_dict
from harness.sweep.grid import Cell, apply_cell, make_cells, parse_grid, plan_sweep, sweep_id_of

SCENARIO = REPO / "scenarios" / "sweep-digits.yaml"
GRID = ["--grid", "defenses.dp_sgd.epsilon=1,none", "--grid", "defenses.query_budget=8,200"]
SMALL = ["--set", "victim.data.n_train=300", "--set", "victim.training.epochs=5"]
CLI = [sys.executable, "-c", "from harness.cli import main; main()"]


def test_parse_grid_types_and_errors():
    g = parse_grid(["defenses.dp_sgd.epsilon=1,4.5,none", "defenses.query_budget=1e3,1e4"])
    assert g == {"defenses.dp_sgd.epsilon": [1, 4.5, None], "defenses.query_budget": [1000, 10000]}
    for bad in (["novalue"], ["a="], ["a=1", "a=2"], ["a=1,1"], ["seed=1,2"]):
        with pytest.raises(BadInput):
            parse_grid(bad)


def test_cells_are_the_product_times_seeds():
    cells = make_cells({"a": [1, 2], "b": ["x", None]}, [0, 1])
    assert len(cells) == 8 and len({c.key() for c in cells}) == 8
    assert cells[0].settings == {"a": 1, "b": "x"} and [c.seed for c in cells[:2]] == [0, 1]


def test_none_removes_an_optional_section_or_nulls_a_value():
    raw = make_scenario(defenses={"dp_sgd": {"epsilon": 1.0}, "query_budget": 50,
                                  "output_noise": {"sigma": 0.1}})
    d = apply_cell(raw, Cell({"defenses.dp_sgd.epsilon": None, "defenses.query_budget": None,
                              "defenses.output_noise.sigma": None}, 3))
    s = scenario_from_dict(d)
    assert s.defenses.dp_sgd is None and s.defenses.query_budget is None and s.defenses.output_noise is None
    assert s.seed == 3 and raw["defenses"]["dp_sgd"] == {"epsilon": 1.0}  # the input is untouched
    # a value given: set, creating the section when absent
    d = apply_cell(make_scenario(),
                   Cell({"defenses.dp_sgd.epsilon": 2.0, "defenses.rounding.decimals": None}, 0))
    s = scenario_from_dict(d)
    assert s.defenses.dp_sgd.epsilon == 2.0 and s.defenses.rounding is None
    # none on a DP section that stays valid (noise multiplier given) only nulls the key
    d = apply_cell(make_scenario(defenses={"dp_sgd": {"noise_multiplier": 1.0}}),
                   Cell({"defenses.dp_sgd.epsilon": None}, 0))
    assert scenario_from_dict(d).defenses.dp_sgd.noise_multiplier == 1.0


def test_plan_rejects_bad_cells_by_name():
    raw = make_scenario(attacks=[{"name": "span_nonadaptive"}])
    with pytest.raises(BadInput, match=r"cell defenses.query_budget=-5, seed=0: .*query_budget"):
        plan_sweep(raw, "s.yaml", ["defenses.query_budget=10,-5"], 1)
    with pytest.raises(BadInput, match="unknown key"):
        plan_sweep(raw, "s.yaml", ["defenses.nonsense=1"], 1)
    p = plan_sweep(raw, "s.yaml", ["defenses.query_budget=10,20"], 2)
    assert len(p.cells) == 4 and [s.seed for s in p.scenarios] == [0, 1, 0, 1]
    assert p.sweep_id == sweep_id_of(raw, p.grid, [0, 1]) != sweep_id_of(raw, p.grid, [0])


# --------------------------------------------------------------------------- the 2×2 digits sweep


def leakmeter(*args):
    """Run the CLI in this process (no interpreter start-up); returns click's Result."""
    from click.testing import CliRunner

    from harness.cli import main

    return CliRunner().invoke(main, list(args))


def _client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _done_cells(client, exp_name):
    exp = client.get_experiment_by_name(exp_name)
    if exp is None:
        return []
    return list(client.search_runs([exp.experiment_id], "tags.`leakmeter.cell_done` = '1'"))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """Run the 2×2 sweep, SIGKILL it after its first finished cell, then resume it."""
    tmp = tmp_path_factory.mktemp("sweep")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    env = {**os.environ, "LEAKMETER_THREADS": "1", "TQDM_DISABLE": "1"}
    client = _client(uri)
    client.search_experiments()  # create the store now, not concurrently with the sweep process
    cmd = [*CLI, "sweep", str(SCENARIO), *GRID, *SMALL, "--tracking-uri", uri, "--out", str(tmp / "out")]
    proc = subprocess.Popen([*cmd, "--jobs", "1"], cwd=tmp, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    before = []
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
            try:
                before = _done_cells(client, "leakmeter-sweep")
            except Exception:  # noqa: BLE001 - the store may still be being created
                before = []
            if before:
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its worker processes, mid-sweep
        first_output = proc.communicate()[0]
    assert before, f"no cell finished before the deadline:\n{first_output[-3000:]}"
    before = {r.data.tags["leakmeter.cell"]: r.info.run_id for r in _done_cells(client, "leakmeter-sweep")}
    ci = ["--junit", str(tmp / "sweep.xml"), "--sarif", str(tmp / "sweep.sarif")]
    resumed = subprocess.run([*cmd, "--jobs", "2", *ci], cwd=tmp, env=env, capture_output=True, text=True,
                             timeout=600)
    return {"tmp": tmp, "uri": uri, "before": before, "resumed": resumed, "client": client}


@pytest.mark.slow  # spawns the CLI twice and kills it: ~75 s on 2 shared cores
def test_interrupted_sweep_resumes_without_redoing_finished_cells(swept):
    res, before, client = swept["resumed"], swept["before"], swept["client"]
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 1 <= len(before) < 4, "the interruption must leave unfinished cells"
    assert "resuming sweep" in res.stdout
    assert f"{len(before)} skipped (finished before), {4 - len(before)} to run" in res.stdout
    done = _done_cells(client, "leakmeter-sweep")
    keys = [r.data.tags["leakmeter.cell"] for r in done]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 4  # each cell finished exactly once
    for key, run_id in before.items():  # the cells finished before the kill were not run again
        assert {r.info.run_id for r in done if r.data.tags["leakmeter.cell"] == key} == {run_id}
    exp = client.get_experiment_by_name("leakmeter-sweep")
    assert not list(client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'"))
    sweeps = list(client.search_runs([exp.experiment_id], "tags.`leakmeter.kind` = 'sweep'"))
    assert len(sweeps) == 1 and sweeps[0].info.status == "FINISHED"
    for r in done:  # nested under the one sweep run, params = the cell's settings, HTML report logged
        assert r.data.tags["mlflow.parentRunId"] == sweeps[0].info.run_id
        cell = json.loads(r.data.tags["leakmeter.cell"])["settings"]
        assert r.data.params["sweep.defenses.query_budget"] == str(cell["defenses.query_budget"])
        eps = cell["defenses.dp_sgd.epsilon"]
        assert r.data.params["sweep.defenses.dp_sgd.epsilon"] == ("none" if eps is None else str(eps))
        assert "report.html" in {a.path for a in client.list_artifacts(r.info.run_id)}


def _expected_from_reports(out: Path):
    """Independently of compare: the most accurate cell whose verdict passes, from the report files."""
    reports = [json.loads(p.read_text()) for p in sorted(out.glob("cell-*/report.json"))]
    assert len(reports) == 4
    cells = [{"eps": None if r["privacy"] is None else r["privacy"]["target_epsilon"],
              "budget": r["query_budget"], "acc": r["victim"]["test_accuracy"], "verdict": r["verdict"]}
             for r in reports]
    passing = [c for c in cells if c["verdict"] == "pass"]
    best = max(passing, key=lambda c: c["acc"])
    assert sum(c["acc"] == best["acc"] for c in passing) == 1, "the expectation must be unique"
    # the test means something only if the most accurate cell overall fails the policy
    assert max(cells, key=lambda c: c["acc"])["acc"] >= best["acc"]
    assert any(c["verdict"] == "fail" and c["acc"] >= best["acc"] for c in cells)
    return {"defenses.dp_sgd.epsilon": best["eps"], "defenses.query_budget": best["budget"]}


@pytest.mark.slow  # spawns the CLI twice and kills it: ~75 s on 2 shared cores
def test_compare_recommends_the_most_useful_passing_cell(swept):
    tmp, uri, client = swept["tmp"], swept["uri"], swept["client"]
    expected = _expected_from_reports(tmp / "out")
    assert expected == {"defenses.dp_sgd.epsilon": None, "defenses.query_budget": 8}
    exp = client.get_experiment_by_name("leakmeter-sweep")
    sweeps = client.search_runs([exp.experiment_id], "tags.`leakmeter.kind` = 'sweep'")
    sweep_id = sweeps[0].info.run_id
    out = leakmeter("compare", sweep_id, "--tracking-uri", uri, "--json", str(tmp / "c.json"),
                    "--markdown", str(tmp / "c.md"), "--out", str(tmp / "cmp"))
    assert out.exit_code == 0, out.stderr[-3000:]
    cmp = json.loads((tmp / "c.json").read_text())
    assert cmp["recommended"]["settings"] == expected
    assert "recommended: epsilon=none, query_budget=8" in out.stdout
    assert "| * epsilon=none, query_budget=8 |" in (tmp / "c.md").read_text()
    # every cell scores a span: under a budget of 8 the noise check asks one point twice (coarse)
    assert len(cmp["cells"]) == 4 and all(c["attacks"]["span_nonadaptive"]["metric"] for c in cmp["cells"])
    # logged back to MLflow: the comparison and its plots, referenced from the sweep run
    names = {a.path for a in client.list_artifacts(sweep_id, "compare")}
    assert {"compare/compare.json", "compare/compare.md", "compare/plots"} <= names
    plots = {a.path for a in client.list_artifacts(sweep_id, "compare/plots")}
    assert {"compare/plots/utility_vs_epsilon.png", "compare/plots/attack_success_vs_epsilon.png"} <= plots
    png = client.download_artifacts(sweep_id, "compare/plots/utility_vs_epsilon.png", str(tmp))
    assert Path(png).read_bytes()[:4] == b"\x89PNG"
    assert client.get_run(sweep_id).data.tags["leakmeter.recommended"] == cmp["recommended"]["label"]


@pytest.mark.slow  # spawns the CLI twice and kills it: ~75 s on 2 shared cores
def test_compare_experiment_finds_the_varying_settings(swept):
    tmp, uri = swept["tmp"], swept["uri"]
    out = leakmeter("compare", "--experiment", "leakmeter-sweep", "--tracking-uri", uri,
                    "--json", str(tmp / "e.json"), "--out", str(tmp / "cmp-e"))
    assert out.exit_code == 0, out.stderr[-3000:]
    cmp = json.loads((tmp / "e.json").read_text())
    assert cmp["keys"] == ["defenses.dp_sgd.epsilon", "defenses.query_budget"]
    assert cmp["recommended"]["settings"] == _expected_from_reports(tmp / "out")
    bad = leakmeter("compare", "--experiment", "nope", "--tracking-uri", uri)
    assert bad.exit_code == 2 and "no such experiment" in bad.stderr
    assert leakmeter("compare", "--tracking-uri", uri).exit_code == 2


def test_curves_are_read_from_the_attack_runs_of_a_cell(tracking_uri):
    from harness.sweep.compare import _curves
    from reports.tracking import Tracker

    tr = Tracker(tracking_uri, "curves", True)
    cell = tr.start("cell")
    atk = tr.start("surrogate", {"leakmeter.attack": "surrogate"}, parent=cell)
    tr.curve(atk, "fidelity", [(1, 0.2), (10, 0.6), (100, 0.9)])
    tr.metrics(atk, {"queries": 100.0})
    tr.end(atk)
    tr.end(cell)
    pts = [(1, 0.2), (10, 0.6), (100, 0.9)]
    assert _curves(tr.client, tr.experiment_id, cell) == {"surrogate/fidelity": pts}


@pytest.mark.slow  # spawns the CLI twice and kills it: ~75 s on 2 shared cores
def test_resumed_sweep_writes_one_junit_suite_per_cell_and_sarif(swept):
    """The CI outputs cover every cell, the ones finished before the interruption included."""
    import xml.etree.ElementTree as ET

    tmp = swept["tmp"]
    suites = ET.parse(tmp / "sweep.xml").getroot().findall("testsuite")
    labels = sorted(s.get("name") for s in suites)
    assert labels == sorted(f"leakmeter sweep-digits [{c.label()}]" for c in
                            make_cells(parse_grid(GRID[1::2]), [0]))
    for s in suites:
        # the span attack; a budget stop of 8 queries adds the budget check's surrogate
        cases = {c.get("name"): c for c in s.findall("testcase")}
        expected = {"span_nonadaptive"} | ({"surrogate"} if "query_budget=8" in s.get("name") else set())
        assert set(cases) == expected, s.get("name")
        case = cases["span_nonadaptive"]
        assert case.get("classname") == "leakmeter.sweep-digits.span"
        verdict = {p.get("name"): p.get("value") for p in s.find("properties")}["verdict"]
        assert any(c.find("failure") is not None for c in cases.values()) == (verdict == "fail")
    log = json.loads((tmp / "sweep.sarif").read_text())
    results = log["runs"][0]["results"]
    risks = {(s.get("name").split(" [")[1][:-1], c.get("name")): json.loads(c.find("system-out").text)["risk"]
             for s in suites for c in s.findall("testcase")}
    level = {"high": "error", "medium": "warning"}
    # one result per cell and attack that reached medium or high, at the level of its risk
    assert {(r["properties"]["cell"], r["ruleId"].rsplit("/", 1)[-1]): r["level"] for r in results} == {
        key: level[risk] for key, risk in risks.items() if risk in level}
    assert "high" in risks.values()
    assert all("Measured in this sweep" in r["message"]["text"] for r in results)


def test_small_sweep_compares_and_writes_ci_outputs(tmp_path, _mlflow_template, monkeypatch):
    """Two cells (budget 8 and 200) run in a worker process from the CLI: the comparison
    recommends the budget that stops the attack, the JUnit file has one suite per cell, and the
    SARIF results carry what the sweep measured."""
    import shutil
    import xml.etree.ElementTree as ET

    monkeypatch.chdir(tmp_path)
    shutil.copy(_mlflow_template, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    res = leakmeter("sweep", str(SCENARIO), "--grid", "defenses.query_budget=8,200", *SMALL,
                    "--set", "defenses.dp_sgd=none", "--tracking-uri", uri, "--out", "out",
                    "--junit", "s.xml", "--sarif", "s.sarif")
    assert res.exit_code == 0, res.output + res.stderr
    assert res.stderr.splitlines()[0].endswith(  # the first line, before torch and MLflow load
        f"] loading {SCENARIO} and its grid: importing torch and MLflow"), res.stderr[:500]
    assert "recommended: query_budget=8" in res.output
    suites = {s.get("name"): s for s in ET.parse(tmp_path / "s.xml").getroot().findall("testsuite")}
    assert set(suites) == {"leakmeter sweep-digits [defenses.query_budget=8, seed=0]",
                           "leakmeter sweep-digits [defenses.query_budget=200, seed=0]"}
    leaks = suites["leakmeter sweep-digits [defenses.query_budget=200, seed=0]"].find("testcase")
    held = suites["leakmeter sweep-digits [defenses.query_budget=8, seed=0]"].find("testcase")
    assert leaks.find("failure") is not None and held.find("failure") is None
    results = json.loads((tmp_path / "s.sarif").read_text())["runs"][0]["results"]
    by_cell = {r["properties"]["cell"]: r for r in results}
    assert by_cell["defenses.query_budget=200, seed=0"]["level"] == "error"
    text = by_cell["defenses.query_budget=200, seed=0"]["message"]["text"]
    assert ("Measured in this sweep (2 cells): defenses.query_budget = 8 kept this attack below high "
            "and 200 did not") in text
    assert "The query budget of 200 did not stop it" in text  # the cell's own settings, not the base file's
