"""Where the attacker's own training runs (a surrogate, a reconstructor network): the run's device
policy (victims/devices.py) decides from the work's size, and records the choice for the report.
Attacks reach it here, beside the rest of what the attacker builds for itself, never the victim."""

from __future__ import annotations

import torch

from victims import devices


def place(part: str, flop: float, note: str = "", step_flop: float | None = None) -> torch.device:
    """The device for `part` of the attacker's work (`flop` in all, `step_flop` per optimizer step)."""
    return devices.current().place(part, flop, note, step_flop)
