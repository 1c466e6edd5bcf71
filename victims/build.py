"""Build the deployed victim a scenario describes: in this process (victims/local.py: data,
model, training with DP-SGD when asked) or behind an HTTP endpoint (victims/http/endpoint.py)."""

from __future__ import annotations

from typing import Any

from victims.http.endpoint import build_remote_victim
from victims.local import build_local_victim
from victims.victim import Victim


def build_victim(s: Any) -> Victim:
    """The scenario's victim: its endpoint when it names one, else built and trained here."""
    if s.victim.endpoint is not None:
        return build_remote_victim(s)
    return build_local_victim(s)
