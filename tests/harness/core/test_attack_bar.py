"""The live attack bar's frames when an attack shows progress of its own and hands back (issue 35:
one frame said `0/10 ?q/s`, the wrong unit, and the queries bar came back as `reconn: : 0q`)."""

from __future__ import annotations

import io
import re

from tqdm import tqdm

from harness.core.progress import AttackBar


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_sub_bar_draws_its_own_unit_and_the_queries_bar_comes_back_as_it_was():
    out = _Tty()
    bar = AttackBar.__new__(AttackBar)  # the bar's state, drawn to a terminal-like buffer
    bar.label, bar.budget, bar.queries, bar.hidden, bar.own = "attack 1/2 reconn", None, 120, False, False
    bar.tq = tqdm(total=None, desc=bar.label, unit="q", leave=False, file=out, ncols=100)
    bar.tq.update(120)
    sub = bar.sub("reconn: shadow models", 10)
    sub.update(3)
    sub.close()
    bar.tq.refresh()
    frames = [f.strip() for f in re.split(r"[\r\n]", out.getvalue()) if f.strip()]
    own = [f for f in frames if "shadow models" in f]
    assert own and all("/10" in f and "q/s" not in f for f in own)
    after = frames[frames.index(own[-1]) + 1:]
    assert after and all(f.startswith("attack 1/2 reconn: ") and ": :" not in f for f in after)
    assert "120q" in after[-1]
