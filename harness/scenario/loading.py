"""Reading scenario files: YAML, `--set` overrides, validation into a `Scenario` with one-line
errors naming the file, the key path (``victim.model.hidden[1]``) and what is allowed."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from harness.core.errors import ScenarioError
from harness.scenario.schema import Scenario, redact_url
from harness.scenario.yamlsafe import YamlRefused, load_yaml_bytes, load_yaml_text
from victims.http.secrets import clip, scrub


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before") or str(part).startswith(
            ("literal[", "list[", "function-")
        ):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "<top level>"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that holds the key at `loc` (for listing allowed keys)."""
    model: Any = Scenario
    for part in loc[:-1]:
        if isinstance(part, int) or not isinstance(part, str):
            continue
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            continue
        ann = fields[part].annotation
        model = unwrap_model(ann)
        if model is None:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def unwrap_model(ann: Any) -> Any:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()) or ():
        found = unwrap_model(arg)
        if found is not None:
            return found
    return None


def _describe(err: dict[str, Any], source: str) -> str:
    loc = tuple(p for p in err["loc"])
    # drop pydantic's union-branch tags, keep real keys and indices
    clean = tuple(p for p in loc if isinstance(p, int) or not str(p).startswith(("literal[",)))
    path = _format_loc(clean)
    value = err.get("input")
    if err["type"] == "extra_forbidden":
        parent = _model_at(clean)
        allowed = ", ".join(parent.model_fields) if parent else "see docs/contract.md"
        return f"{source}: {path}: unknown key; allowed keys here: {allowed}"
    if err["type"] == "missing":
        return f"{source}: {path}: required key is missing"
    msg = err["msg"].removeprefix("Value error, ")
    if not clean:  # a check across sections: its message names the keys itself
        return scrub(f"{source}: {msg}")
    if isinstance(value, str) and (path.endswith("url") or "://" in value):
        value = redact_url(value)  # never repeat credentials or a query string
    if isinstance(value, str) and len(value) > 80:
        value = clip(value, 77) + "..."  # scrubbed before it is cut
    shown = json.dumps(value) if isinstance(value, str | int | float | bool | None) else None
    got = f" (got {shown})" if shown is not None else ""
    if path == "<top level>" and re.match(r"^[a-z_]+(\.[a-z_]+)+: ", msg):
        return scrub(f"{source}: {msg}")  # a cross-field check names its own key path
    return scrub(" ".join(f"{source}: {path}: {msg}{got}".split()))


def _pick_error(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """Prefer the most specific error (longest path) that is not a union-branch mismatch."""
    best = [e for e in errors if e["type"] != "literal_error" or len(e["loc"]) > 1]
    pool = best or errors
    for e in pool:
        if e["type"] == "extra_forbidden":
            return e
    return max(pool, key=lambda e: len(e["loc"]))


def parse_value(text: str) -> Any:
    """Coerce a command-line value with YAML rules (numbers, booleans, null/none, lists)."""
    if text.strip().lower() == "none":
        return None
    try:
        value = load_yaml_text(text)
    except YamlRefused:
        return text
    if isinstance(value, str):  # YAML reads "1e3" as a string; users mean a number
        try:
            num = float(value)
        except ValueError:
            return value
        return int(num) if num.is_integer() and "e" in value.lower() else num
    return value


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``dotted.path=value`` overrides to raw scenario data; returns a new dict."""
    data = copy.deepcopy(data)
    for item in overrides or []:
        if "=" not in item:
            raise ScenarioError(f"--set {item}: expected dotted.path=value")
        key, _, raw = item.partition("=")
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ScenarioError(f"--set {item}: empty key")
        node = data
        for p in parts[:-1]:
            nxt = node.get(p) if isinstance(node, dict) else None
            if not isinstance(nxt, dict):
                nxt = {}
                node[p] = nxt
            node = nxt
        node[parts[-1]] = parse_value(raw)
        if node[parts[-1]] is None and len(parts) > 1:
            _section_off(data, parts)
    return data


def _section_off(data: dict[str, Any], parts: list[str]) -> None:
    """`none` means "section off", as in `--grid`: when nulling a key leaves its section invalid
    (`defenses.dp_sgd.epsilon=none`: DP-SGD needs a target) and the section is optional, the
    section itself is removed."""
    section, holder = _model_at(tuple(parts)), _model_at(tuple(parts[:-1]))
    if section is None or holder is None or parts[-2] not in holder.model_fields:
        return
    node = data
    for p in parts[:-2]:
        node = node[p]
    try:
        section.model_validate(node[parts[-2]])
    except ValidationError:
        field = holder.model_fields[parts[-2]]
        if not field.is_required() and field.default is None:
            node[parts[-2]] = None


def scenario_from_dict(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate raw data into a Scenario; raises ScenarioError with one line."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: the file must hold a mapping of keys, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_describe(_pick_error(exc.errors()), source)) from None


def read_raw(path: str | Path) -> dict[str, Any]:
    """Read the YAML of a scenario file (harness/scenario/yamlsafe.py: UTF-8, no duplicate keys,
    bounded aliases and depth); raises ScenarioError when unreadable or refused."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(f"{p}: scenario file not found")
    try:
        data = load_yaml_bytes(p.read_bytes())
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read the file ({exc.strerror})") from None
    except YamlRefused as exc:
        raise ScenarioError(f"{p}: {exc}") from None
    if data is None:
        raise ScenarioError(f"{p}: the file is empty")
    return data


def choose_auth_env(data: dict[str, Any], name: str | None, source: str) -> dict[str, Any]:
    """The command line's --auth-env NAME: the endpoint's token variable for this run, chosen by
    the person running it (a scenario names only LEAKMETER_* variables itself). Returns `data`."""
    if not name:
        return data
    ep = (data.get("victim") or {}).get("endpoint") if isinstance(data.get("victim"), dict) else None
    if not isinstance(ep, dict):
        raise ScenarioError(f"--auth-env {name}: {source} has no victim.endpoint to send a token to")
    ep["auth_env"] = name
    from victims.http.endpoint import allow_auth_env

    allow_auth_env(name)
    return data


def load_scenario(path: str | Path, overrides: list[str] | None = None,
                  auth_env: str | None = None) -> Scenario:
    """Load, override and validate a scenario file; paths inside it resolve from its folder.
    `auth_env`: the command line's --auth-env (see `choose_auth_env`)."""
    p = Path(path)
    data = choose_auth_env(apply_overrides(read_raw(p), overrides), auth_env, str(p))
    scenario = scenario_from_dict(data, str(p))
    _resolve_paths(scenario, p.parent)
    from harness.scenario.checks import preflight  # imports torch: after the threads are pinned

    preflight(scenario)
    return scenario


def _resolve_paths(s: Scenario, base: Path) -> None:
    m, d = s.victim.model, s.victim.data
    if m.path and not Path(m.path).is_absolute():
        m.path = str((base / m.path).resolve())
    if d.path and not Path(d.path).is_absolute():
        d.path = str((base / d.path).resolve())


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten nested dicts/lists into dotted keys (for MLflow params)."""
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(data, list) and data and any(isinstance(v, dict | list) for v in data):
        for i, v in enumerate(data):
            out.update(flatten(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = data
    return out
