"""GPU-proportional allocation: the baseline every Synergy result is measured against (seed 001 §2).

Each job gets its GPU demand and, with every GPU, that server's CPUs and memory per GPU (3 CPUs and 62.5 GB
on Synergy's servers), whatever the job would do with more or less. Jobs are taken in policy order; one
whose GPU demand exceeds the GPUs left is skipped, not waited for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfpredict.sched.base import Mechanism
from perfpredict.sched.cluster import Allocation, ClusterSpec, Ledger
from perfpredict.sched.job import JobState
from perfpredict.sched.placement import (
    choose_devices,
    place_sticky,
    proportional_allocation,
    select_by_gpus,
    whole_gpus,
)

__all__ = ["GpuProportional"]


class GpuProportional(Mechanism):
    """Whole GPUs only: a fractional request (< 1) gets one whole GPU."""

    name = "proportional"
    rigid = True
    whole_gpus = True

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        selected = select_by_gpus(ordered, cluster.total_gpus)

        def build(js: JobState, led: Ledger, prev: Allocation | None) -> Allocation | None:
            if prev is not None and led.fits(prev) is None:
                return prev  # lease renewed: same GPUs, same proportional CPUs and memory
            devices = choose_devices(led, whole_gpus(js.job.gpus), prefer=prev, device_mem_gb=js.perf.device_mem_gb)
            return None if devices is None else proportional_allocation(led, devices, js.perf.device_mem_gb)

        if sum(1 for js in selected if js.id in running) == len(running):
            # Every running job keeps its lease: only the newly selected ones need placing, in the free space.
            out = dict(running)
            ledger = self.current_ledger(cluster, running)
            for js in selected:
                if js.id not in out:
                    alloc = build(js, ledger, None)
                    if alloc is not None:
                        ledger.take(alloc)
                        out[js.id] = alloc
            return out
        return place_sticky(selected, Ledger(cluster), running, build)
