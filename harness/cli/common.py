"""Pieces every leakmeter command shares: the --threads and --set options, `guarded` (bad input →
one line and exit 2; a crash → one line and exit 3; SIGINT/SIGTERM → an orderly stop, exit
128 + the signal), and the summary lines printed after a run."""

from __future__ import annotations

import sys
from functools import wraps

import click

from reports.text import one_line

THREADS = click.option("--threads", type=click.IntRange(min=1), default=None,
                       help="Threads per process for torch/BLAS (default 1, or LEAKMETER_THREADS).")
TRUST = click.option(
    "--trust-model-code", is_flag=True,
    help="Allow victim.model.format: torchscript. A TorchScript file is a program: its code RUNS when it "
         "is loaded. Only for files you trust; without this flag such files are refused (exit 2).")
AUTH_ENV = click.option(
    "--auth-env", metavar="VAR",
    help="The environment variable holding the endpoint's token, chosen by you for this run. A scenario "
         "may itself name only variables starting with LEAKMETER_ (scenarios travel between people, "
         "and the token is sent to the scenario's URL).")
SET = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                   help="Override a scenario key by dotted path, e.g. defenses.dp_sgd.epsilon=4.")


def ci_outputs(fn):
    """--sarif PATH and --junit PATH: the findings for code scanning and CI test reports."""
    fn = click.option("--junit", "junit_path", type=click.Path(dir_okay=False),
                      help="Write JUnit XML here (one test case per attack).")(fn)
    return click.option("--sarif", "sarif_path", type=click.Path(dir_okay=False),
                        help="Write SARIF 2.1.0 here (code scanning: one result per finding).")(fn)


def check_output_paths(out: str | None = None, **paths) -> None:
    """BadInput, before anything runs, when an output cannot be written: a file's folder is missing
    or takes no new file, the file is a device, a pipe or a folder, or a symlink out of its folder
    (reports/outputs.py); the --out folder (or its nearest existing parent) takes no new file."""
    from harness.errors import BadInput
    from reports.outputs import OutputRefused, check_folder, check_writable

    try:
        if out:
            check_folder(out)
    except OutputRefused as exc:
        raise BadInput(f"--out: {exc}") from None
    for flag, path in paths.items():
        try:
            if path:
                check_writable(path)
        except OutputRefused as exc:
            raise BadInput(f"--{flag}: {exc}") from None


def write_ci_outputs(sarif_path, junit_path, reports, scenario_path, scenario=None, sweep_cells=None,
                     crashed=()) -> None:
    """Write the SARIF and JUnit files asked for. `reports` is [(cell label or None, report)];
    `crashed` is [(cell label, error)] for sweep cells that left no report."""
    if sarif_path:
        from reports.sarif import write_sarif

        write_sarif(sarif_path, reports, scenario_path, scenario, sweep_cells)
        click.echo(f"sarif: {sarif_path}")
    if junit_path:
        from reports.junit import crashed_suite, write_junit

        name = (reports[0][1].get("scenario") if reports else None) or "scenario"
        write_junit(junit_path, reports, [crashed_suite(label, name, err) for label, err in crashed])
        click.echo(f"junit: {junit_path}")


def _fail(msg: str, code: int) -> None:
    from victims.http.secrets import scrub

    line = " ".join(str(scrub(msg)).split())  # one line, whatever the message held
    click.echo(f"leakmeter: {line}", err=True)
    sys.exit(code)


def apply_trust(allowed: bool) -> None:
    """Apply --trust-model-code (after the thread count is pinned: this imports torch)."""
    from victims.models.files import allow_model_code

    allow_model_code(allowed)


def guarded(fn):
    """Turn BadInput into one line and exit 2; any other crash into one line and exit 3."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        from harness.errors import BadInput
        from harness.interrupts import Interrupted, handle_signals

        try:
            with handle_signals():
                return fn(*args, **kwargs)
        except BadInput as exc:
            _fail(f"error: {exc}", 2)
        except Interrupted as exc:
            report = getattr(exc, "report", None)
            if report is not None:
                print_summary(report)
            _fail(f"interrupted by {exc.name}", 128 + exc.signum)
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except click.exceptions.Exit:
            raise
        except SystemExit:
            raise
        except Exception as exc:  # noqa: BLE001
            _fail(f"crashed: {type(exc).__name__}: {exc}", 3)

    return wrapper


def print_attacks(report: dict) -> None:
    """One line per attack: name, status (and what stopped it), risk, queries, reason."""
    for a in report["attacks"]:
        risk = a.get("risk") or "-"
        status = a["status"] + (f"/{a['stopped_by']}" if a.get("stopped_by") else "")
        click.echo(f"  {a['name']:<26} {status:<19} risk={risk:<6} queries={a.get('queries', 0):<8}"
                   f" {one_line(a.get('reason', ''))}")  # endpoint text: one line, no controls


def print_verdict(report: dict) -> None:
    """The verdict line (and a warning when an inconclusive run is let through)."""
    if report.get("error"):
        click.echo(f"run crashed: {one_line(report['error'])}", err=True)
    v = report.get("verdict")
    click.echo(f"verdict: {v} (risk {report.get('risk') or 'none scored'}): "
               f"{one_line(report.get('verdict_reason', ''))}")
    if v == "inconclusive" and (report.get("policy") or {}).get("on_inconclusive") == "pass":
        click.echo("leakmeter: warning: the verdict is inconclusive (no risk shown, but not every "
                   "attack finished); policy.on_inconclusive: pass lets it exit 0", err=True)


def print_summary(report: dict) -> None:
    """Attack lines, the verdict, and where the report went."""
    print_attacks(report)
    line = endpoint_line(report)
    if line:
        click.echo(line)
    print_verdict(report)
    click.echo(where_line(report))


def endpoint_line(report: dict) -> str | None:
    """For a remote victim: the protocol that answered (and that `auto` found it), and the HTTP
    requests it took; None for an in-process victim."""
    ep = (report.get("victim") or {}).get("endpoint")
    if not isinstance(ep, dict):
        return None
    found = " (found by auto)" if ep.get("protocol_requested") == "auto" else ""
    line = f"endpoint: {ep.get('url')} speaks {ep.get('protocol')}{found}"
    stats = ep.get("stats") or {}
    if stats:
        line += (f"; {stats.get('requests', 0)} HTTP requests ({stats.get('retries', 0)} retries) for "
                 f"{report.get('queries_total', 0)} queries")
    return line


def where_line(report: dict) -> str:
    """Where the report went, and its MLflow run (or that tracking was off)."""
    run = report.get("mlflow_run_id")
    return (f"report: {report.get('outdir')}/report.json; "
            + (f"mlflow run: {run}" if run else "mlflow: off (no tracking)"))
