"""Model builders: per-layer options, CNNs, and the first layer as a linear map."""

import torch
from conftest import make_scenario

from harness.scenario import scenario_from_dict
from harness.scenario.schema import ModelSpec
from victims.build import build_victim
from victims.models.builders import build_model


def test_mlp_per_layer_activation_bias_and_init():
    spec = ModelSpec(arch="mlp", hidden=[5, 4], activation=["tanh", "relu"], bias=[True, False, False],
                     init_std=[1e-4, None, None])
    m = build_model(spec, (7,), 1)
    lins = [x for x in m if isinstance(x, torch.nn.Linear)]
    assert [tuple(x.weight.shape) for x in lins] == [(5, 7), (4, 5), (1, 4)]
    assert [x.bias is not None for x in lins] == [True, False, False]
    assert float(lins[0].weight.std()) < 1e-3 and float(lins[1].weight.std()) > 1e-2
    assert isinstance(m[1], torch.nn.Tanh) and isinstance(m[3], torch.nn.ReLU)


def test_cnn_first_layer_is_the_conv_as_a_matrix():
    s = scenario_from_dict(make_scenario(victim={
        "model": {"arch": "cnn", "channels": [3], "hidden": [8]},
        "data": {"dataset": "digits", "n_train": 200, "attacker_pool": 10},
        "training": {"epochs": 20, "lr": 0.05, "momentum": 0.9, "dtype": "float64"}}))
    v = build_victim(s)
    a = v.truth.first_layer
    assert a.shape == (3 * 8 * 8, 64)
    conv = v.truth.model.features[0]
    x = torch.randn(5, 64, dtype=torch.float64)
    direct = conv(x.reshape(5, 1, 8, 8)) - conv(torch.zeros(1, 1, 8, 8, dtype=torch.float64))
    assert torch.allclose(direct.reshape(5, -1), x @ a.T, atol=1e-10)
    assert 0.5 < v.utility["test_accuracy"] <= 1.0


def test_logistic_and_linear_models():
    log = build_model(ModelSpec(arch="logistic"), (30,), 1)
    lin = build_model(ModelSpec(arch="linear", bias=False), (10,), 1)
    assert [tuple(p.shape) for p in log.parameters()] == [(1, 30), (1,)]
    assert [tuple(p.shape) for p in lin.parameters()] == [(1, 10)]
