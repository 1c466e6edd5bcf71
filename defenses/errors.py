"""Errors the defenses raise. The harness re-exports them (harness/core/errors.py)."""


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


class RequestBudgetExhausted(BudgetExhausted):
    """The attacker's request budget (`defenses.request_budget`: requests per client, as gateways
    count them) is spent; nothing more was sent. Still the defense under test (`budget`)."""

    def __init__(self, requested: int, budget: int):
        Exception.__init__(self, f"request budget exhausted: {budget} of {budget} requests sent "
                                 f"(defenses.request_budget); {requested} rows not asked")
        self.requested, self.remaining, self.budget = requested, 0, budget


class RowCapReached(BudgetExhausted):
    """The run's own cost cap (`victim.endpoint.max_rows`) would be exceeded; nothing was sent.

    `stopped_by = "cap"`: a limit on what leakmeter sends, not the defense under test."""

    stopped_by = "cap"

    def __init__(self, requested: int, remaining: int, budget: int):
        Exception.__init__(
            self, f"the scan's row cap (victim.endpoint.max_rows = {budget}) reached: {requested} rows "
                  f"requested, {remaining} left")
        self.requested, self.remaining, self.budget = requested, remaining, budget
