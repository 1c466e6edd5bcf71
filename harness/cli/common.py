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


def choose(fn):
    """--attacks NAME,... and --skip NAME,...: which of the scenario's attacks run."""
    fn = click.option("--skip", metavar="NAME,...",
                      help="Run the scenario's attacks except these (comma-separated).")(fn)
    return click.option("--attacks", "only", metavar="NAME,...",
                        help="Run only these attacks (comma-separated; `leakmeter attacks` lists them), "
                             "with the scenario's params where it sets any.")(fn)


def choose_attacks(s, only: str | None, skip: str | None) -> None:
    """Apply --attacks / --skip to a loaded scenario (BadInput, exit 2, for a name that is not an
    attack, or a choice that leaves none)."""
    if only is None and skip is None:  # an empty --attacks "" is bad input, not "all"
        return
    from harness.core.catalog import catalog
    from harness.core.errors import BadInput
    from harness.scenario.schema import AttackChoice

    known = list(catalog())
    listed = {} if s.attacks == "all" else {c.name: c for c in s.attacks}
    chosen = {}
    for flag, text in (("--attacks", only), ("--skip", skip)):
        names = [n.strip() for n in (text or "").split(",") if n.strip()]
        bad = [n for n in names if n not in known]
        if text is not None and (bad or not names):
            raise BadInput(f"{flag}: {', '.join(bad) or repr(text)}: not an attack; "
                           f"allowed: {', '.join(known)}")
        chosen[flag] = names
    base = chosen["--attacks"] or (list(listed) if listed else known)
    names = [n for n in dict.fromkeys(base) if n not in chosen["--skip"]]
    if not names:
        raise BadInput("--skip: skips every attack the scenario runs; nothing would run")
    s.attacks = [listed.get(n) or AttackChoice(name=n) for n in names]


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
    from harness.core.errors import BadInput
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
        from harness.core.errors import BadInput
        from harness.core.interrupts import Interrupted, handle_signals

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
        except click.exceptions.Abort:  # Ctrl-D or the end of input at a question
            _fail("aborted: a question was left without an answer", 2)
        except click.exceptions.Exit:
            raise
        except SystemExit:
            raise
        except Exception as exc:  # noqa: BLE001
            _fail(f"crashed: {type(exc).__name__}: {exc}", 3)

    return wrapper


WIDTH = 100  # the summary fits this many columns (fewer on a narrower terminal)
STYLES = {"high": "bold red", "medium": "yellow", "low": "green", "fail": "bold red", "pass": "bold green",
          "inconclusive": "bold yellow", "error": "bold magenta", "ok": "", "incomplete": "yellow",
          "skipped": "dim", "none": "dim"}


def colour() -> bool:
    """Colour on a terminal; plain in CI, when piped, and with NO_COLOR set."""
    import os

    return sys.stdout.isatty() and not os.environ.get("CI") and not os.environ.get("NO_COLOR")


def width() -> int:
    import shutil

    return min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns) if sys.stdout.isatty() else WIDTH


def echo_styled(parts: list[tuple[str, str]], err: bool = False) -> None:
    """One line from (text, rich style) parts: styled on a colour terminal, else plain text."""
    if not colour() or err:
        click.echo("".join(t for t, _ in parts), err=err)
        return
    from rich.console import Console
    from rich.text import Text

    line = Text()
    for text, style in parts:
        line.append(text, style=style or None)
    Console(file=sys.stdout, highlight=False, soft_wrap=True).print(line)


def table(header: tuple[str, ...], rows: list[tuple[str, ...]], note: int | None = None) -> None:
    """A table that fits the summary width: the last column wraps within its width; column `note`
    (if given) is printed under its row, indented, instead of as a column. Coloured on a terminal
    (header bold, notes dim), plain when piped or in CI."""
    import textwrap

    cols = [i for i in range(len(header)) if i != note]
    w = {i: max(len(str(r[i])) for r in [header, *rows]) for i in cols[:-1]}
    left = sum(w.values()) + 2 * len(w)
    last = max(width() - left, 20)
    echo_styled([("".join(f"{header[i]:<{w[i] + 2}}" for i in cols[:-1]) + header[cols[-1]], "bold")])
    for r in rows:
        wrapped = textwrap.wrap(str(r[cols[-1]]), last) or [""]
        head = "".join(f"{r[i]:<{w[i] + 2}}" for i in cols[:-1])
        echo_styled([(head, "bold"), (wrapped[0], "")])
        for more in wrapped[1:]:
            echo_styled([(" " * left + more, "")])
        if note is not None:
            for line in textwrap.wrap(str(r[note]), width() - 4):
                echo_styled([("    " + line, "dim")])


def reason_text(a: dict) -> str:
    """An attack's reason as printed: the one place its text (from the attack, perhaps echoing
    an endpoint) is formatted for the terminal."""
    return one_line(a.get("reason", ""))  # endpoint text: one line, no controls


def print_attacks(report: dict) -> None:
    """One line per attack, fitting the summary width: name, status (and what stopped it), risk,
    the figure that decided it, and as much of the reason as fits (the full text: report.md)."""
    from reports.summary import fit, headline, status_text

    rows = [(a["name"], status_text(a), a.get("risk") or "-", headline(a), reason_text(a))
            for a in report["attacks"]]
    if not rows:
        return
    w = [min(max(len(r[i]) for r in rows), cap) for i, cap in ((0, 24), (1, 21), (2, 6), (3, 18))]
    for name, status, risk, fig, why in rows:
        head = [(f"  {fit(name, w[0]):<{w[0]}} ", "bold"), (f"{fit(status, w[1]):<{w[1]}} ",
                STYLES.get(status.split("/")[0], "")), (f"{risk:<{w[2]}} ", STYLES.get(risk, "")),
                (f"{fit(fig, w[3]):<{w[3]}} ", "cyan")]
        used = sum(len(t) for t, _ in head)
        echo_styled(head + [(fit(why, width() - used), "dim")])


def print_verdict(report: dict) -> None:
    """The verdict line (and a warning when an inconclusive run is let through)."""
    from reports.summary import fit

    if report.get("error"):
        click.echo(f"run crashed: {one_line(report['error'])}", err=True)
    v = report.get("verdict")
    risk = report.get("risk") or "none scored"
    head = [("verdict: ", "bold"), (str(v), STYLES.get(str(v), "")), (f" (risk {risk}): ", "")]
    used = sum(len(t) for t, _ in head)
    echo_styled(head + [(fit(one_line(report.get("verdict_reason", "")), width() - used), "")])
    if v == "inconclusive" and (report.get("policy") or {}).get("on_inconclusive") == "pass":
        click.echo("leakmeter: warning: the verdict is inconclusive (no risk shown, but not every "
                   "attack finished); policy.on_inconclusive: pass lets it exit 0", err=True)


def print_summary(report: dict) -> None:
    """Attack lines, the verdict, and where the report went."""
    from reports.summary import fit

    print_attacks(report)
    line = endpoint_line(report)
    if line:
        click.echo(fit(line, width()))
    print_verdict(report)
    for line in where_lines(report):
        click.echo(line)


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


def where_lines(report: dict) -> list[str]:
    """Where the report went (report.md to read first, the HTML), and its MLflow run (or that
    tracking was off)."""
    out = report.get("outdir")
    run = report.get("mlflow_run_id")
    lines = [f"report: {out}/report.md (+ .html, .json)"]  # the folder once: fits 100 columns
    lines.append(f"mlflow run: {run} (`mlflow ui` here: the experiment opens on its runs)"
                 if run else "mlflow: off (no tracking)")
    return lines


def where_line(report: dict) -> str:
    """Where the report went and its MLflow run, on one line (for sweeps)."""
    run = report.get("mlflow_run_id")
    return (f"report: {report.get('outdir')}/report.md; "
            + (f"mlflow run: {run}" if run else "mlflow: off (no tracking)"))
