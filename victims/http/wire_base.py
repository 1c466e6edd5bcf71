"""The base of the wire protocols (victims/http/wire.py, wire_v2.py): what an adapter is, the
error it raises when a response holds no answer, and the message of error-shaped answers."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from victims.http.secrets import clip


def path_suffix(url: str, suffix: str) -> str:
    """`url` with `suffix` (`/infer`, `:predict`) added to its path, its query and fragment kept
    after it: a key in the query string (`?code=...`) stays a query parameter (it used to end up
    as `?code=KEY/infer`)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + suffix))


class AnswerError(Exception):
    """The response holds no answer where the protocol puts it; the message says what it holds."""


class WireProtocol:
    """One protocol: `body(rows, explain)` → JSON-able request; `answer(payload)` → the answer
    field of a parsed response."""

    name = "?"
    sends_token = False  # True: the token travels in the body, not in a header
    url = ""

    def bind(self, url: str) -> WireProtocol:
        """Remember the endpoint's URL (without credentials); returns self."""
        self.url = url
        return self

    def target(self, explain: str | None) -> str:
        """Where a request goes: the URL itself unless the protocol says otherwise."""
        return self.url

    def body(self, rows: list, explain: str | None) -> Any:
        raise NotImplementedError

    def answer(self, payload: Any, explain: str | None = None) -> Any:
        raise NotImplementedError

    def offers_explain(self) -> bool:
        return True


def error_text(payload: Any) -> str | None:
    """The message of an error-shaped answer ({"error": ...}, {"message": ...}), scrubbed and
    cut; None when the answer is not one."""
    if isinstance(payload, dict):
        for key in ("error", "message"):
            if isinstance(payload.get(key), str | dict):
                return clip(str(payload[key]), 200)
    return None


def answer_field(payload: Any, key: str, where: str) -> Any:
    """payload[key], or AnswerError saying what the response holds instead."""
    if isinstance(payload, dict) and key in payload:
        return payload[key]
    err = error_text(payload)
    if err is not None:
        raise AnswerError(f"answered an error instead of {key!r}: {err}")
    keys = ", ".join(clip(k, 40) for k in list(payload)[:5]) if isinstance(payload, dict) else \
        type(payload).__name__
    raise AnswerError(f"the response has no {key!r} field ({where}; got: {keys})")
