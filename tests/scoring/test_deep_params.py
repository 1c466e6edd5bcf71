"""Parameter error of a deep network after aligning permutation and positive scaling, computed
against networks whose relation to the truth is known by construction."""

import torch
from torch import nn

from harness.scoring.deep_params import score_layers


def mlp(widths, seed=0):
    torch.manual_seed(seed)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]).double())
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def linears(model):
    return [(m.weight.detach().clone(), m.bias.detach().clone()) for m in model if isinstance(m, nn.Linear)]


def permuted_scaled(layers, seed=1):
    """The same function: each hidden layer permuted and scaled by positive factors."""
    g = torch.Generator().manual_seed(seed)
    out, prev = [], None
    for i, (w, b) in enumerate(layers):
        if prev is not None:
            perm, scale = prev
            w = w[:, perm] / scale[None, :]
        if i < len(layers) - 1:
            perm = torch.randperm(len(b), generator=g)
            scale = torch.rand(len(b), generator=g, dtype=torch.float64) * 3 + 0.1
            w, b = w[perm] * scale[:, None], b[perm] * scale
            prev = (perm, scale)
        out.append((w, b))
    return out


def test_the_same_network_permuted_and_scaled_has_no_error():
    truth = mlp([6, 5, 4, 2])
    m = score_layers(truth, permuted_scaled(linears(truth)))
    assert m["units_true"] == m["units_matched"] == 9 and m["param_error"] < 1e-12, m
    assert m["depth_true"] == m["depth_found"] == 2


def test_errors_and_missing_units_show():
    truth = mlp([6, 5, 4, 2])
    layers = permuted_scaled(linears(truth))
    w, b = layers[1]
    layers[1] = (w + 1e-3 * torch.randn_like(w), b)
    m = score_layers(truth, layers)
    assert 1e-5 < m["param_error"] < 1e-1 and m["units_matched"] == 5, m  # layer 2 off
    drop = permuted_scaled(linears(truth))
    drop[0] = (drop[0][0][:-1], drop[0][1][:-1])
    drop[1] = (drop[1][0][:, :-1], drop[1][1])
    m = score_layers(truth, drop)
    assert m["units_matched"] < m["units_true"] and m["param_error"] == float("inf"), m
    shallow = score_layers(truth, linears(mlp([6, 5, 2])))  # one hidden layer for two
    assert shallow["depth_found"] == 1 and shallow["param_error"] == float("inf")


def test_negative_scaling_is_not_a_symmetry():
    truth = mlp([6, 5, 1])
    layers = linears(truth)
    (w1, b1), (w2, b2) = layers
    flipped = [(-w1, -b1), (-w2, b2)]  # ReLU(−z) ≠ −ReLU(z): a different function
    assert score_layers(truth, flipped)["param_error"] > 0.1


def test_dead_units_are_not_counted():
    truth = mlp([4, 3, 1])
    with torch.no_grad():
        truth[0].bias[0] = -1e6  # never active on any probe
    probes = torch.randn(500, 4, dtype=torch.float64)
    layers = linears(truth)
    other = [(layers[0][0][1:], layers[0][1][1:]), (layers[1][0][:, 1:], layers[1][1])]
    m = score_layers(truth, other, probes=probes)
    assert m["units_dead"] == 1 and m["units_true"] == m["units_matched"] == 2, m
    assert m["param_error"] < 1e-12


def test_centred_outputs_compare_centred():
    truth = mlp([5, 4, 3])
    layers = linears(truth)
    w, b = layers[-1]
    shifted = layers[:-1] + [(w + torch.randn(1, w.shape[1], dtype=torch.float64), b + 2.0)]
    assert score_layers(truth, shifted, centered=True)["param_error"] < 1e-12
    assert score_layers(truth, shifted)["param_error"] > 1e-3
