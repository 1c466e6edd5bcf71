"""Pieces every leakmeter command shares: the --threads and --set options and `guarded`, which
turns bad input into one line and exit code 2, and any other crash into one line and exit 3."""

from __future__ import annotations

import sys
from functools import wraps

import click

THREADS = click.option("--threads", type=click.IntRange(min=1), default=None,
                       help="Threads per process for torch/BLAS (default 1, or LEAKMETER_THREADS).")
TRUST = click.option(
    "--trust-model-code", is_flag=True,
    help="Allow victim.model.format: torchscript. A TorchScript file is a program: its code RUNS when it "
         "is loaded. Only for files you trust; without this flag such files are refused (exit 2).")
SET = click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                   help="Override a scenario key by dotted path, e.g. defenses.dp_sgd.epsilon=4.")


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

        try:
            return fn(*args, **kwargs)
        except BadInput as exc:
            _fail(f"error: {exc}", 2)
        except KeyboardInterrupt:
            _fail("interrupted", 3)
        except click.exceptions.Exit:
            raise
        except SystemExit:
            raise
        except Exception as exc:  # noqa: BLE001
            _fail(f"crashed: {type(exc).__name__}: {exc}", 3)

    return wrapper


def print_attacks(report: dict) -> None:
    """One line per attack: name, status, risk, queries, reason."""
    for a in report["attacks"]:
        risk = a.get("risk") or "-"
        click.echo(f"  {a['name']:<26} {a['status']:<8} risk={risk:<6} queries={a.get('queries', 0):<8}"
                   f" {a.get('reason', '')}")
