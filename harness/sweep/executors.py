"""Where sweep cells run: spawned worker processes (`run_local`, at most `jobs` at a time) or Ray
tasks (`run_ray`, on a cluster or a local Ray started for the sweep). Either way the worker is
`harness.sweep.grid.run_cell`, so both give the same numbers for the same seeds; a stopped sweep stops
its workers (SIGTERM, then SIGKILL after a grace period)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from harness.core.ray_cluster import THREAD_VARS, start_ray
from harness.sweep.cell import pin_worker, run_cell


def run_local(tasks: list[dict[str, Any]], jobs: int, threads: int,
              on_done: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Run tasks in at most `jobs` spawned worker processes; returns results in finishing order.
    At most `jobs` tasks are handed to the pool at a time: none waits in the pool's queue, so a
    stopped sweep starts no further cell (the pool would run a queued one after the signal)."""
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    env_before = {v: os.environ.get(v) for v in THREAD_VARS}
    for v in THREAD_VARS:  # inherited by the spawned workers before they import torch
        os.environ[v] = str(threads)
    results = []
    pool = ProcessPoolExecutor(max_workers=max(1, min(jobs, len(tasks))),
                               mp_context=mp.get_context("spawn"),
                               initializer=pin_worker, initargs=(threads,))
    try:
        queue = list(tasks)
        pending: set[Any] = set()
        while queue or pending:
            while queue and len(pending) < max(1, jobs):
                pending.add(pool.submit(run_cell, queue.pop(0)))
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                r = f.result()
                results.append(r)
                on_done(r)
        pool.shutdown(wait=True)
    except BaseException:
        _stop_workers(pool)
        raise
    finally:
        for v, old in env_before.items():
            if old is None:
                os.environ.pop(v, None)
            else:
                os.environ[v] = old
    return results


def _stop_workers(pool: Any, grace_s: float = 8.0) -> None:
    """Stop a process pool now: cancel what has not started, ask running workers to stop
    (SIGTERM: each ends its cell's runs KILLED), and kill those still alive after `grace_s`."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)


def run_ray(tasks: list[dict[str, Any]], jobs: int, threads: int, address: str | None,
            on_done: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Run tasks as Ray tasks (one CPU each) on `address`, or on a local Ray started for the sweep
    (whatever RAY_ADDRESS says); at most `jobs` tasks are in flight, on a cluster too."""
    import ray

    started = not ray.is_initialized()
    if started:
        start_ray(address, max(1, jobs), threads)
    results: list[dict[str, Any]] = []
    in_flight: list[Any] = []
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_cell)
        queue = list(tasks)
        while queue or in_flight:
            while queue and len(in_flight) < max(1, jobs):
                in_flight.append(remote.remote(queue.pop(0)))
            done, in_flight = ray.wait(in_flight, num_returns=1)
            for ref in done:
                r = ray.get(ref)
                results.append(r)
                on_done(r)
    except BaseException:
        for ref in in_flight:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
    return results
