"""The fast part of benchmarks/calibration.py: leakmeter's verdict against plain attackers built
outside leakmeter (a scikit-learn thief on the API's answers, NumPy's SVD of API gradients), on
the deployments where a wrong verdict is easiest to make: a budget that stops an expensive attack
while a cheap copy fits inside it, and a first layer wider than its input (no span to leak)."""

import importlib.util
import sys

import pytest
from conftest import REPO


def calibration():
    spec = importlib.util.spec_from_file_location("calibration", REPO / "benchmarks" / "calibration.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["calibration"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


# ~18 s CPU. In the default suite, leakmeter's side of both calls is covered by
# test_spine_run.py::test_budget_is_respected_exactly_and_a_budget_stop_is_checked_by_a_surrogate (a
# budget stop is checked by a surrogate under the same budget) and test_span_obfuscation.py::
# test_a_first_layer_as_wide_as_the_input_hides_nothing (no span claimed where none can leak)
@pytest.mark.slow
def test_no_false_pass_and_no_false_fail_on_the_quick_panel(capsys):
    rows = calibration().main(["--quick"])
    by = {r["name"]: r for r in rows}
    assert len(rows) >= 2
    for r in rows:
        assert r["call"] in ("ok", "unchecked"), (r["name"], r["call"], r["statuses"])
    # the independent thief steals what the budget let through, and leakmeter says so
    fde = by["budget2000-fde"]
    assert fde["thief_leak"] and fde["verdict"] == "fail", fde
    # a first layer wider than the input: no span leak, independently and by leakmeter
    wide = by["wide-first-layer"]
    assert wide["span_rank"] == wide["span_true_rank"] == 64 and not wide["span_leak"]
    assert wide["verdict"] != "fail", wide["statuses"]
    assert "false passes: 0   false fails: 0" in capsys.readouterr().out
