"""The registry contract: every registered attack, present and future, is checked here.

Each attack declares family, needs, paper section and typed defaults; runs with its defaults on
a tiny victim of every interface it accepts, within a budget, reporting queries and wall time;
and is handed only the oracle: its source never reaches for the victim, the truth or the
oracle's backend, and the backend it talks to is sealed (only the API methods exist on it).
"""

import dataclasses
import inspect
import re

import pytest
import torch
from conftest import make_scenario

from defenses.output import OutputDefenses
from harness.attacks import registry
from harness.attacks.base import FAMILIES, INTERFACES, Attack
from harness.core.errors import STOP_REASONS
from harness.core.oracle import Oracle
from harness.run.runner import Planned, run_attack
from harness.scenario import scenario_from_dict
from reports.tracking import Tracker
from reports.verdict import LEVELS
from victims.build import build_victim
from victims.local import LocalBackend

BUDGET = 3000
# the default run's lighter settings (the slow run uses every default): the surrogate learns until
# its curve is flat after 2000 queries by default, ~8 s per tiny victim; here a few seconds in all
QUICK_PARAMS = {"surrogate": {"min_queries": 100, "steps": 20, "final_steps": 20, "patience": 10}}
ATTACKS = sorted(registry())
# each interface with the outputs it is tried with (prediction: scores and label-only)
OUTPUTS = {"prediction": ("probabilities", "label"), "gradient": ("probabilities",),
           "smoothgrad": ("probabilities",), "whitebox": ("logits",)}

VICTIMS = {
    "digits": {"model": {"arch": "mlp", "hidden": [8]},
               "data": {"dataset": "digits", "n_train": 150, "attacker_pool": 40},
               "training": {"epochs": 5, "lr": 0.1, "momentum": 0.9, "dtype": "float64"}},
    # full-batch recipes, so the informed-adversary attacks run their main path too
    "binary": {"model": {"arch": "mlp", "hidden": [6]},
               "data": {"dataset": "gaussian", "dim": 8, "labels": "teacher", "task": "binary",
                        "n_train": 60, "n_test": 100, "attacker_pool": 40},
               "training": {"steps": 30, "batch_size": None, "lr": 0.5, "dtype": "float64"}},
    "glm": {"model": {"arch": "logistic"},
            "data": {"dataset": "breast_cancer", "n_train": 120, "attacker_pool": 40},
            "training": {"optimizer": "lbfgs", "weight_decay": 0.01, "dtype": "float64"}},
}


class SealedBackend:
    """Only the API: closures over the real backend, no attribute leads to the model."""

    __slots__ = ("predict", "explain", "weights", "remote")

    def __init__(self, inner: LocalBackend):
        self.predict = lambda x, kind: inner.predict(x, kind)
        self.explain = lambda x, kind, gen: inner.explain(x, kind, gen)
        self.weights = lambda: inner.weights()
        self.remote = False


@pytest.fixture(scope="module")
def base_victims():
    return {name: build_victim(scenario_from_dict(make_scenario(victim=v)))
            for name, v in VICTIMS.items()}


def deployment(base, name: str, interface: str, output: str):
    """(scenario, victim) for a tiny victim behind `interface` returning `output`."""
    iface = {"kind": interface, "output": output,
             "smoothgrad": {"sigma": 0.1, "samples": 4}}
    s = scenario_from_dict(make_scenario(victim=VICTIMS[name], interface=iface,
                                         defenses={"query_budget": BUDGET}))
    v = base[name]
    backend = LocalBackend(v.truth.model, v.info.task, v.info.n_classes, s.interface,
                           v.info.device, v.info.dtype)
    info = dataclasses.replace(v.info, interface=interface, output=output)
    return s, dataclasses.replace(v, backend=backend, info=info)


@pytest.mark.parametrize("name", ATTACKS)
def test_declarations(name):
    cls = registry()[name]
    assert issubclass(cls, Attack) and cls.name == name
    assert cls.family in FAMILIES
    assert cls.needs and set(cls.needs) <= set(INTERFACES)
    # a paper file of docs (000-004) and section, or an author-year citation (membership family)
    assert re.match(r"^(00[0-4] |[A-Z][a-z]+ et al\. \d{4})", cls.paper), \
        f"{name}: paper must cite a paper file and section, or authors and year"
    assert cls.summary, f"{name}: needs a one-line summary"
    assert cls.__doc__ or inspect.getmodule(cls).__doc__, f"{name}: needs a docstring"
    params = cls.Params()  # every parameter has a default
    assert set(params.model_dump()) == set(cls.Params.model_fields)
    assert cls.run is not Attack.run and cls.judge is not Attack.judge


@pytest.mark.parametrize("name", ATTACKS)
def test_source_only_uses_the_oracle(name):
    src = inspect.getsource(inspect.getmodule(registry()[name]))
    for forbidden in (r"^\s*(from|import)\s+victims", r"\.truth\b", r"\._o\b", r"\.backend\b",
                      r"build_victim"):
        assert not re.search(forbidden, src, re.M), f"{name} reaches past the oracle: {forbidden}"


def contract_cases(cls, full: bool) -> list[tuple[str, str, str]]:
    """(interface, output, victim) to run: every interface and output the attack accepts on every
    victim (`full`), or by default each interface/output on one victim plus each victim on one
    interface/output (the same coverage of each axis in a third of the runs)."""
    pairs = [(i, o) for i in sorted(cls.needs) for o in OUTPUTS[i]]
    if full:
        return [(i, o, v) for i, o in pairs for v in VICTIMS]
    first = next(iter(VICTIMS))
    return [(i, o, first) for i, o in pairs] + [(*pairs[0], v) for v in VICTIMS if v != first]


@pytest.mark.slow
@pytest.mark.parametrize("name", ATTACKS)
def test_runs_on_every_tiny_victim_and_interface(name, base_victims, tmp_path):
    test_runs_on_tiny_victims_within_budget(name, base_victims, tmp_path, full=True)


@pytest.mark.parametrize("name", ATTACKS)
def test_runs_on_tiny_victims_within_budget(name, base_victims, tmp_path, full=False):
    cls = registry()[name]
    ran = []
    cases = contract_cases(cls, full)
    for interface, output, vname in cases:
        s, victim = deployment(base_victims, vname, interface, output)
        oracle = Oracle(SealedBackend(victim.backend), victim.info, OutputDefenses(), BUDGET)
        params = cls.Params() if full else cls.Params(**QUICK_PARAMS.get(name, {}))
        entry = run_attack(Planned(cls(), params), oracle, victim, s,
                           tmp_path / f"{interface}-{output}-{vname}", Tracker(None, "x", False),
                           None)
        where = f"{name} on {vname}/{interface}/{output}"
        assert entry["status"] in ("ok", "incomplete", "skipped"), f"{where}: {entry.get('reason')}"
        assert oracle.quotas.used <= BUDGET
        assert entry["queries"] == entry["queries_sent"] == oracle.quotas.rows.by_attack.get(name, 0)
        assert isinstance(entry["wall_s"], float) and entry["wall_s"] >= 0
        if entry["status"] == "skipped":
            assert entry["reason"], f"{where}: a skip needs a reason"
            continue
        assert entry["reason"], f"{where}: every outcome needs a reason"
        if entry["status"] == "incomplete":  # stopped early: says why, scores what it had
            assert entry["stopped_by"] in STOP_REASONS and entry["stopped_by"] != "budget", where
            assert entry["risk"] in (*LEVELS, None), where
            if entry["risk"] is not None:  # e.g. its own time limit on a loaded machine
                ran.append(where)
            continue
        ran.append(where)
        assert entry["stopped_by"] in (None, "budget"), where
        assert entry["risk"] in LEVELS, f"{where}: an ok attack needs a scored risk"
        assert all(isinstance(v, int | float) for v in entry["metrics"].values()), where
        assert entry["metrics"].get("queries", entry["queries"]) == entry["queries"]
    assert ran, f"{name} ran on none of the tiny victims: everything was skipped"


def test_sealed_backend_really_hides_the_model(base_victims):
    _, victim = deployment(base_victims, "digits", "gradient", "probabilities")
    sealed = SealedBackend(victim.backend)
    assert not hasattr(sealed, "model") and not hasattr(sealed, "truth")
    x = torch.zeros(2, 64, dtype=torch.float64)  # digits inputs
    assert torch.equal(sealed.predict(x, "logits"), victim.backend.predict(x, "logits"))


@pytest.mark.parametrize("name", ATTACKS)
def test_params_reject_non_positive_counts(name):
    """The generic range rule: a positive count default cannot be set to 0 (checked against each
    attack's own declared defaults)."""
    from pydantic import ValidationError

    cls = registry()[name]
    counts = [k for k, f in cls.Params.model_fields.items()
              if isinstance(f.default, int) and not isinstance(f.default, bool) and f.default > 0]
    for k in counts:
        with pytest.raises(ValidationError):
            cls.Params(**{k: 0})
