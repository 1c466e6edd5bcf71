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
_LOADED = False


def scorer(kind: str) -> Callable[[Scorer], Scorer]:
    """Decorator registering the scorer of one artifact kind."""

    def deco(fn: Scorer) -> Scorer:
        _SCORERS[kind] = fn
        return fn

    return deco


def score(artifact: Any, truth: Any, info: Any) -> dict[str, float]:
    """Metrics for an artifact against the truth; {} when the kind has no scorer or no truth."""
    global _LOADED
    if not _LOADED:
        for mod in pkgutil.iter_modules(__path__, prefix=f"{__name__}."):
            importlib.import_module(mod.name)
        _LOADED = True
    fn = _SCORERS.get(artifact.kind)
    if fn is None or truth is None:
        return {}
    return fn(artifact, truth, info)
