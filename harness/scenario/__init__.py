"""The scenario file: a typed, validated view of the YAML (docs/contract.md).

`load_scenario(path, overrides)` returns a `Scenario` or raises `ScenarioError` with one line
naming the file, the key path (``victim.model.hidden[1]``) and what is allowed.
"""

from harness.core.errors import ScenarioError
from harness.scenario.loading import (
    apply_overrides,
    choose_auth_env,
    flatten,
    load_scenario,
    parse_value,
    read_raw,
    scenario_from_dict,
)
from harness.scenario.schema import Scenario, redact_url

__all__ = ["Scenario", "ScenarioError", "apply_overrides", "choose_auth_env", "flatten", "load_scenario",
           "parse_value", "read_raw", "redact_url", "scenario_from_dict"]
