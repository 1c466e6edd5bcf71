"""logit_subspace against small language models built here: the width and the final layer are
compared with the victim's own (ground truth), on every API path, within the stated query counts."""

import math

import numpy as np
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
from victims.build import build_victim
from victims.models.lm_api import answer

V, H = 256, 16


def lm_run(tmp_path, iface=None, defenses=None, params=None, vocab=V, hidden=H):
    s = scenario_from_dict(make_scenario(
        device="cpu", victim={"model": {"arch": "lm", "vocab": vocab, "hidden": hidden, "heads": 2,
                                        "layers": 1, "context": 16}},
        interface={"output": "logprobs", **(iface or {})}, defenses=defenses or {}))
    v = build_victim(s)
    oracle = Oracle(v.backend, v.info, OutputDefenses.from_spec(s.defenses), s.defenses.query_budget)
    cls = registry()["logit_subspace"]
    entry = run_attack(Planned(cls(), cls.Params(**(params or {}))), oracle, v, s, tmp_path,
                       Tracker(None, "x", False), None)
    return entry, v, oracle


def true_width(v):
    return rank(centred_truth(v.truth.model)[0])


def test_full_logprobs_give_the_width_and_the_layer(tmp_path):
    e, v, o = lm_run(tmp_path)
    m = e["metrics"]
    assert e["status"] == "ok" and e["risk"] == "high", e["reason"]
    assert true_width(v) == H and m["hidden_dim"] == m["hidden_dim_true"] == H
    assert m["final_layer_rel_error"] < 1e-3 and m["subspace_residual"] < 1e-4
    assert e["queries"] <= H + 64 and o.quotas.used == e["queries"]
    w_hat = np.load(tmp_path / "logit_subspace" / "final_layer.npy")
    w = v.truth.model.final_layer().numpy()
    w_c = w - w.mean(axis=0)
    a, *_ = np.linalg.lstsq(w_hat, w_c, rcond=None)
    assert w_hat.shape == (V, H) and np.linalg.norm(w_hat @ a - w_c) / np.linalg.norm(w_c) < 1e-3
    assert "logit_bias" in e["reason"] and "$" in e["reason"]  # what stops it, what it cost


def test_top_k_with_a_bias_that_moves_logprobs_rebuilds_full_vectors(tmp_path):
    e, v, _ = lm_run(tmp_path, {"top_logprobs": 5})
    m = e["metrics"]
    assert e["risk"] == "high" and m["hidden_dim"] == H and m["final_layer_rel_error"] < 1e-2
    assert m["api_path"] == 1.0
    assert e["queries"] <= math.ceil((V - 1) / 4) * (H + 64) + 4  # + the 4 queries of the bias probe


def test_bias_outside_the_logprobs_falls_back_to_binary_search(tmp_path):
    e, v, _ = lm_run(tmp_path, {"top_logprobs": 5, "logprobs_mode": "raw"}, vocab=64, hidden=8)
    m = e["metrics"]
    assert m["api_path"] == 2.0 and m["hidden_dim"] == m["hidden_dim_true"] == 8
    assert m["final_layer_rel_error"] < 1e-2 and e["risk"] == "high"
    assert m["queries_per_logit"] >= 15  # ~log2(span/tol) per logit: costed, not hidden


def test_no_bias_and_top_k_means_the_setting_held(tmp_path):
    e, _, o = lm_run(tmp_path, {"top_logprobs": 5, "logit_bias": False})
    assert e["status"] == "ok" and e["risk"] == "low" and "held" in e["reason"]
    assert e["metrics"]["api_blocked"] == 1.0 and o.quotas.used == 0


def test_noise_above_the_signal_is_precision_never_a_width(tmp_path):
    e, _, _ = lm_run(tmp_path, defenses={"output_noise": {"sigma": 0.05}}, params={"max_prompts": 256})
    assert e["status"] == "incomplete" and e["stopped_by"] == "precision", e["reason"]
    assert e["risk"] != "high"


def test_the_budget_is_never_exceeded(tmp_path):
    e, _, o = lm_run(tmp_path, {"top_logprobs": 5}, defenses={"query_budget": 500})
    assert o.quotas.used <= 500 and e["stopped_by"] == "budget"


def test_api_answers_processed_and_raw_against_the_logits():
    g = torch.Generator().manual_seed(0)
    zu = torch.randn(3, 50, generator=g, dtype=torch.float64)
    inv = torch.tensor([0, 1, 2, 2])
    bias = {7: 30.0}
    a = answer(zu, inv, bias, 5, "processed")
    zb = zu[inv].clone()
    zb[:, 7] += 30.0
    assert torch.equal(a.token, zb.argmax(1)) and (a.idx[:, 0] == 7).all()
    assert torch.allclose(a.val, torch.log_softmax(zb, 1).gather(1, a.idx))
    raw = answer(zu, inv, bias, 5, "raw")
    assert torch.equal(raw.token, a.token)  # the bias still moves the generated token
    assert torch.allclose(raw.val, torch.log_softmax(zu[inv], 1).topk(5).values)
    # the token-only path (no dense matrix) against the dense argmax, per-query biases
    ids = torch.randint(0, 50, (4, 2), generator=g)
    vals = 3 * torch.randn(4, 2, generator=g, dtype=torch.float64)
    sparse = answer(zu, inv, (ids, vals), 0)
    dense = zu[inv].scatter_add(1, ids, vals).argmax(1)
    assert torch.equal(sparse.token, dense) and sparse.val.shape == (4, 0)


@pytest.mark.parametrize("bad, key", [
    ({"victim": {"model": {"arch": "lm", "hidden": 16}}, "interface": {"output": "logprobs"}}, "vocab"),
    ({"victim": {"model": {"arch": "lm", "vocab": 64, "hidden": 10, "heads": 4}},
      "interface": {"output": "logprobs"}}, "divisible"),
    ({"victim": {"model": {"arch": "lm", "vocab": 64, "hidden": 16}}}, "logprobs"),
    ({"interface": {"output": "logprobs"}}, "language model"),
    ({"victim": {"model": {"arch": "lm", "vocab": 64, "hidden": 16}},
      "interface": {"output": "logprobs", "top_logprobs": 65}}, "exceeds"),
])
def test_lm_keys_are_checked(bad, key):
    from harness.core.errors import ScenarioError

    with pytest.raises((ScenarioError, ValueError)) as exc:
        scenario_from_dict(make_scenario(**bad))
    assert key in str(exc.value)


def test_a_prompts_logits_are_the_same_bits_whatever_else_is_asked_with_it():
    """The LM victim answers in fixed blocks of prompts (victims/devices.py), as a deployed victim
    does: a prompt asked alone and asked among others gets bit-identical logits (a float32 matmul's
    kernel, and so its rounding, depends on the batch's shape)."""
    s = scenario_from_dict(make_scenario(
        device="cpu", victim={"model": {"arch": "lm", "vocab": V, "hidden": 64, "heads": 2,
                                        "layers": 1, "context": 16}},
        interface={"output": "logprobs"}))
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, V, (45, 8), generator=gen)
    alone = [build_victim(s).backend.next_logits(prompts[i:i + 1])[0][0] for i in (0, 7, 44)]
    zu, inv = build_victim(s).backend.next_logits(prompts)
    together = zu[inv]
    assert together.dtype == torch.float32
    for row, i in zip(alone, (0, 7, 44), strict=True):
        assert torch.equal(row, together[i])
