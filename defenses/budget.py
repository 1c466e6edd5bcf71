"""Query budgets: ledgers charged *before* an answer, so no limit is ever exceeded.

`defenses.query_budget` is what one attacker (one client, one key) may ask: every attack of a run
is its own attacker with its own `Ledger` facing the whole budget. Separately, every row the run
sends on anyone's behalf (attacks, an endpoint's start-up check, black-box verification probes)
is charged to one run-wide ledger whose limit is the scan's own cost cap
(`victim.endpoint.max_rows`): a limit on what leakmeter sends, never evidence about the defense.
"""

from __future__ import annotations

import threading

from defenses.errors import BudgetExhausted, RequestBudgetExhausted, RowCapReached

STARTUP = "startup"  # who an endpoint's start-up check is billed as (the scan's, not an attacker's)
SCORING = "blackbox_scoring"  # who black-box verification probes are billed as (the scorer's)
NOT_ATTACKERS = (STARTUP, SCORING, "-")


class Ledger:
    """Counts queries in total and per payer; refuses a batch that would overrun its limit."""

    def __init__(self, budget: int | None):
        self.budget = budget
        self.used = 0
        self.by_attack: dict[str, int] = {}  # charged: rows sent (re-sends included)
        self.answered: dict[str, int] = {}  # rows whose answers reached each payer

    @property
    def remaining(self) -> int | None:
        return None if self.budget is None else self.budget - self.used

    def fits(self, n: int) -> bool:
        return self.budget is None or self.used + n <= self.budget

    def record(self, n: int, who: str) -> None:
        self.used += n
        self.by_attack[who] = self.by_attack.get(who, 0) + n

    def charge(self, n: int, who: str = "-") -> None:
        """Record n queries for `who`, or raise BudgetExhausted without recording any."""
        if not self.fits(n):
            raise BudgetExhausted(n, self.budget - self.used, self.budget)
        self.record(n, who)


class RequestBudget:
    """`defenses.request_budget`: HTTP requests per attacker (each attack its own client), as a
    gateway counts them: every request sent on an attacker's behalf, re-sends included, is counted
    before it is sent; the scan's own requests (start-up, verification probes) are not an
    attacker's. Thread-safe."""

    def __init__(self, budget: int | None):
        self.budget = budget
        self.sent: dict[str, int] = {}
        self._lock = threading.Lock()

    def charge(self, who: str, rows: int) -> None:
        """Count one request for `who`, or raise RequestBudgetExhausted without counting it."""
        if self.budget is None or who in NOT_ATTACKERS:
            return
        with self._lock:
            if self.sent.get(who, 0) + 1 > self.budget:
                raise RequestBudgetExhausted(rows, self.budget)
            self.sent[who] = self.sent.get(who, 0) + 1


class Quotas:
    """One ledger per attacker (each facing the whole `budget`) and the run's row ledger (`rows`,
    limited by `max_rows`). Thread-safe: a batch is refused whole, before anything is recorded."""

    def __init__(self, budget: int | None, max_rows: int | None = None):
        self.budget = budget
        self.rows = Ledger(max_rows)
        self.payers: dict[str, Ledger] = {}
        self._lock = threading.Lock()

    def of(self, who: str) -> Ledger | None:
        """The attacker `who`'s own ledger (None for the scan's own rows: start-up, scoring)."""
        if who in NOT_ATTACKERS:
            return None
        with self._lock:
            return self.payers.setdefault(who, Ledger(self.budget))

    def charge(self, n: int, who: str = "-") -> None:
        """Charge n rows to `who` and to the run; BudgetExhausted (the attacker's quota) or
        RowCapReached (the run's cap) before anything is recorded."""
        own = self.of(who)
        with self._lock:
            if own is not None and not own.fits(n):
                raise BudgetExhausted(n, own.remaining, own.budget)
            if not self.rows.fits(n):
                raise RowCapReached(n, self.rows.remaining, self.rows.budget)
            if own is not None:
                own.record(n, who)
            self.rows.record(n, who)

    def remaining(self, who: str) -> int | None:
        """Rows `who` may still send: its own quota, and the run's cap (None = unlimited)."""
        own = self.of(who)
        left = [x for x in (own.remaining if own else None, self.rows.remaining) if x is not None]
        return min(left) if left else None

    def capped_by_rows(self, who: str) -> bool:
        """True when the run's row cap, not `who`'s quota, is what limits `who` now."""
        own = self.of(who)
        if self.rows.remaining is None:
            return False
        return own is None or own.remaining is None or self.rows.remaining < own.remaining

    def refund(self, n: int, who: str = "-") -> None:
        """Take back n rows charged to `who` that were never answered: refused by the endpoint
        (429, 401/403, a revoked key) or never sent (the tail of a batch after a failure)."""
        own = self.of(who)
        with self._lock:
            for ledger in (own, self.rows):
                if ledger is None:
                    continue
                n_back = min(n, ledger.by_attack.get(who, 0))
                ledger.used -= n_back
                ledger.by_attack[who] = ledger.by_attack.get(who, 0) - n_back

    def delivered(self, n: int, who: str = "-") -> None:
        """Record n rows answered to `who` (their answers reached the attacker)."""
        with self._lock:
            self.rows.answered[who] = self.rows.answered.get(who, 0) + n

    @property
    def used(self) -> int:
        """Rows sent in the run, on everyone's behalf."""
        return self.rows.used
