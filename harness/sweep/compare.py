"""Runs to compare, read back from MLflow: the cells of a sweep or the scenario runs of an
experiment (their report.json and curves), then compared (reports/compare.py) with the result
written to files and logged to MLflow."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from harness.core.errors import BadInput


def _client(uri: str):
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _report(client, run_id: str, tmp: str) -> dict[str, Any] | None:
    try:
        p = client.download_artifacts(run_id, "report.json", tmp)
    except Exception:  # noqa: BLE001 - a run without a report is not comparable
        return None
    return json.loads(Path(p).read_text())


def _curves(client, experiment_id: str, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every multi-step metric of the attack runs nested under `run_id`: {"attack/key": points}."""
    out: dict[str, list[tuple[int, float]]] = {}
    runs = client.search_runs([experiment_id], f"tags.`mlflow.parentRunId` = '{run_id}'", max_results=200)
    for r in runs:
        attack = r.data.tags.get("leakmeter.attack", r.info.run_name)
        for key in r.data.metrics:
            hist = client.get_metric_history(r.info.run_id, key)
            if len({m.step for m in hist}) > 1:
                out[f"{attack}/{key}"] = sorted((m.step, m.value) for m in hist)
    return out


def gather_sweep(uri: str, sweep_run_id: str) -> tuple[list[dict], dict, Any]:
    """(records, curves by cell label, the sweep run) for a sweep run id; BadInput when unusable."""
    from harness.sweep.grid import Cell, cell_runs, make_cells

    client = _client(uri)
    try:
        sweep = client.get_run(sweep_run_id)
    except Exception:  # noqa: BLE001
        raise BadInput(f"SWEEP_RUN_ID: no run {sweep_run_id!r} in the MLflow store {uri}") from None
    if sweep.data.tags.get("leakmeter.kind") != "sweep":
        raise BadInput(f"SWEEP_RUN_ID: run {sweep_run_id} is not a leakmeter sweep run; "
                       "to compare ordinary runs use --experiment NAME [--runs ID ...]")
    exp = sweep.info.experiment_id
    by_key: dict[str, Any] = {}
    for r in cell_runs(client, exp, sweep_run_id):
        key = r.data.tags.get("leakmeter.cell")
        done = r.info.status == "FINISHED" and r.data.tags.get("leakmeter.cell_done") == "1"
        old = by_key.get(key)
        newer = old is not None and r.info.start_time > old[0].info.start_time
        if old is None or (done and not old[1]) or (done == old[1] and newer):
            by_key[key] = (r, done)
    order: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            grid = json.loads(Path(client.download_artifacts(sweep_run_id, "grid.json", tmp)).read_text())
            order = [c.key() for c in make_cells(grid["grid"], grid["seeds"])]
        except Exception:  # noqa: BLE001 - fall back to the order the cells started in
            order = []
        keys = sorted(by_key, key=lambda k: (order.index(k) if k in order else len(order),
                                             by_key[k][0].info.start_time))
        records, curves = [], {}
        for key in keys:
            run, _ = by_key[key]
            rep = _report(client, run.info.run_id, tmp)
            if rep is None:
                continue
            cell = json.loads(key)
            c = Cell(cell["settings"], cell["seed"])
            records.append({"run_id": run.info.run_id, "settings": c.settings, "seed": c.seed, "report": rep})
            cv = _curves(client, exp, run.info.run_id)
            if cv:
                curves[c.label()] = cv
    return records, curves, sweep


def _varying(params: list[dict[str, str]]) -> list[str]:
    """The scenario params that differ between runs, one or two per section (see module doc)."""
    from harness.scenario import parse_value

    skip = ("tracking.", "name", "seed", "sweep.")
    keys = sorted({k for p in params for k in p if not k.startswith(skip)})
    vary = [k for k in keys if len({p.get(k) for p in params}) > 1]
    vary = [k for k in vary if not any(o.startswith(k + ".") for o in vary)]  # drop "section: None"
    groups: dict[str, list[str]] = {}
    for k in vary:
        groups.setdefault(k.rsplit(".", 1)[0] if "." in k else k, []).append(k)
    out = []
    for ks in groups.values():  # values compared as canonical JSON: a list (hidden: [64]) is a value too
        moving = [k for k in ks if len({json.dumps(parse_value(p[k]), sort_keys=True, default=str)
                                        for p in params if k in p}) > 1]
        out += moving or [next((k for k in ks if k.endswith("epsilon")), ks[0])]
    return out


def gather_experiment(uri: str, experiment: str, run_ids: list[str]) -> tuple[list[dict], dict, Any]:
    """(records, curves, experiment) for the scenario runs of an experiment (or the given runs)."""
    from harness.scenario import parse_value

    client = _client(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise BadInput(f"--experiment {experiment}: no such experiment in the MLflow store {uri}")
    if run_ids:
        runs = []
        for rid in run_ids:
            try:
                runs.append(client.get_run(rid))
            except Exception:  # noqa: BLE001
                raise BadInput(f"--runs {rid}: no such run in the MLflow store {uri}") from None
    else:
        runs = list(client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'",
                                       max_results=1000, order_by=["attribute.start_time ASC"]))
    runs = [r for r in runs
            if "leakmeter.fingerprint" in r.data.tags and "leakmeter.attack" not in r.data.tags]
    if not runs:
        raise BadInput(f"--experiment {experiment}: no finished leakmeter scenario runs to compare")
    keys = _varying([r.data.params for r in runs])
    records, curves = [], {}
    from reports.compare import label_of

    with tempfile.TemporaryDirectory() as tmp:
        for r in runs:
            rep = _report(client, r.info.run_id, tmp)
            if rep is None:
                continue
            settings = {k: parse_value(r.data.params[k]) if k in r.data.params else None for k in keys}
            records.append({"run_id": r.info.run_id, "settings": settings,
                            "seed": parse_value(r.data.params.get("seed", "0")), "report": rep,
                            "model": Path(r.data.params.get("victim.model.path") or "").name or None})
            cv = _curves(client, exp.experiment_id, r.info.run_id)
            if cv:
                curves[label_of(settings) + f", seed={records[-1]['seed']} ({r.info.run_id[:8]})"] = cv
    if not records:
        raise BadInput(f"--experiment {experiment}: none of the runs has a report.json artifact")
    return records, curves, exp


def run_compare(uri: str, records: list[dict], curves: dict, out: Path, log_to: str | None,
                experiment_id: str | None = None, runs_tag: str = "") -> tuple[dict, list[Path], str]:
    """Compare, write compare.{json,md,txt} and the plots into `out`, and log them to MLflow:
    onto run `log_to` (a sweep's own run), or onto a new "compare" run in `experiment_id` (only
    when asked: the user's experiment holds their runs), or nowhere when both are None. Returns
    (cmp, files, run id or None)."""
    import warnings

    from reports import compare as C
    from reports.plots import all_plots

    why = C.incomparable(records)
    if why:
        raise BadInput(f"compare: {why}")
    cmp = C.compare(records)
    out.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(record=True) as caught:  # matplotlib's notes: into compare.json
        warnings.simplefilter("always")
        plots = all_plots(cmp, curves, out / "plots")
    notes = sorted({f"{w.category.__name__}: {' '.join(str(w.message).split())}" for w in caught})
    if notes:
        cmp["warnings"] = notes
    files = [out / "compare.json", out / "compare.md", out / "compare.txt"]
    files[0].write_text(C.to_json(cmp))
    files[1].write_text(C.to_markdown(cmp))
    files[2].write_text(C.to_table(cmp))
    if log_to is None and experiment_id is None:
        return cmp, files + plots, None
    client = _client(uri)
    run_id = log_to
    if run_id is None:
        run = client.create_run(experiment_id, run_name="compare",
                                tags={"leakmeter.kind": "compare", "leakmeter.runs": runs_tag[:5000]})
        run_id = run.info.run_id
    for f in files:
        client.log_artifact(run_id, str(f), "compare")
    for p in plots:
        client.log_artifact(run_id, str(p), "compare/plots")
    rec = cmp.get("recommended") or {}
    client.set_tag(run_id, "leakmeter.recommended", rec.get("label", "none passes"))
    client.set_tag(run_id, "leakmeter.compare_message", cmp["message"][:5000])
    if log_to is None:
        client.set_terminated(run_id, "FINISHED")
    return cmp, files + plots, run_id
