"""`leakmeter scan`: a scheduled regression scan of an endpoint (harness/scan.py) against a
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
    guarded,
    print_attacks,
    print_verdict,
    where_line,
    write_ci_outputs,
)
from harness.threads import pin_threads


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
@click.option("--fail-on-verdict", is_flag=True,
              help="Also exit 1 when the verdict is fail (not only on a regression).")
@ci_outputs
@AUTH_ENV
@TRUST
@THREADS
@guarded
def scan(scenario, overrides, baseline, tolerances, json_path, out, tracking_uri, verbose,
         fail_on_verdict, sarif_path, junit_path, auth_env, trust_model_code, threads):
    """Scan the SCENARIO's endpoint and compare with a baseline run: exit 1 on a regression."""
    pin_threads(threads)
    apply_trust(trust_model_code)
    from pathlib import Path

    from harness.scan import format_diff, parse_tolerances, run_scan
    from harness.scenario import load_scenario

    check_output_paths(out, json=json_path, sarif=sarif_path, junit=junit_path)
    tol = parse_tolerances(tolerances)
    s = load_scenario(scenario, list(overrides), auth_env)
    from harness.interrupts import Interrupted

    try:
        res = run_scan(s, baseline=baseline, tolerance=tol, tracking_uri=tracking_uri, out=out,
                       json_path=json_path, source=Path(scenario).read_text())
    except Interrupted as exc:  # the partial report reaches CI too (none before the victim is built)
        if getattr(exc, "report", None) is not None:
            write_ci_outputs(sarif_path, junit_path, [(None, exc.report)], scenario, s.public_dump())
        raise
    report = res["report"]
    print_attacks(report)
    stats = report.get("victim", {}).get("endpoint", {}).get("stats")
    if stats:
        click.echo(f"endpoint: {stats['requests']} HTTP requests ({stats['retries']} retries) for "
                   f"{report.get('queries_total', 0)} queries")
    if not res["baseline_found"]:
        why = "none requested" if baseline == "none" else f"none found ({baseline})"
        click.echo(f"baseline: {why}; nothing to compare — this run "
                   f"({report.get('mlflow_run_id')}) can be the next baseline")
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
    code = res["exit"]
    if fail_on_verdict and code == 0 and report.get("verdict") == "fail":
        code = 1
    sys.exit(code)
