"""Every script in benchmarks/ loads the way a user runs it (`python benchmarks/X.py` from any
directory): its imports resolve to this checkout's packages, not to the test folders beside them
(tests/victims/ once shadowed the victims package and every benchmark that reads the test
helpers failed at import)."""

import subprocess
import sys

from conftest import REPO

CODE = """
import runpy, sys
from pathlib import Path
failed = []
for path in sorted(Path(sys.argv[1]).glob("*.py")):
    saved = list(sys.path)
    sys.path[:0] = [str(path.parent)]  # what `python benchmarks/X.py` puts first
    try:
        runpy.run_path(str(path), run_name="benchmark_import_check")
    except BaseException as exc:  # noqa: BLE001 - reported below
        failed.append(f"{path.name}: {type(exc).__name__}: {exc}")
    finally:
        sys.path[:] = saved
        for name in [m for m in sys.modules if m.split(".")[0] in ("victims", "harness")]:
            del sys.modules[name]
print("\\n".join(failed) or "all loaded")
"""


def test_every_benchmark_script_loads_from_another_directory(tmp_path):
    out = subprocess.run([sys.executable, "-c", CODE, str(REPO / "benchmarks")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("all loaded"), out.stdout[-2000:]
    assert len(list((REPO / "benchmarks").glob("*.py"))) >= 10
