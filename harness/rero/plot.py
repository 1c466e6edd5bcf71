"""The γ-vs-ε figure: how the ReRo bound of the scenario's prior moves with the privacy budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from harness.rero import accounting, bounds


def sweep(kappa: float, p: accounting.Privacy, n: int = 5) -> dict[str, np.ndarray]:
    """γ of each bound kind for DP-SGD runs with the victim's (q, steps, δ) and noise multipliers
    around its own; returns {"epsilon": ε at δ by RDP, "<kind>": γ, ...} sorted by ε."""
    from opacus.accountants.analysis.rdp import get_privacy_spent

    orders = accounting.coarse_orders()
    sigmas = p.noise_multiplier * np.geomspace(0.5, 4.0, n)
    cols: dict[str, list[float]] = {k: [] for k in ("epsilon", "eps_delta_dp", "rdp", "zcdp", "profile")}
    for sg in sigmas:
        o, r = accounting.rdp_curve(float(sg), p.sample_rate, p.steps, orders)
        ok = np.isfinite(r)
        eps = float(get_privacy_spent(orders=o[ok], rdp=r[ok], delta=p.delta)[0])
        e, d = accounting.privacy_profile(float(sg), p.sample_rate, p.steps, 0.05, 1e-10)
        cols["epsilon"].append(eps)
        cols["eps_delta_dp"].append(bounds.gamma_eps_delta(kappa, eps, p.delta).gamma)
        cols["rdp"].append(bounds.gamma_rdp(kappa, o, r).gamma)
        cols["zcdp"].append(bounds.gamma_zcdp(kappa, accounting.zcdp_rho(float(sg), p.steps)).gamma)
        cols["profile"].append(bounds.gamma_profile(kappa, e, d).gamma)
    idx = np.argsort(cols["epsilon"])
    return {k: np.asarray(v)[idx] for k, v in cols.items()}


def gamma_vs_epsilon(ev: Any, p: accounting.Privacy | None, path: Path,
                     measured: list[dict[str, Any]] | None = None) -> Path:
    """Plot γ against ε for the prior evaluation `ev` (κ at one η); writes and returns `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    k = ev.kappa
    if p is not None and p.has_mechanism and p.delta:
        cols = sweep(k, p)
        for kind, style in (("eps_delta_dp", ":"), ("zcdp", "-."), ("rdp", "--"), ("profile", "-")):
            ax.plot(cols["epsilon"], cols[kind], style, marker=".", label=kind)
        ax.axvline(p.epsilon, color="grey", lw=0.8)
        ax.annotate(f"victim ε={p.epsilon:.3g}", (p.epsilon, 0.02), xycoords=("data", "axes fraction"),
                    rotation=90, fontsize=7, color="grey", ha="right")
        title = f"DP-SGD q={p.sample_rate:.3g}, {p.steps} steps, δ={p.delta:g} (σ varied)"
    else:
        eps = np.geomspace(0.05, 200.0, 80)
        ax.plot(eps, [bounds.gamma_eps_dp(k, e).gamma for e in eps], "-", label="ε-DP (Cor. 3)")
        ax.plot(eps, [bounds.gamma_eps_delta(k, e, 1e-5).gamma for e in eps], "--", label="(ε, 1e-5)-DP")
        title = "victim has no DP: γ = 1 (no guarantee); curves if it were ε-DP"
    bottom = max(min(k, 1.0) / 3, 1e-30)
    for m in measured or []:
        if m.get("ci_high") is not None and p is not None and p.epsilon is not None:
            # on a log axis a zero rate sits at the bottom edge; the bar spans the 95% CI
            y = max(m["measured"], bottom)
            lo = max(m.get("ci_low") or 0.0, bottom)
            ax.errorbar([p.epsilon], [y], yerr=[[y - lo], [max(0.0, m["ci_high"] - y)]], fmt="o",
                        color="red", capsize=3, label=f"measured: {m['attack']} ({m['measured']:.3g})")
    ax.axhline(max(k, 1e-300), color="black", lw=0.6, ls=":", label=f"κ = {k:.3g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylim(bottom, 1.5)
    eta = "" if ev.eta is None else f", η={ev.eta:.3g}"
    ax.set_title(f"ReRo γ vs ε — {ev.desc}{eta}\n{title}", fontsize=8)
    ax.set_xlabel("ε (at δ)" if p is not None else "ε")
    ax.set_ylabel("γ: bound on reconstruction success")
    ax.legend(fontsize=7)
    # fixed margins (this figure's size is fixed): tight_layout measures every text, ~0.05 s a run
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.11, top=0.88)
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


