"""What a run shows on the terminal while it works (stderr): one line per stage with the time since
the run started (`leakmeter: [  12.3 s] attack 2/5 surrogate: running`), on a terminal and off
it alike, and on a terminal one live bar for the attack that is running.

The bar counts the attack's queries against its budget (one attacker's quota), or, when the attack
reports progress of its own (gradient samples, shadow models, steps), that progress, with the
queries as a suffix. Training the attacker's reference or shadow models is a stage line of the
attack (`training 16 reference models`), never a bar of its own. Bars hide in CI and when stderr
is not a terminal (`progress_disabled`).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm.auto import tqdm

from victims.models.training import progress_disabled

_current: RunProgress | None = None
_cell: str = ""  # a sweep cell's label: its runs' lines say which cell, and draw no bars


def sweep_cell(label: str) -> None:
    """Runs in this process belong to sweep cell `label` (worker processes run several at once:
    their stage lines carry the label, and no bars are drawn)."""
    global _cell
    _cell = label


def stage(text: str) -> None:
    """A stage line of the run in progress (nothing outside a run: a library call stays quiet)."""
    if _current is not None:
        _current.stage(text)


def sub_bar(desc: str, total: int | None) -> Any:
    """A tqdm-like bar for an attack's own progress: the running attack's bar, or a hidden one."""
    if _current is not None and _current.bar is not None:
        return _current.bar.sub(desc, total)
    return tqdm(total=total, desc=desc, disable=True)


class RunProgress:
    """The clock, the stage lines and the live bar of one run (`with RunProgress(): ...`)."""

    def __init__(self, prefix: str = "") -> None:
        self.t0 = time.perf_counter()
        self.prefix = prefix  # the attack a stage line belongs to, when one is running
        self.bar: AttackBar | None = None
        self._started = self.t0
        self._outer: RunProgress | None = None

    def __enter__(self) -> RunProgress:
        global _current
        self._outer, _current = _current, self
        return self

    def __exit__(self, *exc: Any) -> None:
        global _current
        self.end_attack()
        _current = self._outer

    def stage(self, text: str) -> None:
        cell = f"[{_cell}] " if _cell else ""
        line = f"leakmeter: [{time.perf_counter() - self.t0:6.1f} s] {cell}{self.prefix}{text}"
        if self.bar is not None and not self.bar.hidden:
            tqdm.write(line, file=sys.stderr)  # above the live bar, which redraws below it
        else:
            print(line, file=sys.stderr, flush=True)

    def start_attack(self, label: str, budget: int | None, announce: bool = True) -> None:
        """Name the running attack (`attack 2/5 surrogate`) and open its bar (`announce`: say it
        runs; an attack about to be skipped says only that)."""
        self.end_attack()
        if announce:
            self.stage(f"{label}: running")
        self.prefix = f"{label}: "
        self.bar = AttackBar(label, budget)
        self._started = time.perf_counter()

    def end_attack(self, result: str = "") -> None:
        """Close the attack's bar; `result` (how it ended) becomes its closing stage line."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        label, self.prefix = self.prefix, ""
        if result and label:
            took = "" if result.startswith("skipped") else f" in {time.perf_counter() - self._started:.1f} s"
            self.stage(f"{label}{result}{took}")

    def queries(self, n: int) -> None:
        """The oracle's hook: n more queries charged."""
        if self.bar is not None:
            self.bar.on_queries(n)


class AttackBar:
    """One live bar for the running attack (see the module docstring)."""

    def __init__(self, label: str, budget: int | None) -> None:
        self.label, self.budget, self.queries = label, budget, 0
        self.hidden = progress_disabled() or bool(_cell)
        self.own = False  # showing the attack's own progress, queries as a suffix
        self.tq = tqdm(total=budget, desc=label, unit="q", leave=False, disable=self.hidden,
                       dynamic_ncols=True)

    def on_queries(self, n: int) -> None:
        self.queries += n
        if self.own:
            of = f"/{self.budget}" if self.budget is not None else ""
            self.tq.set_postfix_str(f"{self.queries}{of} queries", refresh=False)
        self.tq.update(0 if self.own else n)

    def sub(self, desc: str, total: int | None) -> _SubBar:
        name = self.label.split()[-1]  # "reconn: shadow models" under "attack 12/15 reconn"
        desc = desc.removeprefix(f"{name}: ")
        self.own = True
        self.tq.reset(total=total)
        self.tq.unit = "it"
        self.tq.set_description(f"{self.label}: {desc}", refresh=False)
        return _SubBar(self)

    def back_to_queries(self) -> None:
        self.own = False
        self.tq.reset(total=self.budget)
        self.tq.unit = "q"
        self.tq.set_description(self.label, refresh=False)
        self.tq.set_postfix_str("", refresh=False)
        self.tq.update(self.queries)

    def close(self) -> None:
        self.tq.close()


class _SubBar:
    """What an attack holds for its own progress: update and close, as a tqdm bar."""

    def __init__(self, owner: AttackBar) -> None:
        self._owner = owner
        self.n = 0

    def update(self, n: int = 1) -> None:
        self.n += n
        self._owner.tq.update(n)

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self._owner.tq.set_postfix_str(s, refresh=refresh)

    def close(self) -> None:
        if self._owner.own:
            self._owner.back_to_queries()
