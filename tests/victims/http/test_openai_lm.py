"""The openai protocol end to end: `leakmeter serve --protocol openai` (an `arch: lm` victim with the
deployment's settings) called by the official `openai` client, and scanned by leakmeter's own
client (protocol: openai) with `logit_subspace`, the width checked against the served model."""

import pytest
import torch
from conftest import make_scenario

from defenses.output import OutputDefenses
from harness.attacks import registry
from harness.core.oracle import Oracle
from harness.run.runner import Planned, run_attack
from harness.scenario import scenario_from_dict
from harness.scoring.logits import centred_truth, rank
from reports.tracking import Tracker
from victims import devices
from victims.build import build_victim
from victims.http.server import VictimServer
from victims.http.server_openai import build_lm_served


@pytest.fixture
def openai():
    """The official client, imported by the tests that call it (not when the module is collected)."""
    return pytest.importorskip("openai")


LM = {"model": {"arch": "lm", "vocab": 128, "hidden": 8, "heads": 2, "layers": 1, "context": 16}}


def served(iface, defenses=None, budget=None, keys=None):
    s = scenario_from_dict(make_scenario(device="cpu", victim=LM, interface={"output": "logprobs", **iface},
                                         defenses=defenses or {}))
    sv, victim = build_lm_served(s)
    srv = VictimServer(sv, "127.0.0.1", 0, budget=budget, keys=keys, protocol="openai",
                       model_name="tiny").start()
    return srv, victim


def test_the_official_client_reads_the_served_api(openai):
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


def test_logit_bias_refused_when_the_deployment_says_so(openai):
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
            device="auto", interface={"output": "logprobs", **iface},
            victim={"endpoint": {"url": srv.url, "protocol": "openai", "model": "tiny", "vocab_size": 128}}))
        policy = devices.activate("auto")
        policy.cuda = torch.device("cuda")  # a GPU `auto` could use (fake: the choice only)
        v = build_victim(s)
        # the endpoint's answers arrive over HTTP: its part stays on the CPU, recorded for the report
        assert v.info.device.type == "cpu" and policy.parts["victim"]["device"] == "cpu"
        assert "LLM endpoint" in policy.parts["victim"]["why"]
        oracle = Oracle(v.backend, v.info, OutputDefenses(), None)
        cls = registry()["logit_subspace"]
        e = run_attack(Planned(cls(), cls.Params()), oracle, v, s, tmp_path, Tracker(None, "x", False), None)
        truth = rank(centred_truth(victim.truth.model)[0])
        assert e["status"] == "ok", e["reason"]
        assert e["metrics"]["hidden_dim"] == truth == 8
        assert e["metrics"]["subspace_residual"] < 1e-3 and e["risk"] == "high"  # fresh prompts, black box
    finally:
        devices._CURRENT.clear()
        srv.close()


@pytest.mark.slow  # two `leakmeter` processes start (~10 s each on a quiet machine)
def test_leakmeter_serve_protocol_openai_answers_the_official_client(tmp_path, openai):
    """The command itself: `leakmeter serve SCENARIO --protocol openai` with API keys from the
    environment, called by the official client; a classifier scenario is refused (exit 2)."""
    import os
    import re
    import subprocess
    import sys
    import time

    import yaml
    from conftest import REPO

    scen = tmp_path / "lm.yaml"
    scen.write_text(yaml.safe_dump(make_scenario(device="cpu", victim=LM,
                                                 interface={"output": "logprobs", "top_logprobs": 3})))
    env = {**os.environ, "LM_KEYS": "key-1"}
    cmd = [sys.executable, "-c", "from harness.cli import main; main()", "serve", str(scen), "--port", "0",
           "--protocol", "openai", "--model-name", "tiny", "--keys-env", "LM_KEYS"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        deadline, line = time.time() + 120, ""
        while time.time() < deadline:
            line = proc.stdout.readline()
            if line.startswith("serving") or proc.poll() is not None:
                break
        m = re.search(r"at (http://127\.0\.0\.1:\d+/v1) ", line)
        assert m, f"serve did not start: {line!r}"
        c = openai.OpenAI(base_url=m.group(1), api_key="key-1", max_retries=0)
        r = c.completions.create(model="tiny", prompt=[[5, 6]], max_tokens=1, logprobs=3)
        assert len(r.choices[0].logprobs.top_logprobs[0]) == 3 and r.choices[0].text.startswith("token_id:")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    refused = subprocess.run([*cmd[:4], str(REPO / "scenarios" / "quickstart.yaml"), "--protocol", "openai"],
                             capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert refused.returncode == 2 and "openai" in refused.stderr and "Traceback" not in refused.stderr
