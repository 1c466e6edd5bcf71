"""JSON from the other side of an HTTP connection, parsed within bounds on what it becomes.

A byte limit alone does not bound memory: each `[]` (2 bytes) becomes a Python list of ~56 bytes
plus its slot, so 32 MiB of `[[],[],...]` peaked at 1.5 GB. `loads` counts the arrays and objects
a body may hold (its `[` and `{` bytes, strings included: an over-count, never an under-count)
before parsing, and refuses integers no float64 can hold (a 401-digit integer crashed numpy with
OverflowError, where an answer or a request should be refused as bad data).
"""

from __future__ import annotations

import json
from typing import Any

# arrays + objects one body may hold: ~64 MB of empty lists at most; a batch of 100,000 rows
# (the server's MAX_ROWS) with a few containers per row fits with room to spare
MAX_CONTAINERS = 1_000_000


class JSONTooLarge(ValueError):
    """The body would hold more arrays/objects than `max_containers`."""


class JSONNumberTooLarge(ValueError):
    """The body holds an integer no float64 can hold."""


def _int(text: str) -> int:
    value = int(text)
    if len(text) > 300:  # only long spellings can pass float64's range (1.8e308)
        try:
            float(value)
        except OverflowError:
            raise JSONNumberTooLarge(f"a {len(text.lstrip('-'))}-digit integer (beyond float64's "
                                     "range, 1.8e308)") from None
    return value


def loads(raw: bytes | str, max_containers: int = MAX_CONTAINERS) -> Any:
    """`raw` parsed as JSON: JSONTooLarge / JSONNumberTooLarge (both ValueError), ValueError for
    text that is not JSON, RecursionError for nesting Python cannot parse."""
    data = raw.encode() if isinstance(raw, str) else raw
    containers = data.count(b"[") + data.count(b"{")
    if containers > max_containers:
        raise JSONTooLarge(f"{containers:,} arrays or objects (at most {max_containers:,} are parsed)")
    return json.loads(raw, parse_int=_int)
