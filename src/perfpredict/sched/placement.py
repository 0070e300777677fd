"""Placement helpers shared by the mechanisms: which jobs fit by GPU count, which devices they get.

Placement is *sticky*: a job that was running keeps its devices when they are still free (Synergy's lease
renewal, §4.3), so re-deciding every round does not migrate jobs for nothing. New jobs then go where they
fragment the cluster least: the single server with the fewest free GPUs that still fits (best fit), or, for
a job larger than any server's free GPUs, the fewest servers (largest free first).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from perfpredict.sched.cluster import EPS, Allocation, Ledger, Share
from perfpredict.sched.job import JobState

__all__ = ["choose_devices", "place_sticky", "proportional_allocation", "select_by_gpus", "whole_gpus"]

DevicesByServer = dict[int, list[int]]


def select_by_gpus(ordered: Sequence[JobState], total_gpus: float) -> list[JobState]:
    """The jobs to run, in order: each job whose GPU demand still fits the remaining GPU count is taken;
    one that does not is skipped (not blocking those behind it). Stops when no GPU is left."""
    left = float(total_gpus)
    out: list[JobState] = []
    for js in ordered:
        if left < EPS:
            break
        if js.job.gpus <= left + EPS:
            out.append(js)
            left -= js.job.gpus
    return out


def whole_gpus(gpus: float) -> int:
    """The whole devices a GPU demand occupies on a whole-GPU mechanism: at least 1, fractions rounded up."""
    return max(1, math.ceil(gpus - EPS))


def choose_devices(ledger: Ledger, n: int, prefer: Allocation | None = None,
                   single_server: bool = False, device_mem_gb: float = 0.0) -> DevicesByServer | None:
    """Whole free devices for an ``n``-GPU job: ``prefer``'s devices if they are all free, else best fit on one
    server, else (unless ``single_server``) spread over the fewest servers. Servers whose devices are smaller
    than ``device_mem_gb`` are not used. None if the devices do not exist."""
    if prefer is not None and not prefer.is_fractional and abs(prefer.gpus - n) < EPS:
        if all(ledger.device_free[s.server][d] >= 1 - EPS for s in prefer.shares for d in s.devices):
            return {s.server: list(s.devices) for s in prefer.shares}
    free = list(zip(ledger.free_whole, range(ledger.spec.n_servers)))
    if device_mem_gb > 0:
        free = [(f, i) for f, i in free if ledger.spec.servers[i].gpu_mem_gb + EPS >= device_mem_gb]
    fitting = [(f, i) for f, i in free if f >= n]
    if fitting:
        _, i = min(fitting)
        return {i: ledger.free_devices(i)[:n]}
    if single_server:
        return None
    chosen: DevicesByServer = {}
    need = n
    for f, i in sorted(free, key=lambda t: (-t[0], t[1])):
        if need <= 0 or f == 0:
            break
        take = min(f, need)
        chosen[i] = ledger.free_devices(i)[:take]
        need -= take
    return chosen if need <= 0 else None


def proportional_allocation(ledger: Ledger, devices: DevicesByServer, device_mem_gb: float = 0.0) -> Allocation:
    """Whole GPUs with each server's GPU-proportional CPUs and memory (its CPUs/GPU and GB/GPU per device)."""
    return Allocation(tuple(
        Share(server=srv, gpus=float(len(devs)), cpus=len(devs) * ledger.spec.servers[srv].cpus_per_gpu,
              mem_gb=len(devs) * ledger.spec.servers[srv].mem_per_gpu, devices=tuple(devs), device_mem_gb=device_mem_gb)
        for srv, devs in sorted(devices.items()) if devs))


def place_sticky(selected: Sequence[JobState], ledger: Ledger, running: Mapping[str, Allocation],
                 build: Callable[[JobState, Ledger, Allocation | None], Allocation | None]) -> dict[str, Allocation]:
    """Place ``selected`` on ``ledger``: previously running jobs first (so they can keep their devices), then
    the rest, each in the given order. ``build(js, ledger, previous)`` returns an allocation that fits the
    ledger (or None to skip the job); it is taken immediately."""
    out: dict[str, Allocation] = {}
    first = [js for js in selected if js.id in running]
    rest = [js for js in selected if js.id not in running]
    for js in (*first, *rest):
        alloc = build(js, ledger, running.get(js.id))
        if alloc is None:
            continue
        ledger.take(alloc)
        out[js.id] = alloc
    return out
