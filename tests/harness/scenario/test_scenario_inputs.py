"""Inputs reach a model leakmeter did not train as they are (issue 30, item 3, the schema): a
model file and an endpoint default to `standardize: none`, a model leakmeter trains to `standard`;
and the layer keys of item 2 are checked where they cannot work."""

import pytest
from conftest import make_scenario

from harness.core.errors import ScenarioError
from harness.scenario import scenario_from_dict


def test_standardize_defaults_to_none_wherever_leakmeter_did_not_train_the_model(tmp_path):
    trained = scenario_from_dict(make_scenario())
    assert trained.victim.data.standardize == "standard"
    endpoint = make_scenario()
    endpoint["victim"]["endpoint"] = {"url": "http://127.0.0.1:9/invocations"}
    assert scenario_from_dict(endpoint).victim.data.standardize == "none"
    f = make_scenario()
    f["victim"]["model"] = {"arch": "file", "path": str(tmp_path / "m.onnx")}
    assert scenario_from_dict(f).victim.data.standardize == "none"
    asked = make_scenario()
    asked["victim"]["endpoint"] = {"url": "http://127.0.0.1:9/invocations"}
    asked["victim"]["data"]["standardize"] = "standard"  # said: kept
    assert scenario_from_dict(asked).victim.data.standardize == "standard"


def test_layer_keys():
    ok = make_scenario()
    ok["victim"]["model"] = {"arch": "mlp", "hidden": [8], "norm": "layer", "activation": "gelu"}
    assert scenario_from_dict(ok).victim.model.norm == "layer"
    bad = make_scenario(defenses={"dp_sgd": {"epsilon": 8.0}})
    bad["victim"]["model"] = {"arch": "mlp", "hidden": [8], "norm": "batch"}
    with pytest.raises(ScenarioError, match="norm: batch"):
        scenario_from_dict(bad)
    wrong = make_scenario()
    wrong["victim"]["model"] = {"arch": "mlp", "norm": "group"}
    with pytest.raises(ScenarioError, match="norm"):
        scenario_from_dict(wrong)
