"""Comparison plots (matplotlib, Agg, PNG) from a comparison dict (reports.compare) and curves.

ε is drawn as an ordered category axis: the finite values ascending, then "no DP", so cells
without DP sit at the right end instead of being dropped from a log axis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

RISK_COLOURS = {"low": "#1e8e3e", "medium": "#f29900", "high": "#d93025", None: "#888888"}
# What the step of each logged curve counts. Only curves over queries belong on a queries axis;
# the others (samples, epochs, optimisation steps, noise ratios) get their own plots.
CURVE_X = {"fidelity": "queries", "accuracy": "queries", "agreement": "queries",
           "recovered_rank_vs_samples": "gradient samples", "reconn_loss": "reconstructor epoch",
           "kkt_residual": "optimisation step", "obfuscation_kept_vs_ratio_pct": "noise-to-signal ratio (%)"}
# ReRo γ bounds reconstruction (and, through the DP game, membership) attacks only.
BOUNDED_FAMILIES = ("reconstruction", "membership")


def curve_x(key: str) -> str:
    """The x-axis label of a curve by its key ("attack/key" or "key"): what its step counts."""
    return CURVE_X.get(key.rsplit("/", 1)[-1], "step")


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
    """Each attack's success in [0, 1] against ε. The ReRo bound γ is drawn only in the panel of
    the attacks it bounds (reconstruction, membership); other families get their own panel."""
    cells = cmp["cells"]
    pts = [(c, n, a["success"], a.get("family")) for c in cells for n, a in c["attacks"].items()
           if a.get("success") is not None]
    gammas = [c for c in cells if c.get("rero_gamma") is not None]
    if not pts and not gammas:
        return None
    bounded = [p for p in pts if p[3] in BOUNDED_FAMILIES]
    others = [p for p in pts if p[3] not in BOUNDED_FAMILIES]
    panels = [("reconstruction attacks and the ReRo bound", bounded, True)] if bounded or gammas else []
    if others:
        panels.append(("other attacks (not bounded by ReRo γ)", others, False))
    plt = _plt()
    labels, pos = epsilon_axis(cells)
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4.2), dpi=100, squeeze=False)
    for ax, (title, sel_pts, with_gamma) in zip(axes[0], panels, strict=True):
        groups = list(dict.fromkeys((n, _others(cmp, c)) for c, n, _, _ in sel_pts))
        for gi, (n, other) in enumerate(groups):
            sel = sorted([(_x(pos, c), s) for c, nn, s, _ in sel_pts if nn == n and _others(cmp, c) == other])
            ax.plot([x for x, _ in sel], [s for _, s in sel], marker="os^Dv"[gi % 5], label=f"{n} ({other})")
        if with_gamma and gammas:
            gsel: dict[int, float] = {}
            for c in gammas:
                x = _x(pos, c)
                gsel[x] = max(gsel.get(x, 0.0), c["rero_gamma"])
            xs = sorted(gsel)
            ax.plot(xs, [gsel[x] for x in xs], "k--", lw=2,
                    label="ReRo γ: bound on any reconstruction attack")
        ax.set_xticks(range(len(labels)), labels)
        ax.set_ylim(-0.03, 1.05)
        ax.set_xlabel("ε (DP-SGD)")
        ax.set_ylabel("attack success (fraction of goal)")
        ax.set_title(f"Attack success vs ε: {title}", fontsize=9)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return _write_png(plt, fig, path)


def curves_vs_queries(curves: dict[str, dict[str, list]], path: str | Path,
                      prefer: tuple[str, ...] = ("fidelity", "agreement")) -> Path | None:
    """Curves {cell label: {"attack/key": [(queries, value), ...]}} whose step counts queries,
    the fidelity-like ones if any; one line per cell and key. None when there are none."""
    flat = [(lab, k, pts) for lab, d in curves.items() for k, pts in d.items()
            if len(pts) > 1 and curve_x(k) == "queries"]
    if not flat:
        return None
    chosen = [t for t in flat if t[1].rsplit("/", 1)[-1] in prefer] or flat
    return _curve_plot(chosen, path, "queries", "Attack progress vs queries, per cell")


def other_curves(curves: dict[str, dict[str, list]], outdir: str | Path) -> list[Path]:
    """One plot per curve key whose step is not queries (rank vs samples, loss vs epoch, ...),
    with its own x axis; files `curve_<key>.png`."""
    by_key: dict[str, list] = {}
    for lab, d in curves.items():
        for k, pts in d.items():
            if len(pts) > 1 and curve_x(k) != "queries":
                by_key.setdefault(k, []).append((lab, k, pts))
    out = []
    for k, chosen in by_key.items():
        name = "curve_" + "".join(ch if ch.isalnum() else "_" for ch in k) + ".png"
        out.append(_curve_plot(chosen, Path(outdir) / name, curve_x(k), f"{k} per cell"))
    return out


def _curve_plot(chosen: list, path: str | Path, xlabel: str, title: str) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    for lab, k, pts in chosen:
        pts = sorted((float(s), float(v)) for s, v in pts)
        ax.plot([s for s, _ in pts], [v for _, v in pts], marker=".", label=f"{k} — {lab}")
    xs = [s for _, _, pts in chosen for s, _ in pts]
    if xs and min(xs) > 0 and max(xs) / min(xs) > 50:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(", ".join(sorted({k.rsplit('/', 1)[-1] for _, k, _ in chosen}))[:60])
    ax.set_title(title, fontsize=9)
    return _save(plt, fig, ax, path, legend_size=6)


def all_plots(cmp: dict[str, Any], curves: dict[str, dict[str, list]], outdir: str | Path) -> list[Path]:
    """Write every plot that has data into `outdir`; returns the files written."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    made = [utility_vs_epsilon(cmp, out / "utility_vs_epsilon.png"),
            success_vs_epsilon(cmp, out / "attack_success_vs_epsilon.png"),
            curves_vs_queries(curves, out / "fidelity_vs_queries.png"), *other_curves(curves, out)]
    return [p for p in made if p is not None]


def _save(plt, fig, ax, path: str | Path, legend_size: int, title: str | None = None) -> Path:
    """Grid, legend, layout; write the PNG, close the figure; returns its path."""
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size, title=title, title_fontsize=legend_size)
    fig.tight_layout()
    return _write_png(plt, fig, path)


def _write_png(plt, fig, path: str | Path) -> Path:
    """Save the figure as PNG with what each panel shows (title, axis labels, series) read back
    from the axes into the PNG's Description text chunk, so a reader (or a test) can check the
    labels without looking at pixels; close the figure."""
    import json

    panels = [{"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
               "series": ax.get_legend_handles_labels()[1]} for ax in fig.axes]
    p = Path(path)
    fig.savefig(p, metadata={"Description": json.dumps(panels, ensure_ascii=False)})
    plt.close(fig)
    return p


def png_description(path: str | Path) -> list[dict[str, Any]]:
    """The panels a plot written here describes (see `_write_png`), read from the PNG file."""
    import json
    import struct
    import zlib

    data = Path(path).read_bytes()
    pos = 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind in (b"tEXt", b"zTXt", b"iTXt"):
            key, _, rest = body.partition(b"\0")
            if key != b"Description":
                continue
            if kind == b"tEXt":
                return json.loads(rest.decode("latin-1"))
            if kind == b"zTXt":
                return json.loads(zlib.decompress(rest[1:]).decode("latin-1"))
            flag, rest = rest[0], rest[2:]
            _lang, _, rest = rest.partition(b"\0")
            _tkey, _, text = rest.partition(b"\0")
            return json.loads((zlib.decompress(text) if flag else text).decode("utf-8"))
    return []
