"""The oracle: interface rules, budget charged before answering, output defenses."""

import pytest
import torch
from conftest import make_scenario

from defenses.output import OutputDefenses
from harness.errors import BudgetExhausted, InterfaceError
from harness.oracle import Oracle
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


def test_budget_is_never_exceeded_and_counted_per_attack(victim):
    o = oracle_for(victim, budget=100)
    a, b = o.view("a"), o.view("b")
    a.predict(torch.zeros(60, 64))
    with pytest.raises(BudgetExhausted):
        b.explain(torch.zeros(41, 64))  # would make 101: refused whole, nothing answered
    b.explain(torch.zeros(40, 64))
    assert (a.queries, b.queries, o.ledger.used, a.remaining) == (60, 40, 100, 0)
    with pytest.raises(BudgetExhausted):
        a.predict(torch.zeros(1, 64))
    assert o.ledger.used == 100 and a.affordable(5) == 0


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
