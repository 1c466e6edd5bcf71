"""Error types that map to the CLI's exit codes."""


class BadInput(Exception):
    """Bad input from the user (scenario, option, model file, endpoint): exit code 2."""


class ScenarioError(BadInput):
    """A scenario file that does not validate; the message names the file and key path."""


class InterfaceError(Exception):
    """An attack asked the oracle for something the deployed interface does not offer."""


class BudgetExhausted(Exception):
    """The query budget would be exceeded by the requested batch; nothing was answered."""

    def __init__(self, requested: int, remaining: int, budget: int):
        super().__init__(
            f"query budget exhausted: {requested} queries requested, {remaining} of {budget} left"
        )
        self.requested = requested
        self.remaining = remaining
        self.budget = budget


class AttackSkipped(Exception):
    """An attack declined a deployment it only recognises once running; the message says why."""


class AttackFailed(Exception):
    """An attack could not produce a trustworthy result; the message says why."""
