"""DP-SGD's σ for a target ε: ours (remembered across a run's many shadows) is Opacus' own."""

import warnings

import pytest
import torch

from defenses.dp_sgd import PrivateTraining, noise_for_epsilon
from harness.scenario.schema import DPSpec


def _parts(n=100, batch=25):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,)))
    return model, opt, torch.utils.data.DataLoader(data, batch_size=batch)


@pytest.mark.parametrize("accountant", ["rdp", pytest.param("prv", marks=pytest.mark.slow)])
def test_sigma_for_a_target_epsilon_is_opacus_make_private_with_epsilon(accountant):
    from opacus import PrivacyEngine  # imported here: collecting the default suite skips it

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = _parts()
        _, theirs, _ = PrivacyEngine(accountant=accountant).make_private_with_epsilon(
            module=model, optimizer=opt, data_loader=loader, target_epsilon=3.0,
            target_delta=1e-5, epochs=5, max_grad_norm=1.0)
        spec = DPSpec(epsilon=3.0, delta=1e-5, max_grad_norm=1.0, accountant=accountant)
        model, opt, loader = _parts()
        _, ours, _ = PrivateTraining(spec, epochs=5).wrap(model, opt, loader,
                                                         torch.nn.CrossEntropyLoss())
    assert ours.noise_multiplier == theirs.noise_multiplier
    # the same question again is answered from memory, with the same σ
    hits = noise_for_epsilon.cache_info().hits
    assert noise_for_epsilon(3.0, 1e-5, 0.25, 5, accountant) == ours.noise_multiplier
    assert noise_for_epsilon.cache_info().hits == hits + 1
