"""Property test: mutants of valid scenarios (a value replaced by a hostile one, a key dropped, an
unknown key added) end in a documented exit code within a time limit and never print a traceback.
`validate` must answer 0 or 2; `run` (on a tiny victim) 0, 1, 2 or 4."""

from __future__ import annotations

import copy
import time

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main

TINY = {
    "name": "fuzz", "seed": 0, "device": "cpu",
    "victim": {"model": {"arch": "mlp", "hidden": [4], "activation": "relu", "bias": True},
               "data": {"dataset": "breast_cancer", "n_train": 60, "n_test": 40, "attacker_pool": 10,
                        "standardize": "standard"},
               "training": {"optimizer": "sgd", "lr": 0.1, "epochs": 1, "batch_size": 32,
                            "dtype": "float64"}},
    "interface": {"kind": "gradient", "output": "probabilities", "gradient_of": "predicted",
                  "gradient_class": 0, "smoothgrad": {"sigma": 0.1, "samples": 4}},
    "defenses": {"query_budget": 2000, "output_noise": {"sigma": 0.0}, "rounding": {"decimals": 6}},
    "attacks": [{"name": "span_nonadaptive", "params": {}}],
    "policy": {"fail_on": "high"},
    "tracking": {"enabled": False},
}
ENDPOINT = {"url": "http://127.0.0.1:9/invocations", "protocol": "json", "timeout_s": 0.2,
            "retries": 0, "input_dim": 30, "request_template": {"inputs": "$inputs"}}
HOSTILE = [None, True, False, 0, -1, 1, 2, 3, 2**31, 2**63, 10**9, 0.0, -0.0, 0.5, -1.5, 1e-300, 1e300,
           float("inf"), float("-inf"), float("nan"), "", "x", "\x00", "../../etc/passwd", "http://[::1",
           "é" * 3, "1e3", [], [None], [1, True], {}, {"a": 1}, [[[[[]]]]], {"deep": {"er": [1]}}]


# values a scenario could plausibly hold, by the type of the value they replace: mutants built
# from them mostly validate, so `run` is exercised on unusual but valid deployments
WORDS = ["label", "logits", "probabilities", "prediction", "gradient", "smoothgrad", "whitebox", "sgd",
         "adam", "lbfgs", "tanh", "sigmoid", "elu", "none", "minmax", "center", "minmax_center", "digits",
         "diabetes", "gaussian", "binary", "regression", "multiclass", "class", "sum", "float32", "low",
         "medium", "never", "pass", "linear", "logistic", "span_threshold", "query_learning",
         "informed_mia", "obfuscation"]


def _like(value):
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int):
        return st.integers(0, 8)
    if isinstance(value, float):
        return st.floats(0, 1.5)
    if isinstance(value, str):
        return st.sampled_from(WORDS)
    if isinstance(value, list):
        return st.lists(st.integers(1, 6), min_size=1, max_size=3)
    return st.none()


def _paths(node, prefix=()):
    """Every key path in a nested dict/list (leaves and sections)."""
    out = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for k, v in items:
        out.append((*prefix, k))
        out += _paths(v, (*prefix, k))
    return out


def _mutate(data, path, action, value):
    node = data
    for p in path[:-1]:
        node = node[p]
    last = path[-1]
    if action == "replace":
        node[last] = value
    elif action == "drop" and isinstance(node, dict):
        node.pop(last, None)
    elif action == "unknown" and isinstance(node, dict):
        node[f"{last}_typo"] = value
    return data


def mutants(base, plausible=False):
    """Lists of 1-3 changes (path, action, value): hostile values of any type, or (plausible)
    values like the one replaced."""
    paths = _paths(base)
    if plausible:
        def change(path):
            return st.tuples(st.just(path), st.sampled_from(["replace", "replace", "replace", "drop"]),
                             _like(_get(base, path)))

        one = st.sampled_from(paths).flatmap(change)
    else:
        one = st.tuples(st.sampled_from(paths), st.sampled_from(["replace", "replace", "drop", "unknown"]),
                        st.sampled_from(HOSTILE) | st.integers(-5, 50) | st.text(max_size=8))
    return st.lists(one, min_size=1, max_size=3)


def _get(node, path):
    for p in path:
        node = node[p]
    return node


def _apply(base, changes):
    data = copy.deepcopy(base)
    for path, action, value in changes:
        try:
            data = _mutate(data, path, action, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed or replaced the parent
    return data


def _invoke(tmp_path, data, command):
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data, allow_unicode=False))
    t0 = time.process_time()  # CPU time: a busy machine does not stretch it
    res = CliRunner().invoke(main, [command, str(p), *(["--no-tracking", "--out", str(tmp_path / "o")]
                                                       if command == "run" else [])])
    return res, time.process_time() - t0


def _check(res, took, allowed, limit):
    text = res.output + (res.stderr or "")
    assert res.exit_code in allowed, (res.exit_code, text[-2000:], repr(res.exception))
    assert "Traceback" not in text, text[-2000:]
    assert took < limit, took


TINY_ENDPOINT = {**TINY, "victim": {**TINY["victim"], "endpoint": ENDPOINT}}


def _validate_case(case, tmp_path_factory):
    base, changes = case
    tmp = tmp_path_factory.mktemp("v")
    res, took = _invoke(tmp, _apply(base, changes), "validate")
    _check(res, took, {0, 2}, 10)


def _run_case(changes, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("r")
    res, took = _invoke(tmp, _apply(TINY, changes), "run")
    _check(res, took, {0, 1, 2, 4}, 60)


CASES = st.sampled_from([TINY, TINY_ENDPOINT]).flatmap(lambda b: st.tuples(st.just(b), mutants(b)))
QUIET = {"deadline": None, "derandomize": True, "database": None,
         "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]}


# the default suite draws a fixed sample (derandomized: the same mutants every run); `slow` the wide one
@settings(max_examples=100, **QUIET)
@given(case=CASES)
def test_validate_answers_0_or_2_for_every_mutant(case, tmp_path_factory):
    _validate_case(case, tmp_path_factory)


@pytest.mark.slow
@settings(max_examples=300, **QUIET)
@given(case=CASES)
def test_validate_answers_0_or_2_for_300_mutants(case, tmp_path_factory):
    _validate_case(case, tmp_path_factory)


@settings(max_examples=10, **QUIET)
@given(changes=mutants(TINY, plausible=True))
def test_run_ends_in_a_documented_exit_code_for_every_mutant(changes, tmp_path_factory):
    _run_case(changes, tmp_path_factory)


@pytest.mark.slow
@settings(max_examples=30, **QUIET)
@given(changes=mutants(TINY, plausible=True))
def test_run_ends_in_a_documented_exit_code_for_30_mutants(changes, tmp_path_factory):
    _run_case(changes, tmp_path_factory)
