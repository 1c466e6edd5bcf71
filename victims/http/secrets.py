"""The secrets scrubber: every string that leaves the process passes through `scrub`.

Secrets are registered when they are read (the endpoint's token, the user:password of its URL, the
values of credential-like query parameters). `scrub(text)` replaces each of them by ``***`` in every
form it travels in: as written, percent-encoded, JSON- or repr-escaped, and — for URL userinfo —
as the base64 of ``user:password`` that a Basic header carries. On top of the registered values,
three patterns are masked wherever they appear, registered or not: URL userinfo (``scheme://u:p@``),
credential-named query parameters (``?api_key=...``) and the value of a Bearer/Basic header.

Values shorter than MIN_SECRET characters are masked only through those patterns: replacing a
two-letter string everywhere would garble every message without protecting anything. Any
FRAGMENT-character piece of a registered value (in any of its forms) is masked too, with the run
of text it belongs to: a secret cut in half by a length limit is still found. Text is always
scrubbed *before* it is cut (`clip`), never after.

The CLI routes stdout and stderr through `ScrubbingStream`, the runner scrubs the report before it
is written, and reports/tracking.py's Tracker scrubs what it logs to MLflow (harness passes it this
module's `scrub`): one scrubber, one registry.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

MASK = "***"
MIN_SECRET = 4
FRAGMENT = 8  # pieces of a registered secret this long are masked wherever they appear
# query parameter names whose values are credentials whatever their length: any name containing
# one of these words (api_key, subscription-key, X-Amz-Signature, access_token, ...), or exactly
# `code` / `pass`
_CRED_WORDS = r"key|token|secret|passw|pwd|sig|auth|credential|session|jwt|bearer"
CREDENTIAL_PARAM = re.compile(rf"(?i)^(?:[\w.~-]*(?:{_CRED_WORDS})[\w.~-]*|code|pass)$")
# Every pattern below runs in time linear in the text (endpoints choose what we scrub): no
# quantifier can backtrack over what another one consumed (possessive `*+` / `++`), the scheme
# of a URL is at most 32 characters, and the credential words are looked for in a parameter name
# already cut out (a `[\w.~-]*(?:key|...)[\w.~-]*=` regex took ~17 min on 400 KB of `a.a.a...`).
_USERINFO = re.compile(r"(?i)([a-z][a-z0-9+.-]{0,31}+://)([^/\s@?#'\"<>]++)@")
_QUERY_PARAM = re.compile(r"([?&;])([\w.~-]++)=([^&#\s'\"<>]++)")
_CRED_NAME = re.compile(rf"(?i){_CRED_WORDS}")
# a header value: at least 6 token characters, one of them a digit or punctuation (not a word)
_AUTH_VALUE = re.compile(
    r"(?i)\b(bearer|basic)(\s++|%20|\+)(?!\*\*\*)(?=[A-Za-z]*+[0-9._~+/=:-])[A-Za-z0-9._~+/=:-]{6,}+")


def _mask_query(m: re.Match[str]) -> str:
    return f"{m.group(1)}{m.group(2)}={MASK}" if _CRED_NAME.search(m.group(2)) else m.group(0)


def _forms(value: str) -> set[str]:
    """The ways a value is written in text we might emit."""
    out = {value, quote(value, safe=""), quote_plus(value), quote(value, safe="/:@")}
    out.add(json.dumps(value)[1:-1])
    out.add(json.dumps(value, ensure_ascii=False)[1:-1])
    out.add(repr(value)[1:-1])
    return {f for f in out if f}


def _b64_forms(raw: bytes) -> set[str]:
    """Base64 of `raw` (standard and URL-safe, with and without padding)."""
    std = base64.b64encode(raw).decode()
    url = base64.urlsafe_b64encode(raw).decode()
    return {std, std.rstrip("="), url, url.rstrip("=")}


class Scrubber:
    """A registry of secret values and the function that masks them."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._grams: frozenset[str] = frozenset()  # every FRAGMENT-long piece of every value
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None

    def _register(self, forms: set[str]) -> None:
        """Add forms of a secret (caller holds no lock)."""
        with self._lock:
            new = {f for f in forms if len(f) >= MIN_SECRET} - self._values
            if new:
                self._values |= new
                self._grams = self._grams | {f[i : i + FRAGMENT] for f in new if len(f) >= FRAGMENT
                                             for i in range(len(f) - FRAGMENT + 1)}
                self._pattern = None

    def add(self, value: str | None) -> None:
        """Register a secret (and its encodings)."""
        if not value or len(value) < MIN_SECRET:
            return
        forms = _forms(value) | _forms(unquote(value))
        forms |= {f for f in _b64_forms(value.encode()) if len(f) >= 8}
        self._register(forms)

    def add_userinfo(self, user: str, password: str | None) -> None:
        """Register URL credentials: each part, and `user:password` as a Basic header sends it."""
        for part in (user, password):
            self.add(part)
        for u, p in ((user, password or ""), (unquote(user), unquote(password or ""))):
            pair = f"{u}:{p}"
            self.add(pair)
            for enc in ("utf-8", "latin-1"):
                try:
                    raw = pair.encode(enc)
                except UnicodeEncodeError:
                    continue
                self._register(_b64_forms(raw))

    def add_url(self, url: str) -> None:
        """Register the credentials a URL carries: userinfo and credential-like query values."""
        try:
            parts = urlsplit(url)
            user, password = parts.username, parts.password
        except ValueError:
            return
        if user is not None:
            self.add_userinfo(user, password)
        for name, value in parse_qsl(parts.query, keep_blank_values=False):
            looks_like_token = len(value) >= 12 and re.search(r"\d", value) and re.search(r"[A-Za-z]", value)
            if CREDENTIAL_PARAM.match(name) or looks_like_token:
                self.add(value)
        raw_query = parts.query
        for piece in re.split(r"[&;]", raw_query):  # the raw (still encoded) values too
            name, _, value = piece.partition("=")
            if value and CREDENTIAL_PARAM.match(unquote(name)):
                self.add(value)

    @property
    def longest(self) -> int:
        """Length of the longest registered form (0 when none): how far a secret cut at the end of
        a text can reach back into it."""
        with self._lock:
            return max((len(v) for v in self._values), default=0)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._grams = frozenset()
            self._pattern = None

    def _compiled(self) -> re.Pattern[str] | None:
        with self._lock:
            if self._pattern is None and self._values:
                ordered = sorted(self._values, key=len, reverse=True)  # longest first
                self._pattern = re.compile("|".join(re.escape(v) for v in ordered))
            return self._pattern

    def __call__(self, text: Any) -> Any:
        return self.scrub(text)

    def scrub(self, text: Any) -> Any:
        """`text` with every secret masked; anything that is not a str is returned unchanged."""
        if not isinstance(text, str) or not text:
            return text
        pattern = self._compiled()
        if pattern is not None:
            text = pattern.sub(MASK, text)
            text = self._mask_fragments(text)
        text = _USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
        text = _QUERY_PARAM.sub(_mask_query, text)
        return _AUTH_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)

    def _mask_fragments(self, text: str) -> str:
        """Mask every run of text covered by FRAGMENT-long pieces of registered secrets."""
        grams = self._grams
        if len(text) < FRAGMENT or not grams:
            return text
        spans: list[list[int]] = []
        for i in range(len(text) - FRAGMENT + 1):
            if text[i : i + FRAGMENT] in grams:
                if spans and i <= spans[-1][1]:
                    spans[-1][1] = i + FRAGMENT
                else:
                    spans.append([i, i + FRAGMENT])
        if not spans:
            return text
        out, at = [], 0
        for start, end in spans:
            out += [text[at:start], MASK]
            at = end
        out.append(text[at:])
        return "".join(out)

    def clip(self, text: Any, limit: int) -> str:
        """`text` as one safe line of at most `limit` characters: bounded (so no pattern ever
        sees more than a few times `limit`), made one line with its control characters escaped
        (`one_line`), scrubbed, and only then cut (a secret cut in half before scrubbing would
        no longer be recognised). When the bound cut the text, its last (longest-secret)
        characters go first: a secret straddling that cut cannot surface in part."""
        text = str(text)
        longest = self.longest
        bound = 4 * limit + 2 * longest + 256
        cut = len(text) > bound
        out = str(self.scrub(one_line(text[:bound] if cut else text)))
        if cut:
            out = out[: max(0, len(out) - longest - FRAGMENT)]
        return out[:limit]

    def scrub_obj(self, obj: Any) -> Any:
        """A copy of plain data (dicts, lists, tuples, strings) with every string scrubbed,
        dict keys included."""
        if isinstance(obj, str):
            return self.scrub(obj)
        if isinstance(obj, dict):
            return {self.scrub(k): self.scrub_obj(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return type(obj)(self.scrub_obj(v) for v in obj)
        return obj

    def scrub_in_place(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Scrub a report dict in place (callers keep their reference); returns it."""
        clean = self.scrub_obj(obj)
        obj.clear()
        obj.update(clean)
        return obj


SECRETS = Scrubber()


def scrub(text: Any) -> Any:
    """Mask every registered secret and credential pattern in `text` (module-level scrubber)."""
    return SECRETS.scrub(text)


def scrub_obj(obj: Any) -> Any:
    return SECRETS.scrub_obj(obj)


def clip(text: Any, limit: int) -> str:
    """Scrub, then cut to `limit` characters (module-level scrubber)."""
    return SECRETS.clip(text, limit)


class ScrubbingStream:
    """A text stream that scrubs what is written to it, line by line (so a secret split across
    two writes is still whole when scrubbed). It has no `buffer`: nobody can write around it."""

    def __init__(self, stream: Any, scrubber: Scrubber = SECRETS):
        self._stream = stream
        self._scrub = scrubber
        self._pending = ""
        self._lock = threading.Lock()

    @property
    def wrapped(self) -> Any:
        return self._stream

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", "utf-8") or "utf-8"

    @property
    def errors(self) -> str | None:
        return getattr(self._stream, "errors", "strict")

    def isatty(self) -> bool:
        return bool(getattr(self._stream, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self._stream.fileno()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # a text stream: libraries probe with write(b"")
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:
            self._pending += text
            cut = max(self._pending.rfind("\n"), self._pending.rfind("\r"))
            if cut >= 0:
                done, self._pending = self._pending[: cut + 1], self._pending[cut + 1 :]
                self._stream.write(self._scrub.scrub(done))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._stream.write(self._scrub.scrub(self._pending))
                self._pending = ""
        flush = getattr(self._stream, "flush", None)
        if flush is not None:
            flush()

    def close(self) -> None:
        self.flush()

    @property
    def closed(self) -> bool:
        return bool(getattr(self._stream, "closed", False))


# credentials MLflow (and the artifact stores behind it) read from the environment: a tracking
# server or a library that echoes one must not put it on stderr or in a report
TRACKING_ENV = ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD", "DATABRICKS_TOKEN",
                "DATABRICKS_CLIENT_SECRET", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                "AZURE_STORAGE_ACCESS_KEY", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_CLIENT_SECRET")


def register_tracking_env() -> None:
    """Register the values of TRACKING_ENV that are set, and `user:password` of
    MLFLOW_TRACKING_USERNAME / _PASSWORD as the Basic header MLflow sends (base64)."""
    import os

    for name in TRACKING_ENV:
        SECRETS.add(os.environ.get(name))
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        SECRETS.add(f"{user}:{password}")
        SECRETS._register(_b64_forms(f"{user}:{password}".encode()))


def install_stream_scrubbing() -> None:
    """Route sys.stdout and sys.stderr through the scrubber (idempotent); registers the tracking
    credentials of the environment (TRACKING_ENV)."""
    import sys

    register_tracking_env()

    if not isinstance(sys.stdout, ScrubbingStream):
        sys.stdout = ScrubbingStream(sys.stdout)
    if not isinstance(sys.stderr, ScrubbingStream):
        sys.stderr = ScrubbingStream(sys.stderr)


_SPACE = re.compile(r"[ \t\n\v\f\r\x1c-\x1f\x85\u2028\u2029]++")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
                      r"\ufeff\ufff9-\ufffb\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def one_line(text: Any) -> str:
    """Text from outside as one printable line: line breaks and other spacing collapsed to single
    spaces, every other control or invisible formatting character (ESC, BEL, NUL, DEL, C1, bidi
    overrides, zero-width) written as a visible escape (`\\x1b`): it can neither start a line of
    its own (`verdict: pass`, `::error`, a Markdown heading) nor drive a terminal (OSC 52).
    reports/text.py holds the same rule for the report writers (reports import nothing of ours)."""
    s = _SPACE.sub(" ", str(text))
    return _CONTROL.sub(_escape, s).strip(" ")


_HEADER_VALUE = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$")
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def valid_header_value(value: str) -> bool:
    """True when `value` can travel in an HTTP header: visible ASCII, inner spaces only, no
    control characters (a newline would split the header, and libraries print the value when
    they refuse it)."""
    return bool(_HEADER_VALUE.match(value))
