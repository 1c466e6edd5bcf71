"""Scenario validation: one-line errors naming file, key path and what is allowed."""

import numpy as np
import pytest
import yaml
from conftest import make_scenario

from harness.core.errors import ScenarioError
from harness.scenario import apply_overrides, flatten, load_scenario, parse_value, scenario_from_dict


def write(tmp_path, data, name="s.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def error_of(tmp_path, data, overrides=None):
    with pytest.raises(ScenarioError) as exc:
        load_scenario(write(tmp_path, data), overrides)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_valid_scenario_round_trips(tmp_path):
    s = load_scenario(write(tmp_path, make_scenario()))
    assert s.victim.model.hidden == [16]
    assert s.interface.kind == "gradient"
    assert s.attacks == "all"


def test_unknown_key_names_path_and_allowed_keys(tmp_path):
    data = make_scenario()
    data["victim"]["model"]["hiden"] = [3]
    msg = error_of(tmp_path, data)
    assert "victim.model.hiden" in msg and "unknown key" in msg
    assert "hidden" in msg and "s.yaml" in msg


def test_wrong_type_in_list_names_index(tmp_path):
    data = make_scenario()
    data["victim"]["model"]["hidden"] = [16, "wide"]
    msg = error_of(tmp_path, data)
    assert "victim.model.hidden[1]" in msg and '"wide"' in msg


def test_bad_dataset_name_lists_allowed(tmp_path):
    data = make_scenario()
    data["victim"]["data"]["dataset"] = "mnist"
    msg = error_of(tmp_path, data)
    assert "victim.data.dataset" in msg and "digits" in msg and "fashion_mnist" in msg


def test_out_of_range_value(tmp_path):
    data = make_scenario()
    data["defenses"] = {"query_budget": -5}
    msg = error_of(tmp_path, data)
    assert "defenses.query_budget" in msg and "-5" in msg


def test_dp_needs_exactly_one_target(tmp_path):
    data = make_scenario()
    data["defenses"] = {"dp_sgd": {"delta": 1e-5}}
    assert "defenses.dp_sgd" in error_of(tmp_path, data)


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ScenarioError, match="not found"):
        load_scenario(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(bad)


def test_name_must_be_slug(tmp_path):
    assert "name" in error_of(tmp_path, make_scenario(name="Has Spaces"))


def test_overrides_coerce_types(tmp_path):
    p = write(tmp_path, make_scenario())
    s = load_scenario(p, ["defenses.dp_sgd.epsilon=4", "victim.model.hidden=[8, 4]",
                          "defenses.query_budget=1e3", "tracking.enabled=false"])
    assert s.defenses.dp_sgd.epsilon == 4.0
    assert s.victim.model.hidden == [8, 4]
    assert s.defenses.query_budget == 1000
    assert s.tracking.enabled is False
    msg = error_of(tmp_path, make_scenario(), ["victim.model.hidden=wide"])
    assert "victim.model.hidden" in msg


def test_override_none_removes_section():
    raw = make_scenario(defenses={"dp_sgd": {"epsilon": 1.0}})
    out = apply_overrides(raw, ["defenses.dp_sgd=none"])
    assert scenario_from_dict(out).defenses.dp_sgd is None
    assert raw["defenses"]["dp_sgd"] == {"epsilon": 1.0}  # input untouched
    assert parse_value("none") is None and parse_value("0.5") == 0.5


def test_set_none_turns_a_section_off_as_the_grid_does():
    """`--set defenses.dp_sgd.epsilon=none` means "no DP-SGD", exactly as `--grid ...=1,none`."""
    from harness.sweep.grid import Cell, apply_cell

    raw = make_scenario(defenses={"dp_sgd": {"epsilon": 1.0, "delta": 1e-5}, "query_budget": 50})
    for key in ("defenses.dp_sgd.epsilon", "defenses.query_budget", "defenses.output_noise.sigma"):
        by_set = scenario_from_dict(apply_overrides(raw, [f"{key}=none"]))
        by_grid = scenario_from_dict(apply_cell(raw, Cell({key: None}, 0)))
        assert by_set.defenses == by_grid.defenses, key
    off = scenario_from_dict(apply_overrides(raw, ["defenses.dp_sgd.epsilon=none"]))
    assert off.defenses.dp_sgd is None and off.defenses.query_budget == 50
    # a key that may be null stays a null key: the section around it is kept
    kept = apply_overrides(make_scenario(), ["victim.data.n_test=none"])
    assert kept["victim"]["data"]["n_test"] is None and kept["victim"]["data"]["dataset"] == "digits"


def test_relative_paths_resolve_from_scenario_folder(tmp_path):
    data = make_scenario()
    data["victim"]["data"] = {"dataset": "npz", "path": "arrays.npz"}
    z = np.zeros((4, 2))  # files a scenario names must exist and be readable at load
    np.savez(tmp_path / "arrays.npz", x_train=z, y_train=z[:, 0], x_test=z, y_test=z[:, 0])
    s = load_scenario(write(tmp_path, data))
    assert s.victim.data.path == str((tmp_path / "arrays.npz").resolve())


def test_fingerprint_ignores_tracking_only():
    a = scenario_from_dict(make_scenario())
    b = scenario_from_dict(make_scenario(tracking={"experiment": "other"}))
    c = scenario_from_dict(make_scenario(seed=1))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    assert flatten({"a": {"b": [1, 2]}}) == {"a.b": [1, 2]}


def test_public_dump_redacts_endpoint_credentials():
    s = scenario_from_dict(make_scenario(victim={"endpoint": {
        "url": "https://user:s3cret@api.example.com:8443/v1/invocations?key=abc#frag"}}))
    dumped = str(s.public_dump())
    assert "s3cret" not in dumped and "key=abc" not in dumped and "user" not in dumped
    assert s.public_dump()["victim"]["endpoint"]["url"] == "https://api.example.com:8443/v1/invocations"


def test_public_dump_hides_a_tracking_servers_password():
    from harness.scenario import scenario_from_dict

    s = scenario_from_dict({"name": "t", "tracking": {"uri": "http://alice:pw-Zz81@mlflow.example:5000"}})
    assert s.public_dump()["tracking"]["uri"] == "http://mlflow.example:5000"
    s = scenario_from_dict({"name": "t", "tracking": {"uri": "sqlite:///tmp/x.db"}})
    assert s.public_dump()["tracking"]["uri"] == "sqlite:///tmp/x.db"
