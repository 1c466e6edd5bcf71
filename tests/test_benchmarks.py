"""Every script in benchmarks/ loads the way a user runs it (`python benchmarks/X.py` from any
directory): its imports resolve to this checkout's packages, not to the test folders beside them
(tests/victims/ once shadowed the victims package and every benchmark that reads the test
helpers failed at import)."""

import subprocess
import sys

import pytest
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


@pytest.fixture
def gpu_rows():
    """benchmarks/gpu.py's functions (its rows activate a device policy: dropped afterwards)."""
    import runpy

    from victims import devices

    yield runpy.run_path(str(REPO / "benchmarks" / "gpu.py"), run_name="benchmark_rows")
    devices._CURRENT.clear()


def _args(**kw):
    import argparse

    return argparse.Namespace(**kw)


def test_gpu_benchmark_lm_rows_at_a_tiny_size(gpu_rows):
    """benchmarks/gpu.py's `lm` rows run (CPU half) and give their figures: the decoder's mean
    logprob over its prompts, and logit_subspace's final-layer error against the built LM (top-20
    logprobs + logit_bias, a width-8 decoder)."""
    import math

    g = gpu_rows
    args = _args(lm_vocab=64, lm_hidden=8, lm_layers=1, lm_prompts=4)
    secs, (mean_lp, n) = g["timed"](lambda dev: g["lm_forward"](args, dev), "cpu")
    assert n == 4 and -math.log(64) - 5 < mean_lp < 0 and secs >= 0
    _, (err, queries) = g["timed"](lambda dev: g["lm_logit_subspace"](args, dev), "cpu")
    assert err < 1e-2 and queries > 64  # biased requests: several per prompt


@pytest.mark.slow  # loads Fashion-MNIST (~10 s on 2 shared cores)
def test_gpu_benchmark_cnn_rows_at_a_tiny_size(gpu_rows):
    g = gpu_rows
    args = _args(cnn_train=200, cnn_epochs=1, cnn_refs=2, cnn_queries=100, surrogate_steps=5)
    _, (acc, n) = g["timed"](lambda dev: g["cnn_victim"](args, dev), "cpu")
    assert n == 200 and 0.0 <= acc <= 1.0
    _, (rms, k) = g["timed"](lambda dev: g["cnn_reference_models"](args, dev), "cpu")
    assert k == 2 and 0 < rms < 1
    _, (fid, q) = g["timed"](lambda dev: g["cnn_surrogate"](args, dev), "cpu")
    assert q == 100 and 0.0 <= fid <= 1.0
