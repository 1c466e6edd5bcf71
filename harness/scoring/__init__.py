"""Scorers compare an attack's artifact with the victim's truth. They are looked up by the
artifact's kind; each returns a flat dict of float metrics.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

Scorer = Callable[[Any, Any, Any], dict[str, float]]
_SCORERS: dict[str, Scorer] = {}
_BLACKBOX: dict[str, Scorer] = {}
_LOADED = False


def scorer(kind: str, blackbox: bool = False) -> Callable[[Scorer], Scorer]:
    """Decorator registering the scorer of one artifact kind; `blackbox=True` registers the one
    used when the truth is only an endpoint to probe (no model to compare with)."""

    def deco(fn: Scorer) -> Scorer:
        (_BLACKBOX if blackbox else _SCORERS)[kind] = fn
        return fn

    return deco


def is_blackbox(truth: Any) -> bool:
    """True for a truth that is only an endpoint to probe."""
    return getattr(truth, "model", None) is None and getattr(truth, "endpoint", None) is not None


def score(artifact: Any, truth: Any, info: Any) -> dict[str, float]:
    """Metrics for an artifact against the truth; {} when the kind has no scorer or no truth."""
    global _LOADED
    if not _LOADED:
        for mod in pkgutil.iter_modules(__path__, prefix=f"{__name__}."):
            importlib.import_module(mod.name)
        _LOADED = True
    if truth is None:
        return {}
    fn = (_BLACKBOX if is_blackbox(truth) else _SCORERS).get(artifact.kind)
    return fn(artifact, truth, info) if fn is not None else {}
