"""The surrogate's training loop (harness/attacks/extraction/surrogate.py): early stopping keeps
the state with the lowest held-out loss, and a regression copy's answer scale is refitted without
changing the function it computes."""

import copy
from types import SimpleNamespace

import torch

from harness.attacker.scaling import AnswerScale, refit_answer_scale
from harness.attacks.extraction.surrogate import Answers, Surrogate, SurrogateParams, build_mlp
from harness.core.optim import Adam


def _ce(net, a: Answers) -> float:
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(net(a.x), a.y))


def test_early_stopping_keeps_the_best_heldout_state():
    gen = torch.Generator().manual_seed(0)
    train = Answers(torch.randn(20, 10, generator=gen, dtype=torch.float64),
                    torch.randint(0, 3, (20,), generator=gen), None)
    held = Answers(torch.randn(60, 10, generator=gen, dtype=torch.float64),
                   torch.randint(0, 3, (60,), generator=gen), None)  # random labels: it overfits
    info = SimpleNamespace(output="label", task="multiclass")
    p = SurrogateParams(steps=400, patience=400, lr=1e-2)  # no early break: only the kept state differs
    torch.manual_seed(0)
    start = build_mlp(10, 3, [64], None, torch.float32)
    watched, blind = copy.deepcopy(start), copy.deepcopy(start)
    Surrogate()._train(watched, Adam(watched.parameters(), lr=p.lr), train, held, p, info, False, p.steps)
    Surrogate()._train(blind, Adam(blind.parameters(), lr=p.lr), train, None, p, info, False, p.steps)
    assert _ce(blind, train) < 0.1  # it memorised its 20 random labels
    assert _ce(watched, held) < _ce(blind, held) - 0.5  # the kept state is the early one


def test_answer_scale_refit_keeps_the_function():
    torch.manual_seed(0)
    net = build_mlp(5, 1, [8], None, torch.float32, answer_scale=True)
    x = torch.randn(50, 5, dtype=torch.float64)
    before = net(x).detach()
    y = 150 + 70 * torch.randn(200, dtype=torch.float64)
    refit_answer_scale(net, y)
    head = [m for m in net.modules() if isinstance(m, AnswerScale)][0]
    assert torch.allclose(head.mean, y.mean()) and torch.allclose(head.sd, y.std())
    after = net(x).detach()
    assert after.dtype == torch.float64
    assert torch.allclose(after, before, atol=1e-4)
