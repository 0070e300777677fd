"""Synergy-Tune (§4.2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfpredict.sched.base import Mechanism
from perfpredict.sched.cluster import Allocation, ClusterSpec
from perfpredict.sched.job import JobState
from perfpredict.sched.mechanisms.synergy.devices import _best_fit, _DevicePicker, _fits, _gpu_best_fit
from perfpredict.sched.mechanisms.synergy.packer import _Packer, _place_with_repair
from perfpredict.sched.mechanisms.synergy.requests import _Req, _RequestBuilder


class SynergyTune(Mechanism):
    """Synergy-Tune (§4.2).

    1. Runnable set: the top jobs in policy order whose GPU demands fit the cluster's GPUs
       (as :func:`~perfpredict.sched.placement.select_by_gpus`); CPU and memory never exclude a job.
    2. Jobs that were running and whose devices are still free are placed first, on those devices (lease
       renewal, §4.3); the rest follow. Each group is sorted by GPU, then CPU, then memory demand (largest
       first) and placed best-fit: the server with the least free resources that fits the whole demand
       vector; a job that needs several servers for its GPUs goes on that minimum number of servers with its
       CPU/memory split in proportion to GPUs.
    3. If it does not fit: (1) a demand above the proportional share is switched to the fallback vector and
       retried; (2) otherwise (or if still no fit) the job goes on the GPU-best-fit servers, and jobs there
       holding more than their share are switched to their fallback — least throughput lost per resource
       freed first — until it fits. Every placed job is at its demand, a grid point above it (leftovers) or
       its fallback, all at least as fast as the GPU-proportional share, so no job runs below it.
    4. ``redistribute=True`` (default): CPU and memory left free are then handed, in policy order, to jobs
       that run faster with more (each moves to the fastest grid point that fits what is free on its
       servers); the paper does this at low load (§5.3). ``False`` keeps jobs at their demand vectors.

    ``last_stats``: ``placed``, ``reverted`` (switches to the share to make room), ``fallback`` (jobs
    placed at their fallback in step 3.1), ``upgraded`` (leftover hand-outs), ``total_rate``.

    Speed: what an instance keeps between calls is only caches keyed by immutable inputs (each job's request
    per perf model and GPU demand on the cluster; what it derived from the running allocations, reused while
    a job's allocation is the very same object; the allocations it returned, handed back unchanged when a
    job's devices and amounts are unchanged), so a decision depends only on the call's arguments.
    ``tests/test_synergy_mechanisms.py`` pins the decisions against ones recorded before these caches.
    """

    name = "tune"
    rigid = True
    whole_gpus = True

    def __init__(self, threshold: float = 0.1, redistribute: bool = True) -> None:
        super().__init__()
        self.redistribute = redistribute
        self._requests = _RequestBuilder(threshold, floor_fix=True)
        #: the last decision's allocations and how they were built (see _Packer.result), and what the device
        #: picker derived from the running allocations (see _DevicePicker): kept across decisions
        self._allocs: dict[str, tuple[tuple, Allocation]] = {}
        self._picker_memo: dict[str, tuple[Allocation, tuple | None]] = {}

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        reqs = self._requests.runnable(ordered, cluster)
        packer = _Packer(cluster)
        picker = _DevicePicker(running, self._picker_memo)
        fallback = 0

        def size_key(r: _Req) -> tuple:
            return (-r.g, -r.g * r.c, -r.g * r.m, r.idx)

        sticky, fresh = [], []
        for r in reqs:
            (sticky if r.id in running else fresh).append(r)
        for r in sorted(sticky, key=size_key) + sorted(fresh, key=size_key):
            led = packer.ledger
            prev = picker.previous_placement(led, r.id, r.g)
            if prev:
                devices, counts = prev
                if _fits(led, counts, r.c, r.m):  # (what _place_with_repair tries first)
                    packer.place(r, devices, r.c, r.m, counts)
                    continue
                if _place_with_repair(packer, r, counts, picker, r.c, r.m, devices) is not None:
                    continue
            elif prev is False and (prev_devices := picker.previous(led, r.id, r.g)) is not None:
                counts = {s: len(d) for s, d in prev_devices.items()}
                if _place_with_repair(packer, r, counts, picker, r.c, r.m) is not None:
                    continue
            counts = _best_fit(led, r.g, r.c, r.m, r.ok)
            c, m = r.c, r.m
            if counts is None and r.above_prop(packer.pc, packer.pm):  # step (1)
                c, m = r.fb_c, r.fb_m
                counts = _best_fit(led, r.g, c, m, r.ok)
                fallback += counts is not None
            if counts is not None:
                packer.place(r, picker.devices(led, r.id, counts), c, m)
                continue
            counts = _gpu_best_fit(led, r.g, r.ok)  # step (2)
            if counts is not None and packer.ensure(counts, c, m, exclude={r.id}) and _fits(led, counts, c, m):
                packer.place(r, picker.devices(led, r.id, counts), c, m)
        upgraded = packer.hand_out_leftovers([r.id for r in reqs]) if self.redistribute else 0
        self.last_stats = {"placed": float(len(packer.placed)), "reverted": float(packer.reverted),
                           "fallback": float(fallback), "upgraded": float(upgraded),
                           "total_rate": float(sum(p.req.gf * p.w() for p in packer.placed.values()))}
        return packer.result(self._allocs)
