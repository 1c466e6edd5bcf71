"""`leakmeter run`, `validate` and `attacks`: parse, call the runner, print, exit."""

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
    choose,
    choose_attacks,
    ci_outputs,
    guarded,
    print_summary,
    write_ci_outputs,
)
from harness.core.threads import pin_threads


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@SET
@choose
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Write the report JSON here.")
@click.option("--out", type=click.Path(file_okay=False), help="Folder for report files and plots.")
@click.option("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here).")
@click.option("--no-tracking", is_flag=True, help="Do not log to MLflow.")
@ci_outputs
@AUTH_ENV
@TRUST
@THREADS
@guarded
def run(scenario, overrides, only, skip, json_path, out, tracking_uri, no_tracking, sarif_path, junit_path,
        auth_env, trust_model_code, threads) -> None:
    """Run every attack the SCENARIO's deployment allows and print the verdict."""
    from harness.core.progress import begin, busy

    begin()  # the clock starts with the command; nothing is printed before the scenario is read
    # bad input is refused at once, in one line: the output paths and the scenario (YAML and its
    # schema) are checked before torch is imported; then the first stage line says what loads
    check_output_paths(out, json=json_path, sarif=sarif_path, junit=junit_path)
    pin_threads(threads)
    from harness.scenario import load_scenario

    s = load_scenario(scenario, list(overrides), auth_env)
    choose_attacks(s, only, skip)
    # the first stage line (and a live line on a terminal), before the seconds of imports
    with busy(f"loading {s.name} ({scenario}): importing torch and MLflow"):
        apply_trust(trust_model_code)
        from pathlib import Path

        from harness.core.interrupts import Interrupted
        from harness.run.runner import run_scenario
        from reports.verdict import exit_code

    if no_tracking:
        s.tracking.enabled = False
    try:
        report = run_scenario(s, tracking_uri=tracking_uri, out=out, json_path=json_path,
                              source=Path(scenario).read_text())
    except Interrupted as exc:  # the partial report reaches CI too (none before the victim is built)
        report = getattr(exc, "report", None)
        if report is not None:
            write_ci_outputs(sarif_path, junit_path, [(None, report)], scenario, s.public_dump())
        raise
    print_summary(report)
    write_ci_outputs(sarif_path, junit_path, [(None, report)], scenario, s.public_dump())
    sys.exit(exit_code(report))


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@SET
@choose
@AUTH_ENV
@TRUST
@guarded
def validate(scenario, overrides, only, skip, auth_env, trust_model_code) -> None:
    """Check a SCENARIO file without running anything: its keys, attack list, files and size, and
    everything `run` would refuse before its first attack (the data loads, the model file loads
    into its spec, the endpoint's token is set). Nothing is trained, no request is sent."""
    pin_threads(None)
    apply_trust(trust_model_code)
    from harness.run.runner import plan_attacks
    from harness.scenario import load_scenario
    from victims.build import check_buildable

    s = load_scenario(scenario, list(overrides), auth_env)
    choose_attacks(s, only, skip)
    plan = plan_attacks(s)
    _files_exist(s)
    check_buildable(s)
    click.echo(f"{scenario}: valid ({s.name}; interface {s.interface.kind}/{s.interface.output}; "
               f"{len(plan)} attack(s) planned)")


def _files_exist(s) -> None:
    """BadInput when a file or folder the scenario names (resolved from its own folder) does not
    exist: `validate` must not call a scenario valid that `run` cannot start."""
    from pathlib import Path

    from harness.core.errors import BadInput

    m, d = s.victim.model, s.victim.data
    for key, path, folder in (("victim.model.path", m.path, False),
                              ("victim.data.path", d.path, d.dataset == "idx")):
        if path and not (Path(path).is_dir() if folder else Path(path).is_file()):
            raise BadInput(f"{key}: {path}: no such {'folder' if folder else 'file'}")


@click.command()
def attacks() -> None:
    """List the registered attacks: what each does, the APIs it works on, and its paper."""
    from harness.cli.common import table
    from harness.core.catalog import catalog  # the attacks' declarations, without importing torch
    from reports.mitigation import paper_names

    rows = [(c["name"], c["family"], _works_on(c["needs"]), paper_names(str(c["paper"])), c["summary"])
            for c in catalog().values()]
    table(("attack", "family", "works on", "paper", "what it does"), rows, note=4)


def _works_on(needs: list[str]) -> str:
    """The interfaces an attack needs, short: `any API` when every interface serves it."""
    every = {"prediction", "gradient", "smoothgrad", "whitebox"}
    return "any API" if every <= set(needs) else ", ".join(needs)
