"""Error types that map to the CLI's exit codes.

The victim and defense layers define their own (victims/errors.py, defenses/errors.py); they are
re-exported here so the harness catches every error by one name."""

from defenses.errors import BudgetExhausted
from victims.errors import BadInput, InterfaceError

__all__ = ["BadInput", "InterfaceError", "BudgetExhausted", "ScenarioError", "AttackSkipped",
           "AttackFailed", "AttackStopped", "PrecisionLimit", "AssumptionViolated", "TimeLimit",
           "STOP_REASONS"]


class ScenarioError(BadInput):
    """A scenario file that does not validate; the message names the file and key path."""


class AttackSkipped(Exception):
    """An attack declined a deployment it only recognises once running; the message says why."""


class AttackFailed(Exception):
    """An attack could not produce a trustworthy result; the message says why."""


# Why an attack stopped before the end of its procedure (docs/contract.md: `stopped_by`). `budget` is the
# defense under test working (status ok, once a surrogate under the same budget shows it holds);
# every other reason makes the attack `incomplete`. `cap`: its own parameter limit (max_samples,
# max_queries, steps...) while its measurement still grew, or the scan's own row cap (max_rows).
STOP_REASONS = ("budget", "cap", "faults", "endpoint", "time", "precision", "assumption", "interrupt")


class AttackStopped(Exception):
    """An attack stopped early. `stopped_by` is one of STOP_REASONS; `artifact` is the best
    artifact it had (None: the runner scores the last one the attack kept with `ctx.keep`)."""

    stopped_by = "assumption"

    def __init__(self, reason: str, *, stopped_by: str | None = None, artifact=None):
        super().__init__(reason)
        if stopped_by is not None:
            self.stopped_by = stopped_by
        if self.stopped_by not in STOP_REASONS:
            raise ValueError(f"stopped_by {self.stopped_by!r} not in {STOP_REASONS}")
        self.artifact = artifact


class PrecisionLimit(AttackStopped):
    """The answers' numerical precision makes the next step of the procedure impossible."""

    stopped_by = "precision"


class AssumptionViolated(AttackStopped):
    """The deployment breaks an assumption the attack's procedure rests on (e.g. randomized
    answers for an exact attack, or no ReLU kink where the procedure needs one)."""

    stopped_by = "assumption"


class TimeLimit(AttackStopped):
    """The attack reached its own time limit."""

    stopped_by = "time"
