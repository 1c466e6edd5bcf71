"""Advice files: one per registered attack, each parses, each template compiles, and advice is
filled only from numbers the run measured (an item that needs a missing one is left out)."""

import pytest

from harness.attacks import registry
from reports import mitigation

ATTACKS = sorted(registry())


@pytest.mark.parametrize("name", ATTACKS)
def test_every_attack_has_an_advice_file_that_compiles(name):
    cls = registry()[name]
    assert (mitigation.ADVICE_DIR / f"{name}.yaml").is_file(), f"reports/advice/{name}.yaml is missing"
    spec = mitigation.advice_for(name, cls.family)
    assert spec["title"] and len(spec["help"]) > 100 and spec["advice"]
    assert all(c.startswith("CWE-") for c in spec["cwe"]) and 0 < float(spec["security_severity"]) <= 10
    env = mitigation._env()
    for item in spec["advice"]:
        assert set(item) <= {"when", "text"} and item["text"]
        env.from_string(item["text"])
        if item.get("when"):
            env.compile_expression(item["when"])
    assert mitigation.paper_citations(cls.paper), f"{name}: {cls.paper!r} is not in papers.yaml"
    # no metrics at all: only the items that need none are shown, and none shows a blank
    lines = mitigation.render_advice({"name": name, "family": cls.family, "metrics": {}, "queries": 10},
                                     {"policy": {"fail_on": "high"}, "interface": {"kind": "prediction"}})
    assert all("None" not in ln and "{{" not in ln and "  " not in ln for ln in lines)


def test_an_item_that_needs_a_missing_number_is_left_out():
    entry = {"name": "span_nonadaptive", "family": "span", "queries": 300,
             "metrics": {"recovered_rank": 16.0, "true_rank": 16.0, "max_principal_angle_deg": 0.5}}
    report = {"policy": {"fail_on": "high"}, "interface": {"kind": "gradient"}, "query_budget": 500}
    full = mitigation.render_advice(entry, report)
    assert any("16 of 16 span dimensions leaked in 300 queries (18.8 per dimension" in ln for ln in full)
    assert any("The query budget of 500 did not stop it" in ln for ln in full)
    del entry["metrics"]["max_principal_angle_deg"]
    fewer = mitigation.render_advice(entry, report)
    assert not any("span dimensions leaked" in ln for ln in fewer) and len(fewer) == len(full) - 1


def test_sweep_facts_say_only_what_every_cell_showed():
    def cell(eps, budget, risk, status="ok"):
        return {"settings": {"defenses.dp_sgd.epsilon": eps, "defenses.query_budget": budget}, "epsilon": eps,
                "attacks": {"a": {"risk": risk, "status": status}}}

    cells = [cell(1.0, 8, "low"), cell(1.0, 200, "high"), cell(None, 8, "low"), cell(None, 200, "high"),
             cell(4.0, 8, "low", status="incomplete")]  # an unfinished low is no evidence
    f = mitigation.sweep_facts(cells, "a", "high")
    assert f["cells"] == 4
    assert f["held"] == [{"key": "defenses.query_budget", "held": ["8"], "leaked": ["200"]}]
    assert "safe_epsilon" not in f  # ε = 1 held at budget 8 but not at 200: no ε is safe on its own
    cells = [cell(0.5, 200, "low"), cell(1.0, 200, "low"), cell(4.0, 200, "high"), cell(None, 200, "high")]
    f = mitigation.sweep_facts(cells, "a", "high")
    assert (f["safe_epsilon"], f["unsafe_epsilon"]) == (1.0, 4.0)
    assert mitigation.sweep_facts(cells[:1], "a", "high") is None
