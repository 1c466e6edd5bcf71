"""Black-box scoring (harness/scoring/blackbox.py) against a served victim whose truth the test
knows: the true model agrees on every held-out probe, a wrong one does not; the true first-layer
span holds fresh gradients, a wrong span does not; probes are charged to the budget."""

from __future__ import annotations

import json

import torch

from defenses.output import OutputDefenses
from harness.attacks.base import Artifact
from harness.core.oracle import Oracle
from harness.scenario import scenario_from_dict
from harness.scoring import score
from victims.build import build_victim
from victims.http.served import build_served
from victims.http.server import VictimServer
from victims.models.builders import build_model

SCENARIO = {
    "name": "bb", "seed": 0, "device": "cpu",
    "victim": {"model": {"arch": "mlp", "hidden": [16]},
               "data": {"dataset": "digits", "n_train": 300, "attacker_pool": 50},
               "training": {"epochs": 5, "lr": 0.1, "dtype": "float64"}},
    "interface": {"kind": "gradient", "output": "probabilities"},
    "defenses": {"query_budget": 5000}, "tracking": {"enabled": False},
}


def test_blackbox_scores_match_the_known_truth():
    s = scenario_from_dict(SCENARIO)
    served, local = build_served(s)
    server = VictimServer(served).start()
    try:
        remote = json.loads(json.dumps(SCENARIO))
        remote["victim"]["endpoint"] = {"url": server.url}
        victim = build_victim(scenario_from_dict(remote))
        oracle = Oracle(victim.backend, victim.info, OutputDefenses(), 5000)
        truth, info = victim.truth, victim.info
        assert truth.model is None
        wrong = build_model(s.victim.model, (64,), 10).double()
        good = score(Artifact("model", data={"model": local.truth.model}), truth, info)
        bad = score(Artifact("model", data={"model": wrong}), truth, info)
        assert good["blackbox_agreement"] == 1.0 and bad["blackbox_agreement"] < 0.5
        assert good["blackbox_probes"] == 256
        span = score(Artifact("subspace", data={"basis": local.truth.first_layer}), truth, info)
        rand = score(Artifact("subspace", data={"basis": torch.randn(16, 64, dtype=torch.float64)}),
                     truth, info)
        assert span["blackbox_span_rank"] == 16 and span["blackbox_heldout_angle_deg"] < 1e-4
        assert span["blackbox_heldout_energy"] > 1 - 1e-9
        assert rand["blackbox_heldout_angle_deg"] > 30 and rand["blackbox_heldout_energy"] < 0.6
        # the start-up check (predict + explain) and every probe went through the ledger
        assert oracle.quotas.used == 2 + 2 * 256 + 2 * 8 == victim.backend.stats.rows_sent
    finally:
        server.close()


def test_an_artifact_no_probe_could_verify_is_incomplete_never_low(tmp_path):
    """The scan's row cap lets the surrogate spend its budget but leaves no room for the held-out
    probes: nothing verified the copy, so the attack is incomplete with no risk (once it read
    "low, not verifiable" and the scan passed); the cap is never exceeded."""
    from harness.run.runner import run_scenario

    s = scenario_from_dict(SCENARIO)
    served, _ = build_served(s)
    server = VictimServer(served).start()
    try:
        remote = json.loads(json.dumps(SCENARIO))
        remote["victim"]["endpoint"] = {"url": server.url, "max_rows": 2 + 300}
        remote["defenses"]["query_budget"] = 300
        remote["interface"] = {"kind": "prediction", "output": "probabilities"}
        # a short surrogate: what is checked is the cap, not how well it copies
        remote["attacks"] = [{"name": "surrogate", "params": {"steps": 60, "final_steps": 60}}]
        rep = run_scenario(scenario_from_dict(remote), out=tmp_path / "o")
    finally:
        server.close()
    (a,) = rep["attacks"]
    assert a["queries_sent"] == 300 and a["metrics"].get("blackbox_unverified") == 1.0
    assert a["status"] == "incomplete" and a["risk"] is None and a["stopped_by"] == "cap", a
    assert "verified" in a["reason"] and rep["verdict"] == "inconclusive"
    assert rep["queries_sent_total"] <= 302


class _Blurred(torch.nn.Module):
    """The true model with a deterministic, input-dependent blur (~95% agreement on digits)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.r = torch.randn(64, 10, generator=torch.Generator().manual_seed(3), dtype=torch.float64)

    def forward(self, x):
        f = self.model(x)
        return f + 0.08 * f.std() * torch.sin(x.double() @ self.r)


def test_a_judgment_near_a_level_adds_probes_and_decides_on_the_lower_bound():
    """Issue 30: a copy at ~95% agreement straddles the high bar on 256 probes: the scorer adds
    probes (here until the held-out inputs run out), reports n_probes and one-sided 95% lower
    bounds (Clopper–Pearson, computed independently here), and the judge decides on them."""
    from scipy.stats import binomtest

    from harness.scoring.fidelity import judge_fidelity

    s = scenario_from_dict(SCENARIO)
    served, local = build_served(s)
    server = VictimServer(served).start()
    try:
        remote = json.loads(json.dumps(SCENARIO))
        remote["victim"]["endpoint"] = {"url": server.url}
        victim = build_victim(scenario_from_dict(remote))
        m = score(Artifact("model", data={"model": _Blurred(local.truth.model)}), victim.truth,
                  victim.info)
    finally:
        server.close()
    n = int(m["n_probes"])
    assert 256 < n == m["blackbox_probes"] <= 2048
    k = round(m["blackbox_agreement"] * n)
    lo = binomtest(k, n).proportion_ci(confidence_level=0.90, method="exact").low
    assert abs(m["agreement_lower"] - lo) < 1e-9 and m["agreement_lower"] < m["blackbox_agreement"]
    assert m["kappa_lower"] < m["blackbox_kappa"]
    risk, reason = judge_fidelity({**m, "queries": 100})
    assert risk == "medium" and f"{n} held-out probes" in reason and "lower bounds" in reason
