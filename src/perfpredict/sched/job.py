"""Jobs as a scheduler sees them: what was asked for (:class:`Job`) and where it stands (:class:`JobState`).

Work is measured in *reference seconds*: ``Job.work`` is how long the job runs at its reference allocation
(its GPU demand with the reference CPUs and memory per GPU of its :class:`~perfpredict.sched.perf.PerfModel`),
so a trace's "duration" column is the work, and a job whose allocation makes it 1.5× faster finishes its
work in duration / 1.5. The perf model turns an allocation into that speed factor.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from perfpredict.sched.cluster import Allocation, ClusterSpec
    from perfpredict.sched.perf import PerfModel

__all__ = ["Job", "JobState"]


#: The latest arrival a trace may have (seconds from its start): beyond it, the clock's rounding eats jobs' work.
MAX_ARRIVAL_S = 1e11


@dataclass(frozen=True)
class Job:
    """One training job of a trace.

    ``gpus`` is the demand: a gang (all or nothing) for rigid mechanisms, the requested size for moldable
    ones, which may choose any size in ``[min_gpus, max_gpus]`` (fractions = shared devices). ``model`` keys
    the job's :class:`~perfpredict.sched.perf.PerfModel` in the simulator's card provider. ``task`` is the
    workload class (image / language / speech, Synergy's split). ``user`` groups tasks into jobs for flow
    time (seed 002 §III-C). ``priority``, ``deadline`` and ``qos`` are for the policies that use them.

    ANDREAS (seed 000): ``deadline`` is the due date d_j (absolute, on the trace clock), ``weight`` the tardiness
    weight ω_j (cost per hour of tardiness, EUR/h in the energy-cost metrics), and ``epochs`` the number of
    training epochs the work is made of: a checkpoint is taken after every epoch, so a job that is preempted
    or migrated restarts from its last completed epoch (None: progress is never lost).
    """

    id: str
    arrival: float
    gpus: float
    work: float
    model: str = ""
    task: str = ""
    user: str = ""
    min_gpus: float | None = None
    max_gpus: float | None = None
    priority: int = 0
    deadline: float | None = None
    qos: str | None = None
    weight: float = 1.0
    epochs: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str):
            raise ValueError(f"job id must be a string, got {self.id!r}")
        # A NaN or infinite arrival, size or work would make the job vanish from the result, not fail.
        for name in ("arrival", "gpus", "work", "min_gpus", "max_gpus", "deadline", "weight"):
            v = getattr(self, name)
            if v is None and name in ("min_gpus", "max_gpus", "deadline"):
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise ValueError(f"job {self.id}: {name} must be a finite number, got {v!r}")
        for name in ("min_gpus", "max_gpus"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"job {self.id}: {name} must be > 0, got {v}")
        if self.epochs is not None and (isinstance(self.epochs, bool) or not isinstance(self.epochs, numbers.Real)
                                        or self.epochs != int(self.epochs)):
            raise ValueError(f"job {self.id}: epochs must be a whole number, got {self.epochs!r}")
        if not self.arrival >= 0:
            raise ValueError(f"job {self.id}: arrival must be >= 0, got {self.arrival}")
        if self.arrival > MAX_ARRIVAL_S:
            # a job's work would be lost to rounding at such times (1.7e18 ns since 1970 ran every job in 0 s)
            raise ValueError(f"job {self.id}: arrival {self.arrival:g} s is past {MAX_ARRIVAL_S:g} s (3,000 years): "
                             f"arrivals are seconds from the trace's start (shift the clock to the first arrival)")
        if isinstance(self.priority, bool) or not isinstance(self.priority, numbers.Integral) \
                or not -2 ** 63 <= self.priority < 2 ** 63:
            raise ValueError(f"job {self.id}: priority must be a whole number within 64 bits, got {self.priority!r}")
        if not self.gpus > 0:
            raise ValueError(f"job {self.id}: GPU demand must be > 0, got {self.gpus}")
        if not self.work > 0:
            raise ValueError(f"job {self.id}: work must be > 0, got {self.work}")
        lo, hi = self.min_gpus, self.max_gpus
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"job {self.id}: min_gpus {lo} > max_gpus {hi}")
        if self.deadline is not None and self.deadline < self.arrival:
            # the due date is on the trace clock, like arrival: one before it is a unit or column mix-up
            raise ValueError(f"job {self.id}: deadline {self.deadline:g} s is before its arrival at {self.arrival:g} s "
                             f"(both are seconds from the trace start)")
        if not self.weight >= 0:
            raise ValueError(f"job {self.id}: tardiness weight must be >= 0, got {self.weight}")
        if self.epochs is not None and self.epochs < 1:
            raise ValueError(f"job {self.id}: epochs must be >= 1, got {self.epochs}")

    @property
    def epoch_work(self) -> float | None:
        """Reference seconds per epoch (the checkpoint granularity), None without epochs."""
        return None if self.epochs is None else self.work / self.epochs


@dataclass
class JobState:
    """A job in the simulator: its progress, its allocation, and the history metrics are computed from.

    ``remaining`` is work left in reference seconds as of ``updated_at``; while the job runs it falls at
    ``rate`` per second. ``attained`` is GPU-seconds received (LAS's priority). ``estimated_remaining`` is
    what SRTF sees (remaining work at the reference allocation, i.e. the trace's knowledge).
    """

    job: Job
    perf: PerfModel
    remaining: float = field(init=False)
    updated_at: float = field(init=False)
    allocation: Allocation | None = None
    rate: float = 0.0
    attained: float = 0.0
    first_start: float | None = None
    finish: float | None = None
    preemptions: int = 0
    restarts: int = 0
    #: time the job stops being charged preemption/start overhead (no progress until then)
    overhead_until: float = 0.0
    #: total time spent running (allocated), for queueing delay = JCT - run time
    run_time: float = 0.0
    #: integral of allocated CPUs and memory over time (for per-job averages)
    cpu_seconds: float = 0.0
    mem_gb_seconds: float = 0.0
    version: int = 0
    #: work (reference seconds) lost to restarts from the last epoch checkpoint (preemption or migration)
    lost_work: float = 0.0
    #: energy cost (EUR) of the GPUs held so far, and its rate while the current allocation holds (EUR/s);
    #: the simulator sets the rate from the servers' ``energy_cost`` (per GPU-hour)
    energy_cost: float = 0.0
    cost_rate: float = 0.0
    #: GPU sharing (Horus, seed 004): times the job failed with an out-of-memory error on a shared device, and
    #: the device memory (GB) to reserve for it from then on (None: what its perf model predicts; the simulator
    #: also raises ``perf.device_mem_gb`` to it, so that every mechanism reserves it)
    ooms: int = 0
    mem_request_gb: float | None = None
    #: the job's place among the simulated jobs in arrival order, ties in trace order (the simulator numbers
    #: them): jobs arriving together are served in trace order, not in their ids' string order ("10" before
    #: "2"); states made without it tie-break by id
    seq: int = 0

    def __post_init__(self) -> None:
        self.remaining = self.job.work
        self.updated_at = self.job.arrival
        self.id: str = self.job.id
        #: (arrival, trace position, id): FIFO's order and every policy's tie-break, precomputed (sorting is hot
        #: in the simulator)
        self.arrival_key: tuple[float, int, str] = (self.job.arrival, self.seq, self.job.id)

    def rate_on(self, alloc: Allocation, cluster: ClusterSpec | None = None) -> float:
        """This job's speed on ``alloc``, relative to its reference allocation (its requested GPUs); with
        ``cluster``, a perf model with per-GPU-type speeds also accounts for the servers' GPU types."""
        return self.perf.rate(alloc, self.job.gpus, cluster)

    @property
    def device_mem_request_gb(self) -> float:
        """Device memory a placement should reserve for this job: the request raised after an OOM failure, else
        its perf model's (predicted) footprint."""
        return self.perf.device_mem_gb if self.mem_request_gb is None else self.mem_request_gb

    def checkpoint_remaining(self, t: float | None = None) -> float:
        """Work left (at time ``t``, default ``updated_at``) if the job restarted from its last epoch
        checkpoint: the remaining work rounded up to a whole number of epochs."""
        rem = self.remaining if t is None else self.remaining_at(t)
        epoch = self.job.epoch_work
        if epoch is None or rem <= 0:
            return rem
        done = self.job.work - rem
        kept = math.floor(done / epoch + 1e-9) * epoch
        return max(rem, self.job.work - kept)

    def rollback_to_checkpoint(self) -> float:
        """Drop the progress since the last completed epoch (call after ``advance``); returns the work lost."""
        ckpt = self.checkpoint_remaining()
        lost = ckpt - self.remaining
        if lost > 0:
            self.remaining = ckpt
            self.lost_work += lost
        return max(0.0, lost)

    @property
    def running(self) -> bool:
        return self.allocation is not None

    @property
    def done(self) -> bool:
        return self.finish is not None

    def remaining_at(self, t: float) -> float:
        """Work left at time ``t`` (≥ ``updated_at``) if nothing changes in between."""
        if self.allocation is None:
            return self.remaining
        productive = max(0.0, t - max(self.updated_at, self.overhead_until))
        return max(0.0, self.remaining - self.rate * productive)

    def advance(self, t: float) -> None:
        """Bring the accounting up to time ``t``."""
        dt = t - self.updated_at
        if dt < 0:
            raise ValueError(f"job {self.id}: time went backwards ({self.updated_at} -> {t})")
        if self.allocation is not None and dt > 0:
            self.remaining = self.remaining_at(t)
            self.attained += self.allocation.gpus * dt
            self.run_time += dt
            self.cpu_seconds += self.allocation.cpus * dt
            self.mem_gb_seconds += self.allocation.mem_gb * dt
            self.energy_cost += self.cost_rate * dt
        self.updated_at = t
