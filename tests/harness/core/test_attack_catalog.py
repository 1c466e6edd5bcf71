"""`leakmeter attacks` lists the registry's declarations without importing the attacks (torch,
SciPy): the catalog read from the source equals the registry, attack for attack."""

import os
import re
import subprocess
import sys
from pathlib import Path

from harness.attacks import registry
from harness.core.catalog import catalog

REPO = Path(__file__).resolve().parents[3]


def test_catalog_equals_the_registry():
    cat = catalog()
    assert list(cat) == list(registry())
    for name, cls in registry().items():
        assert cat[name] == {"name": cls.name, "family": cls.family, "needs": sorted(cls.needs),
                             "paper": cls.paper, "summary": cls.summary}, name


def test_listing_the_attacks_imports_no_torch():
    code = ("import sys; from click.testing import CliRunner; from harness.cli import main; "
            "r = CliRunner().invoke(main, ['attacks']); print(r.output); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().endswith("NO-TORCH"), res.stdout[-500:]
    assert all(name in res.stdout for name in catalog())
    table = res.stdout.strip().splitlines()[:-1]
    assert max(len(ln) for ln in table) <= 100, table  # fits 100 columns
    # papers by the names readers know, never the internal numbers 000-004
    assert "Milli et al. 2019, App. C" in res.stdout and "Jayaram et al. 2020" in res.stdout
    assert not [ln for ln in table if re.search(r"\b00[0-4] ", ln)], table
