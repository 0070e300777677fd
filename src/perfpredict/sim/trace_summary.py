"""What a trace asks of a cluster, before it is replayed (``perfpredict trace``).

A replay's result depends first on the load: a public log replayed on too many GPUs never queues, on too few it
never drains. :func:`summarize_trace` gives the figures to choose a cluster by: jobs, arrival window, GPU demand
histogram, run-time percentiles, GPU-hours asked, and, for a cluster, the *offered load* (the GPU-seconds the
jobs ask at their recorded demand divided by the cluster's GPU-seconds over the arrival window: near or above 1
the queue grows for the whole window) and the jobs no server or no cluster of that size can hold.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field

from perfpredict.sched.cluster import ClusterSpec
from perfpredict.sched.job import Job

__all__ = ["TraceSummary", "summarize_trace"]


class TraceSummary(BaseModel):
    """The figures of one trace (and, with a cluster, of the load it puts on it)."""

    trace: str = Field(description="the trace spec or file")
    jobs: int
    notes: list[str] = Field(default_factory=list, description="what the reader passed over")
    first_arrival_s: float | None = None
    last_arrival_s: float | None = None
    arrival_window_s: float = Field(0.0, description="last arrival - first arrival")
    gpu_demand: dict[str, int] = Field(default_factory=dict, description="GPUs asked -> jobs, by size")
    work_s: dict[str, float] = Field(default_factory=dict, description="run time at the recorded demand: min, "
                                     "p50, p90, p99, max, mean")
    gpu_hours: float = Field(0.0, description="sum of work x GPUs, hours")
    users: int = 0
    models: dict[str, int] = Field(default_factory=dict, description="perf-model key -> jobs")
    cluster: str | None = None
    cluster_gpus: int | None = None
    offered_load: float | None = Field(None, description="GPU-seconds asked / (cluster GPUs x arrival window); "
                                       "None for a trace whose jobs all arrive at once")
    jobs_wider_than_a_server: int | None = Field(None, description="jobs asking more GPUs than the cluster's "
                                                 "largest server has (a gang spread over servers)")
    jobs_larger_than_the_cluster: int | None = Field(None, description="jobs asking more GPUs than the cluster "
                                                     "has: simulate refuses them unless --drop-oversized or a mechanism resizes them")


def _size(g: float) -> str:
    return str(int(g)) if float(g).is_integer() else f"{g:g}"


def summarize_trace(jobs: Sequence[Job], *, trace: str = "", cluster: ClusterSpec | None = None,
                    notes: Sequence[str] = ()) -> TraceSummary:
    """The :class:`TraceSummary` of ``jobs``; with ``cluster``, the offered load and the jobs it cannot hold."""
    s = TraceSummary(trace=trace, jobs=len(jobs), notes=list(notes))
    if cluster is not None:
        s.cluster, s.cluster_gpus = cluster.name, cluster.total_gpus
        s.jobs_wider_than_a_server = s.jobs_larger_than_the_cluster = 0
    if not jobs:
        return s
    arrivals = np.array([j.arrival for j in jobs])
    gpus = np.array([j.gpus for j in jobs])
    work = np.array([j.work for j in jobs])
    s.first_arrival_s, s.last_arrival_s = float(arrivals.min()), float(arrivals.max())
    s.arrival_window_s = s.last_arrival_s - s.first_arrival_s
    # counted by the printed size: sizes that print alike (0.1 + 0.2 and 0.3) are one bar, not one overwritten
    by_size = Counter(_size(g) for g in gpus.tolist())
    s.gpu_demand = dict(sorted(by_size.items(), key=lambda kv: float(kv[0])))
    p50, p90, p99 = np.percentile(work, [50, 90, 99])
    s.work_s = {"min": float(work.min()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
                "max": float(work.max()), "mean": float(work.mean())}
    s.gpu_hours = float(np.sum(work * gpus) / 3600.0)
    s.users = len({j.user for j in jobs if j.user})
    s.models = dict(Counter(j.model for j in jobs).most_common())
    if cluster is not None:
        if s.arrival_window_s > 0:
            s.offered_load = float(np.sum(work * gpus) / (cluster.total_gpus * s.arrival_window_s))
        widest = max(server.gpus for server in cluster.servers)
        s.jobs_wider_than_a_server = int(np.sum(gpus > widest))
        s.jobs_larger_than_the_cluster = int(np.sum(gpus > cluster.total_gpus))
    return s
