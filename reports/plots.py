"""Comparison plots (matplotlib, Agg, PNG) from a comparison dict (reports.compare) and curves.

ε is drawn as an ordered category axis: the finite values ascending, then "no DP", so cells
without DP sit at the right end instead of being dropped from a log axis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

RISK_COLOURS = {"low": "#1e8e3e", "medium": "#f29900", "high": "#d93025", None: "#888888"}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _eps_label(e: float | None) -> str:
    return "no DP" if e is None else f"{e:.3g}"


def epsilon_axis(cells: list[dict[str, Any]]) -> tuple[list[str], dict[str, int]]:
    """(tick labels, label → x position): finite ε ascending, then "no DP"."""
    finite = sorted({round(c["epsilon"], 6) for c in cells if c["epsilon"] is not None})
    labels = [_eps_label(e) for e in finite]
    labels = list(dict.fromkeys(labels))
    if any(c["epsilon"] is None for c in cells):
        labels.append("no DP")
    return labels, {lab: i for i, lab in enumerate(labels)}


def _x(pos: dict[str, int], c: dict[str, Any]) -> int:
    return pos[_eps_label(None if c["epsilon"] is None else round(c["epsilon"], 6))]


def _others(cmp: dict[str, Any], c: dict[str, Any]) -> str:
    """The cell's settings other than the ε key (the series a point belongs to)."""
    keys = [k for k in cmp["keys"] if "epsilon" not in k and "dp_sgd" not in k]
    from reports.compare import label_of, short_keys

    names = short_keys(list(cmp["keys"]))
    return label_of({k: c["settings"].get(k) for k in keys}, names) if keys else "all"


def utility_vs_epsilon(cmp: dict[str, Any], path: str | Path) -> Path | None:
    """Utility against ε, one marker per series of other settings, coloured by worst risk."""
    cells = [c for c in cmp["cells"] if c["utility"] is not None]
    if not cells:
        return None
    plt = _plt()
    labels, pos = epsilon_axis(cells)
    series = list(dict.fromkeys(_others(cmp, c) for c in cells))
    markers = "os^DvP*X"
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    width = 0.35
    for si, name in enumerate(series):
        pts = [c for c in cells if _others(cmp, c) == name]
        off = (si - (len(series) - 1) / 2) * (width / max(1, len(series) - 1) if len(series) > 1 else 0)
        xs = [pos[_eps_label(None if c["epsilon"] is None else round(c["epsilon"], 6))] + off for c in pts]
        ax.plot(xs, [c["utility"] for c in pts], color="#bbbbbb", lw=0.8, zorder=1)
        ax.scatter(xs, [c["utility"] for c in pts], c=[RISK_COLOURS.get(c["risk"], "#888") for c in pts],
                   marker=markers[si % len(markers)], s=70, edgecolors="black", zorder=2, label=name)
    rec = (cmp.get("recommended") or {}).get("label")
    for c in cells:
        if c["label"] == rec:
            si = series.index(_others(cmp, c))
            off = (si - (len(series) - 1) / 2) * (width / max(1, len(series) - 1) if len(series) > 1 else 0)
            x = pos[_eps_label(None if c["epsilon"] is None else round(c["epsilon"], 6))] + off
            ax.scatter([x], [c["utility"]], s=260, facecolors="none", edgecolors="#1a73e8", lw=2, zorder=3)
            ax.annotate("recommended", (x, c["utility"]), textcoords="offset points", xytext=(8, -14),
                        color="#1a73e8", fontsize=8)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel("ε (DP-SGD)")
    ax.set_ylabel("utility (test accuracy)")
    ax.set_title("Utility vs ε; colour = worst risk (green low, orange medium, red high)", fontsize=9)
    return _save(plt, fig, ax, path, legend_size=7, title="other settings (marker)")


def success_vs_epsilon(cmp: dict[str, Any], path: str | Path) -> Path | None:
    """Each attack's success in [0, 1] against ε, with the ReRo bound γ drawn over it when known."""
    cells = cmp["cells"]
    pts = [(c, n, a["success"]) for c in cells for n, a in c["attacks"].items()
           if a.get("success") is not None]
    gammas = [c for c in cells if c.get("rero_gamma") is not None]
    if not pts and not gammas:
        return None
    plt = _plt()
    labels, pos = epsilon_axis(cells)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    groups = list(dict.fromkeys((n, _others(cmp, c)) for c, n, _ in pts))
    for gi, (n, other) in enumerate(groups):
        sel = sorted([(_x(pos, c), s, c["risk"]) for c, nn, s in pts
                      if nn == n and _others(cmp, c) == other])
        xs = [x for x, _, _ in sel]
        ax.plot(xs, [s for _, s, _ in sel], marker="os^Dv"[gi % 5], label=f"{n} ({other})")
    if gammas:
        gsel = {}
        for c in gammas:
            x = pos[_eps_label(None if c["epsilon"] is None else round(c["epsilon"], 6))]
            gsel[x] = max(gsel.get(x, 0.0), c["rero_gamma"])
        xs = sorted(gsel)
        ax.plot(xs, [gsel[x] for x in xs], "k--", lw=2, label="ReRo γ: bound on any reconstruction attack")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylim(-0.03, 1.05)
    ax.set_xlabel("ε (DP-SGD)")
    ax.set_ylabel("attack success (fraction of goal)")
    ax.set_title("Attack success vs ε" + (" with the ReRo bound" if gammas else ""), fontsize=9)
    return _save(plt, fig, ax, path, legend_size=7)


def curves_vs_queries(curves: dict[str, dict[str, list]], path: str | Path,
                      prefer: tuple[str, ...] = ("fidelity", "agreement")) -> Path | None:
    """Curves {cell label: {"attack/key": [(queries, value), ...]}}: the fidelity-like ones if any,
    else every curve; one line per cell and key. None when there are no curves."""
    flat = [(lab, k, pts) for lab, d in curves.items() for k, pts in d.items() if len(pts) > 1]
    if not flat:
        return None
    chosen = [t for t in flat if any(p in t[1] for p in prefer)] or flat
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    for lab, k, pts in chosen:
        pts = sorted((float(s), float(v)) for s, v in pts)
        ax.plot([s for s, _ in pts], [v for _, v in pts], marker=".", label=f"{k} — {lab}")
    xs = [s for _, _, pts in chosen for s, _ in pts]
    if xs and min(xs) > 0 and max(xs) / min(xs) > 50:
        ax.set_xscale("log")
    ax.set_xlabel("queries")
    ax.set_ylabel(", ".join(sorted({k.rsplit('/', 1)[-1] for _, k, _ in chosen}))[:60])
    ax.set_title("Attack progress vs queries, per cell", fontsize=9)
    return _save(plt, fig, ax, path, legend_size=6)


def all_plots(cmp: dict[str, Any], curves: dict[str, dict[str, list]], outdir: str | Path) -> list[Path]:
    """Write every plot that has data into `outdir`; returns the files written."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    made = [utility_vs_epsilon(cmp, out / "utility_vs_epsilon.png"),
            success_vs_epsilon(cmp, out / "attack_success_vs_epsilon.png"),
            curves_vs_queries(curves, out / "fidelity_vs_queries.png")]
    return [p for p in made if p is not None]


def _save(plt, fig, ax, path: str | Path, legend_size: int, title: str | None = None) -> Path:
    """Grid, legend, layout; write the PNG, close the figure; returns its path."""
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size, title=title, title_fontsize=legend_size)
    fig.tight_layout()
    p = Path(path)
    fig.savefig(p)
    plt.close(fig)
    return p
