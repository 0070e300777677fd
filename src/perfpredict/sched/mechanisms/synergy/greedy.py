"""Synergy-Greedy (§3.3): first fit of each job's full demand vector, in policy order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfpredict.sched.base import Mechanism
from perfpredict.sched.cluster import Allocation, ClusterSpec, Ledger
from perfpredict.sched.job import JobState
from perfpredict.sched.mechanisms.synergy.devices import _alloc, _DevicePicker, _first_fit, _fits
from perfpredict.sched.mechanisms.synergy.requests import _RequestBuilder


class SynergyGreedy(Mechanism):
    """First-fit of each job's full demand vector in policy order; a job that does not fit in every dimension
    is skipped this round (§3.3). ``last_stats``: ``placed``, ``skipped`` (jobs passed over although GPUs
    were free for them), ``idle_gpus``."""

    name = "greedy"
    rigid = True
    whole_gpus = True

    def __init__(self, threshold: float = 0.1) -> None:
        super().__init__()
        self._requests = _RequestBuilder(threshold, floor_fix=False)

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        ledger = Ledger(cluster)
        picker = _DevicePicker(running)
        out: dict[str, Allocation] = {}
        skipped = 0
        for r in self._requests.build(ordered, cluster):
            free = ledger.total_free_gpus
            if free == 0:
                break
            devices = picker.previous(ledger, r.id, r.g)
            if devices is None or not _fits(ledger, {s: len(d) for s, d in devices.items()}, r.c, r.m):
                counts = _first_fit(ledger, r.g, r.c, r.m, r.ok)
                if counts is None:
                    skipped += int(r.g <= free)
                    continue
                devices = picker.devices(ledger, r.id, counts)
            alloc = _alloc(devices, r.g, r.c, r.m, r.perf)
            ledger.take(alloc)
            out[r.id] = alloc
        self.last_stats = {"placed": float(len(out)), "skipped": float(skipped),
                           "idle_gpus": float(ledger.total_free_gpus)}
        return out
