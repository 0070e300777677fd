"""A discrete-event simulator of a GPU cluster running a trace under a (policy, mechanism) pair.

Events are arrivals, completions and scheduling decisions. Two modes (``SimConfig.mode``):

* ``"round"`` (Synergy, seed 001 §4.3): decisions happen on round boundaries (``round_s``, 300 s). Jobs that
  arrive or finish mid-round wait for the next boundary; at each boundary the mechanism re-decides every
  allocation (lease renewal: a job that keeps its GPUs keeps running; one that loses them is suspended). A
  boundary where nothing happened since the last decision is skipped unless the policy's order moves with
  time and jobs are waiting (SRTF, LAS, FTF), so a quiet cluster costs nothing to simulate.
* ``"event"`` (moldable/malleable, seed 002): a decision right after every batch of arrivals/completions.

``"auto"`` takes the mechanism's ``round_based`` flag.

Periodic rescheduling (ANDREAS, seed 000: the optimizer runs on arrivals, completions *and* periodically):
with ``SimConfig.period_s`` (or the mechanism's ``period_s``) set, there is also a decision at every multiple
of the period while jobs are active: on the period's grid in event mode; in round mode the period must be a
multiple of the round (a decision at each of those boundaries, quiet or not), since round mode decides on
boundaries only.

Between events each running job progresses at the rate its perf model gives for its allocation (reference
seconds of work per second, :meth:`perfpredict.sched.job.JobState.rate_on`), so completion times are exact,
not stepped. A job that starts, resumes, or whose GPU placement changes pays ``restart_overhead_s`` of no
progress (``start_overhead_s`` the first time); a CPU/memory resize on the same GPUs is free (Synergy
resizes in place). An overhead cut short by the next change (the job is suspended or moved again before it is
paid) is time lost: the next start pays its own overhead, not the rest of the one it interrupted, since that
restart never completes. A job with ``epochs`` restarts from its last completed epoch when it is preempted or its
placement changes: the progress since that checkpoint is lost (``JobState.lost_work``). Each job's
``energy_cost`` integrates its GPUs' ``ServerSpec.energy_cost`` (per GPU-hour) over the time it holds them.
A mechanism with a ``pop_wakeups()`` method may also ask for decisions at given times (returned after each
decision; Horus's PAB baseline measures a job's effect at the end of its warm-up).

Every decision is checked: allocations must fit the cluster together (the simulator keeps its own
:class:`~perfpredict.sched.cluster.Ledger`), refer to active jobs, give each rigid job its GPU demand when the
mechanism says it is rigid, and a non-preemptive mechanism must leave running jobs untouched; a violation is a
:class:`SimulationError` naming the mechanism, not a silently wrong result.

GPU sharing (Horus, seed 004): with ``SimConfig.sharing`` (:class:`~perfpredict.sim.sharing.Sharing`) the
simulator also accounts each device's measured utilisation and memory: jobs time-sharing a device (shared
shares) slow each other down by the cumulative utilisation, a device whose jobs' measured memory exceeds it
fails the jobs placed last (out of memory; they are resubmitted after a delay with a larger memory request),
and the NVML-style busy time of the devices is recorded. See :mod:`perfpredict.sim.sharing`.

Deterministic: no randomness here (traces carry the seed); ties break by job arrival, then position in the trace.
"""

from __future__ import annotations

import copy
import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from perfpredict.sched.base import Mechanism, Policy
from perfpredict.sched.cluster import (
    EPS,
    Allocation,
    CapacityError,
    ClusterSpec,
    Ledger,
)
from perfpredict.sched.job import Job, JobState
from perfpredict.sched.perf import PerfModel
from perfpredict.sched.placement import whole_gpus

if TYPE_CHECKING:
    from perfpredict.sim.sharing import Sharing

__all__ = ["SimConfig", "SimResult", "SimulationError", "simulate"]


def _add_note(e: BaseException, note: str) -> None:
    """``e.add_note(note)`` where Python has it (3.11 on); on 3.10 the exception goes on as it was."""
    add = getattr(e, "add_note", None)
    if callable(add):
        add(note)


class SimulationError(RuntimeError):
    """The simulation cannot go on: a mechanism broke a rule, or the inputs contradict each other."""


#: The shortest round or decision period (s) a run takes.
MIN_PERIOD_S = 1e-3


def _off_round_grid(period_s: float, round_s: float) -> bool:
    """Whether a decision period puts decisions off the round grid (is not a whole number >= 1 of rounds)."""
    k = period_s / round_s
    return round(k) < 1 or abs(k - round(k)) > 1e-9 * k


@dataclass(frozen=True)
class SimConfig:
    mode: Literal["auto", "round", "event"] = "auto"
    round_s: float = 300.0
    start_overhead_s: float = 0.0
    restart_overhead_s: float = 0.0
    #: stop at this simulated time (jobs not finished by then are reported as unfinished)
    max_time_s: float | None = None
    #: jobs the cluster can never run (a GPU demand above its GPUs, device memory above its largest GPU, more
    #: GPUs that hold the job than it has for the smallest size the mechanism runs it on, ``Mechanism.min_devices``,
    #: or a GPU type the job's model has no speed for): "error" (default) or "drop" (reported in the result)
    oversized: Literal["error", "drop"] = "error"
    #: stop as soon as every job with one of these ids has finished (the others still active are reported as
    #: unfinished; those not yet arrived are left out). Synergy's simulator measures a window of jobs this
    #: way: arrivals go on, keeping the cluster loaded, until the window's last job completes (seed 001 §5.1).
    stop_after: frozenset[str] | None = None
    #: also decide every period_s seconds while jobs are active (default: the mechanism's ``period_s``)
    period_s: float | None = None
    #: GPU sharing: measured utilisation/memory per job, interference and OOM (None: devices are not shared)
    sharing: Sharing | None = None

    def __post_init__(self) -> None:
        # Checked here, not where they are used: a negative overhead would finish jobs before their work allows,
        # a negative max_time_s would drop every job from the result, and round_s = 0 divides by zero.
        def finite(name: str, v, lo: float, strict: bool = False) -> None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or (v <= lo if strict else v < lo):
                raise ValueError(f"SimConfig.{name} must be a finite number {'>' if strict else '>='} {lo:g}, "
                                 f"got {v!r}")

        if self.mode not in ("auto", "round", "event"):
            raise ValueError(f"SimConfig.mode must be auto, round or event, got {self.mode!r}")
        if self.oversized not in ("error", "drop"):
            raise ValueError(f"SimConfig.oversized must be 'error' or 'drop', got {self.oversized!r}")
        # a round much shorter than a millisecond never moves the clock on (t + R == t) or takes for ever
        finite("round_s", self.round_s, MIN_PERIOD_S)
        finite("start_overhead_s", self.start_overhead_s, 0)
        finite("restart_overhead_s", self.restart_overhead_s, 0)
        if self.max_time_s is not None:
            finite("max_time_s", self.max_time_s, 0)
        if self.period_s is not None:
            finite("period_s", self.period_s, MIN_PERIOD_S)
            if self.mode == "round" and _off_round_grid(self.period_s, self.round_s):
                raise ValueError(f"SimConfig.period_s ({self.period_s:g} s) must be a multiple of round_s "
                                 f"({self.round_s:g} s) in round mode, where decisions happen on round boundaries")
        if isinstance(self.stop_after, str):
            raise ValueError("SimConfig.stop_after is a set of job ids, not a string")


@dataclass
class SimResult:
    finished: list[JobState]
    unfinished: list[JobState]
    dropped: list[Job]
    #: (time, GPUs, CPUs, memory GB) allocated, after every change; piecewise constant
    usage: list[tuple[float, float, float, float]]
    cluster: ClusterSpec
    policy: str
    mechanism: str
    mode: str
    decisions: int = 0
    decision_time_s: float = 0.0
    wall_s: float = 0.0
    #: the simulated time the run stopped at: the last event the loop handled, not the last completion. With every
    #: job finished that is the last completion in event mode, but in round mode the round boundary at or after it
    #: (the decision the completion asked for), or a mechanism's later wake-up; with ``max_time_s`` that time; with
    #: ``stop_after`` the measured jobs' last completion; on a stall the time it was declared. Makespan and
    #: utilisation do not use it (:func:`~perfpredict.sim.metrics.metrics_from_result` spans the first arrival to
    #: the last finish); ``metrics.json`` has it as ``simulation.end_time_s``.
    end_time: float = 0.0
    mechanism_stats: list[dict] = field(default_factory=list)
    #: with sharing: (time, busy GPUs) after every change, a device counting min(1, cumulative utilisation)
    busy: list[tuple[float, float]] = field(default_factory=list)
    #: with sharing: out-of-memory failures, the largest measured memory / capacity of any device after each
    #: decision (<= 1: the OOM case resolved) and before resolution (> 1 when something ran out of memory),
    #: and the per-device snapshots when ``Sharing.record`` is set
    oom_events: int = 0
    max_mem_frac: float = 0.0
    max_mem_frac_attempted: float = 0.0
    device_log: list[tuple] = field(default_factory=list)
    #: why the run stopped with jobs left that could never finish (None: it did not stall), e.g. a cluster on
    #: which the mechanism's allocations give those jobs no progress
    stall: str | None = None

    @property
    def states(self) -> list[JobState]:
        return self.finished + self.unfinished


#: decisions in a row with nothing progressing and nothing left to arrive before a run is declared stalled: a
#: randomised mechanism (ANDREAS' RG) gets several tries, and a periodic one cannot loop for ever
STALL_DECISIONS = 10
#: Every this many decisions, once every job has arrived, the run checks that work gets done: an active job must
#: get further (reference seconds of work done) than at any earlier check, or a job finish, within
#: NO_PROGRESS_CHECKS checks. Otherwise preemptions roll the work back to checkpoints, or
#: restart overheads eat it, as fast as it is done (LAS swapping two one-epoch jobs every round), and the run
#: would go on for ever.
PROGRESS_CHECK_DECISIONS = 1000
#: (10 stopped two ANDREAS runs, re-planning every minute with start overheads, that end after ~16 800 decisions)
NO_PROGRESS_CHECKS = 50
#: A job that ran out of device memory this many times is given up: a mechanism that places it again and again
#: on GPUs that cannot hold it (one that ignores the job's card, whose device memory each OOM raises, §4.2.3)
#: would otherwise retry it for ever.
OOM_GIVE_UP = 50
#: How much more device memory (GB) than the whole GPU a job asks for after running out of it with the GPU to
#: itself: Horus resubmits with "equal or greater" than the memory that was available; equal would let it back
#: onto a GPU of that size, where it fails again. (Failing beside other jobs, it asks for what was left to it.)
OOM_REQUEST_MARGIN_GB = 1e-3

# Event kinds, in the order they are handled at equal times: completions free resources before arrivals are
# queued, and both happen before the decision at that instant.
_COMPLETION, _ARRIVAL = 0, 1


def _owed_gpus(gpus: float, whole_only: bool) -> float:
    """What a rigid mechanism owes a demand: whole GPUs (rounded up), and below one GPU the fraction itself, or
    one whole GPU from a mechanism that places whole GPUs only (:attr:`Mechanism.whole_gpus`)."""
    return gpus if gpus < 1 and not whole_only else float(whole_gpus(gpus))


class _Sim:
    def __init__(self, jobs: Sequence[Job], cluster: ClusterSpec, policy: Policy, mechanism: Mechanism,
                 perf_for: Callable[[Job], PerfModel], cfg: SimConfig,
                 on_decision: Callable[[float, int, int], None] | None) -> None:
        self.cluster, self.policy, self.mech, self.cfg = cluster, policy, mechanism, cfg
        self.mode = cfg.mode if cfg.mode != "auto" else ("round" if mechanism.round_based else "event")
        self.on_decision = on_decision
        #: set by run() when jobs are left that can never finish (SimResult.stall)
        self.stall: str | None = None
        self.dropped: list[Job] = []
        drop_reasons: list[str] = []

        def unrunnable(j: Job, reason: str) -> None:
            """A job the cluster can never run: dropped (``oversized="drop"``) or refused."""
            if cfg.oversized != "drop":
                raise SimulationError(f"{reason} (to leave such jobs out and count them: --drop-oversized, "
                                      "SimConfig(oversized='drop'))")
            self.dropped.append(j)
            drop_reasons.append(reason)

        ids = set()
        kept: list[Job] = []
        for j in jobs:
            if j.id in ids:
                raise SimulationError(f"job id {j.id!r} appears twice in the trace")
            ids.add(j.id)
            # a job the mechanism resizes is judged by its minimum size, below (with device memory)
            if not mechanism.resizes and j.gpus > cluster.total_gpus + EPS:
                unrunnable(j, f"job {j.id} asks for {j.gpus:g} GPUs; the cluster has {cluster.total_gpus}")
                continue
            kept.append(j)
        # device memory of every GPU, largest first: a job needs enough devices that can hold it
        device_mems = sorted((srv.gpu_mem_gb for srv in cluster.servers for _ in range(srv.gpus)), reverse=True)
        biggest_device = device_mems[0] if device_mems else 0.0
        self.perf_cache: dict[str, PerfModel] = {}
        self.perf_for = perf_for
        self.sharing = cfg.sharing
        fitting: list[Job] = []
        gpu_types = sorted({srv.gpu_type for srv in cluster.servers if srv.gpus > 0})
        for j in kept:
            speeds = self._perf(j).type_speed  # a model with per-type speeds runs only on the types it knows
            known = sorted(t for t, _ in speeds) if speeds is not None else gpu_types
            missing = [t for t in gpu_types if t not in known]
            if missing:
                unrunnable(j, f"job {j.id} ({j.model}) has a speed for GPU type(s) {', '.join(known)} only; the "
                              f"cluster has {', '.join(map(repr, missing))} (give the cluster those types, e.g. "
                              f"16x8:type={known[0]}, or the job a card measured there)")
                continue
            need = self._perf(j).device_mem_gb
            if self.sharing is not None:
                perf = self._perf(j)
                need = max(need, self.sharing.job_truth(j.model, perf.gpu_util, perf.device_mem_gb)[1])
            if need > biggest_device + EPS:
                unrunnable(j, f"job {j.id} ({j.model}) needs {need:g} GB of device memory; the cluster's largest "
                              f"GPU has {biggest_device:g} GB")
                continue
            # the fewest devices the mechanism can run the job on (a rigid gang job: all its GPUs; a moldable one:
            # its minimum size), each big enough for it; a job needing more would only wait until the run stalls
            devices = mechanism.min_devices(j)
            holding = sum(1 for m in device_mems if m >= need - EPS) if need > 0 else len(device_mems)
            if devices > holding:
                each, such = (f" with {need:g} GB of device memory each", " such GPU(s)") if need > 0 else ("", "")
                unrunnable(j, f"job {j.id} ({j.model}) needs {devices} GPUs{each}; the cluster has {holding}{such}, "
                              f"and the {mechanism.name} mechanism gives a job all its GPUs or none"
                           if mechanism.rigid else
                           f"job {j.id} ({j.model}) needs at least {devices} GPUs{each} (its minimum size under the "
                           f"{mechanism.name} mechanism); the cluster has {holding}{such}")
                continue
            fitting.append(j)
        if jobs and not fitting:
            raise SimulationError(f"the cluster can run none of the {len(jobs)} jobs, e.g. {drop_reasons[0]}")
        kept = fitting
        kept.sort(key=lambda j: j.arrival)  # stable: jobs arriving together keep their trace order
        #: ids of cfg.stop_after still to finish (dropped jobs never will, so they are not waited for)
        self.watch: set[str] = set()
        if cfg.stop_after is not None:
            unknown = set(cfg.stop_after) - ids
            if unknown:
                raise SimulationError(f"stop_after names {len(unknown)} job(s) not in the trace, e.g. "
                                      f"{sorted(unknown)[0]!r}")
            self.watch = set(cfg.stop_after) - {j.id for j in self.dropped}
        self.arrivals = kept
        self.next_arrival = 0
        self.active: dict[str, JobState] = {}
        self.running: dict[str, Allocation] = {}
        self.finished: list[JobState] = []
        self.heap: list[tuple[float, int, str]] = []  # (finish time, version, job id)
        self.ledger = Ledger(cluster)
        self.used = [0.0, 0.0, 0.0]
        self.usage: list[tuple[float, float, float, float]] = [(0.0, 0.0, 0.0, 0.0)]
        self.decisions = 0
        self.decision_time = 0.0
        self.stats: list[dict] = []
        # GPU sharing (only used with cfg.sharing)
        self.dev_jobs: dict[tuple[int, int], dict[str, bool]] = {}  # device -> {job id: holds it shared}
        self.dev_util: dict[tuple[int, int], float] = {}  # measured cumulative utilisation
        self.dev_mem: dict[tuple[int, int], float] = {}  # measured device memory in use
        self.truth: dict[str, tuple[float, float]] = {}  # job id -> (utilisation, memory GB)
        self.touched: set[tuple[int, int]] = set()
        self.busy_total = 0.0
        self.busy: list[tuple[float, float]] = [(0.0, 0.0)]
        self.wakeups: list[float] = []
        self.hold_until: dict[str, float] = {}
        self.oom_events = 0
        self.max_mem_frac = 0.0
        self.max_mem_frac_attempted = 0.0
        self.device_log: list[tuple] = []

    # -- bookkeeping -----------------------------------------------------------------------------------
    def _record_usage(self, t: float) -> None:
        g, c, m = self.used
        if self.sharing is not None:
            g = float(len(self.dev_jobs))  # devices in use, however many jobs share each
            if self.busy[-1][0] == t:
                self.busy[-1] = (t, self.busy_total)
            else:
                self.busy.append((t, self.busy_total))
        if self.usage and self.usage[-1][0] == t:
            self.usage[-1] = (t, g, c, m)
        else:
            self.usage.append((t, g, c, m))

    # -- GPU sharing --------------------------------------------------------------------------------------
    def _occupy(self, js: JobState, alloc: Allocation, sign: int) -> None:
        """Add (sign 1) or remove (-1) a job's measured utilisation and memory on its devices."""
        u, mem = self.truth[js.id]
        for sh in alloc.shares:
            for d in sh.devices:
                key = (sh.server, d)
                jobs = self.dev_jobs.setdefault(key, {})
                old_busy = min(1.0, self.dev_util.get(key, 0.0))
                if sign > 0:
                    jobs[js.id] = sh.shared
                    self.dev_util[key] = self.dev_util.get(key, 0.0) + u
                    self.dev_mem[key] = self.dev_mem.get(key, 0.0) + mem
                else:
                    jobs.pop(js.id, None)
                    self.dev_util[key] = self.dev_util.get(key, 0.0) - u
                    self.dev_mem[key] = self.dev_mem.get(key, 0.0) - mem
                    if not jobs:
                        del self.dev_jobs[key]
                        self.dev_util[key] = 0.0
                        self.dev_mem[key] = 0.0
                self.busy_total += min(1.0, max(0.0, self.dev_util[key])) - old_busy
                self.touched.add(key)

    def _share_factor(self, js: JobState) -> float:
        assert self.sharing is not None and js.allocation is not None
        f = 1.0
        for sh in js.allocation.shares:
            if not sh.shared:
                continue
            for d in sh.devices:
                key = (sh.server, d)
                f = min(f, self.sharing.factor(self.dev_util[key], len(self.dev_jobs[key])))
        return f

    def _refresh(self, t: float) -> None:
        """Re-rate every job on a device whose set of jobs changed (interference), then forget the changes."""
        seen: set[str] = set()
        for key in self.touched:
            for jid in self.dev_jobs.get(key, ()):
                if jid in seen:
                    continue
                seen.add(jid)
                js = self.active[jid]
                assert js.allocation is not None
                rate = js.rate_on(js.allocation, self.cluster) * self._share_factor(js)
                if abs(rate - js.rate) <= 1e-12 * max(1.0, rate):
                    continue
                js.advance(t)
                js.rate = rate
                js.version += 1
                if rate > 0:
                    heapq.heappush(self.heap, (max(t, js.overhead_until) + js.remaining / rate, js.version, js.id))
        if self.sharing is not None and self.sharing.record:
            for key in sorted(self.touched):
                srv = self.cluster.servers[key[0]]
                jobs = self.dev_jobs.get(key, {})
                self.device_log.append((t, key, tuple(sorted(jobs)), self.dev_mem.get(key, 0.0),
                                        self.ledger.device_mem_used[key[0]][key[1]], srv.gpu_mem_gb,
                                        self.dev_util.get(key, 0.0),
                                        tuple(sorted((jid, self.active[jid].rate) for jid in jobs))))
        self.touched.clear()

    def _memory_check(self, t: float, placed: Sequence[JobState]) -> None:
        """Out of memory: fail the jobs placed last on a device whose measured memory exceeds it."""
        assert self.sharing is not None
        cap = self.cluster.servers
        frac = max((self.dev_mem[k] / cap[k[0]].gpu_mem_gb for k in self.touched if k in self.dev_jobs), default=0.0)
        self.max_mem_frac_attempted = max(self.max_mem_frac_attempted, frac)
        for js in reversed(placed):
            alloc = js.allocation
            if alloc is None:
                continue
            keys = [(sh.server, d) for sh in alloc.shares for d in sh.devices]
            over = [k for k in keys if self.dev_mem[k] > cap[k[0]].gpu_mem_gb + EPS]
            if not over:
                continue
            mem = self.truth[js.id][1]
            available = min(cap[k[0]].gpu_mem_gb - (self.dev_mem[k] - mem) for k in over)
            self._set_allocation(js, None, t, 0.0)
            js.ooms += 1
            self.oom_events += 1
            if js.ooms >= OOM_GIVE_UP and self.stall is None:
                self.stall = (f"job {js.id} ran out of device memory {js.ooms} times ({mem:g} GB measured): "
                              f"{self.mech.name} placed it again and again where the memory left beside the "
                              f"other jobs could not hold it")
            if available >= min(cap[k[0]].gpu_mem_gb for k in over) - EPS:
                available += OOM_REQUEST_MARGIN_GB  # it failed with whole GPUs to itself: it needs larger ones
            request = max(js.device_mem_request_gb, available)
            if js.ooms >= self.sharing.max_oom_retries:
                request = max(request, min(cap[k[0]].gpu_mem_gb for k in keys))
            js.mem_request_gb = request
            if request > js.perf.device_mem_gb:
                # the resubmitted job's card asks for the memory: every mechanism reserves and places by the card
                # (a copy, not dataclasses.replace: a subclass's own __init__ need not take device_mem_gb)
                js.perf = copy.copy(js.perf)
                object.__setattr__(js.perf, "device_mem_gb", request)
            if js.first_start == t:
                js.first_start = None  # it never ran
            self.hold_until[js.id] = t + self.sharing.oom_delay_s
            heapq.heappush(self.wakeups, t + self.sharing.oom_delay_s)
        frac = max((self.dev_mem[k] / cap[k[0]].gpu_mem_gb for k in self.touched if k in self.dev_jobs), default=0.0)
        if frac > 1 + 1e-9:
            raise SimulationError(f"device memory still over capacity ({frac:.3f}) after the OOM failures")
        self.max_mem_frac = max(self.max_mem_frac, frac)

    def _device_memory_short(self, js: JobState, alloc: Allocation) -> str | None:
        """What is wrong with ``alloc``'s device memory for ``js``, or None: a device smaller than the job's
        footprint (its card's device memory, raised after a simulated OOM to what the job resubmits with: Horus'
        §4.2.3), or a share of a device the job does not hold alone that reserves less than it (the ledger keeps
        only reservations within the device, so the jobs beside it could not be kept there). A server the cluster
        lacks is the ledger's to refuse."""
        need = js.perf.device_mem_gb
        for sh in alloc.shares:
            if not 0 <= sh.server < len(self.cluster.servers):
                continue
            cap = self.cluster.servers[sh.server].gpu_mem_gb
            if need > cap + EPS:
                short = f"server {sh.server}'s GPUs, with {cap:g} GB of device memory each"
            elif (sh.shared or sh.gpus < 1 - EPS) and sh.device_mem_gb < need - EPS:
                short = (f"a share of a GPU on server {sh.server} that reserves {sh.device_mem_gb:g} GB of device "
                         f"memory (its device_mem_gb)")
            else:
                continue
            raised = f", raised after its {js.ooms} out-of-memory failure(s)" if js.ooms else ""
            return f"{short}, and it needs {need:g} GB (js.perf.device_mem_gb{raised})"
        return None

    def _gpus_in_use(self, alloc: Allocation) -> float:
        """The GPUs ``alloc`` adds to the usage series (just taken) or takes from it (about to be released): its
        GPUs, but of its shared devices only those it holds alone (the first sharer in, the last out). A device is
        one GPU in use however many jobs share it; adding each sharer's GPU made two jobs on one device 2 GPUs
        (gpu_util 2.0) without ``SimConfig.sharing``, whose usage series counts devices (:meth:`_record_usage`)."""
        if not alloc.is_shared:
            return alloc.gpus
        sharers = self.ledger.device_sharers
        return sum(sh.gpus if not sh.shared else sum(1 for d in sh.devices if sharers[sh.server][d] == 1)
                   for sh in alloc.shares)

    def _set_allocation(self, js: JobState, alloc: Allocation | None, t: float, overhead: float) -> None:
        old = js.allocation
        if old is not None:
            if self.sharing is not None:
                self._occupy(js, old, -1)
            self.used[0] -= self._gpus_in_use(old)
            self.ledger.release(old)
            self.used[1] -= old.cpus
            self.used[2] -= old.mem_gb
        js.allocation = alloc
        js.version += 1
        if alloc is None:
            js.rate = 0.0
            js.cost_rate = 0.0
            self.running.pop(js.id, None)
            return
        try:
            self.ledger.take(alloc)
        except CapacityError as e:  # the simulator's ledger holds every allocation that stays: this is the check
            raise SimulationError(f"{self.mech.name} over-committed the cluster with job {js.id}: {e}") from None
        self.used[0] += self._gpus_in_use(alloc)
        self.used[1] += alloc.cpus
        self.used[2] += alloc.mem_gb
        self.running[js.id] = alloc
        if self.sharing is not None:
            self._occupy(js, alloc, +1)
        js.rate = js.rate_on(alloc, self.cluster)
        js.cost_rate = sum(sh.gpus * (self.cluster.servers[sh.server].energy_cost or 0.0)
                           for sh in alloc.shares) / 3600.0
        js.overhead_until = t + overhead
        if js.rate > 0:
            finish = js.overhead_until + js.remaining / js.rate
            heapq.heappush(self.heap, (finish, js.version, js.id))

    def _perf(self, job: Job) -> PerfModel:
        key = job.model
        p = self.perf_cache.get(key)
        if p is None:
            p = self.perf_for(job)
            self.perf_cache[key] = p
        return p

    # -- events ----------------------------------------------------------------------------------------
    def _peek_completion(self) -> float:
        while self.heap:
            t, version, jid = self.heap[0]
            js = self.active.get(jid)
            if js is None or js.version != version:
                heapq.heappop(self.heap)
                continue
            return t
        return math.inf

    def _complete_until(self, t: float) -> bool:
        any_done = False
        while self._peek_completion() <= t:
            _, _, jid = heapq.heappop(self.heap)
            js = self.active.pop(jid)
            js.advance(t)
            js.remaining = 0.0
            js.finish = t
            self._set_allocation(js, None, t, 0.0)
            self.finished.append(js)
            self.watch.discard(jid)
            any_done = True
            if self.sharing is not None:
                self._refresh(t)  # the job's co-runners speed up now
        return any_done

    def _arrive_until(self, t: float) -> bool:
        any_new = False
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival].arrival <= t:
            seq = self.next_arrival
            job = self.arrivals[seq]
            self.next_arrival += 1
            js = JobState(job, self._perf(job), seq=seq)
            self.active[job.id] = js
            if self.sharing is not None:
                self.truth[job.id] = self.sharing.job_truth(job.model, js.perf.gpu_util, js.perf.device_mem_gb)
            any_new = True
        return any_new

    # -- decisions -------------------------------------------------------------------------------------
    def _decide(self, t: float) -> None:
        visible = [js for js in self.active.values()
                   if not self.hold_until or self.hold_until.get(js.id, -math.inf) <= t]
        try:
            ordered = self.policy.order(visible, t, self.cluster)
        except Exception as e:
            _add_note(e, f"(raised while policy {self.policy.name!r} ordered the jobs at simulated time {t:g} s)")
            raise
        self.mech._current = self.ledger.copy
        t0 = time.perf_counter()
        try:
            new = self.mech.allocate(ordered, self.cluster, dict(self.running), t)
        except Exception as e:
            _add_note(e, f"(raised in mechanism {self.mech.name!r}'s allocate at simulated time {t:g} s)")
            raise
        finally:
            self.mech._current = None
        self.decision_time += time.perf_counter() - t0
        self.decisions += 1
        wake = getattr(self.mech, "pop_wakeups", None)  # times the mechanism wants to decide again (PAB)
        if wake is not None:
            for w in wake():
                if w > t:
                    heapq.heappush(self.wakeups, w)
        stats = getattr(self.mech, "last_stats", None)  # a subclass may not have called Mechanism.__init__
        if stats:
            self.stats.append({"time": t, **stats})
        name = self.mech.name
        if not isinstance(new, Mapping):
            raise SimulationError(f"{name}.allocate returned {type(new).__name__}, not a mapping of job id -> "
                                  f"Allocation")
        changed: list[tuple[JobState, Allocation, Allocation | None]] = []
        for jid, alloc in new.items():
            prev = self.running.get(jid)
            if prev is alloc:
                continue
            js = self.active.get(jid)
            if js is None:
                raise SimulationError(f"{name} allocated job {jid!r}, which is not active")
            if not isinstance(alloc, Allocation):
                raise SimulationError(f"{name} gave job {jid!r} a {type(alloc).__name__}, not an Allocation")
            if alloc.gpus <= 0:
                raise SimulationError(f"{name} gave job {jid} an allocation without GPUs")
            if prev is not None and prev == alloc:
                continue
            short = self._device_memory_short(js, alloc)
            if short:
                raise SimulationError(f"{name} gave job {jid} {short}")
            if self.mech.rigid and abs(alloc.gpus - _owed_gpus(js.job.gpus, self.mech.whole_gpus)) > EPS:
                raise SimulationError(f"{name} is rigid but gave job {jid} {alloc.gpus:g} GPUs for a demand of "
                                      f"{js.job.gpus:g}")
            changed.append((js, alloc, prev))
        stopped = [jid for jid in self.running if jid not in new]
        if not self.mech.preemptive and (stopped or any(prev is not None for _, _, prev in changed)):
            jid = stopped[0] if stopped else next(js.id for js, _, prev in changed if prev is not None)
            raise SimulationError(f"{name} is non-preemptive but changed or stopped running job {jid}")
        # Stop or shrink first, so that what the moved and new jobs take is free.
        for jid in stopped:
            js = self.active[jid]
            js.advance(t)
            js.preemptions += 1
            js.rollback_to_checkpoint()
            self._set_allocation(js, None, t, 0.0)
        plan: list[tuple[JobState, Allocation, float]] = []
        for js, alloc, prev in changed:
            js.advance(t)
            if prev is None:
                overhead = self.cfg.start_overhead_s if js.first_start is None else self.cfg.restart_overhead_s
                if js.first_start is None:
                    js.first_start = t
                else:
                    js.restarts += 1
            elif prev.placement != alloc.placement:
                overhead = self.cfg.restart_overhead_s
                js.restarts += 1
                js.rollback_to_checkpoint()
            else:
                overhead = max(0.0, js.overhead_until - t)  # a resize in place keeps any overhead still due
            if prev is not None:
                self._set_allocation(js, None, t, 0.0)
            plan.append((js, alloc, overhead))
        for js, alloc, overhead in plan:
            self._set_allocation(js, alloc, t, overhead)
        if self.sharing is not None:
            self._memory_check(t, [js for js, _, _ in plan])
            self._refresh(t)
        self._record_usage(t)
        if self.on_decision is not None:
            self.on_decision(t, len(self.finished), len(self.active))

    def _stuck(self) -> str:
        """Why the jobs still active will never finish, for :attr:`SimResult.stall`."""
        held = len(self.running)
        waiting = len(self.active) - held
        parts = []
        if held:
            parts.append(f"{held} job(s) hold allocations under which their performance models give no "
                         f"throughput")
        if waiting:
            parts.append(f"the {self.mech.name} mechanism places none of the other {waiting} job(s)" if held else
                         f"the {self.mech.name} mechanism places none of the {waiting} job(s) left")
        return "; ".join(parts)

    # -- the loop --------------------------------------------------------------------------------------
    def run(self) -> tuple[float, list[JobState]]:
        R = self.cfg.round_s
        P = self.cfg.period_s if self.cfg.period_s is not None else self.mech.period_s
        if P is not None and not P > 0:
            raise SimulationError(f"period_s must be > 0, got {P}")
        if P is not None and self.mode == "round" and _off_round_grid(P, R):
            # a periodic decision between boundaries would decide mid-round, where round mode decides on boundaries
            # only (and it took the place of the boundary decision an arrival or completion had asked for)
            whose = "SimConfig" if self.cfg.period_s is not None else f"the {self.mech.name} mechanism's"
            raise SimulationError(f"the decision period ({whose} period_s, {P:g} s) is not a multiple of the round "
                                  f"({R:g} s): in round mode decisions happen on round boundaries only; choose a "
                                  f"round that divides the period, or event mode")
        horizon = self.cfg.max_time_s if self.cfg.max_time_s is not None else math.inf
        pending: float | None = None  # next decision time (round mode)
        tick: float | None = None  # next periodic decision (with a period)
        t = 0.0
        idle_decisions = 0  # decisions in a row after which nothing progressed and nothing was left to arrive
        progress = _ProgressWatch()
        while self.stall is None:
            decisions_before = self.decisions
            t_arr = self.arrivals[self.next_arrival].arrival if self.next_arrival < len(self.arrivals) else math.inf
            t_done = self._peek_completion()
            t_dec = min(pending if pending is not None else math.inf, tick if tick is not None else math.inf)
            t_wake = self.wakeups[0] if self.wakeups else math.inf
            t_next = min(t_arr, t_done, t_dec, t_wake)
            if t_next == math.inf:
                if self.active:  # jobs left, and no event will ever come
                    self.stall = f"nothing else will happen: {self._stuck()}"
                break
            if t_next > horizon:
                t = horizon
                break
            t = t_next
            changed = self._complete_until(t)
            if self.cfg.stop_after is not None and not self.watch:
                break  # the measured jobs are done
            changed = self._arrive_until(t) or changed
            while self.wakeups and self.wakeups[0] <= t:
                heapq.heappop(self.wakeups)
                changed = True
            periodic = tick is not None and t >= tick - 1e-9
            if self.mode == "event":
                if (changed or periodic) and self.active:
                    self._decide(t)
                elif changed:
                    self._record_usage(t)
            else:
                if changed:
                    self._record_usage(t)
                    boundary = math.ceil(t / R - 1e-12) * R
                    pending = boundary if pending is None else min(pending, boundary)
                if periodic:
                    pending = t if pending is None else min(pending, t)
                if pending is not None and t >= pending - 1e-9:
                    if self.active:
                        self._decide(t)
                    waiting = len(self.active) > len(self.running)
                    pending = t + R if (waiting and self.policy.time_dependent) else None
            if P is not None:
                tick = (math.floor(t / P + 1e-9) + 1) * P if self.active else None
            frozen = (self.active and self.next_arrival >= len(self.arrivals) and not self.wakeups
                      and self._peek_completion() == math.inf)
            if frozen and not self.running and pending is None and tick is None:
                # nothing runs and nothing will change (no periodic decision is due either): the rest can never be
                # scheduled; with a period, the decisions-in-a-row check below stops a mechanism that never places
                self.stall = f"nothing else will happen: {self._stuck()}"
                break
            if frozen and self.decisions > decisions_before:
                idle_decisions += 1
                if idle_decisions >= STALL_DECISIONS:
                    # decisions keep coming (a period, a time-dependent policy) but no job can progress: without
                    # this the loop would tick for ever (e.g. a server with GPUs and no CPUs gives every job rate 0)
                    self.stall = f"{idle_decisions} decisions in a row changed nothing: {self._stuck()}"
                    break
            elif not frozen:
                idle_decisions = 0
            if (self.decisions // PROGRESS_CHECK_DECISIONS > decisions_before // PROGRESS_CHECK_DECISIONS
                    and self.next_arrival >= len(self.arrivals) and self.stall is None):
                self.stall = progress.check(self, t)
        for js in self.active.values():
            js.advance(max(t, js.updated_at))
        return t, list(self.active.values())


class _ProgressWatch:
    """The no-net-progress check of :data:`PROGRESS_CHECK_DECISIONS` (a run whose work is undone as fast as it is
    done has a completion always scheduled, so the frozen-run checks never see it)."""

    def __init__(self) -> None:
        self.finished = -1
        self.best: dict[str, float] = {}  # each active job's most work done (reference s) seen at a check
        self.checks = 0

    def check(self, sim: _Sim, t: float) -> str | None:
        """None while work gets done; else the stall reason. Progress is a job getting further than it ever
        was at a check (the sum over jobs would miss one job saving checkpoints while another loses a peak)."""
        further = False
        for jid, js in sim.active.items():
            done = js.job.work - js.remaining_at(t)
            if done > self.best.get(jid, -math.inf):
                self.best[jid] = done
                further = True
        if len(sim.finished) != self.finished or further:
            self.finished, self.checks = len(sim.finished), 0
            return None
        self.checks += 1
        if self.checks < NO_PROGRESS_CHECKS:
            return None
        states = sim.active.values()
        return (f"{self.checks * PROGRESS_CHECK_DECISIONS} decisions in a row in which no job finished and none of "
                f"the {len(sim.active)} active job(s) got further than at an earlier check "
                f"({sum(js.preemptions for js in states)} preemption(s) and {sum(js.restarts for js in states)} "
                f"restart(s) so far, {sum(js.lost_work for js in states):g} s of work rolled back to epoch "
                f"checkpoints in all): preemptions, re-sizing or start and restart overheads undo or eat the work as "
                f"fast as it is done ({sim.policy.name} with {sim.mech.name}; fewer preemptions, shorter epochs or "
                f"overheads, or longer rounds let it stay done)")


def simulate(jobs: Sequence[Job], cluster: ClusterSpec, policy: Policy | str, mechanism: Mechanism | str,
             perf_for: Callable[[Job], PerfModel] | dict[str, PerfModel], config: SimConfig | None = None,
             on_decision: Callable[[float, int, int], None] | None = None) -> SimResult:
    """Run ``jobs`` on ``cluster`` under ``policy`` and ``mechanism`` (instances, or names as the CLI takes them).
    ``perf_for`` maps a job to its perf model (a dict keys by ``job.model``; a model missing from it is an error
    naming the job). ``on_decision(t, finished, active)`` is called after every decision (progress bars)."""
    if isinstance(policy, str):
        from perfpredict.sched.policies import make_policy

        policy = make_policy(policy)
    if isinstance(mechanism, str):
        from perfpredict.sched.mechanisms import make_mechanism

        mechanism = make_mechanism(mechanism)
    cfg = config or SimConfig()
    if isinstance(perf_for, dict):
        table = perf_for

        def perf_for(job: Job) -> PerfModel:  # type: ignore[no-redef]
            try:
                return table[job.model]
            except KeyError:
                names = sorted(table, key=lambda n: ("/" in n, n))  # the plain names first
                have = ", ".join(names[:12]) + (f" and {len(names) - 12} more" if len(names) > 12 else "")
                if not job.model:
                    raise SimulationError(f"job {job.id} names no model (the trace's model column is missing or "
                                          f"blank), and the simulator runs each job at the rate of its model: "
                                          f"add a model column (e.g. {have or 'none loaded'})") from None
                import difflib

                near = difflib.get_close_matches(job.model, names, n=3, cutoff=0.6)
                hint = f"did you mean {', '.join(map(repr, near))}? " if near else ""
                raise SimulationError(f"job {job.id}: no performance model for {job.model!r} "
                                      f"({hint}have {have or 'none'})") from None

    reset = getattr(mechanism, "reset", None)  # a subclass of Mechanism has it; anything else may not
    if callable(reset):
        reset()
    sim = _Sim(jobs, cluster, policy, mechanism, perf_for, cfg, on_decision)
    t0 = time.perf_counter()
    end, unfinished = sim.run()
    return SimResult(finished=sim.finished, unfinished=unfinished, dropped=sim.dropped, usage=sim.usage,
                     cluster=cluster, policy=policy.name, mechanism=mechanism.name, mode=sim.mode,
                     decisions=sim.decisions, decision_time_s=sim.decision_time, wall_s=time.perf_counter() - t0,
                     end_time=end, mechanism_stats=sim.stats,
                     busy=sim.busy if sim.sharing is not None else [], oom_events=sim.oom_events,
                     max_mem_frac=sim.max_mem_frac, max_mem_frac_attempted=sim.max_mem_frac_attempted,
                     device_log=sim.device_log, stall=sim.stall)
