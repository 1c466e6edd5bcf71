"""Off a terminal a long attack is never silent: `heartbeat` prints a stage line every few seconds
with the queries sent so far; with a live bar on screen it adds nothing."""

import re
import threading

from harness.core.progress import RunProgress
from harness.run.heartbeat import heartbeat


def _attack(capsys, hidden: bool, beats_wanted: int, steps: int) -> list[str]:
    """An attack that sends queries for at most `steps` beat intervals, until `beats_wanted`
    heartbeat lines were printed; returns the stderr lines."""
    lines: list[str] = []
    with RunProgress() as live:
        live.start_attack("attack 1/1 slow", None)
        live.bar.hidden = hidden
        enough = threading.Event()
        with heartbeat(live, every=0.005):
            for _ in range(steps):
                live.queries(7)
                lines += capsys.readouterr().err.splitlines()
                if sum("still running" in ln for ln in lines) >= beats_wanted or enough.wait(0.005):
                    break
        live.end_attack("ok")
    return lines + capsys.readouterr().err.splitlines()


def test_a_hidden_bar_gets_a_line_every_few_seconds_with_the_queries(capsys):
    lines = _attack(capsys, hidden=True, beats_wanted=2, steps=4000)
    beats = [ln for ln in lines if "still running" in ln]
    assert len(beats) >= 2, lines
    for ln in beats:
        m = re.search(r"\] attack 1/1 slow: still running \(\d+ s, (\d+) queries so far\)$", ln)
        assert m and int(m[1]) % 7 == 0 and int(m[1]) > 0, ln
    assert lines[-1].split("] ")[1].startswith("attack 1/1 slow: ok"), lines  # no beat after the end


def test_a_live_bar_on_screen_gets_no_extra_lines(capsys):
    lines = _attack(capsys, hidden=False, beats_wanted=1, steps=40)
    assert not [ln for ln in lines if "still running" in ln], lines
