"""Query budgets: a ledger that is charged *before* an answer, so a budget is never exceeded."""

from __future__ import annotations

import threading

from defenses.errors import BudgetExhausted

STARTUP = "startup"  # who an endpoint's start-up check is billed as (the deployment's, not an attack's)


class Ledger:
    """Counts queries in total and per attack; refuses a batch that would overrun the budget."""

    def __init__(self, budget: int | None):
        self.budget = budget
        self.used = 0
        self.by_attack: dict[str, int] = {}  # charged: rows sent (re-sends included)
        self.answered: dict[str, int] = {}  # rows whose answers reached each attack
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int | None:
        return None if self.budget is None else self.budget - self.used

    def charge(self, n: int, who: str = "-") -> None:
        """Record n queries for `who`, or raise BudgetExhausted without recording any."""
        with self._lock:
            if self.budget is not None and self.used + n > self.budget:
                raise BudgetExhausted(n, self.budget - self.used, self.budget)
            self.used += n
            self.by_attack[who] = self.by_attack.get(who, 0) + n

    def spent_by_other_attacks(self, who: str) -> int:
        """Rows charged to attacks other than `who` (the start-up check and unnamed callers are
        not attacks)."""
        with self._lock:
            return sum(n for k, n in self.by_attack.items() if k not in (who, STARTUP, "-"))

    def delivered(self, n: int, who: str = "-") -> None:
        """Record n rows answered to `who` (their answers reached the attacker)."""
        with self._lock:
            self.answered[who] = self.answered.get(who, 0) + n
