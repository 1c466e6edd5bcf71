"""The attacker's own input scaling (harness/attacker/scaling.py) against the definitions:
standardised points map back to the API's inputs, gradients in z are sd·∇ₓ, the layer is the
inverse map, and raw tabular features are told from standardised ones."""

import torch

from harness.attacker.scaling import PoolScale, ScaledOracle


class _Api:
    """f(x) = (x·w)² per row, ∇ₓ f = 2(x·w)w: a toy API with an exact gradient."""

    def __init__(self, w):
        self.w, self.asked = w, []

    def predict(self, x):
        self.asked.append(x)
        return ((x @ self.w) ** 2)[:, None]

    def explain(self, x):
        return 2 * (x @ self.w)[:, None] * self.w[None, :]


def test_scaled_oracle_asks_at_mean_plus_sd_z_and_returns_z_gradients():
    gen = torch.Generator().manual_seed(0)
    pool = 100 + 50 * torch.randn(40, 5, generator=gen, dtype=torch.float64)
    sc = PoolScale.of(pool, 5)
    assert torch.allclose(sc.mean, pool.mean(0)) and torch.allclose(sc.sd, pool.std(0))
    api = _Api(torch.randn(5, generator=gen, dtype=torch.float64))
    o = ScaledOracle(api, sc)
    z = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    x = sc.mean + sc.sd * z
    assert torch.allclose(o.predict(z), api.predict(x))
    g = torch.func.vmap(torch.func.grad(lambda zi: (((sc.mean + sc.sd * zi) @ api.w) ** 2)))(z)
    assert torch.allclose(o.explain(z), g)
    assert torch.allclose(sc.layer()(x), z)


def test_raw_features_are_far_from_standard_and_standardised_ones_are_not():
    from sklearn.datasets import load_breast_cancer

    x = torch.as_tensor(load_breast_cancer().data)
    assert PoolScale.of(x[:85], 30).far_from_standard()
    assert not PoolScale.of((x - x.mean(0)) / x.std(0), 30).far_from_standard()
    assert PoolScale.of(None, 30).identity and not PoolScale.of(None, 30).far_from_standard()
