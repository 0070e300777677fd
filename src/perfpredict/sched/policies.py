"""Job-ordering policies: FIFO, SRTF, LAS, FTF (Synergy §5), Rigid Shortest (seed 002 §IV-C), EDF and Priority
Scheduling (ANDREAS §V-B's first-principle baselines)."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from perfpredict.sched.base import Policy
from perfpredict.sched.cluster import ClusterSpec
from perfpredict.sched.job import JobState

__all__ = ["EDF", "FIFO", "FTF", "LAS", "POLICIES", "SRTF", "PriorityScheduling", "ShortestFirst", "make_policy"]


class FIFO(Policy):
    """First come, first served (by arrival)."""

    name = "fifo"

    def key(self, js: JobState, now: float, cluster: ClusterSpec, n_active: int) -> float:
        return js.job.arrival

    def order(self, jobs: Sequence[JobState], now: float, cluster: ClusterSpec) -> list[JobState]:
        return sorted(jobs, key=_ARRIVAL)  # same order as the generic key, without a Python call per job


_ARRIVAL = attrgetter("arrival_key")


class SRTF(Policy):
    """Shortest remaining time first: remaining work at the reference allocation (what the trace knows)."""

    name = "srtf"
    time_dependent = True

    def key(self, js: JobState, now: float, cluster: ClusterSpec, n_active: int) -> float:
        return js.remaining_at(now)


class LAS(Policy):
    """Least attained service first (Tiresias-style): GPU-seconds received so far."""

    name = "las"
    time_dependent = True

    def key(self, js: JobState, now: float, cluster: ClusterSpec, n_active: int) -> float:
        attained = js.attained
        if js.allocation is not None:
            attained += js.allocation.gpus * max(0.0, now - js.updated_at)
        return attained


class FTF(Policy):
    """Finish-time fairness (Themis): serve the job whose ρ = T_shared / T_isolated is largest.

    T_shared is the time since arrival plus the remaining work at the reference speed; T_isolated is the
    job's work run on its fair 1/N share of the cluster, i.e. slowed by ``max(1, N·g / G)`` for N active
    jobs of demand g on G GPUs.
    """

    name = "ftf"
    time_dependent = True

    def key(self, js: JobState, now: float, cluster: ClusterSpec, n_active: int) -> float:
        contention = max(1.0, n_active * js.job.gpus / max(1, cluster.total_gpus))
        t_shared = (now - js.job.arrival) + js.remaining_at(now)
        return -t_shared / (js.job.work * contention)


class ShortestFirst(Policy):
    """Rigid Shortest (seed 002 §V-B: tasks "sorted by v_k in an ascending order"): the smallest computational
    volume first, ``v_k`` being the task's whole run time alone on one GPU (§V-A), regardless of progress
    (non-preemptive use). From the job's speedup curve: its work at the reference size ``Job.gpus`` over
    ``S(1) / S(gpus)``, as the moldable mechanisms' ``v_rem`` is (work × GPUs only under a linear curve)."""

    name = "shortest"

    def key(self, js: JobState, now: float, cluster: ClusterSpec, n_active: int) -> float:
        return js.job.work / js.perf.gpu_factor(1.0, js.job.gpus)


class EDF(Policy):
    """Earliest deadline first: earliest due date (``Job.deadline``) first; jobs without one come last."""

    name = "edf"

    def key(self, js: JobState, now: float, cluster: ClusterSpec, n_active: int) -> float:
        d = js.job.deadline
        return float("inf") if d is None else d


class PriorityScheduling(Policy):
    """Priority scheduling: the highest tardiness weight ω_j (``Job.weight``) first, then the highest
    ``Job.priority`` (ANDREAS' PS baseline orders by the jobs' tardiness weights)."""

    name = "priority"

    def key(self, js: JobState, now: float, cluster: ClusterSpec, n_active: int) -> tuple[float, int]:
        return -js.job.weight, -js.job.priority


POLICIES: dict[str, type[Policy]] = {p.name: p for p in (FIFO, SRTF, LAS, FTF, ShortestFirst, EDF,
                                                         PriorityScheduling)}


def make_policy(name: str) -> Policy:
    if not isinstance(name, str):
        raise ValueError(f"a policy is named by a string ({', '.join(POLICIES)}), got {name!r}")
    try:
        return POLICIES[name.lower()]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}") from None
