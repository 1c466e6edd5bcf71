"""DP accounting: defenses/rdp.py's vectorised RDP series against Opacus' scalar loop.

    python benchmarks/accounting.py

One row per DP-SGD recipe (ε, δ, sample rate, epochs): the σ Opacus' `get_noise_multiplier`
picks and the CPU seconds it takes, the same for `defenses.rdp.noise_multiplier` (the σ must be
identical), and one RDP curve over the ReRo grid's 318 orders (harness/rero/accounting.py)
computed both ways, with the largest difference in one step's log A_α.
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RECIPES = [  # (ε, δ, q, epochs): the shipped DP scenarios' shapes and a sweep's corners
    (1.0, 1e-5, 0.1, 100), (8.0, 1e-5, 64 / 300, 10), (3.0, 1e-5, 0.01, 5), (8.0, 1e-5, 0.25, 3),
    (0.5, 1e-6, 0.05, 20), (50.0, 1e-5, 0.5, 1),
]


def _cpu(fn, *args, **kwargs):
    t = time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - t


def _opacus_curve(q, sigma, orders):
    import numpy as np
    from opacus.accountants.analysis.rdp import compute_rdp

    return np.array([compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=float(a)) for a in orders])


def main() -> None:
    import numpy as np
    from opacus.accountants.utils import get_noise_multiplier

    from defenses import rdp
    from harness.rero.accounting import rdp_orders

    warnings.simplefilter("ignore")
    get_noise_multiplier(target_epsilon=1.0, target_delta=1e-5, sample_rate=0.1, epochs=1)  # imports
    orders = rdp_orders()
    print("| ε | δ | q | epochs | σ Opacus | σ ours | same | search s Opacus | ours | ratio "
          "| curve s Opacus | ours | ratio | max Δ log A |")
    print("|" + "---|" * 14)
    for eps, delta, q, epochs in RECIPES:
        theirs, t_theirs = _cpu(get_noise_multiplier, target_epsilon=eps, target_delta=delta,
                                sample_rate=q, epochs=epochs, accountant="rdp")
        ours, t_ours = _cpu(rdp.noise_multiplier, eps, delta, q, epochs)
        c_theirs, ct = _cpu(_opacus_curve, q, theirs, orders)
        c_ours, co = _cpu(rdp.compute_rdp, q, theirs, 1, orders)
        fin = np.isfinite(c_theirs)
        gap = float(np.max(np.abs(c_ours[fin] - c_theirs[fin]) * (orders[fin] - 1)))
        print(f"| {eps:g} | {delta:g} | {q:.3g} | {epochs} | {theirs:.6g} | {ours:.6g} | "
              f"{'yes' if ours == theirs else 'NO'} | {t_theirs:.3f} | {t_ours:.3f} | "
              f"{t_theirs / max(t_ours, 1e-9):.1f}× | {ct:.3f} | {co:.4f} | {ct / max(co, 1e-9):.1f}× | "
              f"{gap:.1e} |")


if __name__ == "__main__":
    main()
