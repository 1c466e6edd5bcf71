"""Where reference models train: here (the default), or as Ray tasks (`membership.executor: ray`)
for users who outgrow one machine.

Ray follows the sweep's convention (harness/sweep/executors.py): a local Ray started for the run
(`membership.ray_workers` CPUs, default all of this machine's), or a cluster at
`membership.ray_address` (whose workers need leakmeter installed, as for a Ray sweep). The K models
of a reference set are split into parts of `models_per_task` (default: spread evenly over the CPUs
Ray offers); each part is trained in one Ray task exactly as here (`train_stacked`, batched with
stacked parameters). Model k's batch order, initialisation and DP noise depend on k alone, so the
parameters, and every score read from them, equal the local run's. Ray stays up while the run
needs it and stops at its end (`close`, called by the runner); a Ray that was already running (a
sweep's task, the user's own session) is used as it is and left running. `check` is the scenario
check done before anything runs (harness/scenario/checks.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from harness.core.ray_cluster import ray_preflight, start_ray

_SESSION: dict[str, Any] = {}  # the Ray this module started: {"key": (address, workers)}


@dataclass(frozen=True)
class RayExecutor:
    """Train reference models in Ray tasks (`run_chunks` is train_stacked's hook)."""

    address: str | None = None
    workers: int | None = None
    models_per_task: int | None = None

    @property
    def name(self) -> str:
        return f"ray ({self.address})" if self.address else "ray (local)"

    def run_chunks(self, recipe: Any, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, seed: int,
                   init_seeds: list[int] | None, sizes: list[int] | None) -> torch.Tensor:
        """(K, P) flat parameters, the same as `train_stacked(recipe, x, y, idx, seed, init_seeds)`
        (`sizes`: DP-SGD's batch lengths over all K models, so every part pads as one run would)."""
        ray = session(self.address, self.workers)
        k = len(idx)
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        per = self.models_per_task or math.ceil(k / cpus)
        gpus = 1 if torch.device(recipe.device).type == "cuda" else 0
        task = ray.remote(num_cpus=1, num_gpus=gpus, max_retries=0)(train_part)
        xr, yr = ray.put(x.detach().cpu()), ray.put(y.detach().cpu())
        refs = [task.remote(recipe, xr, yr, idx[i : i + per].cpu(), seed + i,
                            None if init_seeds is None else init_seeds[i : i + per], sizes)
                for i in range(0, k, per)]
        try:
            parts = ray.get(refs)
        except BaseException:
            for r in refs:
                ray.cancel(r, force=True)
            raise
        recipe.n_trained += k
        recipe.train_seconds += sum(s for _, s in parts)
        return torch.cat([p for p, _ in parts]).to(recipe.device)


def train_part(recipe: Any, x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, seed: int,
               init_seeds: list[int] | None, sizes: list[int] | None) -> tuple[torch.Tensor, float]:
    """One Ray task: models idx[j] (seeds seed + j) trained as train_stacked trains them here (in
    its chunks of 64, which change no number), one thread per task; returns their flat parameters
    (on the CPU) and the seconds it took."""
    from harness.attacker.stacked_training import train_stacked
    from harness.core.threads import pin_threads

    pin_threads(1)
    t0 = time.perf_counter()
    flat = train_stacked(recipe, x, y, idx, seed=seed, init_seeds=init_seeds, sizes=sizes)
    return flat.cpu(), time.perf_counter() - t0


def executor_for(spec: Any) -> RayExecutor | None:
    """The executor a scenario's `membership` section asks for (None: train here)."""
    if spec is None or spec.executor == "local":
        return None
    return RayExecutor(spec.ray_address, spec.ray_workers, spec.models_per_task)


def session(address: str | None, workers: int | None):
    """The ray module, initialised: a Ray already running is used as it is; else one is started
    for (address, workers) and kept until `close` (a different request restarts it). BadInput
    when Ray is missing or the cluster does not answer."""
    ray_preflight(address, "membership.executor: ray", "membership.ray_address")
    import ray

    key = (address, workers)
    if ray.is_initialized():
        if "key" not in _SESSION or _SESSION["key"] == key:
            return ray
        close()
    start_ray(address, workers, 1, option="membership.ray_address")
    _SESSION["key"] = key
    return ray


def close() -> None:
    """Stop the Ray this module started (nothing when it started none)."""
    if "key" not in _SESSION:
        return
    _SESSION.clear()
    import ray

    if ray.is_initialized():
        ray.shutdown()
