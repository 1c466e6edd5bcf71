"""`leakmeter attacks` lists the registry's declarations without importing the attacks (torch,
SciPy): the catalog read from the source equals the registry, attack for attack."""

import os
import subprocess
import sys
from pathlib import Path

from harness.attack_catalog import catalog
from harness.attacks import registry

REPO = Path(__file__).resolve().parents[2]


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
