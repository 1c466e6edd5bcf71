"""Choosing attacks: `--attacks NAME,...` and `--skip NAME,...` on `run` and `validate`, and bare
names in the file or through `--set attacks=[surrogate]` (issue 35, item 3). Bad choices are one
line and exit 2, before anything loads."""

import pytest
import yaml
from click.testing import CliRunner
from conftest import REPO, message_lines

from harness.cli import main
from harness.cli.common import choose_attacks
from harness.core.catalog import catalog
from harness.core.errors import BadInput
from harness.scenario import load_scenario

QUICKSTART = str(REPO / "scenarios" / "quickstart.yaml")


def _names(s) -> list[str]:
    return [c.name for c in s.attacks]


def test_attacks_and_skip_choose_from_the_scenarios_list_and_keep_its_params(tmp_path):
    p = tmp_path / "s.yaml"
    data = yaml.safe_load(open(QUICKSTART))
    data["attacks"] = ["mia_loss", {"name": "surrogate", "params": {"steps": 5}}, "span_nonadaptive"]
    p.write_text(yaml.safe_dump(data))
    s = load_scenario(str(p))
    assert _names(s) == ["mia_loss", "surrogate", "span_nonadaptive"]  # bare names are choices
    choose_attacks(s, "surrogate,mia_lira", None)
    assert _names(s) == ["surrogate", "mia_lira"] and s.attacks[0].params == {"steps": 5}
    s = load_scenario(str(p))
    choose_attacks(s, None, "surrogate")
    assert _names(s) == ["mia_loss", "span_nonadaptive"]
    s = load_scenario(QUICKSTART)  # attacks: all, so --skip leaves every other registered attack
    choose_attacks(s, None, " reconn , dp_audit")
    assert _names(s) == [n for n in catalog() if n not in ("reconn", "dp_audit")]


@pytest.mark.parametrize("only, skip, words", [
    ("nope", None, ["--attacks: nope: not an attack", "allowed: ", "surrogate"]),
    ("", None, ["--attacks: ''"]),
    (None, ",", ["--skip: ','"]),
    ("surrogate", "surrogate", ["--skip: skips every attack"]),
])
def test_a_bad_choice_is_bad_input_naming_what_is_allowed(only, skip, words):
    s = load_scenario(QUICKSTART)
    with pytest.raises(BadInput) as err:
        choose_attacks(s, only, skip)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_the_flags_and_set_reach_validate_and_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(main, ["validate", QUICKSTART, "--attacks", "surrogate,mia_lira"])
    assert res.exit_code == 0 and "2 attack(s) planned" in res.output, res.output
    res = runner.invoke(main, ["validate", QUICKSTART, "--set", "attacks=[surrogate]"])
    assert res.exit_code == 0 and "1 attack(s) planned" in res.output, res.output
    res = runner.invoke(main, ["validate", QUICKSTART, "--skip", "surrogate"])
    assert res.exit_code == 0 and f"{len(catalog()) - 1} attack(s) planned" in res.output, res.output
    # `run` refuses a bad choice in one line, before anything loads (no stage line, no folder)
    res = runner.invoke(main, ["run", QUICKSTART, "--attacks", "mia_lira,nope", "--no-tracking"])
    assert res.exit_code == 2 and message_lines(res.stderr) == res.stderr.strip().splitlines()
    assert len(res.stderr.strip().splitlines()) == 1 and "nope: not an attack" in res.stderr
    assert not (tmp_path / "leakmeter-out").exists()
