"""Text from outside (an endpoint's error body, a header, a server path) made safe for every sink:
one line, no control characters, and — per format — no markup.

`one_line` is the defence in depth of the report writers (the endpoint client already cleans what
it reads, victims/http/secrets.py `clip`): line breaks and other spacing become one space, every
other control or invisible formatting character (ESC, BEL, NUL, DEL, C1, bidi overrides,
zero-width characters, lone surrogates) is written as a visible escape (`\\x1b`), so a body cannot
start a line of its own (`verdict: pass`, a `::error` workflow command, a `# Verdict` heading) nor
drive a terminal (OSC 52 clipboard writes, window titles). `md_inline` also escapes Markdown
(no heading, image, link or HTML from a value); `xml_text` leaves only what XML 1.0 may hold.
"""

from __future__ import annotations

import re
from typing import Any

_SPACE = re.compile(r"[ \t\n\v\f\r\x1c-\x1f\x85\u2028\u2029]++")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
                      r"\ufeff\ufff9-\ufffb\ud800-\udfff]")
# enough to make a value inert: no link or image (`[`), autolink or HTML (`<`), code span, emphasis
# (`*`), table cell break (`|`); one line, so no heading, list or quote can start
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|])")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def one_line(text: Any) -> str:
    """`text` as one printable line: spacing collapsed to single spaces, control characters
    escaped (`\\x1b`), leading and trailing space removed."""
    s = _SPACE.sub(" ", str(text))
    return _CONTROL.sub(_escape, s).strip(" ")


def md_inline(text: Any) -> str:
    """`text` as inert Markdown inside a line or a table cell: one line, the characters that start
    a link, an image, HTML, a code span, emphasis or a cell break backslash-escaped."""
    return _MD_SPECIAL.sub(r"\\\1", one_line(text))


_XML_ILLEGAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


def xml_text(text: Any) -> str:
    """`text` with the characters XML 1.0 cannot hold (ESC, BEL, NUL, lone surrogates, ...)
    written as visible escapes; line breaks kept (a traceback stays readable)."""
    return _XML_ILLEGAL.sub(_escape, str(text))
