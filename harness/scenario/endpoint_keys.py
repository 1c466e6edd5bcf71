"""Checks of `victim.endpoint` keys that depend on the wire protocol, and of the `headers` map
(whose values may only name environment variables: a scenario never holds a secret)."""

from __future__ import annotations

import re
from typing import Any

HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}$")
ENV_REF = re.compile(r"^\$env:([A-Za-z_][A-Za-z0-9_]{0,127})$")
# headers the client sets itself (framing, content negotiation): a scenario may not replace them
RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "content-type",
                    "accept", "accept-encoding", "te", "upgrade", "expect", "cookie"}
MAX_HEADERS = 32
V2_ONLY = ("input_name", "output_name", "datatype", "classification")
TEMPLATE_PROTOCOLS = ("json", "torchserve")


def check_headers(v: dict[str, str] | None) -> dict[str, str] | None:
    """Header names are HTTP tokens (not ones the client sets itself) and every value is
    "$env:NAME"; ValueError naming the header (never a value that could be a secret)."""
    if v is None:
        return v
    if len(v) > MAX_HEADERS:
        raise ValueError(f"at most {MAX_HEADERS} headers")
    seen: set[str] = set()
    for name, value in v.items():
        shown = name if HEADER_NAME.match(name) else "<invalid name>"
        if not HEADER_NAME.match(name):
            raise ValueError("a header name must be an HTTP token (letters, digits, !#$%&'*+-.^_`|~), "
                             "at most 64 characters")
        if name.lower() in RESERVED_HEADERS:
            raise ValueError(f"{shown}: set by leakmeter itself; allowed: any other header")
        if name.lower() in seen:
            raise ValueError(f"{shown}: given twice (header names ignore case)")
        seen.add(name.lower())
        if not isinstance(value, str) or not ENV_REF.match(value):
            raise ValueError(f"{shown}: a header value must be \"$env:NAME\" (read from the environment "
                             "variable NAME, never written into the scenario; value not shown)")
    return v


def header_vars(headers: dict[str, str] | None) -> dict[str, str]:
    """{header name: environment variable} of a validated headers map."""
    return {k: ENV_REF.match(v).group(1) for k, v in (headers or {}).items()}


def check_protocol_keys(ep: Any) -> None:
    """Keys only some protocols read are refused elsewhere (a key that does nothing misleads)."""
    used = ep.model_fields_set
    if ep.protocol not in ("kserve-v2", "auto"):
        extra = [k for k in V2_ONLY if k in used and getattr(ep, k) is not None]
        if extra:
            raise ValueError(f"{', '.join(extra)}: only the kserve-v2 protocol (or auto) reads "
                             f"{'it' if len(extra) == 1 else 'them'}; protocol is {ep.protocol}")
    if ep.protocol not in TEMPLATE_PROTOCOLS:
        extra = [k for k in ("request_template", "response_path") if getattr(ep, k) is not None]
        if extra:
            raise ValueError(f"{', '.join(extra)}: only the json and torchserve protocols read "
                             f"{'it' if len(extra) == 1 else 'them'}; protocol is {ep.protocol}")
    if ep.protocol != "openai":
        extra = [k for k in ("model", "vocab", "vocab_size") if getattr(ep, k, None) is not None]
        if extra:
            raise ValueError(f"{', '.join(extra)}: only the openai protocol reads "
                             f"{'it' if len(extra) == 1 else 'them'}; protocol is {ep.protocol}")
    elif not ep.model:
        raise ValueError("protocol openai: model: <the served model's name> is required")
    if ep.protocol == "torchserve" and "/predictions/" not in ep.url.split("?", 1)[0]:
        raise ValueError("protocol torchserve: the url must be the model's prediction URL, "
                         "http(s)://host:port/predictions/MODEL[/VERSION]")
    if ep.auth_env and ep.headers and ep.auth_header.lower() in {k.lower() for k in ep.headers}:
        raise ValueError(f"headers: {ep.auth_header} is the header auth_env fills; give one of them")
