"""`leakmeter init`: from flags or answers to a commented scenario that validates and runs."""

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from harness.runner import plan_attacks
from harness.scenario import load_scenario


def leakmeter(*args, input=None):
    from click.testing import CliRunner

    from harness.cli import main

    return CliRunner().invoke(main, list(args), input=input)


def test_flags_give_a_commented_scenario_that_validates(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = leakmeter("init", "--data", "digits", "--interface", "gradient", "--no-ask")
    assert res.exit_code == 0, res.output + res.stderr
    text = (tmp_path / "digits.yaml").read_text()
    s = load_scenario(tmp_path / "digits.yaml")
    assert (s.name, s.interface.kind, s.victim.model.arch, s.attacks) == ("digits", "gradient", "mlp", "all")
    assert sum(ln.lstrip().startswith("#") or " # " in ln for ln in text.splitlines()) >= 15  # commented
    assert "gradient_exact" in text and "span_threshold" not in text  # the attacks this interface allows
    assert len(plan_attacks(s)) >= 1
    valid = leakmeter("validate", "digits.yaml")
    assert valid.exit_code == 0 and "note:" not in valid.output + valid.stderr  # no deprecated keys
    again = leakmeter("init", "--data", "digits", "--no-ask")
    assert again.exit_code == 2 and "exists; pass --force" in again.stderr


def test_model_file_and_npz_become_a_scenario_that_runs(tmp_path, monkeypatch):
    """A user's state_dict and .npz: the widths are read from the file, paths are relative to
    the scenario, the task is inferred, and `leakmeter run` loads the model from it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    torch.save(net.state_dict(), tmp_path / "models" / "churn.pt")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 6))
    y = rng.integers(0, 3, 240)
    np.savez(tmp_path / "churn.npz", x_train=x[:160], y_train=y[:160], x_test=x[160:], y_test=y[160:])
    res = leakmeter("init", "--model", "models/churn.pt", "--data", "churn.npz", "--interface", "gradient",
                    "--output", "logits", "--no-ask", "-o", "scen.yaml")
    assert res.exit_code == 0, res.output + res.stderr
    raw = yaml.safe_load((tmp_path / "scen.yaml").read_text())
    assert raw["victim"]["model"] == {"arch": "file", "path": "models/churn.pt", "format": "auto",
                                      "spec": {"arch": "mlp", "hidden": [8], "activation": "relu"}}
    assert raw["victim"]["data"]["dataset"] == "npz" and raw["victim"]["data"]["task"] == "multiclass"
    run = leakmeter("run", "scen.yaml", "--no-tracking", "--out", "out",
                    "--set", "attacks=[{name: span_nonadaptive}]", "--set", "defenses.query_budget=200")
    assert run.exit_code in (0, 1, 4), run.output + run.stderr  # it ran: a verdict, not bad input
    assert "span_nonadaptive" in run.output


def test_answers_to_the_questions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = leakmeter("init", "--ask", "--name", "My Model", input="none\nbreast_cancer\nprediction\nlabel\n")
    assert res.exit_code == 0, res.output + res.stderr
    s = load_scenario(tmp_path / "my-model.yaml")
    assert (s.victim.data.dataset, s.interface.kind, s.interface.output) == ("breast_cancer", "prediction",
                                                                           "label")


@pytest.mark.parametrize("args, says", [
    (["--data", "nowhere.npz"], "--data: nowhere.npz is neither"),
    (["--model", "missing.pt"], "--model: missing.pt: no such file"),
    (["--out", "no/such/dir/s.yaml"], "--out: folder"),
])
def test_bad_answers_are_one_line_and_leave_no_file(tmp_path, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)
    res = leakmeter("init", "--no-ask", *args)
    assert res.exit_code == 2 and says in res.stderr
    assert not list(tmp_path.glob("*.yaml"))
