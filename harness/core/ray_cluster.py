"""Starting or reaching Ray, for the sweep's executor (harness/sweep/executors.py) and reference
models (harness/attacker/reference_executors.py): checks before anything runs, and ray.init with
errors a user can act on (BadInput, exit 2)."""

from __future__ import annotations

import os
from typing import Any

from harness.core.errors import BadInput
from victims.http.secrets import clip

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "LEAKMETER_THREADS")


def ray_preflight(address: str | None, executor: str = "--executor ray",
                  option: str = "--ray-address") -> None:
    """Checks a Ray sweep (or Ray reference models: `executor`/`option` name the scenario keys)
    needs before anything is recorded: Ray importable, and a given cluster address answering
    within seconds (ray.init would otherwise wait for minutes)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise BadInput(f"{executor}: Ray is not installed; pip install 'leakmeter[ray]'") from None
    if not address or address == "auto":
        return
    import socket

    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise BadInput(f"{option} {address}: expected HOST:PORT (or ray://HOST:PORT, or auto)")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise BadInput(f"{option} {address}: nothing answers there ({exc.strerror or exc}); "
                       "start the cluster with `ray start --head` or omit the option for a local Ray"
                       ) from None


def start_ray(address: str | None, cpus: int | None, threads: int, option: str = "--ray-address") -> None:
    """ray.init on `address`, or a new local Ray of `cpus` CPUs (None: all) even beside a running
    cluster or with RAY_ADDRESS set; workers get `threads` threads. An unreachable cluster or a Ray
    that cannot start is BadInput naming `option`."""
    import ray

    env = {v: str(threads) for v in THREAD_VARS} | {"MLFLOW_DISABLE_TELEMETRY": "true",
                                                    "TQDM_DISABLE": os.environ.get("TQDM_DISABLE", "1")}
    kwargs: dict[str, Any] = {"runtime_env": {"env_vars": env}, "log_to_driver": False,
                              "configure_logging": False}
    if address:
        kwargs["address"] = address
    else:
        kwargs.update(address="local", num_cpus=cpus, include_dashboard=False)
    try:
        ray.init(**kwargs)
    except Exception as exc:  # noqa: BLE001 - an unreachable cluster is a bad option
        raise BadInput(f"{option} {address or '(local)'}: cannot start or reach Ray: "
                       f"{type(exc).__name__}: {_ray_cause(exc)}") from None


def _ray_cause(exc: BaseException) -> str:
    """The line of a Ray start-up error that names the cause (Ray puts it deep in the text)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for key in ("token", "auth", "version", "refused", "timed out", "timeout"):
        hit = next((ln for ln in lines if key in ln.lower()), None)
        if hit:
            return clip(hit, 300)
    return clip(lines[-1] if lines else type(exc).__name__, 300)
