"""`leakmeter sweep` and `leakmeter compare`: parse, call harness/sweep/grid.py and
harness/sweep/compare.py, exit.

Exit codes: sweep — 0 every cell ran and at least one passes the policy, 1 none passes, 2 bad
input, 3 a cell crashed; compare — 0 a cell is recommended, 1 none passes, 2 bad input.
numpy/torch/mlflow are imported inside the commands, after the thread count is pinned.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from harness.cli.common import (
    AUTH_ENV,
    THREADS,
    TRUST,
    apply_trust,
    check_output_paths,
    ci_outputs,
    guarded,
    write_ci_outputs,
)
from harness.core.errors import BadInput
from harness.core.threads import pin_threads
from harness.sweep.compare import gather_experiment, gather_sweep, run_compare


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--grid", "grid", multiple=True, metavar="KEY=V1,V2,...",
              help="A scenario key and its values, e.g. defenses.dp_sgd.epsilon=1,4,none "
                   "(none = section off).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a key in every cell.")
@click.option("--seeds", type=click.IntRange(min=1), default=1, show_default=True,
              help="Seeds per cell: the scenario's seed, seed+1, ...")
@click.option("--max-cells", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Refuse a sweep of more cells (grid combinations × seeds) than this, before any "
                   "cell is built.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Cells run in parallel (processes, or Ray CPUs).")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True)
@click.option("--ray-address", default=None, help="Ray cluster address (default: start a local Ray).")
@click.option("--out", type=click.Path(file_okay=False),
              help="Folder for the cells' reports and the comparison.")
@click.option("--tracking-uri",
              help="MLflow tracking URI (default: the scenario's, or sqlite:///mlflow.db here).")
@click.option("--fresh", is_flag=True, help="Start a new sweep run instead of resuming a matching one.")
@click.option("--no-compare", is_flag=True, help="Do not compare the cells at the end.")
@ci_outputs
@AUTH_ENV
@TRUST
@THREADS
@guarded
def sweep(scenario, grid, overrides, seeds, max_cells, jobs, executor, ray_address, out, tracking_uri, fresh,
          no_compare, sarif_path, junit_path, auth_env, trust_model_code, threads) -> None:
    """Run SCENARIO over a grid of defense settings; each cell a nested MLflow run; resumable."""
    from harness.core.progress import begin, busy
    from harness.scenario import apply_overrides, choose_auth_env, read_raw
    from harness.sweep.grid import plan_sweep, run_sweep

    begin()  # as `run`: bad paths and a bad file in one line at once, then the first stage line
    threads = pin_threads(threads)
    check_output_paths(out, sarif=sarif_path, junit=junit_path)
    if not grid:
        raise BadInput("--grid: give at least one KEY=V1,V2,... to sweep over")
    raw = choose_auth_env(apply_overrides(read_raw(scenario), list(overrides)), auth_env, scenario)
    with busy(f"loading {scenario} and its grid: importing torch and MLflow"):
        apply_trust(trust_model_code)
        plan = plan_sweep(raw, scenario, list(grid), seeds, max_cells)  # plans each cell's attacks
        from harness.scenario.checks import preflight
        from victims.http.endpoint import read_headers, read_token

    for cell, s in zip(plan.cells, plan.scenarios, strict=True):
        try:
            preflight(s)
            if s.victim.endpoint is not None:
                read_token(s.victim.endpoint)  # an allowed, set token variable: before any cell runs
                read_headers(s.victim.endpoint)
        except BadInput as exc:
            raise BadInput(f"cell {cell.label()}: {exc}") from None
    from harness.core.interrupts import Interrupted

    try:
        res = run_sweep(plan, scenario_path=scenario, tracking_uri=tracking_uri, out=out, jobs=jobs,
                        threads=threads, executor=executor, ray_address=ray_address, fresh=fresh,
                        echo=click.echo, trust_model_code=trust_model_code, auth_env=auth_env)
    except Interrupted as exc:  # the cells that ran (killed ones with their partial reports) reach CI
        part = getattr(exc, "sweep", None)
        if part is not None and (sarif_path or junit_path):
            records, _, _ = gather_sweep(part["tracking_uri"], part["sweep_run_id"])
            _ci_outputs(sarif_path, junit_path, records, part, None, scenario, raw)
        raise
    click.echo(f"sweep run: {res['sweep_run_id']} ({len(res['results'])} cells run, "
               f"{res['skipped']} skipped)")
    code = 3 if res["errors"] else 0
    cmp = None
    if not no_compare or sarif_path or junit_path:
        records, curves, _ = gather_sweep(res["tracking_uri"], res["sweep_run_id"])
    if not no_compare:
        cmp, files, _ = run_compare(res["tracking_uri"], records, curves, Path(res["out"]) / "compare",
                                    res["sweep_run_id"])
        click.echo(_terminal(cmp))
        click.echo(f"comparison: {files[0]} (+ Markdown, plots); logged to MLflow run {res['sweep_run_id']}")
        if code == 0 and cmp["recommended"] is None:
            inconclusive = any(c["verdict"] == "inconclusive" for c in cmp["cells"])
            code = 4 if inconclusive else 1  # no passing cell: none shown safe, or none could tell
    if sarif_path or junit_path:
        _ci_outputs(sarif_path, junit_path, records, res, cmp, scenario, raw)
    sys.exit(code)


def _ci_outputs(sarif_path, junit_path, records, res, cmp, scenario, raw) -> None:
    """SARIF and JUnit over every finished cell (one JUnit suite per cell); crashed cells too."""
    from harness.sweep.grid import Cell, apply_cell

    if cmp is None and sarif_path:
        from reports.compare import compare as compare_cells

        cmp = compare_cells(records)
    cells = [Cell(r["settings"], r["seed"]) for r in records]
    reports = [(c.label(), r["report"], apply_cell(raw, c)) for c, r in zip(cells, records, strict=True)]
    done = {item[0] for item in reports}
    crashed = [(r["label"], r["error"]) for r in res["results"] if r.get("error") and r["label"] not in done]
    write_ci_outputs(sarif_path, junit_path, reports, scenario, raw,
                     sweep_cells=cmp["cells"] if cmp else None, crashed=crashed)


def _terminal(cmp: dict) -> str:
    """The comparison as wide as this terminal (rich wraps and picks the columns)."""
    import shutil

    from reports.compare import to_terminal

    return to_terminal(cmp, shutil.get_terminal_size((100, 24)).columns).rstrip("\n")


@click.command()
@click.argument("sweep_run_id", required=False)
@click.option("--experiment", help="Compare the leakmeter runs of this MLflow experiment.")
@click.option("--runs", "runs", multiple=True, metavar="RUN_ID", help="Only these runs (with --experiment).")
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here).")
@click.option("--out", type=click.Path(file_okay=False), help="Folder for compare.{json,md,txt} and plots.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False),
              help="Also write the comparison JSON here.")
@click.option("--markdown", "md_path", type=click.Path(dir_okay=False), help="Also write the Markdown here.")
@click.option("--log-run", is_flag=True, help="With --experiment: also log the comparison as a 'compare' "
              "run in that experiment (by default it only writes files).")
@THREADS
@guarded
def compare(sweep_run_id, experiment, runs, tracking_uri, out, json_path, md_path, log_run, threads) -> None:
    """Compare the cells of a sweep (or an experiment's runs): table, Pareto front, recommended setting."""
    pin_threads(threads)
    from reports.tracking import default_uri

    if bool(sweep_run_id) == bool(experiment):
        raise BadInput("give either SWEEP_RUN_ID or --experiment NAME")
    if runs and not experiment:
        raise BadInput("--runs: only with --experiment")
    uri = tracking_uri or default_uri()
    if sweep_run_id:
        records, curves, _ = gather_sweep(uri, sweep_run_id)
        exp_id, log_to, tag = None, sweep_run_id, ""
    else:
        records, curves, exp = gather_experiment(uri, experiment, list(runs))
        exp_id = exp.experiment_id if log_run else None  # the user's experiment: only when asked
        log_to, tag = None, ",".join(r["run_id"] for r in records)
    if not records:
        raise BadInput(f"{sweep_run_id}: the sweep has no finished cell with a report yet")
    outdir = Path(out) if out else Path("leakmeter-out") / f"compare-{sweep_run_id or experiment}"
    cmp, files, run_id = run_compare(uri, records, curves, outdir, log_to, exp_id, tag)
    from reports.compare import to_json, to_markdown

    if json_path:
        Path(json_path).write_text(to_json(cmp))
    if md_path:
        Path(md_path).write_text(to_markdown(cmp))
    click.echo(_terminal(cmp))
    click.echo(f"comparison: {files[0]} (+ Markdown, {len(files) - 3} plot(s)); "
               + (f"logged to MLflow run {run_id}" if run_id else "not logged to MLflow (--log-run)"))
    sys.exit(0 if cmp["recommended"] else 1)
