"""MLflow logging: one parent run per scenario run, one nested run per attack.

The default store is SQLite in the working directory (`sqlite:///mlflow.db`): MLflow 3 refuses
the old ./mlruns file store by default. Every run that is started is ended — FINISHED, or
FAILED when the run crashed — so none is left RUNNING.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

MAX_PARAM = 500  # characters kept of a param value
TEXT_SUFFIXES = {".json", ".md", ".html", ".yaml", ".yml", ".txt", ".csv", ".log"}


def _identity(text: Any) -> Any:
    return text


# What every Tracker passes strings through before they reach MLflow (harness sets the secrets
# scrubber here at start-up; this package imports nothing of ours, so it is handed in).
_default_scrub: Callable[[Any], Any] = _identity


def set_default_scrub(scrub: Callable[[Any], Any] | None) -> None:
    """Set the scrub function Trackers use when none is given (None: no scrubbing)."""
    global _default_scrub
    _default_scrub = scrub or _identity


def default_uri() -> str:
    """The embedded store in the working directory."""
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def _key(k: str) -> str:
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", k)[:250]


def _metric_key(k: str) -> str:
    return _key(k).replace(" ", "_")


class Tracker:
    """Thin wrapper over MlflowClient; `enabled=False` turns every call into a no-op. Every
    string logged (run names, params, tags, text and text artifacts) passes through `scrub`."""

    def __init__(self, uri: str | None, experiment: str, enabled: bool = True,
                 scrub: Callable[[Any], Any] | None = None):
        self._scrub = scrub
        self.enabled = enabled
        self.uri = uri or default_uri()
        self.experiment = experiment
        self.client = None
        self.experiment_id: str | None = None
        if enabled:
            from mlflow.tracking import MlflowClient

            self.client = MlflowClient(tracking_uri=self.uri)
            exp = self.client.get_experiment_by_name(experiment)
            self.experiment_id = (
                exp.experiment_id if exp else self.client.create_experiment(experiment)
            )

    def start(self, name: str, tags: dict[str, str] | None = None,
              parent: str | None = None) -> str | None:
        """Start a run (nested under `parent` if given); returns its id."""
        if not self.enabled:
            return None
        tags = {k: self.scrub(str(v)) for k, v in (tags or {}).items()}
        if parent:
            tags["mlflow.parentRunId"] = parent
        run = self.client.create_run(self.experiment_id, run_name=self.scrub(name), tags=tags)
        return run.info.run_id

    def params(self, run_id: str | None, params: dict[str, Any]) -> None:
        if not run_id:
            return
        from mlflow.entities import Param

        items = [Param(_key(self.scrub(k)), self.scrub(str(v))[:MAX_PARAM]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(run_id, params=items[i : i + 100])

    def metrics(self, run_id: str | None, metrics: dict[str, float], step: int = 0) -> None:
        if not run_id:
            return
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [
            Metric(_metric_key(k), float(v), now, step)
            for k, v in metrics.items()
            if isinstance(v, int | float) and v == v and abs(v) != float("inf")
        ]
        for i in range(0, len(items), 500):
            self.client.log_batch(run_id, metrics=items[i : i + 500])

    def curve(self, run_id: str | None, key: str, points: list[tuple[int, float]]) -> None:
        """A metric with one value per step (e.g. fidelity vs queries)."""
        if not run_id or not points:
            return
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(_metric_key(key), float(v), now, int(s)) for s, v in points]
        for i in range(0, len(items), 500):
            self.client.log_batch(run_id, metrics=items[i : i + 500])

    def tags(self, run_id: str | None, tags: dict[str, Any]) -> None:
        if not run_id:
            return
        for k, v in tags.items():
            self.client.set_tag(run_id, _key(self.scrub(k)), self.scrub(str(v))[:5000])

    def scrub(self, text: Any) -> Any:
        return (self._scrub or _default_scrub)(text)

    def artifact(self, run_id: str | None, path: str | Path, subdir: str | None = None) -> None:
        """Log a file; text files are logged as a scrubbed copy."""
        p = Path(path)
        if not run_id or not p.exists():
            return
        if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES:
            text = p.read_text(errors="replace")
            clean = self.scrub(text)
            if clean != text:
                with tempfile.TemporaryDirectory() as tmp:
                    copy = Path(tmp) / p.name
                    copy.write_text(clean)
                    self.client.log_artifact(run_id, str(copy), subdir)
                return
        self.client.log_artifact(run_id, str(p), subdir)

    def text(self, run_id: str | None, text: str, name: str) -> None:
        if not run_id:
            return
        with tempfile.TemporaryDirectory() as tmp:
            p = Path(tmp) / name
            p.write_text(self.scrub(text))
            self.client.log_artifact(run_id, str(p))

    def end(self, run_id: str | None, failed: bool = False) -> None:
        if run_id:
            self.client.set_terminated(run_id, "FAILED" if failed else "FINISHED")
