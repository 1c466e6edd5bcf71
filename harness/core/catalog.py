"""What `leakmeter attacks` lists, read from the attack modules' source without importing them
(importing them imports torch, SciPy and the scorers: seconds, for a list of names).

Every attack declares `name`, `family`, `needs`, `paper` and `summary` as literal class attributes
of a class decorated with `@register` (harness/attacks/base.py); tests check that this catalog
equals the registry's declarations, attack for attack.
"""

from __future__ import annotations

import ast
from pathlib import Path

FIELDS = ("name", "family", "needs", "paper", "summary")
ATTACKS = Path(__file__).resolve().parents[1] / "attacks"


def _literal(node: ast.expr) -> object:
    """A literal, or frozenset({...}) / set(...) of literals."""
    f = node.func if isinstance(node, ast.Call) else None
    if isinstance(f, ast.Name) and f.id in ("frozenset", "set"):
        return frozenset(ast.literal_eval(node.args[0])) if node.args else frozenset()
    return ast.literal_eval(node)


def _registered(cls: ast.ClassDef) -> bool:
    return any((isinstance(d, ast.Name) and d.id == "register")
               or (isinstance(d, ast.Attribute) and d.attr == "register") for d in cls.decorator_list)


def catalog() -> dict[str, dict[str, object]]:
    """{name: {name, family, needs (sorted list), paper, summary}} of every registered attack."""
    out: dict[str, dict[str, object]] = {}
    for path in sorted(ATTACKS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and _registered(n)):
            row: dict[str, object] = {"summary": ""}
            for stmt in cls.body:
                targets = ([t.id for t in stmt.targets if isinstance(t, ast.Name)]
                           if isinstance(stmt, ast.Assign) else
                           [stmt.target.id] if isinstance(stmt, ast.AnnAssign) and stmt.value is not None
                           and isinstance(stmt.target, ast.Name) else [])
                for t in targets:
                    if t in FIELDS:
                        row[t] = _literal(stmt.value)
            if "name" in row:
                row["needs"] = sorted(row.get("needs", ()))
                out[str(row["name"])] = row
    return dict(sorted(out.items()))
