"""What the endpoint client sent (the report's `victim.endpoint.stats`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EndpointStats:
    """What the client sent (live; the report's victim.endpoint section). `by_caller` holds,
    per attack the oracle billed as, rows sent (first tries and re-sends), re-sent requests and
    failed attempts."""

    requests: int = 0
    retries: int = 0
    rows_sent: int = 0
    rows_resent: int = 0
    rows_refused: int = 0  # rows the endpoint refused (429, a revoked key): sent, never answered
    rows_by_key: dict[str, int] = field(default_factory=dict)  # "auth" / "probe_auth" / "none"
    faults: dict[str, int] = field(default_factory=dict)
    by_caller: dict[str, dict[str, int]] = field(default_factory=dict)

    def caller(self, who: str) -> dict[str, int]:
        return self.by_caller.setdefault(who, {"queries_sent": 0, "requests": 0, "retries": 0, "faults": 0,
                                               "rows_resent": 0})

    def sent(self, who: str, rows: int, retry: bool, billed: bool = True) -> None:
        self.requests += 1
        self.rows_sent += rows
        c = self.caller(who)
        c["queries_sent"] += rows
        c["requests"] += 1
        if retry and not billed:  # re-sent in place of rows the endpoint refused (never billed)
            self.retries += 1
            c["retries"] += 1
        elif retry:
            self.retries += 1
            self.rows_resent += rows
            c["retries"] += 1
            c["rows_resent"] += rows

    def fault(self, kind: str, who: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1
        self.caller(who)["faults"] += 1

    def refused(self, rows: int, who: str) -> None:
        self.rows_refused += rows
        c = self.caller(who)
        c["rows_refused"] = c.get("rows_refused", 0) + rows
