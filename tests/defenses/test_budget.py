"""The ledger: charged before answers, per payer; what other attacks spent leaves out the
deployment's own start-up check."""

import pytest

from defenses.budget import STARTUP, Ledger
from defenses.errors import BudgetExhausted


def test_other_attacks_spending_leaves_out_the_start_up_check_and_refuses_overruns():
    led = Ledger(20)
    led.charge(5, STARTUP)
    led.charge(10, "a")
    led.charge(3, "b")
    assert led.remaining == 2
    assert led.spent_by_other_attacks("a") == 3
    assert led.spent_by_other_attacks("b") == 10
    assert led.spent_by_other_attacks("c") == 13
    with pytest.raises(BudgetExhausted):
        led.charge(3, "c")
    assert led.used == 18 and "c" not in led.by_attack  # nothing recorded for a refused batch
