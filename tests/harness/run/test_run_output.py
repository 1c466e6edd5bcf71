"""What a run leaves behind and prints: a line per stage on non-TTY output, third-party warnings and
MLflow's download bar kept off the terminal, no empty folders, MLflow curves that start where the
attack started, `compare --experiment` over list-valued settings, and `validate` on missing files."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import make_scenario

from harness.core.errors import BadInput
from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict

CLI = [sys.executable, "-c", "from harness.cli import main; main()"]
ENV = {**os.environ, "LEAKMETER_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[3])}


def leakmeter(*args):
    from click.testing import CliRunner

    from harness.cli import main

    return CliRunner().invoke(main, list(args))


def test_non_tty_run_prints_each_stage_and_keeps_warnings_in_the_report(tmp_path, tracking_uri):
    """stdout and stderr are pipes here, as under cron or CI: no bars, so a line per stage; Opacus'
    and PyTorch's warnings go to report.json, not between those lines."""
    scen = make_scenario(name="dp", attacks=[{"name": "span_nonadaptive"}], defenses={
        "dp_sgd": {"noise_multiplier": 1.0, "delta": 1e-5, "max_grad_norm": 1.0}, "query_budget": 200})
    scen["victim"]["data"]["n_train"] = 128
    scen["victim"]["training"].update(epochs=1, momentum=0.0)
    (tmp_path / "dp.yaml").write_text(yaml.safe_dump(scen))
    env = {k: v for k, v in ENV.items() if k not in ("CI", "PYTHONWARNINGS")}
    res = subprocess.run([*CLI, "run", "dp.yaml", "--out", "out", "--tracking-uri", tracking_uri],
                         cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    stages = [ln for ln in res.stderr.splitlines() if re.match(r"leakmeter: \[ *\d+\.\d s\] ", ln)]
    # the first line says what loads, before torch and MLflow are imported; then a line per stage,
    # the clock counting from the command's start (loading included)
    assert stages[0].endswith("] loading dp (dp.yaml): importing torch and MLflow"), stages
    assert stages[1].endswith("] dp: training the victim") and "dp: victim ready" in stages[2], stages
    assert float(stages[1].split("[")[1].split(" s]")[0]) > 0.5, stages  # torch & co. took time
    assert any(ln.endswith("] ReRo bounds") for ln in stages)  # what runs after the attacks says so
    assert any(ln.endswith("] writing report.json, report.md and report.html (with plots)") for ln in stages)
    # the summary: plain text when piped, no line over 100 columns, a line per attack and the verdict
    assert "\x1b[" not in res.stdout and max(len(ln) for ln in res.stdout.splitlines()) <= 100, res.stdout
    line = r"^  span_nonadaptive +ok +(low|medium|high) +rank \d+/\d+ "
    assert re.search(line, res.stdout, re.M), res.stdout
    assert re.search(r"^verdict: (pass|fail) \(risk ", res.stdout, re.M), res.stdout
    assert any(ln.endswith("attack 1/1 span_nonadaptive: running") for ln in stages), res.stderr
    done = next(ln for ln in stages if "attack 1/1 span_nonadaptive: ok" in ln)  # how it ended
    assert re.search(r"risk (low|medium|high), \d+ queries in \d+\.\d s$", done), done
    assert "Warning" not in res.stderr + res.stdout and "Secure RNG" not in res.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    caught = {w["message"].split(".")[0]: w for w in report["warnings"]}
    assert any("Secure RNG turned off" in m for m in caught), report["warnings"]
    assert all(w["category"].endswith("Warning") and w["count"] >= 1 for w in report["warnings"])
    # nothing empty left behind: every folder under the report holds a file
    assert all(any(d.iterdir()) for d in (tmp_path / "out").rglob("*") if d.is_dir())


def test_mlflow_download_bar_stays_off(tracking_uri, tmp_path, monkeypatch, capfd):
    from mlflow.tracking import MlflowClient

    from harness.core.threads import _defaults
    from harness.scan.baseline import baseline_report

    c = MlflowClient(tracking_uri=tracking_uri)
    run = c.create_run(c.create_experiment("x"))
    (tmp_path / "report.json").write_text(json.dumps({"scenario": "x"}))
    c.log_artifact(run.info.run_id, str(tmp_path / "report.json"))
    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    _defaults()  # what importing harness does in a fresh process
    capfd.readouterr()
    assert baseline_report(tracking_uri, run)["scenario"] == "x"
    assert "Downloading artifacts" not in capfd.readouterr().err
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "true")  # control: MLflow's default draws it
    assert baseline_report(tracking_uri, run)["scenario"] == "x"
    assert "Downloading artifacts" in capfd.readouterr().err


def test_bad_input_leaves_no_empty_report_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = make_scenario(attacks=[{"name": "span_nonadaptive"}])
    bad["victim"]["data"]["classes"] = [0, 99]
    with pytest.raises(BadInput, match=r"classes: \[99\] not among the labels"):
        run_scenario(scenario_from_dict(bad), out=tmp_path / "given")
    assert not (tmp_path / "given").exists()
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    res = leakmeter("run", "bad.yaml")
    assert res.exit_code == 2 and "classes: [99]" in res.stderr
    assert not (tmp_path / "leakmeter-out").exists()


# --------------------------------------------------------------------------- two tracked runs

@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, _mlflow_template):
    """Two tracked runs of one scenario that differ by a list-valued setting (hidden widths)."""
    import shutil

    tmp = tmp_path_factory.mktemp("two")
    shutil.copy(_mlflow_template, tmp / "mlflow.db")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    reports = []
    for hidden in ([16], [8]):
        s = make_scenario(name="widths", attacks=[
            {"name": "surrogate", "params": {"max_queries": 30, "steps": 5}}, {"name": "span_nonadaptive"}],
            defenses={"query_budget": 400}, tracking={"experiment": "widths"})
        s["victim"]["model"]["hidden"] = hidden
        s["victim"]["training"]["epochs"] = 3
        reports.append(run_scenario(scenario_from_dict(s), tracking_uri=uri, out=tmp / f"h{hidden[0]}"))
    return {"uri": uri, "tmp": tmp, "reports": reports}


def test_compare_experiment_handles_list_valued_settings(two_runs):
    tmp, uri = two_runs["tmp"], two_runs["uri"]
    res = leakmeter("compare", "--experiment", "widths", "--tracking-uri", uri, "--json", str(tmp / "c.json"),
                    "--out", str(tmp / "cmp"))
    assert res.exit_code in (0, 1), res.output + res.stderr  # a recommendation or none passes, no crash
    cmp = json.loads((tmp / "c.json").read_text())
    assert cmp["keys"] == ["victim.model.hidden"]
    assert sorted(c["settings"]["victim.model.hidden"] for c in cmp["cells"]) == [[8], [16]]
    assert {c["label"] for c in cmp["cells"]} == {"hidden=[16]", "hidden=[8]"}


def test_compare_experiment_fits_the_terminal_and_leaves_the_experiment_alone(two_runs, monkeypatch):
    """The terminal table is as wide as the terminal (80 columns here) and names the cells; the
    user's experiment gets no 'compare' run unless --log-run asks for one."""
    from mlflow.tracking import MlflowClient

    tmp, uri = two_runs["tmp"], two_runs["uri"]
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("widths")
    kinds = lambda: [r.data.tags.get("leakmeter.kind") for r in client.search_runs([exp.experiment_id])]  # noqa: E731
    before = kinds()
    monkeypatch.setenv("COLUMNS", "80")
    res = leakmeter("compare", "--experiment", "widths", "--tracking-uri", uri, "--out", str(tmp / "c80"))
    assert res.exit_code in (0, 1), res.output + res.stderr
    table = res.output.split("comparison:")[0]
    assert max(len(ln) for ln in table.splitlines()) <= 80, table
    assert "hidden=[16]" in table.replace("\n", "") and "not logged to MLflow" in res.output
    assert kinds() == before  # nothing added to the user's experiment
    res = leakmeter("compare", "--experiment", "widths", "--tracking-uri", uri, "--out", str(tmp / "c2"),
                    "--log-run")
    assert res.exit_code in (0, 1) and kinds().count("compare") == before.count("compare") + 1


def test_mlflow_curve_starts_where_the_attack_started(two_runs):
    """The surrogate's fidelity curve in MLflow is the curve of the report, point for point: no
    extra step 0 holding the final value."""
    from mlflow.tracking import MlflowClient

    rep = two_runs["reports"][0]
    client = MlflowClient(tracking_uri=two_runs["uri"])
    exp = client.get_experiment_by_name("widths")
    (atk,) = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{rep['mlflow_run_id']}' "
                                "and tags.`leakmeter.attack` = 'surrogate'")
    entry = next(a for a in rep["attacks"] if a["name"] == "surrogate")
    for key in ("fidelity", "accuracy"):
        hist = sorted((m.step, m.value) for m in client.get_metric_history(atk.info.run_id, key))
        assert hist == [tuple(p) for p in entry["curves"][key]]
        assert hist[0][0] > 0 and hist[-1][1] == entry["metrics"][key]
    # metrics without a curve are still logged once
    assert [m.step for m in client.get_metric_history(atk.info.run_id, "wall_s")] == [0]


def test_validate_fails_on_files_that_do_not_exist(tmp_path):
    model = make_scenario()
    model["victim"]["model"] = {"arch": "file", "path": "missing.safetensors"}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(model))
    res = leakmeter("validate", str(tmp_path / "m.yaml"))
    assert res.exit_code == 2 and "victim.model.path" in res.stderr and "not found" in res.stderr
    data = make_scenario()
    data["victim"]["data"] = {"dataset": "npz", "path": "nowhere.npz"}
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(data))
    res = leakmeter("validate", str(tmp_path / "d.yaml"))
    assert res.exit_code == 2 and "victim.data.path" in res.stderr and "not found" in res.stderr
    (tmp_path / "nowhere.npz").write_bytes(b"")  # present but unreadable: refused, naming the key
    res = leakmeter("validate", str(tmp_path / "d.yaml"))
    assert res.exit_code == 2 and "victim.data.path" in res.stderr


def test_terminal_run_names_each_attack_with_one_live_bar(tmp_path):
    """On a terminal (a pty of 100 columns): the same stage lines as off it, a bar named after
    the running attack, and the attacker's released/reference models trained without bars of
    their own named as the victim's."""
    import fcntl
    import pty
    import struct
    import termios

    scen = make_scenario(name="tty", attacks=[{"name": "span_nonadaptive"},
                                              {"name": "informed_mia", "params": {"games": 2}}])
    scen["victim"]["training"]["epochs"] = 3
    (tmp_path / "tty.yaml").write_text(yaml.safe_dump(scen))
    main, sub = pty.openpty()
    fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    env = {k: v for k, v in ENV.items() if k != "CI"}
    proc = subprocess.Popen([*CLI, "run", "tty.yaml", "--out", "out", "--no-tracking"], cwd=tmp_path, env=env,
                            stdin=sub, stdout=sub, stderr=sub, close_fds=True)
    os.close(sub)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the pty closes when the run ends
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(main)
    raw = b"".join(chunks).decode("utf8", "replace")
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", raw)
    pieces = re.split(r"[\r\n]", text)
    assert proc.returncode in (0, 1), text[-3000:]
    stages = [p for p in pieces if re.match(r"leakmeter: \[ *\d+\.\d s\] ", p)]
    assert any(p.endswith("attack 1/2 span_nonadaptive: running") for p in stages), text[-3000:]
    assert any("attack 2/2 informed_mia: ok" in p for p in stages), text[-3000:]
    bars = [p for p in pieces if "%|" in p or "it/s]" in p or "q/s]" in p]
    assert any(p.startswith("attack 2/2 informed_mia: training the released models") for p in bars), bars
    ready = next(i for i, p in enumerate(pieces) if "tty: victim ready" in p)
    assert not [p for p in pieces[ready:] if p.startswith("training victim")]  # released models say so
    # the summary on a terminal: coloured (the verdict word in red or green), within 100 columns
    assert re.search(r"verdict: \x1b\[0m\x1b\[[0-9;]*m(fail|pass)\x1b\[0m", raw), raw[-1500:]
    summary = text[text.index("  span_nonadaptive "):].splitlines()
    assert summary[2].startswith("verdict: ") and max(len(ln) for ln in summary) <= 100, summary
    # on a terminal too, the first line says at once what is loading, and a live line counts its seconds
    first, live = [p for p in pieces if p.strip()][:2]
    assert re.match(r"leakmeter: \[ *\d+\.\d s\] loading tty \(tty.yaml\): importing torch and MLflow$",
                    first), pieces[:3]
    assert live.startswith("  … loading tty (tty.yaml): importing torch and MLflow (0 s)"), pieces[:3]


def test_mlflow_runs_page_shows_verdict_risk_and_scenario(two_runs):
    """A colleague on MLflow's runs page: the experiment opens on its runs (MLflow 3's experiment
    kind), each run's name says its verdict and risk, `verdict`, `risk` and `scenario` are tags to
    add as columns, and report.html is an artifact of the run."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=two_runs["uri"])
    exp = client.get_experiment_by_name("widths")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    for rep in two_runs["reports"]:
        run = client.get_run(rep["mlflow_run_id"])
        risk = rep["risk"] or "none"
        assert run.info.run_name == f"widths: {rep['verdict'].upper()} (risk {risk})"
        assert (run.data.tags["verdict"], run.data.tags["risk"], run.data.tags["scenario"]) == (
            rep["verdict"], risk, "widths")
        assert "report.html" in [a.path for a in client.list_artifacts(run.info.run_id)]


def test_the_summary_fits_100_columns_with_the_default_report_folder(capsys):
    """The default folder (leakmeter-out/<scenario>-<time>) is named once: the summary's lines,
    piped, stay within 100 columns for a scenario name of 30 characters."""
    from harness.cli.common import print_summary

    out = "leakmeter-out/quickstart-digits-gradient-2026-20261128-123009"
    print_summary({"attacks": [{"name": "surrogate", "status": "ok", "risk": "high", "reason": "x " * 80,
                                "metrics": {"agreement": 0.99}}],
                   "verdict": "fail", "risk": "high", "verdict_reason": "risk high reaches fail_on",
                   "outdir": out, "mlflow_run_id": "9c211665d2564c84a23bf3a308b40234"})
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == f"report: {out}/report.md (+ .html, .json)", lines
    assert max(len(ln) for ln in lines) <= 100, [ln for ln in lines if len(ln) > 100]
