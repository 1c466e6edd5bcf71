"""Shared fixtures: one thread per process, a throw-away MLflow store, scenario builders."""

import os
from pathlib import Path

os.environ.setdefault("LEAKMETER_THREADS", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import pytest  # noqa: E402

import harness  # noqa: E402,F401  (pins threads before numpy/torch)


def pytest_collection_finish(session):
    """What collection imported (torch, MLflow, every test module) lives until the end: freeze
    it, so the collector's full passes during the tests stop re-scanning it (measured on
    tests/attacks + tests/rero: garbage collection took 10% of the CPU, gen-2 passes 9.4 s of it;
    frozen, 6.7 s)."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def _mlflow_template(tmp_path_factory):
    """An initialised SQLite MLflow store (creating one runs MLflow's migrations: ~2 s of CPU),
    built once per test run: the first xdist worker builds it in the run's shared folder, the
    others wait for it."""
    from filelock import FileLock
    from mlflow.tracking import MlflowClient

    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... under xdist
    base = tmp_path_factory.getbasetemp()
    folder = base.parent if worker else base  # pytest-N/, shared by this run's workers
    path = folder / "mlflow-template.db"
    with FileLock(str(folder / "mlflow-template.lock")):
        if not path.is_file():
            part = folder / f"mlflow-template-{worker or 'main'}.db"
            MlflowClient(tracking_uri=f"sqlite:///{part}").search_experiments()
            part.replace(path)
    return path


@pytest.fixture
def tracking_uri(tmp_path, _mlflow_template):
    """A fresh embedded SQLite MLflow store for one test (a copy of the initialised template)."""
    import shutil

    dst = tmp_path / "mlflow.db"
    shutil.copy(_mlflow_template, dst)
    return f"sqlite:///{dst}"


REPO = Path(__file__).resolve().parents[1]  # the repository root


def make_scenario(**over):
    """A small valid scenario dict; keyword args replace top-level sections."""
    base = {
        "name": "t",
        "seed": 0,
        "device": "cpu",
        "victim": {
            "model": {"arch": "mlp", "hidden": [16]},
            "data": {"dataset": "digits", "n_train": 300, "attacker_pool": 50},
            "training": {"epochs": 10, "lr": 0.1, "momentum": 0.9, "batch_size": 64, "dtype": "float64"},
        },
        "interface": {"kind": "gradient", "output": "probabilities"},
        "tracking": {"enabled": False},
    }
    base.update(over)
    return base


@pytest.fixture
def scenario_dict():
    return make_scenario


def message_lines(stderr: str) -> list[str]:
    """stderr's lines without the run's stage lines (`leakmeter: [  0.0 s] ...`): what a user
    must read about bad input is the one error line."""
    import re

    stage = re.compile(r"^leakmeter: \[\s*[0-9.]+ s\]")
    return [ln for ln in stderr.splitlines() if ln.strip() and not stage.match(ln)]


@pytest.fixture(autouse=True, scope="module")
def _forget_secrets():
    """Secrets a module's runs registered (auth tokens such as "attacker-key") are forgotten after
    it: the registry lives for the process, and its 8-character fragments would mask words in the
    reports of unrelated modules run later in the same process (under pytest-xdist, in any order)."""
    yield
    from victims.http.secrets import SECRETS

    SECRETS.clear()
