"""Attacker-seed robustness: the pass rate of chosen tests over attacker seeds.

The runner draws every attack's randomness from the attacker's own seed (`attacker.seed`, else a
stream derived from the scenario's seed). A test that passes for one attacker seed only shows a
lucky draw; this script runs the given tests once per seed, with the runner's attacker seed
fixed to that seed (where the test does not declare its own), and prints how often each test
passed.

    python benchmarks/attacker_seeds.py [--seeds 10] [--tree PATH] [--] PYTEST-ARGS...

e.g. `python benchmarks/attacker_seeds.py -- tests/attacks/span -k "not slow"`. `--tree` runs
the tests of another checkout (a baseline) with the same procedure. Each seed is one pytest
process (LEAKMETER_THREADS=1); only tests with a failure are listed unless `--all`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

PLUGIN = '''
import os
import pytest


@pytest.fixture(autouse=True)
def _fixed_attacker_seed(monkeypatch):
    import harness.run.runner as runner
    seed = int(os.environ["LEAKMETER_ATTACKER_SEED"])
    declared = runner.attacker_run_seed  # a test that declares attacker.seed keeps it
    monkeypatch.setattr(runner, "attacker_run_seed",
                        lambda s: declared(s) if s.attacker.seed is not None else seed)
'''


def run_seed(tree: Path, seed: int, args: list[str], plugin_dir: Path) -> dict[str, bool]:
    env = dict(os.environ, LEAKMETER_THREADS="1", LEAKMETER_ATTACKER_SEED=str(seed),
               PYTHONPATH=os.pathsep.join([str(tree), str(plugin_dir)]))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "fixed_attacker_seed", "-rA",
                          "-p", "no:cacheprovider", *args],
                         cwd=tree, env=env, capture_output=True, text=True).stdout
    res = {}
    for line in out.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR"):
            res[rest.split(" - ")[0].strip()] = word == "PASSED"
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--all", action="store_true", help="list tests that always passed too")
    ap.add_argument("pytest_args", nargs="+")
    a = ap.parse_args()
    plugin_dir = Path(tempfile.mkdtemp(prefix="leakmeter-seeds-"))
    (plugin_dir / "fixed_attacker_seed.py").write_text(PLUGIN)
    passed: dict[str, list[bool]] = defaultdict(list)
    for seed in range(a.seeds):
        for test, ok in run_seed(a.tree.resolve(), seed, a.pytest_args, plugin_dir).items():
            passed[test].append(ok)
        print(f"seed {seed}: done", file=sys.stderr, flush=True)
    print(f"{'passed':>8} | test (attacker seeds 0..{a.seeds - 1}, tree {a.tree})")
    for test, oks in sorted(passed.items()):
        if a.all or not all(oks):
            print(f"{sum(oks):>3} / {len(oks):<2} | {test}")
    print(f"{sum(all(o) for o in passed.values())} of {len(passed)} tests passed on every seed")


if __name__ == "__main__":
    main()
