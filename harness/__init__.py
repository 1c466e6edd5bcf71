"""leakmeter harness: scenarios, the oracle, attacks, scoring, ReRo bounds, runner and CLI."""

from harness import threads as _threads  # noqa: F401  (pins BLAS threads before numpy/torch)

__version__ = "0.1.0"
