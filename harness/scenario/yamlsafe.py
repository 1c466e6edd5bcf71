"""Reading YAML that a stranger may have written: UTF-8 only, PyYAML's safe constructors only, no
duplicate keys, anchors and aliases only within a small expansion budget (no billion laughs, no
recursive structures), and no deeper nesting than a scenario can use.

Each refusal is a `YamlRefused` with a one-line reason and, where there is one, the line number.
"""

from __future__ import annotations

from typing import Any

import yaml

from victims.http.secrets import clip

MAX_BYTES = 1024 * 1024  # a scenario file is a few KB
MAX_DEPTH = 32  # the schema nests ~6 levels; a request template a few more
MAX_NODES = 20_000  # nodes after expanding every alias
MAX_ALIASES = 100  # alias uses in one document


class YamlRefused(ValueError):
    """The YAML is refused; the message says why (and where)."""


def _where(node: Any) -> str:
    mark = getattr(node, "start_mark", None)
    return f" at line {mark.line + 1}" if mark is not None else ""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise YamlRefused(f"merge keys (<<) are not allowed{_where(key_node)}")
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)  # a set key compares as a frozenset but cannot be stored
                    duplicate = key in seen
                except TypeError:
                    raise YamlRefused(f"a mapping key must be a plain value{_where(key_node)}") from None
                if duplicate:
                    raise YamlRefused(f"duplicate key {clip(str(key), 60)!r}{_where(key_node)}")
                seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        """PyYAML's constructors raise plain ValueError / TypeError / OverflowError on values they
        cannot build (`2001-13-45`, `!!float abc`, an integer over 4300 digits): refused here,
        naming the line and the value."""
        try:
            return super().construct_object(node, deep=deep)
        except YamlRefused:
            raise
        except (ValueError, TypeError, OverflowError) as exc:
            kind = str(getattr(node, "tag", "")).rsplit(":", 1)[-1] or "value"
            value = getattr(node, "value", "")
            shown = f" {clip(value, 40)!r}" if isinstance(value, str) else ""
            raise YamlRefused(f"cannot read{shown} as !!{kind}{_where(node)} "
                              f"({clip(str(exc).splitlines()[0], 80)})") from None

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases = getattr(self, "_aliases", 0) + 1
            if self._aliases > MAX_ALIASES:
                raise YamlRefused(f"more than {MAX_ALIASES} aliases (*name){_where(self.peek_event())}")
        return super().compose_node(parent, index)


def _check_shape(root: Any) -> None:
    """Refuse recursive aliases, expanded size over MAX_NODES and depth over MAX_DEPTH."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    active: set[int] = set()

    def visit(node: Any) -> tuple[int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key], depths[key]
        if key in active:
            raise YamlRefused(f"a recursive alias (a structure that contains itself){_where(node)}")
        if len(active) > MAX_DEPTH:
            raise YamlRefused(f"nested deeper than {MAX_DEPTH} levels{_where(node)}")
        active.add(key)
        size, depth = 1, 1
        children: list[Any] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        for child in children:
            s, d = visit(child)
            size += s
            depth = max(depth, d + 1)
            if size > MAX_NODES:
                raise YamlRefused(f"expands to more than {MAX_NODES} values (aliases expanded)"
                                  f"{_where(node)}")
        active.discard(key)
        sizes[key], depths[key] = size, depth
        return size, depth

    visit(root)


def load_yaml_bytes(raw: bytes) -> Any:
    """Parse one YAML document from bytes; YamlRefused on anything unsafe or malformed."""
    if len(raw) > MAX_BYTES:
        raise YamlRefused(f"the file is {len(raw)} bytes; a scenario is at most {MAX_BYTES}")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise YamlRefused(f"not UTF-8 text (invalid byte at offset {exc.start})") from None
    return load_yaml_text(text)


def load_yaml_text(text: str) -> Any:
    """Parse one YAML document from text; YamlRefused on anything unsafe or malformed."""
    try:
        loader = _StrictLoader(text)  # the reader refuses control characters here
    except yaml.YAMLError as exc:
        raise YamlRefused(f"not valid YAML: {_problem(exc)}") from None
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_shape(root)
        return loader.construct_document(root)
    except YamlRefused:
        raise
    except RecursionError:
        raise YamlRefused(f"nested deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise YamlRefused(f"not valid YAML{where}: {_problem(exc)}") from None
    finally:
        loader.dispose()


def _problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):  # a control character (NUL, ...) in the text
        return f"character #x{exc.character:04x} at position {exc.position} is not allowed"
    return getattr(exc, "problem", None) or "syntax error"
