"""`leakmeter scan`: a scheduled regression scan of an endpoint (harness/scan/baseline.py) against a
baseline MLflow run. numpy/torch are imported after the thread count is pinned."""

from __future__ import annotations

import sys

import click

from harness.cli.common import (
    AUTH_ENV,
    SET,
    THREADS,
    TRUST,
    apply_trust,
    check_output_paths,
    ci_outputs,
    endpoint_line,
    guarded,
    print_attacks,
    print_verdict,
    where_line,
    write_ci_outputs,
)
from harness.core.threads import pin_threads


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@SET
@click.option("--baseline", default="last-pass", show_default=True, metavar="RUN_ID|last-pass|last|none",
              help="The MLflow run to compare with (same scenario name and config fingerprint).")
@click.option("--tolerance", "tolerances", multiple=True, metavar="REL|METRIC=ABS|floor=ABS",
              help="Relative tolerance (default 0.05), or an absolute one for a metric; repeatable.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the report JSON here.")
@click.option("--out", type=click.Path(file_okay=False), help="Folder for report files.")
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here).")
@click.option("--verbose", is_flag=True, help="Print every compared metric, not only changes.")
@click.option("--fail-on", "fail_on", type=click.Choice(["verdict", "regression"]), default="verdict",
              show_default=True,
              help="verdict: exit 1 whenever the verdict fails, or leakage regressed; regression: only "
                   "when leakage regressed against the baseline.")
@click.option("--fail-on-verdict", is_flag=True, hidden=True,
              help="The default now (kept for old cron lines).")
@ci_outputs
@AUTH_ENV
@TRUST
@THREADS
@guarded
def scan(scenario, overrides, baseline, tolerances, json_path, out, tracking_uri, verbose, fail_on,
         fail_on_verdict, sarif_path, junit_path, auth_env, trust_model_code, threads):
    """Scan the SCENARIO's endpoint and compare with a baseline run: exit 1 on a regression."""
    from pathlib import Path

    from harness.core.progress import begin, busy
    from harness.scan.baseline import format_diff, parse_tolerances, run_scan
    from harness.scenario import load_scenario

    begin()  # as `run`: bad input in one line at once, then the first stage line before torch loads
    pin_threads(threads)
    check_output_paths(out, json=json_path, sarif=sarif_path, junit=junit_path)
    tol = parse_tolerances(tolerances)
    s = load_scenario(scenario, list(overrides), auth_env)
    with busy(f"loading {s.name} ({scenario}): importing torch and MLflow"):
        apply_trust(trust_model_code)
        import harness.run.runner  # noqa: F401  (the scan's heavy imports, under the stage line)
    from harness.core.interrupts import Interrupted

    try:
        res = run_scan(s, baseline=baseline, tolerance=tol, tracking_uri=tracking_uri, out=out,
                       json_path=json_path, source=Path(scenario).read_text(),
                       fail_on="verdict" if fail_on_verdict else fail_on)
    except Interrupted as exc:  # the partial report reaches CI too (none before the victim is built)
        if getattr(exc, "report", None) is not None:
            write_ci_outputs(sarif_path, junit_path, [(None, exc.report)], scenario, s.public_dump())
        raise
    report = res["report"]
    print_attacks(report)
    line = endpoint_line(report)
    if line:
        click.echo(line)
    if not res["baseline_found"]:
        why = "none requested" if baseline == "none" else f"none found ({baseline})"
        if report.get("verdict") == "pass":
            click.echo(f"baseline: {why}; nothing to compare — this run "
                       f"({report.get('mlflow_run_id')}) can be the next baseline")
        else:  # last-pass takes only passing runs: a failing one is never offered
            click.echo(f"baseline: {why}; nothing to compare — this run's verdict is "
                       f"{report.get('verdict')}: it is no baseline (--baseline last-pass takes only "
                       "passing runs)")
    else:
        lines = format_diff(res["diff"], verbose)
        click.echo(f"baseline: {res['baseline_id']} — {len(res['diff'])} risks/metrics compared")
        for line in lines:
            click.echo(line)
        click.echo("REGRESSION: leakage rose beyond tolerance" if res["regressed"]
                   else "no regression")
    print_verdict(report)
    click.echo(where_line(report))
    write_ci_outputs(sarif_path, junit_path, [(None, report)], scenario, s.public_dump())
    sys.exit(res["exit"])
