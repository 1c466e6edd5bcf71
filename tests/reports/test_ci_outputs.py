"""SARIF 2.1.0 (code scanning) and JUnit XML (CI test reports): structure checked against a schema
subset written from the SARIF specification and against the JUnit elements CI servers read;
results point at the scenario line that asks for each attack; a real `leakmeter run` writes both."""

import hashlib
import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest
import yaml
from conftest import make_scenario

from reports.junit import to_junit, write_junit
from reports.sarif import fingerprint, to_sarif

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-2.1.0-subset.schema.json").read_text())

SCENARIO_TEXT = """\
# a deployment under test
name: synth
seed: 0
interface: {kind: gradient, output: probabilities}
attacks:
  - name: span_nonadaptive
  - name: gradient_exact
    params: {eps: 1.0e-9}
  - {name: surrogate}
  - name: reconn
  - name: kkt
  - name: span_threshold
policy: {fail_on: high}
"""


def attack(name, family, status, risk, **kw):
    base = {"name": name, "family": family, "paper": "003 Sec. 3.1, Alg. 1", "status": status, "risk": risk,
            "reason": f"{name} reason", "queries": 100, "wall_s": 0.25, "metrics": {}, "stopped_by": None}
    return {**base, **kw}


def synth_report():
    return {
        "scenario": "synth", "verdict": "fail", "risk": "high", "policy": {"fail_on": "high"},
        "started_at": "2026-01-01T00:00:00Z", "interface": {"kind": "gradient", "output": "probabilities"},
        "attacks": [
            attack("span_nonadaptive", "span", "ok", "high", queries=300,
                   metrics={"recovered_rank": 16.0, "true_rank": 16.0, "max_principal_angle_deg": 0.01,
                            "heldout_residual": float("nan"), "spectral_gap": float("inf")}),
            attack("gradient_exact", "extraction", "incomplete", "low", stopped_by="precision"),
            attack("surrogate", "extraction", "ok", "medium",
                   metrics={"fidelity": 0.93, "queries_to_90": 80.0}),
            attack("reconn", "reconstruction", "error", None, reason="ValueError: boom"),
            attack("kkt", "reconstruction", "ok", "low", metrics={"success_rate": 0.0}),
            attack("span_threshold", "span", "skipped", None, queries=0, reason="needs a label-only API"),
        ],
    }


def line_of(text, needle):
    """1-based line of the first line containing `needle` (independent of reports.sarif's YAML walk)."""
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


@pytest.fixture
def scenario_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scenarios").mkdir()
    p = tmp_path / "scenarios" / "synth.yaml"
    p.write_text(SCENARIO_TEXT)
    return p


def test_sarif_names_the_scenario_from_the_repository_root_and_no_machine_path(tmp_path, monkeypatch):
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    scen = tmp_path / "repo" / "ci" / "scenarios" / "s.yaml"
    scen.parent.mkdir(parents=True)
    scen.write_text(SCENARIO_TEXT)
    monkeypatch.chdir(scen.parent)  # run from a subfolder of the checkout
    log = to_sarif([(None, synth_report())], "s.yaml")
    jsonschema.validate(log, SCHEMA)
    loc = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert loc == {"uri": "ci/scenarios/s.yaml", "uriBaseId": "%SRCROOT%"}
    assert str(tmp_path) not in json.dumps(log) and "file://" not in json.dumps(log)


def test_sarif_validates_and_has_one_result_per_finding_at_its_line(scenario_file):
    log = to_sarif([(None, synth_report())], scenario_file)
    jsonschema.validate(log, SCHEMA)
    json.dumps(log, allow_nan=False)  # NaN / inf metrics left out: the file is strict JSON
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [f"leakmeter/{a['name']}" for a in synth_report()["attacks"]]
    by_rule = {r["ruleId"]: r for r in run["results"]}
    # findings only: high → error, medium → warning, unfinished → note, crashed → warning;
    # ok/low (kkt) and skipped (span_threshold) are no finding
    assert {k.split("/")[1]: r["level"] for k, r in by_rule.items()} == {
        "span_nonadaptive": "error", "surrogate": "warning", "gradient_exact": "note", "reconn": "warning"}
    for rid, r in by_rule.items():
        name = rid.split("/")[1]
        assert rules[r["ruleIndex"]]["id"] == rid
        loc = r["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"] == {"uri": "scenarios/synth.yaml", "uriBaseId": "%SRCROOT%"}
        assert loc["region"]["startLine"] == line_of(SCENARIO_TEXT, f"name: {name}")
    message = by_rule["leakmeter/span_nonadaptive"]["message"]["text"]
    assert "16 of 16 span dimensions leaked in 300 queries" in message
    assert by_rule["leakmeter/span_nonadaptive"]["properties"]["metrics"] == {
        "recovered_rank": 16.0, "true_rank": 16.0, "max_principal_angle_deg": 0.01}
    span = rules[0]
    assert "external/cwe/cwe-200" in span["properties"]["tags"] and "security" in span["properties"]["tags"]
    assert "Jayaram, Woodruff, Zhang" in span["help"]["markdown"] and "**high**" in span["help"]["markdown"]
    assert "**" not in span["help"]["text"]
    assert run["automationDetails"]["id"] == "leakmeter/synth/"
    assert run["properties"]["verdict"] == "fail"


def test_sarif_fingerprints_are_stable_and_tell_findings_apart(scenario_file):
    rep = synth_report()
    first = to_sarif([(None, rep)], scenario_file)["runs"][0]["results"]
    rep["attacks"][0]["metrics"]["recovered_rank"] = 12.0  # the same finding measured differently
    rep["attacks"][0]["queries"] = 999
    again = to_sarif([(None, rep)], scenario_file)["runs"][0]["results"]
    fps = [r["partialFingerprints"]["leakmeterFinding/v1"] for r in first]
    assert fps == [r["partialFingerprints"]["leakmeterFinding/v1"] for r in again]
    assert len(set(fps)) == len(fps)
    assert fps[0] == fingerprint("synth", "span_nonadaptive", "recovered_rank")
    assert fingerprint("other", "span_nonadaptive", "recovered_rank") != fps[0]
    assert fingerprint("synth", "span_nonadaptive", "recovered_rank", "epsilon=1, seed=0") != fps[0]


@pytest.mark.parametrize("text, key", [
    ("name: synth\ninterface: {kind: gradient}\nattacks: all\n", "attacks:"),
    ("name: synth\n\ninterface:\n  kind: gradient\n", "interface:"),
])
def test_sarif_points_at_attacks_or_interface_without_a_list(tmp_path, monkeypatch, text, key):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "s.yaml"
    p.write_text(text)
    log = to_sarif([(None, synth_report())], p)
    lines = {r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in log["runs"][0]["results"]}
    assert lines == {line_of(text, key)}


def test_the_schema_rejects_what_code_scanning_would_not_show(scenario_file):
    """Control: without a start line, a security tag or a message, the subset schema says no."""
    log = to_sarif([(None, synth_report())], scenario_file)
    def first_result(lg):
        return lg["runs"][0]["results"][0]

    for breaks in (lambda lg: first_result(lg)["locations"][0]["physicalLocation"].pop("region"),
                   lambda lg: lg["runs"][0]["tool"]["driver"]["rules"][0]["properties"].pop("tags"),
                   lambda lg: first_result(lg)["message"].update(text=""),
                   lambda lg: lg.update(version="2.0.0")):
        bad = json.loads(json.dumps(log))
        breaks(bad)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, SCHEMA)


# --------------------------------------------------------------------------- JUnit

TESTSUITE_ATTRS = {"name", "tests", "failures", "errors", "skipped", "time"}
TESTCASE_ATTRS = {"name", "classname", "time"}
CASE_CHILDREN = {"failure", "error", "skipped", "system-out", "system-err"}


def check_junit_structure(root):
    """The JUnit shape Jenkins, GitLab and CircleCI read: <testsuites> of <testsuite> of <testcase>,
    counts that add up, at most one outcome element per case."""
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert suites and all(TESTSUITE_ATTRS <= set(s.attrib) for s in suites)
    for s in suites:
        cases = s.findall("testcase")
        assert int(s.get("tests")) == len(cases)
        for kind, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
            assert int(s.get(attr)) == sum(len(c.findall(kind)) for c in cases)
        for c in cases:
            assert TESTCASE_ATTRS <= set(c.attrib) and float(c.get("time")) >= 0
            assert {e.tag for e in c} <= CASE_CHILDREN
            assert sum(len(c.findall(k)) for k in ("failure", "error", "skipped")) <= 1
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in suites)
    return suites


def outcome(case):
    for kind in ("failure", "error", "skipped"):
        el = case.find(kind)
        if el is not None:
            return kind, el.get("message")
    return "passed", None


def test_junit_maps_outcomes_and_keys_cases_by_classname_and_name(tmp_path):
    p = write_junit(tmp_path / "r.xml", [(None, synth_report())])
    (suite,) = check_junit_structure(ET.parse(p).getroot())
    cases = {(c.get("classname"), c.get("name")): outcome(c) for c in suite.findall("testcase")}
    assert cases[("leakmeter.synth.span", "span_nonadaptive")][0] == "failure"
    assert cases[("leakmeter.synth.extraction", "surrogate")][0] == "passed"  # medium < fail_on high
    assert cases[("leakmeter.synth.extraction", "gradient_exact")] == (
        "skipped", "incomplete (stopped by precision; risk low): gradient_exact reason")
    assert cases[("leakmeter.synth.reconstruction", "reconn")] == ("error", "ValueError: boom")
    assert cases[("leakmeter.synth.reconstruction", "kkt")][0] == "passed"
    assert cases[("leakmeter.synth.span", "span_threshold")] == ("skipped", "needs a label-only API")
    props = {e.get("name"): e.get("value") for e in suite.find("properties")}
    assert props["verdict"] == "fail" and suite.get("timestamp") == "2026-01-01T00:00:00Z"
    out = json.loads(suite.find("testcase").find("system-out").text)
    assert out["metrics"]["recovered_rank"] == 16.0 and out["metrics"]["heldout_residual"] is None


def test_junit_policy_never_fails_nothing_and_a_crashed_run_is_an_error():
    rep = synth_report()
    rep["policy"] = {"fail_on": "never"}
    rep["error"] = "KeyboardInterrupt: "
    root = ET.fromstring(to_junit([("epsilon=1, seed=0", rep)]).tostring())
    (suite,) = check_junit_structure(root)
    assert suite.get("name") == "leakmeter synth [epsilon=1, seed=0]"
    kinds = [outcome(c)[0] for c in suite.findall("testcase")]
    assert "failure" not in kinds and kinds.count("error") == 2  # reconn and the run itself


def test_writers_tolerate_reports_from_before_the_verdict_fields(scenario_file, tmp_path):
    old = {"scenario": "old", "verdict": "pass", "attacks": [
        {"name": "span_nonadaptive", "status": "ok", "risk": "high", "queries": 5},
        {"name": "x"}]}
    jsonschema.validate(to_sarif([(None, old)], scenario_file), SCHEMA)
    check_junit_structure(ET.parse(write_junit(tmp_path / "o.xml", [(None, old)])).getroot())


# --------------------------------------------------------------------------- a real run

def leakmeter(*args):
    from click.testing import CliRunner

    from harness.cli import main

    return CliRunner().invoke(main, list(args))


TINY = make_scenario(name="tiny", attacks=[{"name": "span_nonadaptive"}, {"name": "span_threshold"}],
                     defenses={"query_budget": 400})


def test_run_writes_sarif_junit_and_run_metadata(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scen = tmp_path / "tiny.yaml"
    scen.write_text("# tiny\n" + yaml.safe_dump(TINY, sort_keys=False))
    before = datetime.now(UTC)
    res = leakmeter("run", str(scen), "--out", "out", "--json", "r.json", "--sarif", "r.sarif",
                    "--junit", "r.xml")
    assert res.exit_code == 1, res.output  # the full span leaks: fail
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["scenario_sha256"] == hashlib.sha256(scen.read_bytes()).hexdigest()
    started = datetime.fromisoformat(report["started_at"].replace("Z", "+00:00"))
    assert before.replace(microsecond=0) <= started <= datetime.now(UTC)
    assert 0 < report["duration_s"] <= (datetime.now(UTC) - before).total_seconds() + 1
    assert report["device"] == "cpu" and report["leakmeter_version"]
    log = json.loads((tmp_path / "r.sarif").read_text())
    jsonschema.validate(log, SCHEMA)
    (result,) = log["runs"][0]["results"]  # span_threshold is skipped on a score API: no finding
    assert result["ruleId"] == "leakmeter/span_nonadaptive" and result["level"] == "error"
    text = scen.read_text()
    where = result["locations"][0]["physicalLocation"]
    assert where["region"]["startLine"] == line_of(text, "span_nonadaptive")
    assert where["artifactLocation"]["uri"] == "tiny.yaml"
    (suite,) = check_junit_structure(ET.parse(tmp_path / "r.xml").getroot())
    assert [(c.get("name"), outcome(c)[0]) for c in suite.findall("testcase")] == [
        ("span_nonadaptive", "failure"), ("span_threshold", "skipped")]


@pytest.mark.parametrize("flag", ["--sarif", "--junit"])
def test_a_missing_output_folder_is_bad_input_before_anything_runs(tmp_path, monkeypatch, flag):
    monkeypatch.chdir(tmp_path)
    scen = tmp_path / "tiny.yaml"
    scen.write_text(yaml.safe_dump(TINY, sort_keys=False))
    res = leakmeter("run", str(scen), flag, str(tmp_path / "nope" / "x.out"))
    assert res.exit_code == 2 and f"{flag}: folder" in res.stderr and "does not exist" in res.stderr
    assert not (tmp_path / "leakmeter-out").exists()  # nothing ran, no folder left behind
    res = leakmeter("sweep", str(scen), "--grid", "defenses.query_budget=1,2", flag, "nope/x.out")
    assert res.exit_code == 2 and f"{flag}: folder" in res.stderr


def test_rules_cite_papers_named_by_author_and_year(scenario_file):
    rep = {"scenario": "synth", "verdict": "fail", "policy": {"fail_on": "high"}, "attacks": [
        attack("dp_audit", "membership", "ok", "high",
               paper="Jagielski et al. 2020; Nasr et al. 2021; Steinke et al. 2023",
               metrics={"epsilon_lower": 2.1, "epsilon_claimed": 0.5, "epsilon_perfect": 6.0,
                        "audit_delta": 1e-5}),
        attack("mia_lira", "membership", "ok", "medium", paper="Carlini et al. 2022 Sec. IV",
               metrics={"auc": 0.61, "tpr_at_fpr_0.01": 0.04, "tpr_at_fpr_0.001": 0.01, "lr_low": 2.5})]}
    log = to_sarif([(None, rep)], scenario_file)
    jsonschema.validate(log, SCHEMA)
    audit, lira = log["runs"][0]["tool"]["driver"]["rules"]
    assert "external/cwe/cwe-693" in audit["properties"]["tags"]
    assert all(who in audit["help"]["markdown"] for who in ("Jagielski, Ullman, Oprea", "Steinke, Nasr"))
    assert "Carlini, Chien, Nasr" in lira["help"]["markdown"] and "Sec. IV" in lira["help"]["markdown"]
    msg = {r["ruleId"]: r["message"]["text"] for r in log["runs"][0]["results"]}
    assert "ε ≥ 2.1 at 95%" in msg["leakmeter/dp_audit"]
    assert "above the claimed ε = 0.5" in msg["leakmeter/dp_audit"]
    assert "TPR 0.01 at 0.1% FPR and 0.04 at 1% FPR" in msg["leakmeter/mia_lira"]
