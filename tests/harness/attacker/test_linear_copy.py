"""The surrogate's linear copy and the logit-gap loss on answers that carry no logit (issue 30):
skl2onnx's binary probabilities are p₁ in float32 and p₀ = 1 − p₁ in float32, so a small p₀ is a
multiple of 2⁻²⁴ and its log is not the model's logit; the loss censors it. Checked against the
logistic model that made the answers."""

import torch

from harness.attacker.copy_losses import carries_logit, logit_gap_loss
from harness.attacker.linear_copy import fit_linear


def _answers(n=400, d=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    w = torch.randn(d, generator=gen, dtype=torch.float64) * 6  # logits up to about ±40
    z = x @ w + 0.5
    p1 = torch.sigmoid(z.float())
    p0 = 1 - p1  # float32, as the exporter computes it
    # leakmeter's ONNX reader turns an exact 0 into 1e-30 (victims/models/onnx_model.py)
    return x, w, z, torch.stack([p0, p1], 1).double().clamp_min(1e-30)


def test_small_float32_complements_carry_no_logit():
    x, w, z, y = _answers()
    ok = carries_logit(y)
    small = y < 64 * 2.0**-24
    assert bool(small.any()) and bool((y <= 1e-30).any())  # the case exists in these answers
    # a carried entry's log is the model's own log-probability to 1/64 of itself or better
    true = torch.stack([torch.nn.functional.logsigmoid(-z), torch.nn.functional.logsigmoid(z)], 1)
    err = (y.clamp_min(1e-300).log() - true).abs()
    assert float(err[ok].max()) < 0.02
    assert float(err[~ok].max()) > 1.0  # what was censored was wrong by more than a nat


def test_censored_gap_loss_is_near_zero_at_the_truth_and_a_linear_fit_finds_it():
    x, w, z, y = _answers()
    assert float(logit_gap_loss(z[:, None], y, "probabilities")) < 1e-4
    # the same loss without censoring (every entry read as a logit) is far from zero
    t = y.log()
    naive = (z - (t[:, 1] - t[:, 0])).pow(2).mean() / z.pow(2).mean()
    assert float(naive) > 1e-2
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 1)).double()
    fit_linear(net, lambda: logit_gap_loss(net(x), y, "probabilities"), len(x), 1e4)
    got = net[0].weight[0].detach()
    assert float(torch.nn.functional.cosine_similarity(got, w, 0)) > 0.9999
    assert abs(float(got.norm() / w.norm()) - 1) < 0.01
