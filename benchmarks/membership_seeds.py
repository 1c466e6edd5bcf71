"""Is a membership judgment stable under a re-draw of the victim? The shipped DP scenarios'
membership attacks (scenarios/dp-audit-digits.yaml: mia_loss; scenarios/dp-digits-rero.yaml:
mia_loss, mia_rmia) run with the victim trained from seeds 0, 1, 2 (`--seeds`); the table shows
per seed the AUC with its 95% interval, the one-sided Mann–Whitney p, the likelihood-ratio bound
and the risk (harness/attacks/membership/common.py: medium needs p < 1.7e-5 or lr_low ≥ 2).

    python benchmarks/membership_seeds.py [--seeds 0 1 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LEAKMETER_PROGRESS", "0")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = [("dp-audit-digits", ["mia_loss"]), ("dp-digits-rero", ["mia_loss", "mia_rmia"])]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    from harness.core.threads import pin_threads

    pin_threads(args.threads)
    from harness.run.runner import run_scenario
    from harness.scenario import load_scenario

    out = Path(tempfile.mkdtemp(prefix="leakmeter-seeds-"))
    print(f"# membership judgments under a re-draw of the victim (device {args.device}, "
          f"{args.threads} threads)")
    print(f"{'scenario':18s} {'attack':9s} {'seed':>4s} {'auc':>7s} {'auc 95% interval':>17s} "
          f"{'mw_p':>9s} {'lr_low':>7s} {'risk':>7s} {'s':>6s}")
    for name, attacks in CASES:
        for seed in args.seeds:
            sets = [f"seed={seed}", "attacks=[" + ", ".join(f"{{name: {a}}}" for a in attacks) + "]"]
            s = load_scenario(ROOT / "scenarios" / f"{name}.yaml", sets)
            s.device, s.tracking.enabled = args.device, False
            t0 = time.perf_counter()
            rep = run_scenario(s, out=out / f"{name}-{seed}")
            dt = time.perf_counter() - t0
            for e in rep["attacks"]:
                m = e.get("metrics") or {}
                nan = float("nan")
                ci = f"[{m.get('auc_ci_low', nan):.3f}, {m.get('auc_ci_high', nan):.3f}]"
                print(f"{name:18s} {e['name']:9s} {seed:4d} {m.get('auc', nan):7.4f} {ci:>17s} "
                      f"{m.get('mannwhitney_p', float('nan')):9.2g} {m.get('lr_low', float('nan')):7.2f} "
                      f"{str(e.get('risk')):>7s} {dt:6.1f}", flush=True)


if __name__ == "__main__":
    main()
