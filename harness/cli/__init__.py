"""The `leakmeter` command line (click): one thin module per command group.

Exit codes (docs/contract.md): 0 pass, 1 fail, 2 bad input, 3 an attack or the run crashed.
numpy/torch are imported inside the commands, after the thread count is pinned.
"""

from __future__ import annotations

import click

from harness.cli.bound import bound
from harness.cli.init import init
from harness.cli.run import attacks, run, validate
from harness.cli.scan import scan
from harness.cli.serve import serve
from harness.cli.sweep import compare, sweep


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="leakmeter")
def main() -> None:
    """leakmeter: what can an attacker take from this model deployment?"""
    from victims.http.secrets import install_stream_scrubbing

    install_stream_scrubbing()  # every line printed passes the secrets scrubber


for _command in (run, validate, attacks, bound, serve, scan, sweep, compare, init):
    main.add_command(_command)

if __name__ == "__main__":
    main()
