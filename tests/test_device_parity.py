"""Device parity (issue 15 §4): every shipped scenario run on the CPU and on CUDA must give the
same verdict, the same status and risk per attack, and the same exactness where the CPU run is
exact (max_rel_error ≤ 1e-6 on both), the same recovered span rank. `-m cuda` runs it on a
machine with a GPU (skipped without one); the default suite checks the comparison itself, on two
CPU runs and on reports that differ, so a broken comparator cannot pass the GPU run."""

import copy

import pytest
import torch
from conftest import REPO

from harness.runner import run_scenario
from harness.scenario import load_scenario

EXACT = 1e-6
SHIPPED = sorted(p.relative_to(REPO / "scenarios").with_suffix("").as_posix()
                 for p in (REPO / "scenarios").glob("**/*.yaml")  # scenarios/slow/ too
                 if not p.stem.startswith(("endpoint-", "sweep-")))  # a server; a grid of runs


def run_on(name: str, device: str, tmp_path) -> dict:
    s = load_scenario(REPO / "scenarios" / f"{name}.yaml", [])
    s.device = device
    s.tracking.enabled = False
    return run_scenario(s, out=tmp_path / f"{name}-{device}")


def differences(a: dict, b: dict) -> list[str]:
    """What differs between two reports of one scenario (empty: the same findings)."""
    out = []
    if a["verdict"] != b["verdict"]:
        out.append(f"verdict {a['verdict']} vs {b['verdict']}")
    names_a, names_b = [e["name"] for e in a["attacks"]], [e["name"] for e in b["attacks"]]
    if names_a != names_b:
        return out + [f"attacks {names_a} vs {names_b}"]
    for ea, eb in zip(a["attacks"], b["attacks"], strict=True):
        who = ea["name"]
        for key in ("status", "risk"):
            if ea.get(key) != eb.get(key):
                out.append(f"{who}: {key} {ea.get(key)} vs {eb.get(key)}")
        ma, mb = ea.get("metrics") or {}, eb.get("metrics") or {}
        exact_a, exact_b = ma.get("max_rel_error", 1.0) <= EXACT, mb.get("max_rel_error", 1.0) <= EXACT
        if "max_rel_error" in ma and exact_a != exact_b:
            out.append(f"{who}: max_rel_error {ma['max_rel_error']:.2g} vs {mb.get('max_rel_error')}")
        if "recovered_rank" in ma and ma["recovered_rank"] != mb.get("recovered_rank"):
            out.append(f"{who}: recovered_rank {ma['recovered_rank']} vs {mb.get('recovered_rank')}")
    return out


def test_the_comparison_finds_what_differs_and_nothing_else(tmp_path):
    a = run_on("extraction-gradient-exact", "cpu", tmp_path / "a")
    b = run_on("extraction-gradient-exact", "cpu", tmp_path / "b")
    assert differences(a, b) == [], differences(a, b)
    (entry,) = [e for e in a["attacks"] if "max_rel_error" in e["metrics"]][:1]
    assert entry["metrics"]["max_rel_error"] <= EXACT  # the exactness rule has something to check
    worse = copy.deepcopy(b)
    hit = next(e for e in worse["attacks"] if e["name"] == entry["name"])
    hit["metrics"]["max_rel_error"], hit["risk"] = 3e-4, "medium"
    worse["verdict"] = "pass"
    found = differences(a, worse)
    assert len(found) == 3 and all(entry["name"] in f or "verdict" in f for f in found), found


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_scenario_finds_the_same_on_cuda(name, tmp_path):
    cpu, gpu = run_on(name, "cpu", tmp_path), run_on(name, "cuda", tmp_path)
    assert differences(cpu, gpu) == [], differences(cpu, gpu)
