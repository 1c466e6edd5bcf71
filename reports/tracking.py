"""MLflow logging: one parent run per scenario run, one nested run per attack.

The default store is SQLite in the working directory (`sqlite:///mlflow.db`): MLflow 3 refuses
the old ./mlruns file store by default. Every run that is started is ended — FINISHED, FAILED
when the run crashed, KILLED when it was interrupted — so none is left RUNNING.

Many processes may share one embedded store: its schema is created once under a file lock, and
"database is locked" is retried. A tracking server that does not answer is reported within
`PROBE_TIMEOUT_S` (`TrackingUnavailable`), before anything is logged.

A process killed outright (kill -9, a lost machine) cannot end its runs. Every run is tagged with
the process that owns it (`leakmeter.process`: host, PID namespace, PID and start time); when a
Tracker opens an experiment it marks KILLED the RUNNING runs of processes on this host and PID
namespace that no longer exist (tag `leakmeter.reaped`). Runs of other hosts are left alone: their
processes cannot be seen from here. (Linux only: elsewhere nothing is reaped.)
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# MLflow's HTTP client otherwise retries an unreachable server for minutes
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")

MAX_PARAM = 500  # characters kept of a param value
PROBE_TIMEOUT_S = 6.0  # one attempt: a server that answers nothing in 6 s is not usable
LOCKED_RETRY_S = 60.0  # how long "database is locked" is retried


# MLflow 3's UI opens an experiment of this kind on its runs (not on the GenAI "Traces" page)
KIND = {"mlflow.experimentKind": "custom_model_development"}

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


class TrackingUnavailable(Exception):
    """The tracking store cannot be used (a server that does not answer, an unusable URI)."""


def _locked(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "database is locked" in text or "database table is locked" in text


def _retrying(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call fn, retrying SQLite's "database is locked" with jittered backoff."""
    deadline = time.monotonic() + LOCKED_RETRY_S
    wait = 0.05
    while True:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - only lock contention is retried
            if not _locked(exc) or time.monotonic() > deadline:
                raise
        time.sleep(wait * (1 + random.random()))
        wait = min(wait * 2, 1.0)


def _sqlite_path(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri.removeprefix("sqlite:///"))


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """An exclusive file lock beside an embedded SQLite store, on every platform (filelock);
    a no-op for other stores. Also quiets MLflow's INFO lines about creating a fresh schema."""
    db = _sqlite_path(uri)
    if db is None:
        yield
        return
    import logging

    from filelock import FileLock

    logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
    db.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(db.with_name(db.name + ".lock"))):
        yield


def probe_server(uri: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raise TrackingUnavailable unless an http(s) tracking server answers within `timeout`."""
    if not uri.startswith(("http://", "https://")):
        return
    import requests

    url = uri.rstrip("/") + "/api/2.0/mlflow/experiments/search"
    try:
        resp = requests.get(url, params={"max_results": 1}, timeout=timeout)
    except requests.RequestException as exc:
        raise TrackingUnavailable(f"the tracking server does not answer within {timeout:g} s "
                                  f"({type(exc).__name__})") from None
    if resp.status_code >= 500:
        raise TrackingUnavailable(f"the tracking server answers HTTP {resp.status_code}")


def check_store(uri: str) -> None:
    """TrackingUnavailable at once for an embedded store that cannot be one (MLflow would retry
    opening it for about 100 s): the path is a folder, or something else that is not a file."""
    db = _sqlite_path(uri)
    if db is None or not db.exists():
        return
    if db.is_dir():
        raise TrackingUnavailable(f"{db} is a folder; an embedded store is a file (sqlite:///path/mlflow.db)")
    if not db.is_file():
        raise TrackingUnavailable(f"{db} is not a regular file")


def _proc_start(pid: int) -> str | None:
    """The start time of a process (clock ticks since boot, from /proc), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of stat; fields after "(comm)" start at 3


def _namespace() -> str | None:
    """This host and PID namespace (PIDs mean something only within one), or None off Linux."""
    import socket

    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{socket.gethostname()}|{ns}"


def process_tag() -> str | None:
    """`leakmeter.process` for runs this process starts: namespace|pid|start time."""
    ns, start = _namespace(), _proc_start(os.getpid())
    return f"{ns}|{os.getpid()}|{start}" if ns and start else None


def orphaned(tag: str | None) -> bool:
    """Whether the process a `leakmeter.process` tag names is gone (this namespace only)."""
    ns = _namespace()
    if not tag or ns is None or not tag.startswith(ns + "|"):
        return False
    try:
        pid, start = tag[len(ns) + 1 :].split("|")
        return _proc_start(int(pid)) != start
    except ValueError:
        return False


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
        self.reaped: list[str] = []  # runs of dead processes marked KILLED when this tracker opened
        if enabled:
            probe_server(self.uri)
            check_store(self.uri)
            from mlflow.tracking import MlflowClient

            with _store_lock(self.uri):  # the first use of a fresh store creates its schema
                self.client = MlflowClient(tracking_uri=self.uri)
                self.experiment_id = _retrying(self._experiment_id, experiment)
            self.reaped = self.reap()

    def reap(self) -> list[str]:
        """Mark KILLED the RUNNING runs of this experiment whose process is gone (see the module
        docstring); returns their ids."""
        if _namespace() is None:
            return []
        runs = self._call("search_runs", [self.experiment_id], "attributes.status = 'RUNNING'",
                          max_results=1000)
        gone = [r.info.run_id for r in runs if orphaned(r.data.tags.get("leakmeter.process"))]
        for run_id in gone:
            self._call("set_tag", run_id, "leakmeter.reaped", "its process was gone (killed outright)")
            self._call("set_terminated", run_id, "KILLED")
        return gone

    def _experiment_id(self, name: str) -> str:
        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            try:
                exp = self.client.get_experiment(self.client.create_experiment(name, tags=dict(KIND)))
            except Exception:  # noqa: BLE001 - another process created it first
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise
        key, kind = next(iter(KIND.items()))
        if key not in exp.tags:  # an experiment made before: opened on its runs from now on
            self.client.set_experiment_tag(exp.experiment_id, key, kind)
        return exp.experiment_id

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _retrying(getattr(self.client, method), *args, **kwargs)

    def start(self, name: str, tags: dict[str, str] | None = None,
              parent: str | None = None) -> str | None:
        """Start a run (nested under `parent` if given); returns its id."""
        if not self.enabled:
            return None
        tags = {k: self.scrub(str(v)) for k, v in (tags or {}).items()}
        if parent:
            tags["mlflow.parentRunId"] = parent
        owner = process_tag()
        if owner:  # who can end this run: a later Tracker reaps it if this process is killed outright
            tags["leakmeter.process"] = owner
        run = self._call("create_run", self.experiment_id, run_name=self.scrub(name), tags=tags)
        return run.info.run_id

    def rename(self, run_id: str | None, name: str) -> None:
        """Give a run a new name (the runs page's first column)."""
        if run_id:
            self._call("update_run", run_id, name=self.scrub(name)[:250])

    def params(self, run_id: str | None, params: dict[str, Any]) -> None:
        if not run_id:
            return
        from mlflow.entities import Param

        items = [Param(_key(self.scrub(k)), self.scrub(str(v))[:MAX_PARAM])
                 for k, v in params.items()]
        for i in range(0, len(items), 100):
            self._call("log_batch", run_id, params=items[i : i + 100])

    def metrics(self, run_id: str | None, metrics: dict[str, float], step: int = 0) -> None:
        if not run_id:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [
            Metric(_metric_key(k), float(v), now, step)
            for k, v in metrics.items()
            if isinstance(v, int | float) and v == v and abs(v) != float("inf")
        ]
        for i in range(0, len(items), 500):
            self._call("log_batch", run_id, metrics=items[i : i + 500])

    def curve(self, run_id: str | None, key: str, points: list[tuple[int, float]]) -> None:
        """A metric with one value per step (e.g. fidelity vs queries)."""
        if not run_id or not points:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(_metric_key(key), float(v), now, int(s)) for s, v in points]
        for i in range(0, len(items), 500):
            self._call("log_batch", run_id, metrics=items[i : i + 500])

    def tags(self, run_id: str | None, tags: dict[str, Any]) -> None:
        if not run_id:
            return
        from mlflow.entities import RunTag

        items = [RunTag(_key(self.scrub(k)), self.scrub(str(v))[:5000]) for k, v in tags.items()]
        if items:
            self._call("log_batch", run_id, tags=items)

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
                    self._call("log_artifact", run_id, str(copy), subdir)
                return
        self._call("log_artifact", run_id, str(p), subdir)

    def text(self, run_id: str | None, text: str, name: str) -> None:
        if not run_id:
            return
        with tempfile.TemporaryDirectory() as tmp:
            p = Path(tmp) / name
            p.write_text(self.scrub(text))
            self._call("log_artifact", run_id, str(p))

    def end(self, run_id: str | None, status: str = "FINISHED") -> None:
        """End a run as FINISHED, FAILED or KILLED."""
        if run_id:
            self._call("set_terminated", run_id, status)
