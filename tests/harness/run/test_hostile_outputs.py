"""What a run touches besides its own output (issue 33): tracking credentials from the environment
are masked (E04), `--out` into an existing folder neither deletes nor uploads what leakmeter did
not write (E05), and a sweep's cells are capped before any is built (E11)."""

from __future__ import annotations

import pytest
from conftest import make_scenario
from mlflow.tracking import MlflowClient

from harness.run.runner import open_tracker, run_scenario
from harness.scenario import scenario_from_dict
from victims.errors import BadInput
from victims.http.secrets import SECRETS


def test_tracking_credentials_in_the_environment_are_masked(monkeypatch, tracking_uri):
    """E04: a tracking server that echoes MLFLOW_TRACKING_TOKEN put it on stderr."""
    token, password = "tok-e4-91c2a7f3d5b8", "pw-e4-5b8d3f7a2c19"
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", token)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
    try:
        open_tracker(scenario_from_dict(make_scenario()), tracking_uri)
        echoed = f"401 from server: token={token} password {password}, Bearer {token[:11]}"
        out = SECRETS.scrub(echoed)
        assert token not in out and password not in out and token[:11] not in out, out
    finally:
        SECRETS.clear()


def test_out_into_an_existing_folder_keeps_and_does_not_upload_what_was_there(tmp_path, tracking_uri):
    """E05: every empty sub-folder of --out was deleted and any *.html / *.png there uploaded."""
    out = tmp_path / "shared"
    (out / "empty-but-mine").mkdir(parents=True)
    (out / "holiday.png").write_bytes(b"\x89PNG\r\n\x1a\nnot ours")
    (out / "private.html").write_text("<p>private notes</p>")
    s = make_scenario(attacks=[{"name": "span_nonadaptive"}], tracking={"experiment": "e5"},
                      interface={"kind": "prediction", "output": "probabilities"})
    s["victim"] = {"model": {"arch": "mlp", "hidden": [4]},
                   "data": {"dataset": "breast_cancer", "n_train": 60},
                   "training": {"epochs": 1, "dtype": "float64"}}
    report = run_scenario(scenario_from_dict(s), tracking_uri=tracking_uri, out=out)
    assert (out / "empty-but-mine").is_dir()
    assert (out / "holiday.png").read_bytes().endswith(b"not ours")
    client = MlflowClient(tracking_uri=tracking_uri)
    uploaded = {a.path for a in client.list_artifacts(report["mlflow_run_id"])}
    assert "report.json" in uploaded and "report.html" in uploaded  # what the run wrote
    assert "holiday.png" not in uploaded and "private.html" not in uploaded


def test_a_sweep_over_the_cell_cap_is_refused_before_any_cell_is_built(monkeypatch):
    """E11: 1000 grid values × --seeds 1000 was still building cells at 40 s and 885 MB."""
    import harness.sweep.grid as sweep

    built = []
    monkeypatch.setattr(sweep, "make_cells", lambda *a: built.append(a) or [])
    raw = make_scenario(tracking={"enabled": True})
    values = ",".join(str(100 + i) for i in range(1000))
    with pytest.raises(BadInput, match=r"1,000,000 cells .* over the cap of 1,000 cells; give --max-cells"):
        sweep.plan_sweep(raw, "s.yaml", [f"defenses.query_budget={values}"], 1000)
    assert built == []
    with pytest.raises(BadInput, match="3 cells"):
        sweep.plan_sweep(raw, "s.yaml", ["defenses.query_budget=100,200,300"], 1, max_cells=2)
    monkeypatch.undo()
    plan = sweep.plan_sweep(raw, "s.yaml", ["defenses.query_budget=100,200,300"], 1, max_cells=3)
    assert len(plan.cells) == 3  # the flag lets a larger sweep through
