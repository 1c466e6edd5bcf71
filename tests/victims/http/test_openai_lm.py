"""The openai protocol end to end: `leakmeter serve --protocol openai` (an `arch: lm` victim with the
deployment's settings) called by the official `openai` client, and scanned by leakmeter's own
client (protocol: openai) with `logit_subspace`, the width checked against the served model."""

import pytest
import torch
from conftest import make_scenario

from defenses.output import OutputDefenses
from harness.attacks import registry
from harness.oracle import Oracle
from harness.runner import Planned, run_attack
from harness.scenario import scenario_from_dict
from harness.scoring.logits import centred_truth, rank
from reports.tracking import Tracker
from victims.build import build_victim
from victims.http.server import VictimServer
from victims.http.server_openai import build_lm_served

openai = pytest.importorskip("openai")

LM = {"model": {"arch": "lm", "vocab": 128, "hidden": 8, "heads": 2, "layers": 1, "context": 16}}


def served(iface, defenses=None, budget=None, keys=None):
    s = scenario_from_dict(make_scenario(device="cpu", victim=LM, interface={"output": "logprobs", **iface},
                                         defenses=defenses or {}))
    sv, victim = build_lm_served(s)
    srv = VictimServer(sv, "127.0.0.1", 0, budget=budget, keys=keys, protocol="openai",
                       model_name="tiny").start()
    return srv, victim


def test_the_official_client_reads_the_served_api():
    srv, victim = served({"top_logprobs": 5}, {"rounding": {"decimals": 4}}, budget=6, keys={"k1"})
    try:
        c = openai.OpenAI(base_url=srv.url, api_key="k1", max_retries=0)
        r = c.completions.create(model="tiny", prompt=[[1, 2, 3], [4, 5, 6]], max_tokens=1, logprobs=5,
                                 logit_bias={"7": 30})
        want = victim.backend.complete(torch.tensor([[1, 2, 3], [4, 5, 6]]), {7: 30.0}, 5)
        for ch, ids, vals in zip(r.choices, want.idx, want.val, strict=True):
            top = ch.logprobs.top_logprobs[0]
            assert ch.text == "token_id:7" and len(top) == 5
            for i, v in zip(ids.tolist(), vals.tolist(), strict=True):
                assert top[f"token_id:{i}"] == pytest.approx(round(v, 4), abs=1e-12)
        with pytest.raises(openai.BadRequestError):  # more logprobs than the deployment gives
            c.completions.create(model="tiny", prompt=[[1]], max_tokens=1, logprobs=6)
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=srv.url, api_key="nope", max_retries=0).completions.create(
                model="tiny", prompt=[[1]], max_tokens=1)
        c.completions.create(model="tiny", prompt=[[1], [2], [3]], max_tokens=1)  # 2 + 3 of 6 prompts
        with pytest.raises(openai.RateLimitError):
            c.completions.create(model="tiny", prompt=[[1], [2]], max_tokens=1)
    finally:
        srv.close()


def test_logit_bias_refused_when_the_deployment_says_so():
    srv, _ = served({"top_logprobs": 5, "logit_bias": False})
    try:
        c = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError):
            c.completions.create(model="tiny", prompt=[[1]], max_tokens=1, logit_bias={"3": 5})
    finally:
        srv.close()


@pytest.mark.parametrize("iface", [{}, {"top_logprobs": 5}])
def test_scan_of_the_served_lm_recovers_its_width(iface, tmp_path):
    srv, victim = served(iface)
    try:
        s = scenario_from_dict(make_scenario(
            device="cpu", interface={"output": "logprobs", **iface},
            victim={"endpoint": {"url": srv.url, "protocol": "openai", "model": "tiny", "vocab_size": 128}}))
        v = build_victim(s)
        oracle = Oracle(v.backend, v.info, OutputDefenses(), None)
        cls = registry()["logit_subspace"]
        e = run_attack(Planned(cls(), cls.Params()), oracle, v, s, tmp_path, Tracker(None, "x", False), None)
        truth = rank(centred_truth(victim.truth.model)[0])
        assert e["status"] == "ok", e["reason"]
        assert e["metrics"]["hidden_dim"] == truth == 8
        assert e["metrics"]["subspace_residual"] < 1e-3 and e["risk"] == "high"  # fresh prompts, black box
    finally:
        srv.close()
