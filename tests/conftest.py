"""Shared fixtures: one thread per process, a throw-away MLflow store, scenario builders."""

import os

os.environ.setdefault("LEAKMETER_THREADS", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import harness  # noqa: E402,F401  (pins threads before numpy/torch)
import pytest  # noqa: E402


@pytest.fixture
def tracking_uri(tmp_path):
    """A fresh embedded SQLite MLflow store for one test."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def make_scenario(**over):
    """A small valid scenario dict; keyword args replace top-level sections."""
    base = {
        "name": "t",
        "seed": 0,
        "device": "cpu",
        "victim": {
            "model": {"arch": "mlp", "hidden": [16]},
            "data": {"dataset": "digits", "n_train": 300, "attacker_pool": 50},
            "training": {"epochs": 5, "lr": 0.1, "batch_size": 64, "dtype": "float64"},
        },
        "interface": {"kind": "gradient", "output": "probabilities"},
        "tracking": {"enabled": False},
    }
    base.update(over)
    return base


@pytest.fixture
def scenario_dict():
    return make_scenario
