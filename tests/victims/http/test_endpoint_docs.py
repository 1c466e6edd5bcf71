"""docs/endpoints.md stays runnable: every `victim.endpoint` example in it validates as a scenario
key, and every protocol the schema accepts has its section."""

from __future__ import annotations

import re
import typing

import yaml
from conftest import REPO

from harness.scenario import scenario_from_dict
from harness.scenario.schema import EndpointSpec

DOC = (REPO / "docs" / "endpoints.md").read_text()


def test_every_endpoint_example_validates():
    blocks = re.findall(r"```yaml\n(.*?)```", DOC, re.S)
    assert len(blocks) >= 7
    for block in blocks:
        ep = yaml.safe_load(block)["endpoint"]
        s = scenario_from_dict({"name": "doc", "victim": {"data": {"dataset": "digits"}, "endpoint": ep},
                                "interface": {"kind": "prediction", "output": "probabilities"},
                                "attacks": [{"name": "surrogate"}], "tracking": {"enabled": False}})
        assert s.victim.endpoint.url == ep["url"]


def test_every_protocol_has_a_section():
    protocols = typing.get_args(EndpointSpec.model_fields["protocol"].annotation)
    for p in protocols:
        assert re.search(rf"^## {re.escape(p)} ", DOC, re.M), p
