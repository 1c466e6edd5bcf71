"""The layout rules of docs/architecture.md, checked on the source: imports point one way
(harness → victims → defenses; reports imports nothing of ours), no import cycle between modules,
and no source file over 500 lines."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "victims", "defenses", "reports")
# what each package may import of ours (besides itself)
ALLOWED = {"harness": {"victims", "defenses", "reports"}, "victims": {"defenses"},
           "defenses": set(), "reports": set()}
MAX_LINES = 500
# the rooms of harness/, top floor first: a module imports its own room or rooms on lower floors
# (docs/architecture.md). Jobs (cli; sweep, scan, init) → the run pipeline → attacks (plug-ins) →
# their machinery → what the attacker builds, scoring, ReRo → the scenario → core.
FLOORS = [("harness.cli",), ("harness.sweep", "harness.scan", "harness.init"), ("harness.run",),
          ("harness.attacks",), ("harness.attacks.extraction.cryptanalysis",),
          ("harness.attacker", "harness.scoring", "harness.rero"), ("harness.scenario",), ("harness.core",)]
# machinery may use the attack package's shared base and gradient helpers, never a plug-in
MACHINERY_MAY_USE = {"harness.attacks", "harness.attacks.base"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = p.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = p
    return out


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Every module of ours that `path` imports, at any depth of the file (function bodies too)."""
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(p, m, mods) for m, p in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_modules():
    assert _cycles(_graph()) == []


def test_imports_point_one_way():
    bad = []
    for mod, deps in _graph().items():
        top = mod.split(".")[0]
        for d in deps:
            other = d.split(".")[0]
            if other != top and other not in ALLOWED[top]:
                bad.append(f"{mod} imports {d}")
    assert bad == []


def _room(mod: str) -> str | None:
    rooms = [r for floor in FLOORS for r in floor if mod == r or mod.startswith(r + ".")]
    return max(rooms, key=len) if rooms else None


def _floor(room: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if room in floor)


def test_every_harness_module_is_in_a_room():
    loose = [m for m in _modules() if m.startswith("harness.") and _room(m) is None]
    assert loose == []


def test_harness_rooms_import_downwards():
    bad = []
    for mod, deps in _graph().items():
        here = _room(mod)
        if here is None:
            continue
        for d in deps:
            there = _room(d)
            if there is None or there == here:
                continue
            if here == "harness.attacks.extraction.cryptanalysis" and d in MACHINERY_MAY_USE:
                continue
            if _floor(there) <= _floor(here):
                bad.append(f"{mod} ({here}) imports {d} ({there})")
    assert bad == []


def test_the_room_rule_sees_an_upward_import():
    """The rule above can fail: scoring importing an attack is an upward arrow."""
    assert _floor(_room("harness.attacks.extraction.surrogate")) < _floor(_room("harness.scoring.model"))
    assert _room("harness.attacks.extraction.cryptanalysis.relu_lines") == \
        "harness.attacks.extraction.cryptanalysis"


@functools.cache
def _defined(path: Path) -> set[str]:
    """The names a module defines or imports at its top level (what `from it import name` finds);
    parsed once per module, however many modules import from it."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If | ast.Try):  # TYPE_CHECKING blocks, optional imports
            names |= {(a.asname or a.name).split(".")[0] for n in ast.walk(node)
                      if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}
    return names


def test_every_name_imported_from_our_modules_exists():
    """`from harness.x import y` anywhere (function bodies too) names something x defines, or a
    submodule: a moved function is caught here, not when the line first runs."""
    mods = _modules()
    missing = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level or node.module not in mods:
                continue
            have = _defined(mods[node.module])
            missing += [f"{name}: from {node.module} import {a.name}" for a in node.names
                        if a.name != "*" and a.name not in have and f"{node.module}.{a.name}" not in mods]
    assert missing == []


def test_no_source_file_over_500_lines():
    long = [f"{p.relative_to(ROOT)}: {n}" for p in _modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    long += [f"{p.relative_to(ROOT)}: {n}" for folder in ("tests", "benchmarks")
             for p in (ROOT / folder).rglob("*.py")
             if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert long == []


@pytest.mark.parametrize("source, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_cycle_finder_finds_a_planted_cycle(source, expected):
    assert _cycles(source) == expected


def test_import_walker_sees_function_level_and_relative_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from victims.http import client\n    from . import sibling\n")
    mods = {"harness.x.m": f, "victims.http.client": f, "harness.x.sibling": f}
    assert _imports(f, "harness.x.m", mods) == {"victims.http.client", "harness.x.sibling"}
