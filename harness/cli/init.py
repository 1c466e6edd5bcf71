"""`leakmeter init`: ask for (or take as flags) a model file, a data set and the interface, and write
a commented scenario that validates (harness/init/scaffold.py writes the text)."""

from __future__ import annotations

import sys

import click

from harness.cli.common import guarded

# the choices, kept here so the command module imports nothing heavy
# (harness/init/scaffold.py checks them too)
INTERFACES = ("prediction", "gradient", "smoothgrad", "whitebox")
OUTPUTS = ("label", "probabilities", "logits")
DATASETS = ("digits", "breast_cancer", "diabetes", "fashion_mnist")
ACTIVATIONS = ("relu", "leaky_relu", "gelu", "silu", "tanh", "sigmoid")


def _ask(value, question: str, default, ask: bool, choices=None):
    if value is not None or not ask:
        return value if value is not None else default
    kind = click.Choice(choices) if choices else None
    return click.prompt(question, default=default, type=kind, show_choices=bool(choices))


EPILOG = """\b
Exit codes: 0 written and valid; 2 bad input (a file leakmeter does not read, an existing --out).
\b
Examples:
  leakmeter init                          (asks; each answer is checked as it is given)
  leakmeter init --model model.safetensors --data data.npz --interface prediction
"""


@click.command(epilog=EPILOG)
@click.option("--model", "model", metavar="FILE", help="Your model file (state_dict, safetensors, ...); "
              "'none' to let leakmeter train one like it.")
@click.option("--data", "data", metavar="NAME|FILE|DIR",
              help="digits, breast_cancer, diabetes, fashion_mnist; an .npz file; or a folder of IDX files.")
@click.option("--interface", "interface", type=click.Choice(INTERFACES),
              help="What users of the deployment can ask.")
@click.option("--output", "output", type=click.Choice(OUTPUTS), help="What predict returns.")
@click.option("--activation", type=click.Choice(ACTIVATIONS),
              help="A state_dict's activation (the file does not store it; asked, else relu is assumed).")
@click.option("--name", help="Scenario name (default: from the model or data file).")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), default=None,
              help="Where to write the scenario (default: <name>.yaml here).")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.option("--ask/--no-ask", default=None,
              help="Ask for what the flags leave out (default: when stdin is a terminal).")
@guarded
def init(model, data, interface, output, activation, name, out, force, ask) -> None:
    """Write a commented starting SCENARIO for your model and data, validated."""
    from harness.core.errors import BadInput

    given = {"model": model, "data": data, "interface": interface, "output": output, "activation": activation}
    if ask is None and not sys.stdin.isatty() and None in (model, data, interface):
        # answers piped in (`printf ... | leakmeter init`) are not read unless asked for: say so
        click.echo("leakmeter: note: stdin is not a terminal, so nothing is asked: what the flags leave "
                   "out takes its default (model none, data digits, interface prediction); pass --ask "
                   "to read the answers from stdin", err=True)
    ask = sys.stdin.isatty() if ask is None else ask
    while True:
        try:
            return _init(given, name, out, force, ask)
        except BadInput as exc:
            key = str(exc).split(":")[0].lstrip("-")
            if not ask or key not in given:  # --out and the like: not an answer to ask again
                raise
            click.echo(f"leakmeter: {exc}; try again (your other answers are kept)", err=True)
            given = {**given, key: None}


def _checked(value, question: str, default, ask: bool, check, choices=None):
    """Ask (when the flag left it out) and check the answer at once: a wrong one is said in one
    line and asked again (without --ask: BadInput, exit 2)."""
    from harness.core.errors import BadInput

    while True:
        value = _ask(value, question, default, ask, choices)
        try:
            return value, check(value)
        except BadInput as exc:
            if not ask:
                raise
            click.echo(f"leakmeter: {exc}; try again", err=True)
            value = None


def _read_model(model):
    """What the model file says (None for a model leakmeter trains); BadInput for a file it does
    not read."""
    from pathlib import Path

    from harness.core.errors import BadInput
    from harness.init.scaffold import read_model_file

    if str(model).lower() in ("none", ""):
        return None
    if not Path(model).is_file():
        raise BadInput(f"--model: {model}: no such file")
    return read_model_file(Path(model))


def _init(given: dict, name, out, force, ask: bool) -> None:
    from pathlib import Path

    from harness.core.errors import BadInput
    from harness.init.scaffold import Answers, data_section, scenario_text, slug
    from harness.scenario import load_scenario

    folder = Path(out).resolve().parent if out else Path.cwd()
    given["model"], info = _checked(given["model"], "Model file (none: leakmeter trains one)", "none", ask,
                                    _read_model)
    given["data"], _ = _checked(given["data"], f"Data: {' | '.join(DATASETS)} | an .npz file | an IDX folder",
                                "digits", ask, lambda d: folder.is_dir() and data_section(d, folder, info))
    model, data = given["model"], given["data"]
    given["interface"] = interface = _ask(given["interface"], "Interface", "prediction", ask,
                                          list(INTERFACES))
    output = given["output"]
    if ask:  # left out and not asked: probabilities, or logits for a regression model
        given["output"] = output = _ask(output, "What predict returns (regression: logits)", "probabilities",
                                        ask, list(OUTPUTS))
    model = None if str(model).lower() in ("none", "") else model
    activation = given.get("activation")
    if ask and activation is None and model is not None and _holds_weights(model):
        given["activation"] = activation = _ask(None, "Activation of your network (a state_dict does not "
                                                "store it)", "relu", ask, list(ACTIVATIONS))
    answers = Answers(data=data, interface=interface, output=output, model=model, name=name,
                      activation=activation)
    stem = slug(name or (Path(answers.model).stem if answers.model else Path(data).stem))
    path = Path(out or f"{stem}.yaml")
    if path.exists() and not force:
        raise BadInput(f"--out: {path} exists; pass --force to overwrite it")
    if not path.resolve().parent.is_dir():
        raise BadInput(f"--out: folder {path.resolve().parent} does not exist")
    text = scenario_text(answers, path.resolve().parent)
    path.write_text(text, encoding="utf-8")
    try:
        s = load_scenario(path)
    except BadInput:
        path.unlink()
        raise
    for note in answers.notes:
        click.echo(f"note: {note}")
    click.echo(f"wrote {path} ({s.name}: {s.interface.kind}/{s.interface.output}; valid)\n"
               f"next: leakmeter validate {path} && leakmeter run {path}")


def _holds_weights(model: str) -> bool:
    """The file is a state_dict or safetensors file (weights without their activation)."""
    from pathlib import Path

    from victims.models.files import sniff

    p = Path(model)
    return p.is_file() and sniff(p) in ("state_dict", "safetensors")
