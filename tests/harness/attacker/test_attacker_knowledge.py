"""No peeking: what the attacker knows is declared (`attacker:`), reported, and never taken from
the defender's side — the input box is the documented one, not the training split's, and the
attacker's random streams are apart from the defender's secrets."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_scenario

from harness.core.errors import ScenarioError
from harness.run.runner import attack_seeds, attacker_run_seed, run_scenario
from harness.scenario import scenario_from_dict
from victims.build import build_victim


def _digits(**data):
    base = make_scenario()
    base["victim"]["data"].pop("attacker_pool")
    base["victim"]["data"].update(data)
    return base


def test_the_old_pool_key_still_works_and_says_it_moved():
    s = scenario_from_dict(_digits(attacker_pool=37))
    assert s.victim.data.attacker_pool == 37 and "attacker.pool" in s.notes()[0]
    new = scenario_from_dict({**_digits(), "attacker": {"pool": 37}})
    assert new.victim.data.attacker_pool == 37 and new.notes() == []
    with pytest.raises(ScenarioError, match="attacker.pool: 37 disagrees"):
        scenario_from_dict({**_digits(attacker_pool=10), "attacker": {"pool": 37}})


@pytest.mark.parametrize("domain", [[0, 0], [1, -1], [0, float("inf")], [1, 2, 3]])
def test_a_bad_declared_domain_is_refused(domain):
    with pytest.raises(ScenarioError, match="attacker.input_domain"):
        scenario_from_dict({**_digits(), "attacker": {"input_domain": domain}})


def test_with_no_pool_the_box_is_the_documented_range_not_the_training_split():
    """minmax_center on digits: the documented pixels 0..16 mapped through the deployed
    preprocessing, computed here by hand from the fitted record; the training split's own box is
    narrower, and the attacker must not get it."""
    s = scenario_from_dict(_digits(attacker_pool=0, standardize="minmax_center", n_train=200))
    v = build_victim(s)
    d = v.truth.data
    rec = d.record["normalisation"]
    mu = d.offset
    lo = float(((0 - rec["min"]) / (rec["max"] - rec["min"]) - mu).min())
    hi = float(((16 - rec["min"]) / (rec["max"] - rec["min"]) - mu).max())
    assert (v.info.input_low, v.info.input_high) == pytest.approx((lo, hi), abs=1e-12)
    assert v.info.input_domain_source.startswith("documented")
    train_box = (float(d.x_train.min()), float(d.x_train.max()))
    assert train_box != pytest.approx((v.info.input_low, v.info.input_high), abs=1e-9)


def test_a_declared_domain_wins_and_no_knowledge_is_said_to_be_assumed(tmp_path):
    x = np.random.default_rng(0).normal(size=(120, 5)) * 7
    y = (x[:, 0] > 0).astype(np.int64)
    path = tmp_path / "d.npz"
    np.savez(path, x_train=x[:80], y_train=y[:80], x_test=x[80:], y_test=y[80:])
    data = {"dataset": "npz", "path": str(path), "n_train": 80, "attacker_pool": 0,
            "standardize": "none"}
    plain = build_victim(scenario_from_dict(make_scenario(victim={**make_scenario()["victim"],
                                                                  "data": data})))
    assert (plain.info.input_low, plain.info.input_high) == (-3.0, 3.0)
    assert plain.info.input_domain_source.startswith("assumed")
    told = build_victim(scenario_from_dict({**make_scenario(victim={**make_scenario()["victim"],
                                                                   "data": data}),
                                            "attacker": {"input_domain": [-20, 20]}}))
    assert (told.info.input_low, told.info.input_high) == (-20.0, 20.0)


def test_attacker_and_defender_seeds_are_apart():
    s = scenario_from_dict(_digits())
    run = attacker_run_seed(s)
    assert run != s.seed
    own, secret = attack_seeds(run, s.seed, "reconn")
    assert own != secret and own != s.seed + sum(map(ord, "reconn"))
    other, _ = attack_seeds(run, s.seed, "kkt")
    assert other != own  # each attack its own stream
    declared = scenario_from_dict({**_digits(), "attacker": {"seed": 1234}})
    assert attacker_run_seed(declared) == 1234
    # the defender's secret does not move with the attacker's declared seed
    assert attack_seeds(1234, s.seed, "reconn")[1] == secret


def test_the_report_says_what_the_attacker_knew(tmp_path):
    s = scenario_from_dict({**_digits(attacker_pool=0),
                            "attacks": [{"name": "span_nonadaptive"}]})
    rep = run_scenario(s, out=tmp_path)
    att = rep["attacker"]
    assert att["pool"] == 0 and att["input_domain_source"].startswith("documented")
    assert att["knows_architecture"] is False and "apart" in att["seed"]
