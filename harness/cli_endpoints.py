"""`leakmeter serve` and `leakmeter scan` (issue 7), registered by harness/cli.py.

numpy/torch are imported inside the commands, after the thread count is pinned. This module does
not import harness.cli (harness.cli imports it while loading); shared options come from
harness.cli_common.
"""

from __future__ import annotations

import sys

import click

from harness.cli_common import SET, THREADS, guarded
from harness.threads import pin_threads


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@SET
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=5001, show_default=True,
              help="Port (0 = any free port; the one chosen is printed).")
@click.option("--budget", type=click.IntRange(min=0), default=None,
              help="Query budget per API key (default: the scenario's defenses.query_budget).")
@click.option("--keys-env", metavar="VAR",
              help="Accept only the comma-separated API keys held in this environment variable.")
@click.option("--export-mlflow", type=click.Path(file_okay=False),
              help="Save the victim as an MLflow pyfunc model in this folder and exit "
                   "(then: mlflow models serve -m DIR --env-manager local).")
@click.option("--log", "access_log", is_flag=True, help="Print one line per request (never keys).")
@THREADS
@guarded
def serve(scenario, overrides, host, port, budget, keys_env, export_mlflow, access_log, threads):
    """Serve the SCENARIO's victim over HTTP (MLflow scoring protocol), defenses server side."""
    pin_threads(threads)
    import os

    from harness.errors import BadInput
    from harness.scenario import load_scenario

    s = load_scenario(scenario, list(overrides))
    if export_mlflow:
        from victims.pyfunc import export_pyfunc

        path = export_pyfunc(s, export_mlflow)
        click.echo(f"saved MLflow pyfunc model: {path}\n"
                   f"serve it with: mlflow models serve -m {path} --env-manager local -p 5001")
        return
    keys = None
    if keys_env:
        raw = os.environ.get(keys_env, "")
        keys = {k.strip() for k in raw.split(",") if k.strip()}
        if not keys:
            raise BadInput(f"--keys-env: the environment variable {keys_env} holds no API keys")
    from victims.served import build_served
    from victims.server import VictimServer

    served, _ = build_served(s)
    per_key = budget if budget is not None else s.defenses.query_budget
    log = (lambda line: click.echo(line, err=True)) if access_log else None
    try:
        server = VictimServer(served, host, port, budget=per_key, keys=keys, log=log)
    except OSError as exc:
        raise BadInput(f"--port: cannot listen on {host}:{port} ({exc.strerror})") from None
    defenses = ", ".join(served.defenses.active()) or "none"
    click.echo(f"serving {s.name} at http://{host}:{server.port}/invocations "
               f"(interface {s.interface.kind}/{s.interface.output}; defenses: {defenses}; "
               f"budget per key: {per_key if per_key is not None else 'unlimited'}; "
               f"{'API keys required' if keys else 'no API keys'})", nl=True)
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


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
@THREADS
@guarded
def scan(scenario, overrides, baseline, tolerances, json_path, out, tracking_uri, verbose,
         fail_on_verdict, threads):
    """Scan the SCENARIO's endpoint and compare with a baseline run: exit 1 on a regression."""
    pin_threads(threads)
    from pathlib import Path

    from harness.scan import format_diff, parse_tolerances, run_scan
    from harness.scenario import load_scenario

    tol = parse_tolerances(tolerances)
    s = load_scenario(scenario, list(overrides))
    res = run_scan(s, baseline=baseline, tolerance=tol, tracking_uri=tracking_uri, out=out,
                   json_path=json_path, source=Path(scenario).read_text())
    report = res["report"]
    for a in report["attacks"]:
        click.echo(f"  {a['name']:<26} {a['status']:<8} risk={a.get('risk') or '-':<6} "
                   f"queries={a.get('queries', 0):<8} {a.get('reason', '')}")
    stats = report.get("victim", {}).get("endpoint", {}).get("stats")
    if stats:
        click.echo(f"endpoint: {stats['requests']} HTTP requests ({stats['retries']} retries) for "
                   f"{report.get('queries_total', 0)} queries")
    if report.get("error"):
        click.echo(f"scan crashed: {report['error']}", err=True)
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
    click.echo(f"verdict: {report.get('verdict')} (risk {report.get('risk')}); report: "
               f"{report.get('outdir')}/report.json; mlflow run: {report.get('mlflow_run_id')}")
    code = res["exit"]
    if fail_on_verdict and code == 0 and report.get("verdict") == "fail":
        code = 1
    sys.exit(code)


def register(main) -> None:
    """Add `serve` and `scan` to the leakmeter command group."""
    main.add_command(serve)
    main.add_command(scan)
