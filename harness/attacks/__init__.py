"""The attack registry. Attacks live in harness/attacks/<family>/<technique>.py and register
themselves with `@register`; `registry()` imports every module under this package once.
"""

from __future__ import annotations

import importlib
import pkgutil

from harness.attacks.base import FAMILIES, INTERFACES, Attack

_REGISTRY: dict[str, type[Attack]] = {}
_LOADED = False


def register(cls: type[Attack]) -> type[Attack]:
    """Class decorator: add an attack to the registry (checks its declarations)."""
    for attr in ("name", "family", "needs", "paper"):
        if not getattr(cls, attr, None):
            raise TypeError(f"attack {cls.__name__} must declare {attr}")
    if cls.family not in FAMILIES:
        raise TypeError(f"attack {cls.name}: family {cls.family!r} not in {FAMILIES}")
    if not set(cls.needs) <= set(INTERFACES):
        raise TypeError(f"attack {cls.name}: needs {set(cls.needs)} outside {INTERFACES}")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise TypeError(f"attack name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def registry() -> dict[str, type[Attack]]:
    """All registered attacks by name (importing every attack module on first call)."""
    global _LOADED
    if not _LOADED:
        for mod in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
            importlib.import_module(mod.name)
        _LOADED = True
    return dict(sorted(_REGISTRY.items()))
