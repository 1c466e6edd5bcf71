"""The ledgers: charged before answers; one quota per attacker, one row cap for the run; the
scan's own rows (start-up check, verification probes) count against the cap only."""

import pytest

from defenses.budget import SCORING, STARTUP, Quotas
from defenses.errors import BudgetExhausted, RowCapReached


def test_each_attacker_has_the_whole_budget_and_refused_batches_record_nothing():
    q = Quotas(20)
    q.charge(5, STARTUP)
    q.charge(10, "a")
    q.charge(3, "b")
    assert (q.remaining("a"), q.remaining("b"), q.remaining("c")) == (10, 17, 20)
    with pytest.raises(BudgetExhausted):
        q.charge(11, "a")
    q.charge(20, "c")
    assert q.used == 5 + 10 + 3 + 20
    assert q.rows.by_attack == {STARTUP: 5, "a": 10, "b": 3, "c": 20}
    assert q.remaining(STARTUP) is None  # the scan's own rows have no attacker budget


def test_the_row_cap_counts_everyone_and_is_a_cap_not_a_budget():
    q = Quotas(100, max_rows=30)
    q.charge(2, STARTUP)
    q.charge(20, "a")
    q.charge(5, SCORING)
    assert q.remaining("b") == 3 and q.capped_by_rows("b")
    with pytest.raises(RowCapReached) as exc:
        q.charge(4, "b")
    assert exc.value.stopped_by == "cap" and isinstance(exc.value, BudgetExhausted)
    assert q.used == 27 and "b" not in q.rows.by_attack
    q.charge(3, "b")
    assert q.used == 30 and q.remaining("a") == 0
