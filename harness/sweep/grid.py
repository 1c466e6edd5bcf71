"""Defense sweeps: run a scenario over a grid of settings (× seeds), each cell a nested MLflow run.

One *sweep run* in MLflow holds every cell run (`mlflow.parentRunId`), which holds its attack runs.
A sweep is identified by `leakmeter.sweep_id` = a hash of the scenario, the grid and the seeds;
each cell by `leakmeter.cell` = its settings and seed (canonical JSON). Running the same sweep
again resumes it: cells whose run FINISHED (tag `leakmeter.cell_done`) are skipped, the others
(crashed, interrupted) run again.

Cells run in worker processes (`local`, bounded by `jobs`, one torch/BLAS thread each unless told
otherwise) or as Ray tasks (`ray`); the worker is the same function either way, so both give the
same numbers for the same seeds. numpy/torch/mlflow are imported inside functions only: a spawned
worker must pin its threads before torch loads.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.errors import BadInput
from harness.core.ray_cluster import ray_preflight
from harness.scenario import Scenario, parse_value, scenario_from_dict
from harness.sweep.executors import run_local, run_ray


@dataclass
class Cell:
    """One point of the grid at one seed."""

    settings: dict[str, Any]
    seed: int

    def key(self) -> str:
        """Canonical JSON of settings + seed: how MLflow tags identify the cell."""
        return json.dumps({"settings": self.settings, "seed": self.seed}, sort_keys=True, default=str)

    def label(self) -> str:
        parts = [f"{k}={'none' if v is None else v}" for k, v in self.settings.items()]
        return ", ".join(parts + [f"seed={self.seed}"])


@dataclass
class SweepPlan:
    """Everything needed to run (or resume) a sweep."""

    raw: dict[str, Any]
    grid: dict[str, list[Any]]
    seeds: list[int]
    cells: list[Cell]
    sweep_id: str
    scenarios: list[Scenario] = field(default_factory=list)


# --------------------------------------------------------------------------- the grid


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    """`["a.b=1,2", "c=x,none"]` → {"a.b": [1, 2], "c": ["x", None]}; BadInput on bad syntax."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or not raw.strip():
            raise BadInput(f"--grid {item}: expected dotted.key=value1,value2,... (e.g. "
                           "defenses.query_budget=1000,10000)")
        if key in grid:
            raise BadInput(f"--grid {key}: given twice; list all its values in one --grid")
        if key in ("seed", "name"):
            raise BadInput(f"--grid {key}: not a sweepable key (use --seeds for seeds)")
        values = [_number(parse_value(v.strip())) for v in raw.split(",") if v.strip()]
        if len(set(json.dumps(v, sort_keys=True, default=str) for v in values)) != len(values):
            raise BadInput(f"--grid {item}: a value is repeated")
        grid[key] = values
    return grid


def _number(v: Any) -> Any:
    """YAML leaves "1e3" a string; a grid means a number: 1000 (int when integral), else float."""
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return v
        return int(f) if f.is_integer() and abs(f) < 2**53 else f
    return v


def make_cells(grid: dict[str, list[Any]], seeds: list[int]) -> list[Cell]:
    """Every combination of the grid's values, for every seed (grid order, seeds innermost)."""
    keys = list(grid)
    combos = itertools.product(*(grid[k] for k in keys)) if keys else [()]
    return [Cell(dict(zip(keys, combo, strict=True)), seed) for combo in combos for seed in seeds]


def _section_model(path: list[str]):
    """The pydantic model of the section at `path` (None when it is not a section)."""
    from harness.scenario.loading import unwrap_model

    model: Any = Scenario
    for part in path:
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return None
        model = unwrap_model(fields[part].annotation)
        if model is None:
            return None
    return model


def _nullable(path: list[str]) -> bool:
    """Whether the key at `path` may be null (an optional section or value)."""
    parent = _section_model(path[:-1])
    if parent is None or path[-1] not in parent.model_fields:
        return False
    f = parent.model_fields[path[-1]]
    return not f.is_required() and f.default is None


def apply_cell(raw: dict[str, Any], cell: Cell) -> dict[str, Any]:
    """The scenario data for one cell (a new dict).

    `none` sets an optional key to null; when that leaves its section invalid (e.g.
    `defenses.dp_sgd.epsilon=none`: DP-SGD needs a target) and the section itself is optional,
    the whole section is removed — "no DP".
    """
    from pydantic import ValidationError

    data = copy.deepcopy(raw)
    for key, value in cell.settings.items():
        parts = key.split(".")
        node = data
        for p in parts[:-1]:
            nxt = node.get(p)
            if not isinstance(nxt, dict):
                if value is None:  # removing something under an absent section: nothing to do
                    node = None
                    break
                nxt = {}
                node[p] = nxt
            node = nxt
        if node is None:
            continue
        node[parts[-1]] = value
        if value is None and len(parts) > 1:
            section = _section_model(parts[:-1])
            if section is not None:
                try:
                    section.model_validate(node)
                except ValidationError:
                    if _nullable(parts[:-1]):
                        parent = data
                        for p in parts[:-2]:
                            parent = parent[p]
                        parent[parts[-2]] = None
    data["seed"] = cell.seed
    return data


def sweep_id_of(raw: dict[str, Any], grid: dict[str, list[Any]], seeds: list[int]) -> str:
    """A stable id of (scenario without tracking, grid, seeds): equal ids resume each other."""
    base = {k: v for k, v in raw.items() if k not in ("tracking", "seed")}
    blob = json.dumps({"scenario": base, "grid": grid, "seeds": seeds}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


MAX_CELLS = 1000  # cells a sweep builds unless --max-cells says more


def count_cells(grid: dict[str, list[Any]], seeds: int, max_cells: int) -> int:
    """The number of cells (grid combinations × seeds); BadInput over `max_cells`, said before any
    cell is built (1000 values × --seeds 1000 was still building cells at 40 s and 885 MB)."""
    n = seeds
    for values in grid.values():
        n *= len(values)
    if n > max_cells:
        sizes = " × ".join([str(len(v)) for v in grid.values()] + [f"{seeds} seeds"])
        raise BadInput(f"--grid/--seeds: {n:,} cells ({sizes}) is over the cap of {max_cells:,} "
                       "cells; give --max-cells N to run more")
    return n


def plan_sweep(raw: dict[str, Any], source: str, grid_items: list[str], seeds: int,
               max_cells: int = MAX_CELLS) -> SweepPlan:
    """Validate the grid and every cell's scenario up front; BadInput names the failing cell."""
    from harness.run.runner import plan_attacks

    if seeds < 1:
        raise BadInput(f"--seeds {seeds}: must be at least 1")
    grid = parse_grid(grid_items)
    count_cells(grid, seeds, max_cells)
    base_seed = int(raw.get("seed", 0) or 0)
    seed_list = [base_seed + i for i in range(seeds)]
    cells = make_cells(grid, seed_list)
    scenarios = []
    for cell in cells:
        data = apply_cell(raw, cell)
        try:
            s = scenario_from_dict(data, source)
        except BadInput as exc:
            raise BadInput(f"cell {cell.label()}: {exc}") from None
        plan_attacks(s)
        scenarios.append(s)
    return SweepPlan(raw, grid, seed_list, cells, sweep_id_of(raw, grid, seed_list), scenarios)


# --------------------------------------------------------------------------- the sweep


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def find_sweep(client, experiment_id: str, sweep_id: str):
    """The most recent sweep run with this sweep id (None when there is none)."""
    runs = client.search_runs([experiment_id], f"tags.`leakmeter.sweep_id` = '{sweep_id}' and "
                              "tags.`leakmeter.kind` = 'sweep'", order_by=["attribute.start_time DESC"],
                              max_results=1)
    return runs[0] if runs else None


def cell_runs(client, experiment_id: str, sweep_run_id: str) -> list:
    """Every cell run nested under the sweep run."""
    out, token = [], None
    while True:
        page = client.search_runs([experiment_id], f"tags.`mlflow.parentRunId` = '{sweep_run_id}' and "
                                  "tags.`leakmeter.kind` = 'cell'", max_results=1000, page_token=token)
        out += list(page)
        token = page.token
        if not token:
            return out


def _end_stray_runs(tracker: Any, sweep_run_id: str) -> None:
    """Mark KILLED the cell runs (and their attack runs) a stopped worker left RUNNING."""
    client, exp = tracker.client, tracker.experiment_id
    todo = [sweep_run_id]
    while todo:
        parent = todo.pop()
        for r in client.search_runs([exp], f"tags.`mlflow.parentRunId` = '{parent}'", max_results=5000):
            if r.info.status == "RUNNING":
                tracker.end(r.info.run_id, "KILLED")
            if r.data.tags.get("leakmeter.kind") == "cell":
                todo.append(r.info.run_id)


def log_sweep_scenario(tracker: Any, run_id: str | None, plan: SweepPlan) -> None:
    """The grid and the sweep's scenario as `run` logs one: credentials and query strings removed
    (schema.public_data), every string scrubbed by the tracker — never the raw file, whose URL may
    carry a key under any parameter name."""
    import yaml

    from harness.scenario.schema import public_data
    from victims.http.secrets import SECRETS

    for s in plan.scenarios:  # the secrets the cells' URLs carry, masked wherever they show
        if s.victim.endpoint is not None:
            SECRETS.add_url(s.victim.endpoint.url)
    tracker.text(run_id, json.dumps({"grid": plan.grid, "seeds": plan.seeds}, default=str), "grid.json")
    tracker.text(run_id, yaml.safe_dump(public_data(plan.raw), sort_keys=False), "scenario.yaml")


def run_sweep(plan: SweepPlan, *, scenario_path: str, tracking_uri: str | None, out: str | Path | None,
              jobs: int = 1, threads: int = 1, executor: str = "local", ray_address: str | None = None,
              fresh: bool = False, echo: Callable[[str], None] = print,
              trust_model_code: bool = False, auth_env: str | None = None) -> dict[str, Any]:
    """Run (or resume) the sweep; returns {"sweep_run_id", "results", "skipped", "errors", ...}."""
    import yaml

    from harness.core.interrupts import Interrupted
    from reports.tracking import Tracker, TrackingUnavailable, default_uri

    s0 = plan.scenarios[0]
    if not s0.tracking.enabled:
        raise BadInput("tracking.enabled: a sweep records its cells in MLflow; enable tracking")
    if executor == "ray":
        ray_preflight(ray_address)
    uri = tracking_uri or s0.tracking.uri or default_uri()
    from victims.http.secrets import SECRETS, register_tracking_env

    SECRETS.add_url(uri)  # a tracking server's user:password never reaches any output
    register_tracking_env()  # MLFLOW_TRACKING_TOKEN / _PASSWORD, ...
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_absolute():
        uri = f"sqlite:///{Path(uri.removeprefix('sqlite:///')).resolve()}"
    try:
        tracker = Tracker(uri, s0.tracking.experiment, True)
    except TrackingUnavailable as exc:
        raise BadInput(f"tracking.uri: {uri}: {exc}") from None
    except Exception as exc:  # noqa: BLE001
        raise BadInput(f"tracking.uri: cannot use MLflow store {uri!r}: {type(exc).__name__}") from None
    client = tracker.client
    existing = None if fresh else find_sweep(client, tracker.experiment_id, plan.sweep_id)
    finished: dict[str, str] = {}
    if existing:
        sweep_run_id = existing.info.run_id
        for r in cell_runs(client, tracker.experiment_id, sweep_run_id):
            key = r.data.tags.get("leakmeter.cell")
            if r.info.status == "FINISHED" and r.data.tags.get("leakmeter.cell_done") == "1":
                finished.setdefault(key, r.info.run_id)
            elif r.info.status == "RUNNING":  # left behind by an interrupted sweep
                client.set_terminated(r.info.run_id, "KILLED")
        from reports.tracking import process_tag

        tracker.tags(sweep_run_id, {"leakmeter.process": process_tag() or "",  # this process owns it now
                                    "leakmeter.reaped": ""})
        client.update_run(sweep_run_id, status="RUNNING")
        echo(f"resuming sweep {plan.sweep_id} (MLflow run {sweep_run_id}): "
             f"{len(finished)} of {len(plan.cells)} cells already finished")
    else:
        name = f"sweep-{plan.scenarios[0].name}"
        sweep_run_id = tracker.start(name, {"leakmeter.kind": "sweep", "leakmeter.sweep_id": plan.sweep_id,
                                            "leakmeter.scenario": s0.name})
        grid_params = {f"grid.{k}": ",".join("none" if v is None else str(v) for v in vals)
                       for k, vals in plan.grid.items()}
        tracker.params(sweep_run_id, grid_params | {"seeds": len(plan.seeds), "executor": executor,
                                                    "jobs": jobs})
        log_sweep_scenario(tracker, sweep_run_id, plan)
    outroot = Path(out) if out else Path("leakmeter-out") / f"sweep-{plan.sweep_id}"
    outroot = outroot.resolve()
    tasks = []
    for i, (cell, s) in enumerate(zip(plan.cells, plan.scenarios, strict=True)):
        key = cell.key()
        if key in finished:
            continue
        data = s.model_dump(mode="json")
        data["tracking"]["uri"] = uri
        tasks.append({"data": data, "source": scenario_path, "tracking_uri": uri,
                      "out": str(outroot / f"cell-{i:03d}"), "sweep_run_id": sweep_run_id,
                      "sweep_id": plan.sweep_id, "cell_key": key, "cell_label": cell.label(),
                      "settings": cell.settings, "threads": threads,
                      "trust_model_code": trust_model_code, "auth_env": auth_env,
                      "yaml": yaml.safe_dump(data, sort_keys=False)})
    skipped = len(plan.cells) - len(tasks)
    echo(f"sweep {plan.sweep_id}: {len(plan.cells)} cells, {skipped} skipped (finished before), "
         f"{len(tasks)} to run with {executor} executor, {jobs} job(s)")
    count = [0]

    results: list[dict[str, Any]] = []  # filled as cells finish: a stopped sweep keeps them

    def on_done(r: dict[str, Any]) -> None:
        results.append(r)
        count[0] += 1
        if r.get("error"):
            echo(f"  [{count[0]}/{len(tasks)}] {r['label']}: CRASHED: {r['error']}")
        else:
            rep = r["report"]
            acc = (rep.get("victim") or {}).get("test_accuracy")
            echo(f"  [{count[0]}/{len(tasks)}] {r['label']}: verdict {rep.get('verdict')} "
                 f"(risk {rep.get('risk')}), accuracy {acc if acc is None else round(acc, 4)}, "
                 f"{r['wall_s']:.1f} s")

    t0 = time.perf_counter()
    status = "FAILED"
    try:
        if tasks:
            if executor == "ray":
                run_ray(tasks, jobs, threads, ray_address, on_done)
            else:
                run_local(tasks, jobs, threads, on_done)
        errors = [r for r in results if r.get("error") or r["report"].get("error")
                  or any(a.get("status") == "error" for a in r["report"].get("attacks", []))]
        status = "FAILED" if errors else "FINISHED"
    except (Interrupted, KeyboardInterrupt) as exc:
        status = "KILLED"
        exc.sweep = {"sweep_run_id": sweep_run_id, "tracking_uri": uri, "results": results,
                     "out": str(outroot)}  # what the CLI writes SARIF/JUnit from
        raise
    finally:
        _end_stray_runs(tracker, sweep_run_id)
        tracker.metrics(sweep_run_id, {"cells": len(plan.cells), "cells_run": len(results),
                                       "cells_skipped": skipped, "sweep_wall_s": time.perf_counter() - t0})
        tracker.end(sweep_run_id, status)
    return {"sweep_run_id": sweep_run_id, "sweep_id": plan.sweep_id, "tracking_uri": uri,
            "experiment": s0.tracking.experiment, "results": results, "skipped": skipped,
            "errors": errors, "out": str(outroot)}
