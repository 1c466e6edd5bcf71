"""The oracle: interface rules, budget charged before answering, output defenses."""

import pytest
import torch
from conftest import make_scenario

from defenses.output import OutputDefenses
from harness.core.errors import BudgetExhausted, InterfaceError
from harness.core.oracle import Oracle
from harness.scenario import scenario_from_dict
from victims.build import build_victim


@pytest.fixture(scope="module")
def victim():
    return build_victim(scenario_from_dict(make_scenario()))


def oracle_for(victim, kind="gradient", output="probabilities", budget=None, **defenses):
    info = victim.info
    info = type(info)(**{**info.__dict__, "interface": kind, "output": output})
    return Oracle(victim.backend, info, OutputDefenses(**defenses), budget, seed=0)


def test_predict_matches_the_model_in_float64(victim):
    view = oracle_for(victim).view("a")
    x = torch.as_tensor(victim.truth.data.x_test[:20])
    p = view.predict(x)
    assert p.dtype == torch.float64 and p.shape == (20, 10)
    truth = torch.softmax(victim.truth.model(x.to(torch.float64)), dim=1)
    assert torch.allclose(p, truth, atol=1e-12)
    labels = oracle_for(victim, output="label").view("b").predict(x)
    assert torch.equal(labels, truth.argmax(dim=1))


def test_explain_is_the_predicted_logit_gradient(victim):
    view = oracle_for(victim).view("a")
    x = torch.as_tensor(victim.truth.data.x_test[:5]).requires_grad_(True)
    g = view.explain(x.detach())
    out = victim.truth.model(x)
    for i in range(5):
        (gi,) = torch.autograd.grad(out[i, out[i].argmax()], x, retain_graph=True)
        assert torch.allclose(g[i], gi[i], atol=1e-12)


def test_interface_refuses_what_it_does_not_offer(victim):
    view = oracle_for(victim, kind="prediction").view("a")
    with pytest.raises(InterfaceError, match="does not offer explain"):
        view.explain(torch.zeros(1, 64))
    with pytest.raises(InterfaceError, match="weights"):
        view.weights()
    assert oracle_for(victim, kind="whitebox").view("w").weights()["0.weight"].shape == (16, 64)


def test_each_attacker_faces_the_whole_budget_and_none_exceeds_it(victim):
    o = oracle_for(victim, budget=100)
    a, b = o.view("a"), o.view("b")
    a.predict(torch.zeros(60, 64))
    assert b.remaining == 100  # what a spent leaves b's own quota untouched
    with pytest.raises(BudgetExhausted):
        b.explain(torch.zeros(101, 64))  # over b's own budget: refused whole, nothing answered
    b.explain(torch.zeros(100, 64))
    with pytest.raises(BudgetExhausted):
        a.predict(torch.zeros(41, 64))  # a has 40 left
    a.predict(torch.zeros(40, 64))
    assert (a.queries, b.queries, o.quotas.used, a.remaining, b.remaining) == (100, 100, 200, 0, 0)
    assert a.affordable(5) == 0 and b.affordable(5) == 0
    with pytest.raises(BudgetExhausted):
        a.predict(torch.zeros(1, 64))
    assert o.quotas.used == 200
    assert o.view("c").remaining == 100  # a new attacker starts with the whole budget


def test_the_runs_row_cap_binds_every_attacker_together_and_says_cap(victim):
    from defenses.errors import RowCapReached
    from harness.core.errors import AttackStopped

    info = type(victim.info)(**{**victim.info.__dict__, "interface": "prediction"})
    o = Oracle(victim.backend, info, OutputDefenses(), 100, seed=0, max_rows=150)
    a, b = o.view("a"), o.view("b")
    a.predict(torch.zeros(100, 64))
    assert b.remaining == 50 and b.capped_by_rows() and not a.capped_by_rows()
    with pytest.raises(RowCapReached) as exc:
        b.predict(torch.zeros(51, 64))
    assert exc.value.stopped_by == "cap" and o.quotas.used == 100
    b.predict(torch.zeros(50, 64))
    assert o.quotas.used == 150 and b.queries == 50
    stop = b.cannot_pay(10, "rows")
    assert isinstance(stop, AttackStopped) and stop.stopped_by == "cap"
    assert a.cannot_pay(10, "rows").stopped_by == "budget"  # a's own quota is spent too


def test_rounding_and_noise_defenses(victim):
    x = torch.as_tensor(victim.truth.data.x_test[:200])
    clean = oracle_for(victim).view("c").predict(x)
    rounded = oracle_for(victim, decimals=2).view("r").predict(x)
    assert torch.allclose(rounded, torch.round(clean, decimals=2))
    assert torch.allclose(rounded * 100, torch.round(rounded * 100), atol=1e-9)
    noisy = oracle_for(victim, noise_sigma=0.05).view("n").predict(x)
    resid = (noisy - clean).flatten()
    assert abs(float(resid.std()) - 0.05) < 0.005 and abs(float(resid.mean())) < 0.005
    g = oracle_for(victim).view("g").explain(x)
    gn = oracle_for(victim, explain_sigma=0.1).view("gn").explain(x)
    assert abs(float((gn - g).std()) - 0.1) < 0.01


def test_top_k_keeps_only_the_largest(victim):
    x = torch.as_tensor(victim.truth.data.x_test[:50])
    p = oracle_for(victim, top_k=2).view("t").predict(x)
    assert int((p > 0).sum(dim=1).max()) == 2


def test_smoothgrad_averages_gradients_of_noisy_copies(victim):
    s = scenario_from_dict(make_scenario(interface={"kind": "smoothgrad", "smoothgrad":
                                                    {"sigma": 0.0, "samples": 3}}))
    v = build_victim(s)
    view = Oracle(v.backend, v.info, OutputDefenses(), None).view("s")
    x = torch.as_tensor(v.truth.data.x_test[:4])
    # sigma 0: SmoothGrad equals the plain gradient
    assert torch.allclose(view.explain(x), v.backend.gradient(x), atol=1e-12)
