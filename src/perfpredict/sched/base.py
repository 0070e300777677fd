"""The two things a scheduler is made of, kept apart so they compose freely (ARCHITECTURE.md):

* a :class:`Policy` *orders* the active jobs (who should run first: FIFO, SRTF, LAS, FTF, ...);
* a :class:`Mechanism` *places and sizes* them, in that order, on the cluster (GPU-proportional,
  Synergy-Tune, Equipartition, ...), returning one :class:`~perfpredict.sched.cluster.Allocation` per job
  that should run until the next decision.

The simulator calls ``policy.order`` then ``mechanism.allocate`` at every decision point and enforces the
result: allocations must fit the cluster together (it takes them on a fresh
:class:`~perfpredict.sched.cluster.Ledger`), and a non-preemptive mechanism must return every running job
with its allocation unchanged.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from perfpredict.sched.cluster import EPS, Allocation, ClusterSpec, Ledger
from perfpredict.sched.job import Job, JobState

__all__ = ["Mechanism", "Policy", "UnsupportedInput"]


class UnsupportedInput(ValueError):
    """A mechanism cannot schedule these inputs: a cluster or job outside its model (GENIE's symmetric cluster,
    a Capacity queue the job's type lacks). The user's choice, not a bug: ``run_simulation`` reports it as a
    usage error with this message."""


class Policy(ABC):
    """Orders jobs; the first should be served first."""

    name: str = "policy"
    #: True if the order can change while nothing happens (progress changes it: SRTF, LAS, FTF). Such a
    #: policy makes a round-based simulator decide every round even when no job arrived or finished.
    time_dependent: bool = False

    @abstractmethod
    def key(self, js: JobState, now: float, cluster: ClusterSpec, n_active: int) -> Any:
        """Sort key (smaller = served first); ties break by arrival, then trace position."""

    def order(self, jobs: Sequence[JobState], now: float, cluster: ClusterSpec) -> list[JobState]:
        n = len(jobs)
        return sorted(jobs, key=lambda js: (self.key(js, now, cluster, n), js.arrival_key))


class Mechanism(ABC):
    """Maps ordered jobs to allocations."""

    name: str = "mechanism"
    #: May resize, move or suspend running jobs. A non-preemptive mechanism only starts waiting jobs.
    preemptive: bool = True
    #: Whether the mechanism wants to be called every round (round-based mode) or only on arrivals and
    #: completions (event-based mode). The simulator can override.
    round_based: bool = True
    #: Every job gets exactly its requested GPUs (gang, no resizing); the simulator checks it.
    rigid: bool = False
    #: A rigid mechanism that places whole GPUs only: a demand below one GPU gets one whole device (Synergy's
    #: mechanisms and GPU-proportional). Otherwise such a demand gets that fraction of one device.
    whole_gpus: bool = False
    #: Runs a job on another number of GPUs than it asks for (moldable and malleable mechanisms): a job asking
    #: for more GPUs than the cluster has is refused only when :meth:`min_devices` do not fit.
    resizes: bool = False
    #: Also decide every ``period_s`` seconds while jobs are active (ANDREAS' periodic rescheduling), in either
    #: mode (in round mode a multiple of the round); ``SimConfig.period_s`` overrides. None: only on events (event
    #: mode) or changes (round mode).
    period_s: float | None = None

    def __init__(self) -> None:
        #: Anything worth reporting about the last decision (bound, fragmentation, ...): the simulator logs it.
        self.last_stats: dict[str, float] = {}
        #: Set by the simulator during ``allocate``: returns a copy of its ledger (running jobs taken).
        self._current: Callable[[], Ledger] | None = None

    def reset(self) -> None:
        """Forget what an earlier simulation left. The simulator calls this as a run starts, so one instance
        serves several runs alike; a mechanism that keeps state from decision to decision (a random generator,
        records per job id, which the next trace reuses) clears it here."""

    def current_ledger(self, cluster: ClusterSpec, running: Mapping[str, Allocation]) -> Ledger:
        """A ledger holding exactly the running allocations, which the caller may modify.

        For mechanisms that keep running jobs as they are and only place new ones: starting from this is
        O(servers) in the simulator (a copy of its own ledger) instead of O(running jobs).
        """
        if self._current is not None:
            return self._current()
        ledger = Ledger(cluster)
        ledger.take_all(running.values())
        return ledger

    def min_devices(self, job: Job) -> int:
        """The fewest devices ``job`` can ever run on under this mechanism, each holding the job's device memory.

        The simulator refuses (or, with ``SimConfig.oversized="drop"``, drops) a job before the run when the
        cluster has fewer GPUs that can hold it: such a job would otherwise only wait until the run stalls.
        Default: a rigid mechanism gives a gang job all its GPUs or none, so a demand of one GPU or more needs
        ``ceil(gpus)`` devices; a fraction of a GPU needs one device, and so does any job under a mechanism
        that does not say how small it may make it. Mechanisms with their own minimum size override this.
        """
        return math.ceil(job.gpus - EPS) if self.rigid and job.gpus >= 1 else 1

    @abstractmethod
    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        """Allocations for the jobs that should run now, keyed by job id.

        ``ordered``: every active job (arrived, unfinished), running or not, in policy order.
        ``running``: the current allocation of each running job (a hint for keeping jobs in place; a job
        whose GPU placement changes pays the simulator's restart overhead). Jobs left out are suspended.
        """
