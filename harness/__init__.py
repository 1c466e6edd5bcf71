"""leakmeter harness: scenarios, the oracle, attacks, scoring, ReRo bounds, runner and CLI."""

from harness.core import threads as _threads  # noqa: F401  (pins BLAS threads before numpy/torch)
from reports.tracking import set_default_scrub as _set_default_scrub  # noqa: E402
from victims.http.secrets import SECRETS as _SECRETS  # noqa: E402

__version__ = "0.1.0"

# every MLflow record passes through the one secrets scrubber (reports/ cannot import it)
_set_default_scrub(_SECRETS.scrub)
