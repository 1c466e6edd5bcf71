"""Pieces of the wire format the endpoint client speaks: request templates with "$inputs" /
"$explain" / "$auth" placeholders, dotted response paths, Retry-After, and how an endpoint is named in
messages (never with its credentials)."""

from __future__ import annotations

import email.utils
import time
from typing import Any
from urllib.parse import urlsplit

INPUTS_HEADER = "X-Leakmeter-Standardize"  # a leakmeter server's input scaling, on every answer


def display_url(url: str) -> str:
    """The endpoint as shown in messages: scheme, host, port and path (no userinfo, no query)."""
    try:
        p = urlsplit(url)
        port = f":{p.port}" if p.port else ""
    except ValueError:
        return "<unparseable URL>"
    host = p.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    return f"{p.scheme}://{host}{port}{p.path}"


def retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


INPUTS, EXPLAIN, AUTH = "$inputs", "$explain", "$auth"  # a template's placeholders


def fill(template: Any, inputs: list, explain: str | None, auth: str | None = None) -> Any:
    """The request template with "$inputs" / "$explain" / "$auth" replaced (recursively)."""
    if template == INPUTS:
        return inputs
    if template == EXPLAIN:
        return explain
    if template == AUTH:
        return auth
    if isinstance(template, dict):
        return {k: fill(v, inputs, explain, auth) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, inputs, explain, auth) for v in template]
    return template


def template_has(template: Any, token: str) -> bool:
    """Whether a placeholder appears anywhere in a template."""
    if template == token:
        return True
    if isinstance(template, dict):
        return any(template_has(v, token) for v in template.values())
    if isinstance(template, list):
        return any(template_has(v, token) for v in template)
    return False


def extract_path(body: Any, path: str) -> Any:
    """The value at a dotted path with [i] indices ("result.scores", "outputs[0]")."""
    node = body
    for part in path.replace("[", ".[").split("."):
        if not part:
            continue
        if part.startswith("[") and part.endswith("]"):
            if not isinstance(node, list):
                raise KeyError(path)
            node = node[int(part[1:-1])]
        else:
            if not isinstance(node, dict) or part not in node:
                raise KeyError(path)
            node = node[part]
    return node
