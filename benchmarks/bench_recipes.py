"""A reconn-style recipe and data for benchmarks (no pytest needed)."""

from __future__ import annotations

import torch

from harness.attacker.informed import Recipe
from harness.scenario import scenario_from_dict
from victims.data.datasets import load_dataset


def recipe_and_data():
    """(Recipe, x_minus, y_minus, x_extra, y_extra) on digits with |D₋| = 500."""
    s = scenario_from_dict({
        "name": "bench", "device": "auto",
        "victim": {"model": {"arch": "mlp", "hidden": [10], "activation": "elu"},
                   "data": {"dataset": "digits", "n_train": 501, "attacker_pool": 800,
                            "standardize": "minmax"},
                   "training": {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "steps": 100,
                                "batch_size": None, "dtype": "float32"}}})
    d = load_dataset(s.victim.data, 0)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    r = Recipe(s, d.task, d.input_shape, d.n_outputs, dev, torch.float32)
    f = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
    return r, f(d.x_train[:-1]), torch.as_tensor(d.y_train[:-1]), f(d.x_pool), torch.as_tensor(d.y_pool)
