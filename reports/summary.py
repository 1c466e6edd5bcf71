"""The short forms of a report: each attack's deciding figure (`headline`), and fitting a line to a
width (`fit`). Used by the terminal summary and report.md's findings table."""

from __future__ import annotations

from typing import Any

# (metric, label) in order of preference: the number a reader weighs an attack's risk by
HEADLINES = (("epsilon_lower", "ε ≥ {:.3g}", ("dp_audit",)),
             ("agreement", "agreement {:.3f}", ()), ("fidelity", "agreement {:.3f}", ()),
             ("success_rate", "success {:.2f}", ()), ("auc", "AUC {:.3f}", ()),
             ("prediction_kept", "kept {:.1%}", ()))


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v == v


def headline(attack: dict[str, Any]) -> str:
    """The one figure that decided an attack's risk, as a short phrase ("agreement 0.996",
    "AUC 0.583", "rank 32/32"); "" when it has none (skipped, crashed before measuring)."""
    m = attack.get("metrics") or {}
    for key, fmt, only in HEADLINES:
        if only and attack.get("name") not in only:
            continue
        if _num(m.get(key)):
            return fmt.format(m[key])
    if _num(m.get("recovered_rank")):
        of = f"/{int(m['true_rank'])}" if _num(m.get("true_rank")) else ""
        return f"rank {int(m['recovered_rank'])}{of}"
    return ""


def status_text(attack: dict[str, Any]) -> str:
    """`ok`, `incomplete/cap`, `skipped`, `error`: the status and what stopped it."""
    return str(attack.get("status") or "?") + (f"/{attack['stopped_by']}" if attack.get("stopped_by") else "")


def fit(text: str, width: int) -> str:
    """`text` on one line of at most `width` characters (cut with "…")."""
    text = " ".join(str(text).split())
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: max(width - 1, 0)].rstrip() + "…"
