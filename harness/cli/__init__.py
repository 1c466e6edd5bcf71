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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog="Start here: leakmeter init, then leakmeter run SCENARIO. Every key: docs/contract.md.")
@click.version_option(package_name="leakmeter")
def main() -> None:
    """leakmeter: what can an attacker take from this model deployment?"""
    from victims.http.secrets import install_stream_scrubbing

    install_stream_scrubbing()  # every line printed passes the secrets scrubber


# the one-line summaries `leakmeter --help` lists (never cut with "..."), and each command's exit
# codes and an example, shown under its own --help (docs/contract.md, "Exit codes")
SHORT = {
    "run": "Attack a scenario's deployment; print the verdict.",
    "validate": "Check a scenario without running it.",
    "attacks": "List the attacks, their APIs and papers.",
    "bound": "Bound any reconstruction attack on a DP model.",
    "serve": "Serve a scenario's victim over HTTP.",
    "scan": "Scan an endpoint against a baseline run.",
    "sweep": "Run a scenario over a grid of defenses.",
    "compare": "Rank a sweep's or experiment's settings.",
    "init": "Write a starting scenario for your model.",
}
_RUN_CODES = ("Exit codes: 0 pass; 1 fail (a risk at or above policy.fail_on); 2 bad input, nothing "
              "ran; 3 an attack or the run crashed; 4 inconclusive; 130/143 interrupted.")
EPILOGS = {
    "run": (_RUN_CODES, "leakmeter run scenarios/quickstart.yaml --attacks surrogate,mia_lira --no-tracking"),
    "validate": ("Exit codes: 0 valid; 2 not (one line: the key, the value, what is allowed).",
                 "leakmeter validate scenarios/quickstart.yaml --set defenses.query_budget=1000"),
    "bound": ("Exit codes: 0 bound printed; 2 bad input.",
              "leakmeter bound --epsilon 1 --delta 1e-5 --prior uniform-ball --dim 64 --radius 1 --eta 0.5"),
    "serve": ("Exit codes: 0 stopped cleanly; 2 bad input (scenario, port, keys).",
              "leakmeter serve scenarios/quickstart.yaml --port 8080"),
    "scan": ("Exit codes: 0 no regression; 1 leakage regressed against the baseline (or, with "
             "--fail-on-verdict, the verdict fails); 2 bad input; 3 crashed.",
             "leakmeter scan endpoint.yaml --baseline last-pass"),
    "sweep": ("Exit codes: 0 every cell ran and one passes; 1 none passes; 2 bad input; 3 a cell "
              "crashed; 4 none passes and a cell was inconclusive; 130/143 interrupted.",
              "leakmeter sweep scenarios/quickstart.yaml --grid defenses.query_budget=100,1000"),
    "compare": ("Exit codes: 0 a setting is recommended; 1 none passes; 2 bad input (runs of "
                "different models or tasks are not ranked together).",
                "leakmeter compare --experiment my-model"),
    "attacks": ("Exit codes: 0.", "leakmeter attacks"),
}

for _command in (run, validate, attacks, bound, serve, scan, sweep, compare, init):
    _command.short_help = SHORT[_command.name]
    if _command.name in EPILOGS:
        _codes, _example = EPILOGS[_command.name]
        _command.epilog = f"{_codes}\n\n\b\nExample:\n  {_example}"
    main.add_command(_command)

if __name__ == "__main__":
    main()
