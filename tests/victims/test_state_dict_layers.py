"""State_dicts with the layers teams use (issue 30, item 2): BatchNorm1d, LayerNorm and Dropout,
activations relu / leaky_relu / gelu / silu / tanh / sigmoid, loaded through `victim.model.spec`
and compared with the original network's outputs; layers a spec cannot express are one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml
from click.testing import CliRunner
from torch import nn

from harness.cli import main
from harness.core.errors import BadInput
from harness.scenario import scenario_from_dict
from victims.build import build_victim, check_buildable

ACTS = {"relu": nn.ReLU, "leaky_relu": nn.LeakyReLU, "gelu": nn.GELU, "silu": nn.SiLU,
        "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}


class Named(nn.Module):
    """A team's own class: attribute names of its own, norms registered after the Linear layers."""

    def __init__(self, norm, act):
        super().__init__()
        self.fc1, self.fc2, self.out = nn.Linear(30, 24), nn.Linear(24, 12), nn.Linear(12, 2)
        make = nn.BatchNorm1d if norm == "batch" else nn.LayerNorm
        self.n1, self.n2 = make(24), make(12)
        self.act, self.drop = ACTS[act](), nn.Dropout(0.3)

    def forward(self, x):
        x = self.drop(self.act(self.n1(self.fc1(x))))
        return self.out(self.drop(self.act(self.n2(self.fc2(x)))))


def _trained(norm, act):
    torch.manual_seed(0)
    net = Named(norm, act)
    for p in net.parameters():  # norms with non-trivial affine parameters
        nn.init.normal_(p, std=0.5)
    if norm == "batch":
        net.train()
        for _ in range(3):
            net(torch.randn(64, 30) * 2 + 1)  # running statistics away from (0, 1)
    return net.eval()


def _scenario(path, spec):
    return scenario_from_dict({
        "name": "sd", "seed": 0, "device": "cpu",
        "victim": {"model": {"arch": "file", "path": str(path), "spec": spec},
                   "data": {"dataset": "breast_cancer", "n_train": 200, "task": "multiclass"}},
        "interface": {"kind": "gradient", "output": "logits"},
        "attacks": [{"name": "surrogate"}], "tracking": {"enabled": False}})


@pytest.mark.parametrize("norm,act", [("batch", "relu"), ("layer", "gelu"), ("batch", "silu"),
                                      ("layer", "leaky_relu"), ("batch", "tanh"), ("layer", "sigmoid")])
def test_norms_and_activations_load_and_answer_as_the_original(tmp_path, norm, act):
    net = _trained(norm, act)
    path = tmp_path / "net.pt"
    torch.save(net.state_dict(), path)
    v = build_victim(_scenario(path, {"arch": "mlp", "hidden": [24, 12], "norm": norm, "activation": act}))
    x = torch.as_tensor(v.truth.data.x_test[:50], dtype=torch.float32)
    np.testing.assert_allclose(v.backend.predict(x, "logits").numpy(), net(x).detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    assert v.info.declared["relu_network"] is False  # norms: not the exact attacks' Linear + ReLU


def test_a_spec_without_the_norm_says_which_norm_in_one_line(tmp_path):
    path = tmp_path / "bn.pt"
    torch.save(_trained("batch", "relu").state_dict(), path)
    with pytest.raises(BadInput) as err:
        check_buildable(_scenario(path, {"arch": "mlp", "hidden": [24, 12]}))
    msg = str(err.value)
    assert "set victim.model.spec.norm: batch" in msg and "\n" not in msg
    assert "running_var" not in msg and "Missing key" not in msg  # no PyTorch key dump
    assert "the spec builds" not in msg  # never "widths are X, the spec builds X"


def test_a_layer_the_spec_cannot_express_names_it_and_the_way_out(tmp_path):
    net = nn.Sequential(nn.Conv1d(1, 4, 3), nn.Flatten(), nn.Linear(112, 2))
    path = tmp_path / "conv.pt"
    torch.save(net.state_dict(), path)
    with pytest.raises(BadInput) as err:
        check_buildable(_scenario(path, {"arch": "mlp", "hidden": [4]}))
    msg = str(err.value)
    assert "convolution '0'" in msg and "ONNX" in msg and "\n" not in msg and "Missing key" not in msg


def _init(tmp_path, model, *extra):
    x = np.random.default_rng(0).normal(size=(120, 30))
    np.savez(tmp_path / "d.npz", x_train=x[:80], y_train=(x[:80, 0] > 0).astype(int),
             x_test=x[80:], y_test=(x[80:, 0] > 0).astype(int))
    res = CliRunner().invoke(main, ["init", "--model", str(model), "--data", str(tmp_path / "d.npz"),
                                    "--no-ask", "-o", str(tmp_path / "s.yaml"), "--force", *extra])
    return res


def test_init_reads_norms_and_says_the_activation_is_assumed(tmp_path):
    path = tmp_path / "ln.pt"
    torch.save(_trained("layer", "gelu").state_dict(), path)
    res = _init(tmp_path, path)
    assert res.exit_code == 0, res.output + res.stderr
    spec = yaml.safe_load((tmp_path / "s.yaml").read_text())["victim"]["model"]["spec"]
    assert spec == {"arch": "mlp", "hidden": [24, 12], "norm": "layer", "activation": "relu"}
    assert "relu was ASSUMED" in res.output  # said on the terminal, not only in a YAML comment
    res = _init(tmp_path, path, "--activation", "gelu")
    assert res.exit_code == 0 and "ASSUMED" not in res.output
    spec = yaml.safe_load((tmp_path / "s.yaml").read_text())["victim"]["model"]["spec"]
    assert spec["activation"] == "gelu"


def test_init_refuses_an_unexpressible_layer_in_one_line(tmp_path):
    net = nn.ModuleDict({"rnn": nn.GRU(30, 8), "head": nn.Linear(8, 2)})
    torch.save(net.state_dict(), tmp_path / "gru.pt")
    res = _init(tmp_path, tmp_path / "gru.pt")
    assert res.exit_code == 2 and "ONNX" in res.stderr and "a recurrent layer 'rnn'" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
