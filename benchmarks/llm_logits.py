"""What an LLM's logprob API gives away: `logit_subspace` (Carlini et al. 2024, Finlayson et al.
2024) on small decoder-only LMs built here (random init), per vocabulary × width × API setting.

    python benchmarks/llm_logits.py [--vocab 2048 4096] [--hidden 64 128] [--settings ...]
                                    [--gpt2] [--layers 1]

Each row: is the width right (against the rank of the victim's own centred final layer), the
layer's relative error after the least-squares h×h alignment, the answers' precision (the noise's
share of the recovered layer, `precision_rel_error`: the error target is within 2× of it),
queries, the target bound (⌈(V−1)/(K−1)⌉·(h+64) with top-K + bias, h+64 with full vectors),
status / stop and wall time. `--gpt2` adds GPT-2 small's output shape (vocab 50257, width 768,
random init, full logprobs) on the CPU; `--layers` sets the blocks under the final layer (the
attack sees only the final layer; blocks cost answer time only).
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LEAKMETER_THREADS", "2")

import harness  # noqa: E402,F401
from defenses.output import OutputDefenses  # noqa: E402
from harness.attacks import registry  # noqa: E402
from harness.core.oracle import Oracle  # noqa: E402
from harness.run.runner import Planned, run_attack  # noqa: E402
from harness.scenario import scenario_from_dict  # noqa: E402
from reports.tracking import Tracker  # noqa: E402
from victims.build import build_victim  # noqa: E402

SETTINGS = {
    "full": ({}, {}),
    "top5+bias": ({"top_logprobs": 5}, {}),
    "top20+bias": ({"top_logprobs": 20}, {}),
    "argmax+bias": ({"top_logprobs": 0}, {}),
    "top5-no-bias": ({"top_logprobs": 5, "logit_bias": False}, {}),
    "top5-raw-logprobs": ({"top_logprobs": 5, "logprobs_mode": "raw"}, {}),
    "noise1e-4": ({}, {"output_noise": {"sigma": 1e-4}}),
    "noise1e-2": ({}, {"output_noise": {"sigma": 1e-2}}),
    "round2": ({}, {"rounding": {"decimals": 2}}),
    "round6": ({}, {"rounding": {"decimals": 6}}),
}
CLEAN = ("full", "top5+bias", "top20+bias", "argmax+bias", "round6")


def bound(setting: str, iface: dict, vocab: int, h: int) -> int | None:
    k = iface.get("top_logprobs")
    if setting.startswith("noise") or setting == "round2" or not iface.get("logit_bias", True) and k:
        return None
    if k is None:
        return h + 64
    if k >= 2 and iface.get("logprobs_mode") != "raw":
        return math.ceil((vocab - 1) / (k - 1)) * (h + 64)
    return None


def one(vocab: int, h: int, setting: str, layers: int, heads: int, seed: int) -> dict:
    iface, defenses = SETTINGS[setting]
    s = scenario_from_dict({
        "name": "bench", "seed": seed, "device": "cpu",
        "victim": {"model": {"arch": "lm", "vocab": vocab, "hidden": h, "layers": layers, "heads": heads,
                             "context": 16}},
        "interface": {"output": "logprobs", **iface}, "defenses": defenses})
    v = build_victim(s)
    oracle = Oracle(v.backend, v.info, OutputDefenses.from_spec(s.defenses), None, seed)
    cls = registry()["logit_subspace"]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        e = run_attack(Planned(cls(), cls.Params()), oracle, v, s, Path(tmp), Tracker(None, "x", False),
                       None)
    m = e["metrics"]
    return {"vocab": vocab, "h": h, "setting": setting, "width": m.get("hidden_dim"),
            "true": m.get("hidden_dim_true"), "err": m.get("final_layer_rel_error"),
            "prec": m.get("precision_rel_error"), "queries": e["queries"],
            "bound": bound(setting, iface, vocab, h), "status": e["status"], "stop": e["stopped_by"],
            "risk": e["risk"], "wall": time.perf_counter() - t0, "usd": m.get("usd_cost")}


def fmt(x, spec="{:.2g}") -> str:
    return "-" if x is None else spec.format(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--hidden", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpt2", action="store_true", help="add GPT-2 small's shape (50257 × 768), full")
    a = ap.parse_args()
    rows = []
    print("| vocab | h | API setting | width (true) | right? | rel. error | precision | queries | bound | "
          "status | risk | $ | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    cases = [(v, h, st) for v in a.vocab for h in a.hidden for st in a.settings]
    if a.gpt2:
        cases.append((50257, 768, "full"))
    for v, h, st in cases:
        r = one(v, h, st, a.layers, 4 if h % 4 == 0 else 1, a.seed)
        rows.append(r)
        right = "-" if r["width"] is None else ("yes" if r["width"] == r["true"] else "no")
        print(f"| {v} | {h} | {st} | {fmt(r['width'], '{:.0f}')} ({fmt(r['true'], '{:.0f}')}) | {right} | "
              f"{fmt(r['err'])} | {fmt(r['prec'])} | {r['queries']} | {fmt(r['bound'], '{}')} | "
              f"{r['status']}{'/' + r['stop'] if r['stop'] else ''} | {r['risk']} | "
              f"{fmt(r['usd'], '{:.2f}')} | "
              f"{r['wall']:.1f} |", flush=True)
    clean = [r for r in rows if r["setting"] in CLEAN]
    ok = sum(r["width"] == r["true"] for r in clean)
    print(f"\nclean settings with the exact width: {ok} of {len(clean)}; "
          f"within the query bound: {sum(r['bound'] is None or r['queries'] <= r['bound'] for r in clean)} "
          f"of {len(clean)}")


if __name__ == "__main__":
    main()
