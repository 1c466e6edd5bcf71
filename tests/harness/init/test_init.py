"""`leakmeter init`: from flags or answers to a commented scenario that validates and runs."""

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from harness.run.runner import plan_attacks
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


def test_piped_answers_without_ask_are_not_read_and_it_says_so(tmp_path, monkeypatch):
    """`printf ... | leakmeter init`: stdin is not a terminal, so nothing is asked (CI must not hang);
    a note says the defaults were taken and that --ask reads the answers. Flags that leave nothing
    out, or an explicit --no-ask, get no note."""
    monkeypatch.chdir(tmp_path)
    res = leakmeter("init", input="none\nbreast_cancer\nprediction\nlabel\n")  # not a terminal
    assert res.exit_code == 0 and "pass --ask to read the answers from stdin" in res.stderr, res.stderr
    assert load_scenario(tmp_path / "digits.yaml").victim.data.dataset == "digits"  # the default
    res = leakmeter("init", "--data", "breast_cancer", "--no-ask", input="x\n")
    assert res.exit_code == 0 and "--ask" not in res.stderr, res.stderr
    res = leakmeter("init", "--model", "none", "--data", "diabetes", "--interface", "prediction",
                    input="x\n")
    assert res.exit_code == 0 and "--ask" not in res.stderr, res.stderr


def test_a_wrong_model_is_asked_again_at_once_and_other_answers_are_kept(tmp_path, monkeypatch):
    """The model is read as soon as it is named (before the other questions), the data too; a
    wrong answer is asked again and the others are kept; the experiment is the model's name."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "junk.pt").write_bytes(b"not a model")
    torch.save(nn.Linear(30, 2).state_dict(), tmp_path / "good.pt")
    answers = "junk.pt\ngood.pt\nnowhere.npz\nbreast_cancer\nprediction\nlabel\ntanh\n"  # + the activation
    res = leakmeter("init", "--ask", input=answers)
    assert res.exit_code == 0, res.output + res.stderr
    err = res.stderr.splitlines()
    assert err[0].startswith("leakmeter: --model: junk.pt") and "try again" in err[0]
    assert "--data: nowhere.npz" in err[1] and "try again" in err[1]
    assert res.output.count("Model file") == 2 and res.output.count("Data:") == 2
    s = load_scenario(tmp_path / "good.yaml")
    assert (s.victim.model.path.endswith("good.pt"), s.victim.data.dataset, s.tracking.experiment) == (
        True, "breast_cancer", "good")
    assert s.victim.model.spec.activation == "tanh"  # a state_dict's activation is asked, not assumed


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


def _two_output_classifier(tmp_path, keys="sequential", pool=False):
    """The usual PyTorch binary classifier: 30 → 16 ReLU → 2 logits, float32, trained on raw
    (unstandardised) features, saved with torch.save(state_dict); its data as an .npz."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    w = rng.normal(size=30)
    x = (rng.uniform(0, 5, size=(420, 30))).astype(np.float32)  # raw units, far from standardised
    y = (x @ w > np.median(x @ w)).astype(np.int64)
    net = nn.Sequential(nn.Linear(30, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    xt, yt = torch.tensor(x[:240]), torch.tensor(y[:240])
    for _ in range(300):
        opt.zero_grad()
        nn.functional.cross_entropy(net(xt), yt).backward()
        opt.step()
    state = net.state_dict()
    if keys == "named":  # a class with fc1/fc2 attributes instead of a Sequential
        state = dict(zip(["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"], state.values(), strict=True))
    torch.save(state, tmp_path / "clf.pt")
    arrays = {"x_train": x[:240], "y_train": y[:240], "x_test": x[240:340], "y_test": y[240:340]}
    if pool:
        arrays.update(x_pool=x[340:], y_pool=y[340:])
    np.savez(tmp_path / "clf.npz", **arrays)
    with torch.no_grad():
        acc = float((net(torch.tensor(x[240:340])).argmax(1).numpy() == y[240:340]).mean())
    return acc


def test_own_two_output_model_from_init_to_a_decided_verdict(tmp_path, monkeypatch):
    """The issue's path: a 2-output binary state_dict and an .npz without x_pool; init → validate
    → run on the file init wrote, untouched, ends in a decided verdict (a gradient API: fail)."""
    import json

    monkeypatch.chdir(tmp_path)
    _two_output_classifier(tmp_path)
    res = leakmeter("init", "--model", "clf.pt", "--data", "clf.npz", "--interface", "gradient", "--no-ask")
    assert res.exit_code == 0, res.output + res.stderr
    raw = yaml.safe_load((tmp_path / "clf.yaml").read_text())
    data = raw["victim"]["data"]
    assert data["task"] == "multiclass" and data["standardize"] == "none"  # loads; inputs as they are
    assert raw["attacker"]["pool"] == 50  # what the data can give: half of x_test (no x_pool)
    assert "query_budget" not in (raw.get("defenses") or {})  # no defense the deployment may not have
    assert leakmeter("validate", "clf.yaml").exit_code == 0
    run = leakmeter("run", "clf.yaml", "--no-tracking", "--out", "out")
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert run.exit_code == 1 and rep["verdict"] == "fail", run.output + run.stderr
    assert not [a["name"] for a in rep["attacks"] if a["status"] == "error"], run.output
    assert rep["attacker"]["pool"] == 50
    assert "50 held-out test records" in rep["victim"]["data"]["pool_source"]
    span = next(a for a in rep["attacks"] if a["name"] == "span_nonadaptive")
    assert span["risk"] == "high" and span["metrics"]["recovered_rank"] == 16


def test_own_model_is_audited_on_its_inputs_as_they_are(tmp_path, monkeypatch):
    """No standardising by default for a model file: the reported accuracy is the model's own on
    x_test (computed here), and a class with fc1/fc2 keys loads by position."""
    import json

    monkeypatch.chdir(tmp_path)
    acc = _two_output_classifier(tmp_path, keys="named", pool=True)
    res = leakmeter("init", "--model", "clf.pt", "--data", "clf.npz", "--interface", "prediction",
                    "--no-ask")
    assert res.exit_code == 0, res.output + res.stderr
    assert yaml.safe_load((tmp_path / "clf.yaml").read_text())["attacker"]["pool"] == 80  # x_pool's rows
    run = leakmeter("run", "clf.yaml", "--no-tracking", "--out", "out",
                    "--set", "attacks=[{name: mia_loss}]")
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert run.exit_code in (0, 1), run.output + run.stderr
    assert rep["victim"]["test_accuracy"] == pytest.approx(acc, abs=1e-12)
    assert rep["victim"]["data"]["normalisation"] == {"kind": "none"}


def test_a_spec_that_does_not_fit_is_refused_at_validate_with_its_cause(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _two_output_classifier(tmp_path)
    assert leakmeter("init", "--model", "clf.pt", "--data", "clf.npz", "--no-ask").exit_code == 0
    text = (tmp_path / "clf.yaml").read_text().replace("task: multiclass", "task: binary")
    (tmp_path / "clf.yaml").write_text(text)
    for cmd in ("validate", "run"):
        res = leakmeter(cmd, "clf.yaml", *(["--no-tracking"] if cmd == "run" else []))
        assert res.exit_code == 2, res.output
        msg = res.stderr
        assert "[30, 16, 2]" in msg and "task: multiclass" in msg and "size mismatch" not in msg, msg


@pytest.mark.parametrize("data, n_train, output", [("breast_cancer", 284, "probabilities"),
                                                   ("diabetes", 221, "logits")])
def test_bundled_small_data_sets_get_a_training_size_they_can_give(tmp_path, monkeypatch, data, n_train,
                                                                   output):
    monkeypatch.chdir(tmp_path)
    res = leakmeter("init", "--data", data, "--no-ask")
    assert res.exit_code == 0, res.output + res.stderr
    s = load_scenario(tmp_path / f"{data.replace('_', '-')}.yaml")
    assert (s.victim.data.n_train, s.interface.output) == (n_train, output)


def test_safetensors_and_commented_out_sections(tmp_path, monkeypatch):
    from safetensors.torch import save_file

    monkeypatch.chdir(tmp_path)
    _two_output_classifier(tmp_path)
    state = torch.load(tmp_path / "clf.pt", weights_only=True)
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "clf.safetensors")
    res = leakmeter("init", "--model", "clf.safetensors", "--data", "clf.npz", "--no-ask")
    assert res.exit_code == 0, res.output + res.stderr
    s = load_scenario(tmp_path / "clf.yaml")
    assert s.victim.model.spec.hidden == [16] and s.victim.data.task == "multiclass"
    # every defense commented out: `defenses:` reads as null, which is no defenses, not an error
    assert s.defenses.query_budget is None and "\ndefenses:" in (tmp_path / "clf.yaml").read_text()
