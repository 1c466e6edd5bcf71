"""What a run shows on the terminal while it works (stderr): one line per stage with the time since
the run started (`leakmeter: [  12.3 s] attack 2/5 surrogate: running`), on a terminal and off
it alike, and on a terminal one live bar for the attack that is running.

The bar counts the attack's queries (the query budget, a ceiling, as a suffix: no total, since
how many it asks is the attack's to decide), or, when the attack reports progress of its own with a
known total (shadow models, steps; none where the attack stops when its own curve does), that
progress, with the queries as a suffix. Training the attacker's reference or shadow models is a
stage line of the attack (`training 16 reference models`), never a bar of its own. Bars hide in CI
and when stderr is not a terminal.

The clock starts when the command starts (`begin`, before torch and MLflow are imported); once the
scenario is read (bad input ends earlier, in its one line) the first stage line says what is
loading (`loading NAME (PATH): importing torch and MLflow`), else the clock starts when the run
starts. Work between
attacks that can take seconds (reports, plots, MLflow) is a stage line, and on a terminal a live
spinner (`busy`) with the time it has taken so far.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

_current: RunProgress | None = None
_cell: str = ""  # a sweep cell's label: its runs' lines say which cell, and draw no bars
_T0: float | None = None  # when the command started (`begin`)


def _hidden() -> bool:
    """Live bars hide in CI and when stderr is not a terminal (as victims' training bars do)."""
    return bool(os.environ.get("CI")) or not sys.stderr.isatty()


def _line(t0: float, text: str) -> str:
    cell = f"[{_cell}] " if _cell else ""
    return f"leakmeter: [{time.perf_counter() - t0:6.1f} s] {cell}{text}"


def begin() -> None:
    """Start the clock stage lines count from (the command's start, before the heavy imports)."""
    global _T0
    _T0 = time.perf_counter()


@contextmanager
def busy(text: str, announce: bool = True):
    """A stage of the run that is not an attack (`writing the reports`): its stage line (unless
    `announce` is off: a line above said it), and on a terminal a live line with the seconds it has
    taken, redrawn until it ends."""
    if announce:
        stage(text)
    if (_current is None and _T0 is None) or _hidden() or _cell:
        yield
        return
    started = time.perf_counter()

    def spin(done: threading.Event) -> None:  # drawn at once, redrawn twice a second, erased at the end
        while True:
            sys.stderr.write(f"\r  … {text} ({time.perf_counter() - started:.0f} s)\x1b[K")
            sys.stderr.flush()
            if done.wait(0.5):
                break
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()

    with alongside(spin):
        yield


@contextmanager
def alongside(loop: Callable[[threading.Event], None]):
    """Run `loop(done)` in a daemon thread while the body runs; `done` is set when the body ends,
    and the thread is joined before the body's exit goes on (a line it prints comes first)."""
    done = threading.Event()
    t = threading.Thread(target=loop, args=(done,), daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()


def sweep_cell(label: str) -> None:
    """Runs in this process belong to sweep cell `label` (worker processes run several at once:
    their stage lines carry the label, and no bars are drawn)."""
    global _cell
    _cell = label


def stage(text: str) -> None:
    """A stage line of the run in progress, or of a command that called `begin` (nothing else: a
    library call stays quiet)."""
    if _current is not None:
        _current.stage(text)
    elif _T0 is not None:
        print(_line(_T0, text), file=sys.stderr, flush=True)


def sub_bar(desc: str, total: int | None) -> Any:
    """A tqdm-like bar for an attack's own progress: the running attack's bar, or a hidden one."""
    if _current is not None and _current.bar is not None:
        return _current.bar.sub(desc, total)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=True)


class RunProgress:
    """The clock, the stage lines and the live bar of one run (`with RunProgress(): ...`)."""

    def __init__(self, prefix: str = "") -> None:
        self.t0 = _T0 if _T0 is not None else time.perf_counter()
        self.prefix = prefix  # the attack a stage line belongs to, when one is running
        self.bar: AttackBar | None = None
        self._started = time.perf_counter()
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
        line = _line(self.t0, f"{self.prefix}{text}")
        if self.bar is not None and not self.bar.hidden:
            from tqdm.auto import tqdm

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
        from tqdm.auto import tqdm

        self.label, self.budget, self.queries = label, budget, 0
        self.hidden = _hidden() or bool(_cell)
        self.own = False  # showing the attack's own progress, queries as a suffix
        # no total: how many queries an attack asks is its own to decide (a budget is a ceiling,
        # not a forecast: a bar towards it would end at 2% with an ETA of hours)
        self.tq = tqdm(total=None, desc=label, unit="q", leave=False, disable=self.hidden,
                       dynamic_ncols=True)
        self._ceiling()
        self._done = threading.Event()
        if not self.hidden:  # redrawn every second: its clock moves while the attack trains models
            threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self) -> None:
        while not self._done.wait(1.0):
            try:
                self.tq.refresh()
            except Exception:  # noqa: BLE001 - a bar closing under the redraw: nothing to draw
                return

    def _ceiling(self) -> None:
        if self.budget is not None:
            self.tq.set_postfix_str(f"query budget {self.budget}", refresh=False)

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
        # unit, description and total first: reset() redraws, and must draw the new bar
        self.tq.unit = "it"
        self.tq.set_description(f"{self.label}: {desc}", refresh=False)
        self.tq.total = total  # reset(total=None) keeps whatever total is set
        self.tq.reset(total=total)
        return _SubBar(self)

    def back_to_queries(self) -> None:
        self.own = False
        self.tq.total = None
        self.tq.unit = "q"
        self.tq.set_description_str(self.label, refresh=False)  # as constructed: one colon
        self.tq.set_postfix_str("", refresh=False)
        self._ceiling()
        self.tq.reset()  # total None already: the frame it draws counts queries, never 0/N
        self.tq.update(self.queries)

    def close(self) -> None:
        self._done.set()
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
