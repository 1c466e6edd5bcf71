"""Errors the defenses raise. The harness re-exports them (harness/errors.py)."""


class BudgetExhausted(Exception):
    """The query budget would be exceeded by the requested batch; nothing was answered.

    `stopped_by = "budget"`: an attack stopped by it ran against the defense under test."""

    stopped_by = "budget"

    def __init__(self, requested: int, remaining: int, budget: int):
        super().__init__(
            f"query budget exhausted: {requested} queries requested, {remaining} of {budget} left"
        )
        self.requested = requested
        self.remaining = remaining
        self.budget = budget
