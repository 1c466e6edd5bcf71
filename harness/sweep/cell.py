"""One sweep cell, run in a worker process or a Ray task: pin threads, run the cell's scenario
(its MLflow run nested under the sweep run), and return a small summary. A worker asked to stop
(SIGTERM/SIGINT) ends its cell's runs KILLED. numpy/torch/mlflow are imported inside: a spawned
worker must pin its threads before torch loads."""

from __future__ import annotations

import os
import time
from typing import Any

from harness.core.errors import BadInput
from harness.scenario import scenario_from_dict


def pin_worker(threads: int) -> None:
    from harness.core.threads import pin_threads

    pin_threads(threads)


_stopped: list[str] = []  # the signal that stopped a cell in this worker: it starts no other


def run_cell(task: dict[str, Any]) -> dict[str, Any]:
    """Run one cell's scenario (in a worker process or Ray task); returns a small summary.

    Never raises: a crash is returned as {"error": ...} so the sweep can carry on. A worker that
    was asked to stop runs no further cell (it answers "not started").
    """
    if _stopped:
        return {"cell_key": task["cell_key"], "label": task["cell_label"],
                "error": f"not started: the sweep was stopped ({_stopped[0]})", "interrupted": _stopped[0]}
    pin_worker(task.get("threads", 1))
    t0 = time.perf_counter()
    from harness.core.interrupts import Interrupted, handle_signals
    from harness.core.progress import sweep_cell

    sweep_cell(task["cell_label"])  # stage lines say which cell; no bars from many processes
    try:
        with handle_signals():  # SIGTERM/SIGINT: the cell's runs end KILLED, its report written
            return _run_cell(task, t0)
    except Interrupted as exc:
        _stopped.append(exc.name)
        return {"cell_key": task["cell_key"], "label": task["cell_label"],
                "error": f"interrupted by {exc.name}", "interrupted": exc.name}
    finally:
        sweep_cell("")


def _run_cell(task: dict[str, Any], t0: float) -> dict[str, Any]:
    try:
        from harness.run.runner import run_scenario
        from reports.tracking import Tracker

        s = scenario_from_dict(task["data"], task["source"])
        if task.get("trust_model_code"):  # the sweep's --trust-model-code, for this worker
            from victims.models.files import allow_model_code

            allow_model_code(True)
        if task.get("auth_env"):  # the sweep's --auth-env, for this worker
            from victims.http.endpoint import allow_auth_env

            allow_auth_env(task["auth_env"])
        tags = {"mlflow.parentRunId": task["sweep_run_id"], "leakmeter.kind": "cell",
                "leakmeter.sweep_id": task["sweep_id"], "leakmeter.cell": task["cell_key"],
                "leakmeter.cell_label": task["cell_label"]} if task["sweep_run_id"] else {}
        report = run_scenario(s, tracking_uri=task["tracking_uri"], out=task["out"],
                              extra_tags=tags, source=task.get("yaml"))
        run_id = report.get("mlflow_run_id")
        if run_id:
            tr = Tracker(task["tracking_uri"], s.tracking.experiment, True)
            tr.params(run_id, {f"sweep.{k}": ("none" if v is None else v)
                               for k, v in task["settings"].items()} | {"sweep.seed": s.seed})
            done = not report.get("error") and all(a.get("status") != "error" for a in report["attacks"])
            if done:
                tr.tags(run_id, {"leakmeter.cell_done": "1"})
        return {"cell_key": task["cell_key"], "label": task["cell_label"], "run_id": run_id,
                "report": report, "wall_s": round(time.perf_counter() - t0, 3), "pid": os.getpid()}
    except BadInput as exc:
        return {"cell_key": task["cell_key"], "label": task["cell_label"], "error": f"bad input: {exc}"}
    except Exception as exc:  # noqa: BLE001 - one cell's crash must not stop the sweep
        return {"cell_key": task["cell_key"], "label": task["cell_label"],
                "error": f"{type(exc).__name__}: {exc}"}
