"""`--tracking-uri` against a real `mlflow server` on 127.0.0.1 (started and stopped here)."""

import shutil
import socket
import subprocess
import sys
import time

import pytest
import requests
import yaml
from click.testing import CliRunner
from conftest import make_scenario

from harness.cli import main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path, _mlflow_template):
    port = _free_port()
    db = tmp_path / "server.db"
    shutil.copy(_mlflow_template, db)
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
           "--backend-store-uri", f"sqlite:///{db}",
           "--artifacts-destination", str(tmp_path / "artifacts"), "--workers", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if requests.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None:
                pytest.fail("mlflow server exited at start")
            time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not start within 90 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.slow
def test_run_logs_to_a_real_mlflow_server(tmp_path, mlflow_server):
    import mlflow

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(make_scenario(attacks=[{"name": "span_nonadaptive"}],
                                              tracking={"experiment": "srv"})))
    res = CliRunner().invoke(main, ["run", str(p), "--tracking-uri", mlflow_server,
                                    "--json", str(tmp_path / "r.json"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1, res.output
    client = mlflow.MlflowClient(mlflow_server)
    runs = client.search_runs([client.get_experiment_by_name("srv").experiment_id])
    parent = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parent) == 1 and parent[0].data.tags["verdict"] == "fail"
    assert all(r.info.status == "FINISHED" for r in runs) and len(runs) == 2
    assert parent[0].data.metrics["span_nonadaptive.true_rank"] == 16
    names = {a.path for a in client.list_artifacts(parent[0].info.run_id)}
    assert "report.json" in names


@pytest.mark.slow
def test_a_tracking_server_password_never_reaches_the_report_or_any_output(tmp_path, mlflow_server):
    """`--tracking-uri http://user:password@host`: the password is in no report file, --json file,
    SARIF, JUnit, stdout or stderr (it was set after the report had been scrubbed)."""
    password = "pw-Tr4ck-77x"
    uri = mlflow_server.replace("http://", f"http://alice:{password}@")
    p = tmp_path.parent / f"{tmp_path.name}-input.yaml"  # the input holds it: kept apart
    p.write_text(yaml.safe_dump(make_scenario(attacks=[{"name": "span_nonadaptive"}],
                                              tracking={"experiment": "pw", "uri": uri})))
    out = tmp_path / "o"
    res = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(p), "--json",
                          str(tmp_path / "r.json"), "--out", str(out), "--sarif", str(tmp_path / "r.sarif"),
                          "--junit", str(tmp_path / "r.xml")], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode == 1, res.stderr[-2000:]
    report = (tmp_path / "r.json").read_text()
    assert '"tracking_uri": "http://' in report and "***@127.0.0.1" in report
    texts = [res.stdout, res.stderr] + [f.read_text(errors="replace") for f in tmp_path.rglob("*")
                                        if f.is_file() and f.suffix != ".db"]
    assert all(password not in t for t in texts)
    import mlflow

    client = mlflow.MlflowClient(mlflow_server)
    runs = client.search_runs([client.get_experiment_by_name("pw").experiment_id])
    assert runs and all(password not in str(r.data.params) + str(r.data.tags) for r in runs)
