"""Regression scans: run a scenario's black-box attacks and compare with a baseline MLflow run.

`run_scan` resolves the baseline first (a run id, `last-pass`, `last` or `none`) and refuses an
incomparable one (another scenario name or config fingerprint) before sending any query. After
the run it compares risks and key metrics: a regression is a higher risk (overall or for an
attack) or a leakage metric that moved the attacker's way by more than the tolerance. The scan
run is tagged `leakmeter.scan`, `leakmeter.baseline` and `leakmeter.regression`.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import BadInput

LEVELS = ("low", "medium", "high")
# metric name patterns: +1 = higher means more leakage, -1 = lower means more leakage
HIGHER_WORSE = ("agreement", "fidelity", "accuracy", "recovered_rank", "span_rank", "energy",
                "success", "units_found", "psnr", "ssim", "r2", "precision", "recall", "gamma")
LOWER_WORSE = ("angle", "error", "mse", "mae", "rmse", "distance", "dist", "residual", "loss",
               "lpips")
NEUTRAL = ("queries", "samples", "probes", "wall_s", "true_rank", "spectral_gap", "condition")


def direction(metric: str) -> int:
    """+1 when a higher value means more leakage, -1 when a lower one does, 0 when unknown."""
    name = metric.lower()
    if any(p in name for p in NEUTRAL):
        return 0
    if any(p in name for p in LOWER_WORSE):
        return -1
    if any(p in name for p in HIGHER_WORSE):
        return 1
    return 0


@dataclass
class Tolerance:
    """Relative tolerance, an absolute floor, and absolute tolerances by metric name."""

    rel: float = 0.05
    floor: float = 1e-3
    by_metric: dict[str, float] = field(default_factory=dict)

    def allowed(self, attack: str, metric: str, base: float) -> float:
        for key in (f"{attack}.{metric}", metric):
            if key in self.by_metric:
                return self.by_metric[key]
        return max(self.rel * abs(base), self.floor)


def parse_tolerances(items: list[str] | tuple[str, ...]) -> Tolerance:
    """`0.1` sets the relative tolerance; `NAME=0.5` an absolute one for a metric (or
    `attack.metric`); `floor=1e-4` the absolute floor. BadInput on anything else."""
    tol = Tolerance()
    for item in items:
        key, sep, raw = item.partition("=")
        try:
            value = float(raw if sep else key)
        except ValueError:
            raise BadInput(f"--tolerance {item}: expected a number, NAME=NUMBER or floor=NUMBER") from None
        if value < 0:
            raise BadInput(f"--tolerance {item}: must be >= 0")
        if not sep:
            tol.rel = value
        elif key.strip() == "floor":
            tol.floor = value
        else:
            tol.by_metric[key.strip()] = value
    return tol


# ---------------------------------------------------------------------------- baseline


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def find_baseline(s: Any, uri: str, baseline: str) -> Any:
    """The baseline run (an mlflow Run) or None; BadInput when a named run is missing or not
    comparable."""
    if baseline == "none":
        return None
    client = _client(uri)
    fp = s.fingerprint()
    if baseline in ("last-pass", "last"):
        exp = client.get_experiment_by_name(s.tracking.experiment)
        if exp is None:
            return None
        flt = (f"tags.`leakmeter.scenario` = '{s.name}' and tags.`leakmeter.fingerprint` = '{fp}' "
               "and attributes.status = 'FINISHED'")
        if baseline == "last-pass":
            flt += " and tags.verdict = 'pass'"
        runs = client.search_runs([exp.experiment_id], flt, order_by=["attributes.start_time DESC"],
                                  max_results=1)
        return runs[0] if runs else None
    if not re.fullmatch(r"[0-9a-f]{8,64}", baseline):
        raise BadInput(f"--baseline: {baseline!r} is not a run id; allowed: RUN_ID, last-pass, "
                       "last, none")
    try:
        run = client.get_run(baseline)
    except Exception:  # noqa: BLE001 - any lookup failure means the run is not there
        raise BadInput(f"--baseline: no MLflow run {baseline} in {uri}") from None
    tags = run.data.tags
    if tags.get("leakmeter.scenario") != s.name:
        raise BadInput(f"--baseline: run {baseline} is of scenario {tags.get('leakmeter.scenario')!r}, "
                       f"not {s.name!r}: refusing to compare incomparable runs")
    if tags.get("leakmeter.fingerprint") != fp:
        raise BadInput(f"--baseline: run {baseline} has config fingerprint "
                       f"{tags.get('leakmeter.fingerprint')}, this scenario {fp}: the settings differ, "
                       "refusing to compare incomparable runs")
    return run


def baseline_report(uri: str, run: Any) -> dict[str, Any]:
    """The baseline's report.json (logged as an artifact of its parent run)."""
    client = _client(uri)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run.info.run_id, "report.json", tmp)
        except Exception:  # noqa: BLE001
            raise BadInput(f"--baseline: run {run.info.run_id} has no report.json artifact") from None
        return json.loads(Path(path).read_text())


# ---------------------------------------------------------------------------- comparison


def _level(risk: str | None) -> int:
    return LEVELS.index(risk) if risk in LEVELS else -1


def compare(new: dict[str, Any], base: dict[str, Any], tol: Tolerance) -> list[dict[str, Any]]:
    """Rows {attack, metric, baseline, scan, status}: status regressed | improved | same | info."""
    rows: list[dict[str, Any]] = []

    def risk_row(attack: str, b: str | None, n: str | None) -> None:
        st = "same" if b == n else ("regressed" if _level(n) > _level(b) else "improved")
        if _level(b) < 0 or _level(n) < 0:
            st = "same" if b == n else "info"
        rows.append({"attack": attack, "metric": "risk", "baseline": b, "scan": n, "status": st})

    rows.append({"attack": "(overall)", "metric": "verdict", "baseline": base.get("verdict"),
                 "scan": new.get("verdict"),
                 "status": "same" if base.get("verdict") == new.get("verdict") else "info"})
    risk_row("(overall)", base.get("risk"), new.get("risk"))
    old = {a["name"]: a for a in base.get("attacks", [])}
    for a in new.get("attacks", []):
        b = old.get(a["name"])
        if b is None:
            rows.append({"attack": a["name"], "metric": "status", "baseline": None,
                         "scan": a.get("status"), "status": "info"})
            continue
        if a.get("status") != b.get("status"):
            rows.append({"attack": a["name"], "metric": "status", "baseline": b.get("status"),
                         "scan": a.get("status"), "status": "info"})
        risk_row(a["name"], b.get("risk"), a.get("risk"))
        bm, nm = b.get("metrics", {}), a.get("metrics", {})
        for m in sorted(set(bm) & set(nm)):
            bv, nv = bm[m], nm[m]
            if not isinstance(bv, int | float) or not isinstance(nv, int | float):
                continue
            d = direction(m)
            if d == 0:
                continue
            worse = (nv - bv) * d
            allowed = tol.allowed(a["name"], m, bv)
            st = "regressed" if worse > allowed else ("improved" if -worse > allowed else "same")
            rows.append({"attack": a["name"], "metric": m, "baseline": bv, "scan": nv, "status": st,
                         "allowed": allowed})
    return rows


def format_diff(rows: list[dict[str, Any]], verbose: bool = False) -> list[str]:
    """Printable lines for the changed (or, verbose, all) rows."""
    out = []
    for r in rows:
        if r["status"] == "same" and not verbose:
            continue
        b, n = r["baseline"], r["scan"]
        fb = f"{b:.6g}" if isinstance(b, float) else str(b)
        fn = f"{n:.6g}" if isinstance(n, float) else str(n)
        out.append(f"  {r['status']:<9} {r['attack']:<26} {r['metric']:<32} {fb} -> {fn}")
    return out


# ---------------------------------------------------------------------------- the scan


def run_scan(s: Any, *, baseline: str = "last-pass", tolerance: Tolerance | None = None,
             tracking_uri: str | None = None, out: str | Path | None = None,
             json_path: str | Path | None = None, source: str | None = None,
             fail_on: str = "verdict") -> dict[str, Any]:
    """Run the scan and compare; returns {"report", "baseline_id", "diff", "regressed", "exit"}.

    Exit 1 when leakage regressed against the baseline, and (`fail_on: verdict`, the default)
    whenever the verdict fails, regression or not: a deployment that fails from its first night
    has no passing baseline, and must not pass silently every night. `fail_on: regression`
    narrows exit 1 to regressions (a failing verdict as before is then exit 0)."""
    from harness.run.runner import run_scenario
    from reports.tracking import default_uri
    from reports.verdict import exit_code

    tol = tolerance or Tolerance()
    if not s.tracking.enabled and baseline != "none":
        raise BadInput("tracking.enabled: false leaves no MLflow run to compare with; enable tracking "
                       "or pass --baseline none")
    if s.interface.kind == "whitebox":
        raise BadInput("interface.kind: whitebox is not an endpoint; scan runs black-box attacks "
                       "(prediction, gradient or smoothgrad)")
    uri = tracking_uri or s.tracking.uri or default_uri()
    base_run = find_baseline(s, uri, baseline) if s.tracking.enabled else None
    base = baseline_report(uri, base_run) if base_run is not None else None
    base_id = base_run.info.run_id if base_run is not None else "none"
    report = run_scenario(s, tracking_uri=uri if s.tracking.enabled else None, out=out,
                          json_path=None, source=source,
                          extra_tags={"leakmeter.scan": "true", "leakmeter.baseline": base_id})
    rows = compare(report, base, tol) if base is not None else []
    regressed = any(r["status"] == "regressed" for r in rows)
    code = exit_code(report)  # 1 fail, 3 error, 4 inconclusive (0 with on_inconclusive: pass)
    if fail_on not in ("verdict", "regression"):
        raise BadInput(f"--fail-on {fail_on}: allowed: verdict, regression")
    if regressed or (code == 1 and fail_on == "verdict"):
        code = 1
    elif code == 1:  # --fail-on regression: a verdict that failed as before is no regression
        code = 0
    report["scan"] = {"baseline": base_id, "baseline_found": base is not None, "fail_on": fail_on,
                      "regressed": regressed, "diff": rows, "tolerance": tol.__dict__}
    stats = report.get("victim", {}).get("endpoint", {}).get("stats")
    if json_path:
        from reports import render

        render.write_json(report, json_path)
    outdir = Path(report["outdir"])
    (outdir / "scan.json").write_text(json.dumps(report["scan"], indent=2, default=str))
    run_id = report.get("mlflow_run_id")
    if run_id:
        client = _client(uri)
        client.set_tag(run_id, "leakmeter.regression", str(regressed).lower())
        client.log_artifact(run_id, str(outdir / "scan.json"))
        if stats:
            client.log_metric(run_id, "http_requests", float(stats["requests"]))
            client.log_metric(run_id, "http_retries", float(stats["retries"]))
    return {"report": report, "baseline_id": base_id, "diff": rows, "regressed": regressed,
            "exit": code, "baseline_found": base is not None}
