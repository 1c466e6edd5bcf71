"""Checks the scenario schema shares: the ranges it allows, strict numbers (true/false is never a
number), endpoint URLs, request templates and attack parameters of bounded size, and file paths.

Messages never repeat a URL's credentials or query string."""

from __future__ import annotations

import re
import types
import typing
from typing import Any
from urllib.parse import urlsplit

MAX_WIDTH = 1_000_000  # features or units of one layer (memory is checked separately)
MAX_COUNT = 10_000_000  # rows of a dataset split
MAX_TEMPLATE_DEPTH = 16
MAX_TEMPLATE_NODES = 2_000
# output classes of the datasets whose class count is known before loading them
KNOWN_CLASSES = {"digits": 10, "breast_cancer": 2, "fashion_mnist": 10, "gaussian": 10}
_CONTROL = re.compile(r"[\x00-\x20\x7f]")


def _accepts(annotation: Any, kind: type) -> bool:
    """Whether a field annotation accepts values of `kind` (looking inside unions and lists)."""
    if annotation is kind:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _accepts(typing.get_args(annotation)[0], kind)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(a, kind) for a in typing.get_args(annotation))
    return False


def _numeric(annotation: Any) -> bool:
    return _accepts(annotation, int) or _accepts(annotation, float)


def _item_type(annotation: Any) -> Any:
    """The element type of a list annotation (inside an Optional or union), or None."""
    origin = typing.get_origin(annotation)
    if origin is list:
        return typing.get_args(annotation)[0]
    if origin in (typing.Union, types.UnionType):
        for a in typing.get_args(annotation):
            found = _item_type(a)
            if found is not None:
                return found
    return None


def no_bool_for_numbers(value: Any, annotation: Any) -> Any:
    """`value` unchanged, or ValueError when true/false is given where only numbers are allowed
    (YAML's `true` would otherwise count as 1)."""
    if isinstance(value, bool) and _numeric(annotation) and not _accepts(annotation, bool):
        raise ValueError("must be a number, not true/false")
    if isinstance(value, list):
        item = _item_type(annotation)
        if item is not None and _numeric(item) and not _accepts(item, bool) and \
                any(isinstance(v, bool) for v in value):
            raise ValueError("must be a list of numbers, not true/false")
    return value


def check_url(url: str) -> str:
    """An http(s) URL with a host and a valid port, no whitespace or control characters;
    ValueError naming what is wrong (never the credentials or query it may carry)."""
    if _CONTROL.search(url) or len(url) > 4096:
        raise ValueError("must be an http(s) URL without spaces or control characters")
    try:
        p = urlsplit(url)
        port = p.port
    except ValueError:
        raise ValueError("must be an http(s) URL with a valid host and a port in 1-65535") from None
    if p.scheme not in ("http", "https"):
        raise ValueError("must start with http:// or https://")
    if not p.hostname:
        raise ValueError("must name a host (http(s)://host[:port]/path)")
    if port == 0:
        raise ValueError("the port must be in 1-65535")
    return url


def check_template(value: dict[str, Any] | None, what: str = "request_template") -> dict[str, Any] | None:
    """A JSON-like template of bounded depth and size (aliases in YAML can make huge ones)."""
    if value is None:
        return value
    count = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_TEMPLATE_NODES:
            raise ValueError(f"the {what} has more than {MAX_TEMPLATE_NODES} values")
        if depth > MAX_TEMPLATE_DEPTH:
            raise ValueError(f"the {what} is nested deeper than {MAX_TEMPLATE_DEPTH} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
        elif isinstance(node, str) and len(node) > 10_000:
            raise ValueError(f"a string in the {what} is longer than 10000 characters")
    return value


# template keys whose values are credentials: such a value comes from the environment ("$auth")
_CREDENTIAL_KEY = re.compile(
    r"(?i)(api[_-]?key|apikey|subscription[_-]?key|access[_-]?key|secret|token|passw(or)?d|pwd|"
    r"authorization|^auth$|credential|signature|^sig$|bearer|jwt|session[_-]?id|^key$)")
PLACEHOLDERS = ("$inputs", "$explain", "$auth")


def check_template_secrets(value: Any, path: str = "") -> None:
    """ValueError when a request template writes a credential into the scenario: a string under a
    credential-named key (api_key, token, subscription-key, ...) other than the "$auth"
    placeholder, which is filled from the environment (auth_env). Scenarios are logged, reported
    and shared; a secret in one travels with it."""
    if isinstance(value, dict):
        for k, v in value.items():
            where = f"{path}.{k}" if path else str(k)
            if _CREDENTIAL_KEY.search(str(k)) and isinstance(v, str | int | float) and \
                    not isinstance(v, bool) and v not in PLACEHOLDERS:
                raise ValueError(f"{where} holds a credential written into the scenario (value not shown); "
                                 'write "$auth" there and put the secret in the environment variable '
                                 "auth_env names")
            check_template_secrets(v, where)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_template_secrets(v, f"{path}[{i}]")




def check_path_text(path: str | None) -> str | None:
    """A file path that the OS can take (no NUL byte, bounded length)."""
    if path is not None and ("\x00" in path or not path.strip() or len(path) > 4096):
        raise ValueError("must be a file path (non-empty, no NUL character, at most 4096 characters)")
    return path


LM_MAX_VOCAB = 1_000_000  # token ids of an `arch: lm` victim or an openai endpoint
LM_MAX_CONTEXT = 8192
LM_MAX_PARAMS = 2_000_000_000  # parameters an `arch: lm` victim may have (4 bytes each in float32)


def check_lm_shape(spec: Any) -> None:
    """An `arch: lm` model's shape: a vocabulary, one width divisible by the heads, and a size the
    machine can hold. ValueError naming the key otherwise."""
    if spec.vocab is None:
        raise ValueError("arch: lm needs vocab: <vocabulary size>")
    if len(spec.hidden) != 1:
        raise ValueError(f"arch: lm takes one width (hidden: 128), got {spec.hidden}")
    h = spec.hidden[0]
    if h % spec.heads:
        raise ValueError(f"arch: lm: hidden {h} is not divisible by heads {spec.heads}")
    params = 2 * spec.vocab * h + spec.context * h + spec.layers * 12 * h * h
    if params > LM_MAX_PARAMS:
        raise ValueError(f"arch: lm with vocab {spec.vocab}, hidden {h}, layers {spec.layers} has about "
                         f"{params:.3g} parameters (allowed: up to {LM_MAX_PARAMS:.0e})")
