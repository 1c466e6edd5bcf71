"""Pin BLAS/OpenMP threads before numpy or torch are imported.

On small machines torch and OpenBLAS oversubscribe cores badly; leakmeter defaults to one
thread per process. Import this module first (the CLI and tests do).
"""

import os

_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def pin_threads(n: int | None = None) -> int:
    """Set thread-count variables (and torch's pools if already imported); returns the count."""
    if n is None:
        n = int(os.environ.get("LEAKMETER_THREADS", "1"))
    n = max(1, int(n))
    for var in _VARS:
        os.environ[var] = str(n)
    os.environ["LEAKMETER_THREADS"] = str(n)
    import sys

    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.set_num_threads(n)
    return n


def work_seconds() -> float:
    """CPU seconds of this process over its thread count (LEAKMETER_THREADS): about the wall time
    of its work on an idle machine, and unlike wall time not stretched by other jobs' load (an
    attack's own time limit reads this, so load cannot turn a finished attack into a stopped one)."""
    import time

    return time.process_time() / max(1, int(os.environ.get("LEAKMETER_THREADS", "1") or 1))


def _defaults() -> None:
    n = os.environ.get("LEAKMETER_THREADS", "1")
    for var in _VARS:
        os.environ.setdefault(var, n)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    # MLflow draws a download bar for every artifact it fetches (baselines, compared reports):
    # noise in cron logs and CI output
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("DO_NOT_TRACK", "true")


_defaults()
