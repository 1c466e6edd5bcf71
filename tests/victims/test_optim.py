"""victims/models/optim.py: the own SGD, Adam and RMSprop take the same float64 steps as torch.optim's
CPU implementations, and training a victim no longer imports torch._dynamo (what torch.optim's
constructors cost: ~1.2 s of CPU per process)."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
from torch import nn

from victims.models import optim

CASES = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3}),
    ("Adam", {"lr": 3e-3}),
    ("Adam", {"lr": 1e-2, "weight_decay": 1e-4}),
    ("RMSprop", {"lr": 1e-2}),
]


@pytest.mark.parametrize(("name", "kw"), CASES)
def test_same_steps_as_torch_optim(name, kw):
    torch.manual_seed(0)
    x, y = torch.randn(40, 5, dtype=torch.float64), torch.randint(0, 3, (40,))
    net = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3)).double()
    ours, theirs = copy.deepcopy(net), copy.deepcopy(net)
    opts = [getattr(optim, name)(ours.parameters(), **kw),
            getattr(torch.optim, name)(theirs.parameters(), **kw)]
    for step in range(30):
        idx = torch.arange(step % 4, 40, 4)  # a changing minibatch
        for model, opt in zip((ours, theirs), opts, strict=True):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    moved = max(float((a - b).detach().abs().max())
                for a, b in zip(ours.parameters(), net.parameters(), strict=True))
    assert moved > 1e-3  # it trained
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)


def test_schedule_reads_param_groups():
    p = torch.ones(3, dtype=torch.float64, requires_grad=True)
    opt = optim.SGD([p], lr=0.5)
    opt.param_groups[0]["lr"] = 0.0  # a schedule's change takes effect
    p.sum().backward()
    opt.step()
    assert torch.equal(p.detach(), torch.ones(3, dtype=torch.float64))


def test_victim_training_leaves_dynamo_unimported():
    code = ("import sys, torch\n"
            "from victims.models.training import train\n"
            "from types import SimpleNamespace as N\n"
            "m = torch.nn.Linear(4, 2).double()\n"
            "x, y = torch.randn(32, 4, dtype=torch.float64), torch.randint(0, 2, (32,))\n"
            "for o in ('sgd', 'adam'):\n"
            "    train(m, x, y, 'multiclass', N(optimizer=o, lr=0.1, momentum=0.9, batch_size=8, epochs=2,\n"
            "          steps=None, weight_decay=1e-3), None, 0, bar=None)\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
