"""Moldable and malleable DL scheduling (seed 002, Fujiwara et al.): Equipartition, Proportional, Rigid.

Sizes
-----
A task gets either ``n`` *dedicated* whole GPUs or a *shared* ``1/n`` of one GPU (§IV-A): "a task receives
1/n shared GPU" means it runs on a GPU together with up to ``n - 1`` other tasks. Each task has bounds
``(p_min, p_max)`` with ``p_max ∈ ℕ`` and ``p_min ∈ F = {1/n}`` (§III-A); the paper's GPU experiments use
``(1/4, 4)`` for the moldable/malleable algorithms and ``(1, 1)`` for the rigid ones (§V-B). Here a job's
``Job.min_gpus`` / ``Job.max_gpus`` override the mechanism's defaults ``p_min`` / ``p_max``.

Notation (§IV-A): ``Q`` the queued tasks, ``G`` all GPUs, ``A`` the vacant GPUs (no task on them),
``p_i^avl = 1 - Σ_{k∈R_i} p_k`` the free processor of GPU ``i``. "Allocate p to task k" means: from the
first-found GPU ``i`` (servers, then devices, in index order) whose free device memory holds the task.

Equipartition (§IV-A), at every arrival and completion, scanning ``Q`` in policy (arrival) order:

1. if ``Σ_Q p_min ≥ Σ_G p_avl``: allocate ``p_min`` to each task (while they fit);
2. else if ``Σ_Q p_max ≤ |A|``: allocate ``p_max`` to each task;
3. else if ``|Q| ≤ |A|``: one vacant GPU to each task, then the remaining vacant GPUs by the D'Hondt method
   (GPUs = seats, tasks = parties with ``p_max`` votes), capped at ``p_max``;
4. otherwise: pre-assign each task to the GPU with the fewest running or pre-assigned tasks (if
   ``p_min ≤ p_avl``), then give each task pre-assigned to GPU ``i`` the largest ``p ∈ F`` with
   ``p ≤ p_i^avl / |R'_i|``.

Moldable: ``Q`` = the waiting jobs, running ones are untouched. Malleable: ``Q`` = every active job and all
GPUs are re-distributed (except jobs with at most ``preempt_min_remaining`` = 300 s of single-GPU work left,
which §V-B does not preempt).

Proportional (§IV-B, clairvoyant): cases 1 and 2 as above; otherwise a target makespan
``t_trg = Σ_Q v_k / Σ_G p_avl`` and, in descending order of remaining volume, each task gets the size
``p ∈ ℕ ∪ F`` within its bounds whose runtime ``f(v_rem, p)`` is closest to ``t_trg``.

Rigid (§V-B): each task gets exactly its requested size, in policy order: FIFO is Rigid FCFS,
:class:`~perfpredict.sched.policies.ShortestFirst` is Rigid Shortest.

Interpretations (where the paper is silent or its literal reading breaks a stated constraint)
---------------------------------------------------------------------------------------------
I1. *Sharing bound* (``strict_sharing=True``). The paper defines ``1/n`` as "runs together with up to n-1
    other tasks", but its case-4 formula alone only keeps ``Σ p ≤ 1`` on a GPU (a running ½ task plus two new
    ¼ tasks is three tasks on a GPU, so the ½ task really gets ⅓ and the simulation would over-credit it).
    We keep the definition: a task may join a GPU only if afterwards every task on it has a share
    ``≤ 1/(tasks on the GPU)``; since tasks only leave a GPU by themselves afterwards, every task always gets
    at least what it is charged. ``strict_sharing=False`` is the literal formula (only ``Σ p ≤ 1``).
    This bound is also applied to the case-4 share: ``p ≤ min(p_avl/|R'_i|, 1/(|R_i|+|R'_i|))``.
I2. *Case 4 GPU choice.* The paper picks the GPU with the fewest tasks and pre-assigns "if p_min ≤ p_avl".
    We pick the fewest-tasks GPU *among those that can take the task*: ``p_min ≤ p_avl``, the device memory
    of running + pre-assigned + this task fits, the resulting share ``p_avl/|R'_i|`` (with I1) is still
    ``≥ p_min`` of every task pre-assigned there, and I1 holds. Ties go to the lowest (server, device). A task
    no GPU can take stays queued. Without the ``p_min`` re-check the formula could give shares below
    ``p_min``.
I3. *D'Hondt quotient.* The "remaining vacant GPUs" are distributed with quotients ``votes / (s + 1)`` where
    ``s`` counts the GPUs the task already holds, *including* the first one of step 1
    (``dhondt_counts_first=True``). That is exactly the D'Hondt apportionment of all ``|A|`` seats with a
    one-seat floor ("regarding the available GPUs as parliamentary seats"). ``False`` runs a fresh D'Hondt on
    the remaining seats only. Ties go to the task earlier in policy order; a task at ``p_max`` is out.
I4. *Bounds outside the paper's sets.* ``p_min`` is rounded up to ``ℕ ∪ F`` (0.3 → ⅓, 1.5 → 2) and
    ``p_max`` down (2.5 → 2, 0.3 → ¼); if they cross, an explicit job bound wins over a default, else ``p_min``
    wins. A task with ``p_min ≥ 1`` needs ``p_min`` dedicated GPUs: in case 3 it starts D'Hondt with
    ``p_min`` seats (the case applies when ``Σ max(1, p_min) ≤ |A|``); in case 4 it is given ``p_min`` vacant
    GPUs no other task is pre-assigned to. A task with ``p_max < 1`` takes ``p_max`` of a GPU in case 3
    (counted as its one GPU) and never gets more than ``p_max`` in case 4.
I5. *Who waits.* In every case a task that does not fit (no GPU with the free processor and device memory)
    simply stays queued and the scan goes on with the next one; Equipartition and Proportional never block.
    Whole GPUs are placed best-fit on one server, else over the fewest servers (the paper's nodes share a
    network; it does not say how a multi-GPU task is laid out); case 3 places the largest sizes first (a task
    whose D'Hondt size cannot be laid out, e.g. on servers with too little device memory, waits and its GPUs
    stay idle until the next event); case 2 places whole-GPU tasks before fractional ones.
I6. *Malleable re-placement.* Sizes and the tasks that run are decided exactly as above on the cluster minus
    the non-preemptible jobs; then a job whose size did not change keeps its previous allocation (same
    object) where it still fits, so it pays no restart overhead, and the rest go to their decided place, or
    anywhere that fits. If that re-placement fails, the literal placement is used. ``preempt_min_remaining``
    (§V-B: 300 s) is compared with the job's remaining work converted to single-GPU seconds (the paper's
    ``v_rem``); 0 disables it.
I7. *Proportional details.* ``v`` is the remaining single-GPU volume (for a queued task = its volume; the
    paper writes ``v_k`` in ``t_trg`` and ``v_rem`` in the loop), ``f(v, p) = v / (S(p)/S(1))`` from the job's
    speedup curve, "closest" is the absolute difference in seconds (ties: the smaller size). If the chosen
    size does not fit what is left, the next smaller sizes are tried down to ``p_min`` ("as proportional as
    possible"); if none fits the task waits. ``weight="gpus"`` replaces ``v`` by the requested GPUs and ``f``
    by ``v/p`` (shares proportional to requested size), an option, not the paper.
I8. *Rigid.* The size is the job's request ``Job.gpus`` (§V-B: "the exact number of GPUs as requested";
    ``(p_min, p_max) = (p_req, p_req)`` in §VI): whole GPUs when ≥ 1 (rounded to an integer as
    :class:`~perfpredict.sched.mechanisms.proportional.GpuProportional` does), else that exact fraction of one
    GPU. The paper does not mention backfilling ("allocates p_max to each task in the arrival order"), so by
    default the first job that does not fit blocks the ones behind it (``backfill=True`` skips it instead).
I9. A job that could not run even on an empty cluster (device memory larger than every server's GPU memory,
    or more GPUs than exist) is left out and never blocks a queue; ``last_stats["unschedulable"]`` counts it.
    CPUs and host memory are given in proportion to the GPU amount (server CPUs per GPU × share); the paper
    leaves them out of scope. Only entries of ``running`` whose job is in ``ordered`` are considered.
I10. *Device memory sets a floor on the fraction* (``memory_aware=True``). A task needing ``m`` GB of a
    ``M`` GB GPU can share it with at most ``⌊M/m⌋ - 1`` others, so its ``p_min`` is raised to
    ``1/⌊M/m⌋`` (M: the largest GPU memory in the cluster); e.g. on 12 GB GPUs a 2.5 GB task keeps ¼, a 5 GB
    task gets at least ½ and an 11 GB task a whole GPU. The paper's simulator evidently does the same: it has
    OpenNMT's speedup for whole GPUs only, which suffices because OpenNMT "may not share a GPU because it
    usually requires more than 90% of GPU's device memory" (§V-B). Taken literally instead (``memory_aware=False``), case 1 gives
    such a task ¼ of a GPU nobody else can join, and it runs at S(¼) on a GPU of its own.

``last_stats``: ``case`` (1–4 as above; Proportional reports 3 for its target-makespan case, with
``t_target``), ``queued``, ``allocated`` (jobs given an allocation by this decision), ``pinned`` (malleable
jobs too close to completion to preempt), ``unschedulable``, ``gpus_allocated``; Rigid: ``started``, ``blocked``.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfpredict.sched.base import Mechanism
from perfpredict.sched.cluster import EPS, Allocation, ClusterSpec, Ledger
from perfpredict.sched.job import Job, JobState
from perfpredict.sched.placement import proportional_allocation

__all__ = [
    "Bounds", "DeviceState", "MalleableEquipartition", "MalleableProportional", "MoldableEquipartition",
    "MoldableProportional", "RigidFCFS", "dhondt", "job_bounds", "sizes_between", "snap_down", "snap_up",
    "unit_fraction_ceil", "unit_fraction_floor",
]

#: The paper's bounds for moldable/malleable tasks (§V-B): 1–4 GPUs or 1–4 tasks per GPU.
DEFAULT_P_MIN = 0.25
DEFAULT_P_MAX = 4.0
#: §V-B: a task is preempted only if more than 300 s of (single-GPU) work remains.
PAPER_PREEMPT_MIN_REMAINING_S = 300.0

_TOL = 1e-9


# -- sizes: ℕ ∪ F ----------------------------------------------------------------------------------------
def unit_fraction_floor(x: float) -> float:
    """The largest ``1/n ≤ x`` (``x`` in (0, 1]; 1 for ``x ≥ 1``)."""
    if x >= 1 - _TOL:
        return 1.0
    if x <= 0:
        raise ValueError(f"no unit fraction below {x}")
    return 1.0 / math.ceil(1.0 / x - _TOL)


def unit_fraction_ceil(x: float) -> float:
    """The smallest ``1/n ≥ x`` (``x`` in (0, 1])."""
    if x >= 1 - _TOL:
        return 1.0
    if x <= 0:
        raise ValueError(f"a size must be positive, got {x}")
    return 1.0 / math.floor(1.0 / x + _TOL)


def snap_down(x: float) -> float:
    """The largest size in ``ℕ ∪ F`` that is ``≤ x``."""
    return float(math.floor(x + _TOL)) if x >= 1 - _TOL else unit_fraction_floor(x)


def snap_up(x: float) -> float:
    """The smallest size in ``ℕ ∪ F`` that is ``≥ x``."""
    return float(math.ceil(x - _TOL)) if x > 1 + _TOL else unit_fraction_ceil(min(x, 1.0))


def sizes_between(lo: float, hi: float) -> list[float]:
    """Every size of ``ℕ ∪ F`` in ``[lo, hi]``, ascending (``lo`` and ``hi`` already snapped)."""
    out: list[float] = []
    if lo < 1 - _TOL:
        n_max = round(1.0 / lo)
        for n in range(n_max, 1, -1):
            if 1.0 / n <= hi + _TOL:
                out.append(1.0 / n)
    for g in range(max(1, round(lo)), math.floor(hi + _TOL) + 1):
        out.append(float(g))
    return out


@dataclass(frozen=True)
class Bounds:
    """A job's ``(p_min, p_max)`` snapped to ``ℕ ∪ F``."""

    lo: float
    hi: float

    @property
    def floor(self) -> int:
        """GPUs the task takes in Equipartition's case 3 before D'Hondt (I4)."""
        return max(1, round(self.lo)) if self.lo >= 1 - _TOL else 1


def job_bounds(job: Job, p_min: float, p_max: float) -> Bounds:
    """``(p_min, p_max)`` of ``job``: its own ``min_gpus``/``max_gpus``, else the defaults, snapped (I4)."""
    return _bounds(job.min_gpus, job.max_gpus, p_min, p_max)


@functools.lru_cache(maxsize=4096)
def _bounds(min_gpus: float | None, max_gpus: float | None, p_min: float, p_max: float) -> Bounds:
    lo = snap_up(min_gpus if min_gpus is not None else p_min)
    hi = snap_down(max_gpus if max_gpus is not None else p_max)
    if hi < lo - _TOL:
        if max_gpus is not None and min_gpus is None:
            lo = hi
        else:
            hi = lo
    return Bounds(lo, hi)


def dhondt(votes: Sequence[float], seats: int, start: Sequence[int], caps: Sequence[int],
           count_start: bool = True) -> list[int]:
    """D'Hondt (highest averages): ``seats`` more seats, one at a time, each to the party with the highest
    ``votes / (s + 1)``; ``s`` is the seats it holds (``start`` included when ``count_start``, else only the
    seats won here). A party at its cap takes no more; ties go to the lower index. Returns the totals."""
    total = [int(s) for s in start]
    won = [0] * len(total)
    heap: list[tuple[float, int]] = []

    def push(k: int) -> None:
        if total[k] < caps[k] and votes[k] > 0:
            s = total[k] if count_start else won[k]
            heapq.heappush(heap, (-votes[k] / (s + 1), k))

    for k in range(len(total)):
        push(k)
    for _ in range(max(0, seats)):
        if not heap:
            break
        _, k = heapq.heappop(heap)
        total[k] += 1
        won[k] += 1
        push(k)
    return total


# -- device state: a Ledger plus who shares each device --------------------------------------------------
class DeviceState:
    """Free resources per device (a :class:`Ledger`) and the shares of the tasks on each device (which the
    Ledger does not keep), so that the sharing bound (I1) can be checked."""

    def __init__(self, cluster: ClusterSpec, strict_sharing: bool = True) -> None:
        self.cluster = cluster
        self.strict = strict_sharing
        self.ledger = Ledger(cluster)
        self.shares: list[list[list[float]]] = [[[] for _ in range(s.gpus)] for s in cluster.servers]
        #: servers whose lists in ``shares`` this state alone holds: a copy shares the others' lists with the
        #: state it came from until one of them changes that server (copying every device's list made each
        #: copy O(GPUs), twice a decision)
        self._own: set[int] = set(range(cluster.n_servers))
        #: (amount, device memory) requests that found no room: resources only shrink within a decision, so
        #: any request at least as large fails too (keeps long queues on a full cluster O(queue))
        self._failed: list[tuple[float, float]] = []
        #: vacant devices per server, and the servers by that count (ascending indices; none with 0): a placement
        #: picks its server from these, where testing every device of the cluster made it O(GPUs)
        self._vac: list[int] = [s.gpus for s in cluster.servers]  # an empty ledger: every device vacant
        self._by_vac: dict[int, list[int]] = {}
        for i, n in enumerate(self._vac):
            if n:
                self._by_vac.setdefault(n, []).append(i)

    def copy(self) -> DeviceState:
        new = DeviceState.__new__(DeviceState)
        new.cluster, new.strict, new.ledger = self.cluster, self.strict, self.ledger.copy()
        new.shares = list(self.shares)
        new._own, self._own = set(), set()  # neither may change a server's lists in place now
        new._failed = list(self._failed)
        new._vac = list(self._vac)
        new._by_vac = {n: list(v) for n, v in self._by_vac.items()}
        return new

    def devices(self) -> Iterable[tuple[int, int]]:
        for i, s in enumerate(self.cluster.servers):
            for d in range(s.gpus):
                yield i, d

    def free(self, i: int, d: int) -> float:
        return self.ledger.device_free[i][d]

    def mem_free(self, i: int, d: int) -> float:
        return self.cluster.servers[i].gpu_mem_gb - self.ledger.device_mem_used[i][d]

    def vacant(self, i: int, d: int) -> bool:
        return not self.shares[i][d] and self.free(i, d) >= 1 - EPS

    @property
    def n_vacant(self) -> int:
        return sum(self._vac)

    def _recount(self, i: int) -> None:
        """Count server ``i``'s vacant devices again (it changed) and move it to its count's list."""
        old = self._vac[i]
        new = len(self._vacant_list(i))
        if new == old:
            return
        self._vac[i] = new
        if old:
            servers = self._by_vac[old]
            del servers[bisect.bisect_left(servers, i)]
            if not servers:
                del self._by_vac[old]
        if new:
            bisect.insort(self._by_vac.setdefault(new, []), i)

    @property
    def p_avl(self) -> float:
        return sum(max(0.0, f) for row in self.ledger.device_free for f in row)  # devices() order, without its calls

    def sharing_ok(self, i: int, d: int, share: float, joining: int = 1) -> bool:
        """I1: ``joining`` tasks of ``share`` each may join device ``(i, d)`` (always true when not strict)."""
        if not self.strict:
            return True
        n = len(self.shares[i][d]) + joining
        limit = 1.0 / n + _TOL
        return share <= limit and all(s <= limit for s in self.shares[i][d])

    def can_share(self, i: int, d: int, share: float, mem: float) -> bool:
        """A task of ``share`` (< 1) and ``mem`` GB may join device ``(i, d)``."""
        return (share <= self.free(i, d) + EPS and mem <= self.mem_free(i, d) + EPS
                and self.sharing_ok(i, d, share))

    def fits(self, alloc: Allocation) -> bool:
        if self.ledger.fits(alloc) is not None:
            return False
        return all(self.sharing_ok(s.server, s.devices[0], s.gpus)
                   for s in alloc.shares if s.gpus < 1 - EPS)

    def take(self, alloc: Allocation) -> None:
        self.ledger.take(alloc)
        for s in alloc.shares:
            if s.server not in self._own:
                self.shares[s.server] = [list(d) for d in self.shares[s.server]]
                self._own.add(s.server)
            for d in s.devices:
                self.shares[s.server][d].append(min(s.gpus, 1.0))
        for i in {s.server for s in alloc.shares}:
            self._recount(i)

    # -- placing --------------------------------------------------------------------------------------
    def choose_whole(self, n: int, mem: float, prefer: Allocation | None = None,
                     exclude: set[tuple[int, int]] | None = None) -> dict[int, list[int]] | None:
        """``n`` vacant devices whose memory holds ``mem``: ``prefer``'s if possible, else best fit on one
        server, else the fewest servers (largest free first)."""
        exclude = exclude or set()
        if prefer is not None and not prefer.is_fractional and abs(prefer.gpus - n) < EPS:
            devs = [(s.server, d) for s in prefer.shares for d in s.devices]
            if all(0 <= i < self.cluster.n_servers and 0 <= d < self.cluster.servers[i].gpus
                   and self.vacant(i, d) and (i, d) not in exclude
                   and mem <= self.cluster.servers[i].gpu_mem_gb + EPS for i, d in devs):
                return {s.server: list(s.devices) for s in prefer.shares}
        if not exclude:  # the same choice from the servers by vacant count, listing the chosen servers' devices only
            servers = self.cluster.servers
            counts = sorted(self._by_vac)
            for f in counts:  # best fit: the fewest vacant devices that hold n, then the first server
                if f >= n:
                    for i in self._by_vac[f]:
                        if mem <= servers[i].gpu_mem_gb + EPS:
                            return {i: self._vacant_list(i)[:n]}
            picked: dict[int, list[int]] = {}
            need = n
            for f in reversed(counts):  # else the most vacant servers first
                for i in self._by_vac[f]:
                    if need <= 0:
                        return picked
                    if mem <= servers[i].gpu_mem_gb + EPS:
                        picked[i] = self._vacant_list(i)[:min(f, need)]
                        need -= len(picked[i])
            return picked if need <= 0 else None
        whole = self.ledger.free_whole
        free: list[tuple[int, int, list[int]]] = []
        for i, srv in enumerate(self.cluster.servers):
            if mem > srv.gpu_mem_gb + EPS or not whole[i]:  # a vacant device is whole-free: none here
                continue
            vac = [d for d in range(srv.gpus) if self.vacant(i, d) and (i, d) not in exclude]
            if vac:
                free.append((len(vac), i, vac))
        fitting = [t for t in free if t[0] >= n]
        if fitting:
            _, i, vac = min(fitting, key=lambda t: (t[0], t[1]))
            return {i: vac[:n]}
        chosen: dict[int, list[int]] = {}
        need = n
        for f, i, vac in sorted(free, key=lambda t: (-t[0], t[1])):
            if need <= 0:
                break
            chosen[i] = vac[:min(f, need)]
            need -= len(chosen[i])
        return chosen if need <= 0 else None

    def _vacant_list(self, i: int) -> list[int]:
        return [d for d in range(self.cluster.servers[i].gpus) if self.vacant(i, d)]

    def first_found(self, share: float, mem: float) -> tuple[int, int] | None:
        """The first device (index order) a task of ``share`` and ``mem`` GB may join."""
        for i, d in self.devices():
            if self.can_share(i, d, share, mem):
                return i, d
        return None

    def fraction_alloc(self, i: int, d: int, share: float, mem: float) -> Allocation:
        srv = self.cluster.servers[i]
        return Allocation.fraction(i, d, share, cpus=srv.cpus_per_gpu * share, mem_gb=srv.mem_per_gpu * share,
                                   device_mem_gb=mem)

    def place(self, js: JobState, p: float, prefer: Allocation | None = None,
              exclude: set[tuple[int, int]] | None = None) -> Allocation | None:
        """Allocate ``p`` processors to ``js`` (``n`` dedicated GPUs or a share of one GPU) and take them;
        None (nothing taken) if they are not free."""
        mem = js.perf.device_mem_gb
        if exclude is None and any(p >= fp - _TOL and mem >= fm - EPS for fp, fm in self._failed):
            return None
        alloc = self._build(p, mem, prefer, exclude)
        if alloc is None or not self.fits(alloc):
            if exclude is None:
                self._failed.append((p, mem))
            return None
        self.take(alloc)
        return alloc

    def _build(self, p: float, mem: float, prefer: Allocation | None,
               exclude: set[tuple[int, int]] | None) -> Allocation | None:
        if p >= 1 - EPS:
            devices = self.choose_whole(max(1, round(p)), mem, prefer, exclude)
            if devices is None:
                return None
            alloc = proportional_allocation(self.ledger, devices, mem)
        else:
            loc = None
            if prefer is not None and prefer.is_fractional and len(prefer.shares) == 1:
                s = prefer.shares[0]
                if s.server < self.cluster.n_servers and s.devices[0] < self.cluster.servers[s.server].gpus \
                        and self.can_share(s.server, s.devices[0], p, mem):
                    loc = (s.server, s.devices[0])
            loc = loc or self.first_found(p, mem)
            if loc is None:
                return None
            alloc = self.fraction_alloc(*loc, p, mem)
        return alloc


class _EverFits:
    """I9: could a job run on ``p`` processors on an empty cluster? (cached per device-memory size)"""

    def __init__(self, cluster: ClusterSpec) -> None:
        self.cluster = cluster
        self._usable: dict[float, int] = {}

    def __call__(self, js: JobState, p: float) -> bool:
        mem = js.perf.device_mem_gb
        usable = self._usable.get(mem)
        if usable is None:
            usable = self._usable[mem] = sum(s.gpus for s in self.cluster.servers if mem <= s.gpu_mem_gb + EPS)
        return usable >= (max(1, round(p)) if p >= 1 - EPS else 1)


# -- the moldable/malleable family -----------------------------------------------------------------------
class _Flexible(Mechanism):
    """Common frame: pinned allocations, queue, decision (subclass), malleable re-placement (I6)."""

    malleable: bool = False
    round_based = False
    resizes = True

    def __init__(self, p_min: float = DEFAULT_P_MIN, p_max: float = DEFAULT_P_MAX, *, strict_sharing: bool = True,
                 preempt_min_remaining: float = PAPER_PREEMPT_MIN_REMAINING_S, memory_aware: bool = True) -> None:
        super().__init__()
        if not p_min > 0:
            raise ValueError(f"p_min must be > 0, got {p_min}")
        if p_max < p_min:
            raise ValueError(f"p_max {p_max} < p_min {p_min}")
        if preempt_min_remaining < 0:
            raise ValueError(f"preempt_min_remaining must be >= 0, got {preempt_min_remaining}")
        self.p_min = float(p_min)
        self.p_max = float(p_max)
        self.strict_sharing = strict_sharing
        self.preempt_min_remaining = float(preempt_min_remaining)
        self.memory_aware = memory_aware
        #: device memory -> GPUs of ``_usable_for`` whose memory holds it
        self._usable_for: ClusterSpec | None = None
        self._usable_gpus: dict[float, int] = {}
        self._case = 0
        self._extra: dict[str, float] = {}

    def bounds(self, job: Job) -> Bounds:
        return job_bounds(job, self.p_min, self.p_max)

    def min_devices(self, job: Job) -> int:
        """``p_min`` in devices: ``p_min`` dedicated GPUs when it is one or more (I4), else one device, which a
        ``1/n`` share still needs whole as far as its memory goes. I10's memory floor only raises a fraction,
        at most to one GPU, so :meth:`bounds` alone decides this."""
        return self.bounds(job).floor

    def job_bounds(self, js: JobState, cluster: ClusterSpec) -> Bounds:
        """The bounds this mechanism uses for ``js``: :meth:`bounds`, ``p_max`` at most the GPUs whose memory
        holds the job (with or without ``memory_aware``), and I10's memory floor (``memory_aware``)."""
        b = self.bounds(js.job)
        mem = js.perf.device_mem_gb
        if mem <= 0:
            return b
        # on a cluster whose devices differ in memory, no size above the devices that hold the job (else a
        # job sized for GPUs it cannot use would wait for ever)
        if cluster is not self._usable_for:
            self._usable_for, self._usable_gpus = cluster, {}
        usable = self._usable_gpus.get(mem)
        if usable is None:
            usable = self._usable_gpus[mem] = sum(s.gpus for s in cluster.servers if mem <= s.gpu_mem_gb + EPS)
        if usable < cluster.total_gpus and b.lo - _TOL <= usable < b.hi:
            b = Bounds(b.lo, float(usable))
        if not self.memory_aware or b.lo >= 1 - EPS:  # the cap above holds either way: it is not I10's floor
            return b
        cap = max((s.gpu_mem_gb for s in cluster.servers if s.gpus > 0), default=0.0)
        if cap <= 0 or mem > cap + EPS:
            return b
        lo = max(b.lo, unit_fraction_ceil(min(1.0, mem / cap)))
        return Bounds(lo, max(b.hi, lo))

    @staticmethod
    def volume(js: JobState, now: float) -> float:
        """Remaining work in single-GPU seconds (the paper's ``v_rem``)."""
        return js.remaining_at(now) / js.perf.gpu_factor(1.0, js.job.gpus)

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        active = {js.id: js for js in ordered}
        current = {jid: a for jid, a in running.items() if jid in active}
        if self.malleable:
            pinned = {jid: a for jid, a in current.items()
                      if self.preempt_min_remaining > 0
                      and self.volume(active[jid], now) <= self.preempt_min_remaining}
        else:
            pinned = current
        state = DeviceState(cluster, self.strict_sharing)
        for a in pinned.values():
            state.take(a)
        queue = [js for js in ordered if js.id not in pinned]
        b = {js.id: self.job_bounds(js, cluster) for js in queue}
        ever_fits = _EverFits(cluster)
        runnable = [js for js in queue if ever_fits(js, b[js.id].lo)]
        self._case = 0
        self._extra: dict[str, float] = {}
        decided = self._decide(runnable, state.copy(), now, b)
        if self.malleable and decided:
            decided = self._replace(decided, active, pinned, current, state.copy())
        out = dict(pinned)
        out.update(decided)
        self.last_stats = {
            "case": float(self._case), "queued": float(len(queue)), "allocated": float(len(decided)),
            "pinned": float(len(pinned)) if self.malleable else 0.0,
            "unschedulable": float(len(queue) - len(runnable)),
            "gpus_allocated": float(sum(a.gpus for a in out.values())),
            **self._extra,
        }
        return out

    @abstractmethod
    def _decide(self, queue: list[JobState], state: DeviceState, now: float,
                b: Mapping[str, Bounds]) -> dict[str, Allocation]:
        """Allocations for ``queue`` on what ``state`` has free (``b``: each job's bounds): Equipartition's
        (§IV-A) or Proportional's (§IV-B) rule, in the subclasses."""

    @staticmethod
    def _replace(decided: dict[str, Allocation], active: Mapping[str, JobState], pinned: Mapping[str, Allocation],
                 current: Mapping[str, Allocation], state: DeviceState) -> dict[str, Allocation]:
        """I6: the same sizes, keeping previous allocations where possible."""
        out: dict[str, Allocation] = {}
        rest: list[str] = []
        for jid, a in decided.items():
            prev = current.get(jid)
            if (prev is not None and jid not in pinned and abs(prev.gpus - a.gpus) < EPS
                    and prev.is_fractional == a.is_fractional and state.fits(prev)):
                state.take(prev)
                out[jid] = prev
            else:
                rest.append(jid)
        for jid in rest:
            a = decided[jid]
            if state.fits(a):
                state.take(a)
                out[jid] = a
                continue
            placed = state.place(active[jid], a.gpus, current.get(jid))
            if placed is None:
                return decided
            out[jid] = placed
        return out

    # -- shared cases 1 and 2 --------------------------------------------------------------------------
    def _bounded_cases(self, queue: list[JobState], state: DeviceState,
                       b: Mapping[str, Bounds]) -> dict[str, Allocation] | None:
        """Cases 1 (congested: ``p_min`` each) and 2 (idle: ``p_max`` each), or None if neither applies."""
        if sum(b[js.id].lo for js in queue) >= state.p_avl - _TOL:
            self._case = 1
            return self._each(queue, state, {js.id: b[js.id].lo for js in queue})
        if sum(b[js.id].hi for js in queue) <= state.n_vacant + _TOL:
            self._case = 2
            order = [js for js in queue if b[js.id].hi >= 1 - EPS] + [js for js in queue if b[js.id].hi < 1 - EPS]
            return self._each(order, state, {js.id: b[js.id].hi for js in queue})
        return None

    @staticmethod
    def _each(queue: Iterable[JobState], state: DeviceState, size: Mapping[str, float]) -> dict[str, Allocation]:
        out: dict[str, Allocation] = {}
        for js in queue:
            a = state.place(js, size[js.id])
            if a is not None:
                out[js.id] = a
        return out


class _Equipartition(_Flexible):
    """§IV-A, cases 1–4 (see the module docstring)."""

    def __init__(self, p_min: float = DEFAULT_P_MIN, p_max: float = DEFAULT_P_MAX, *, dhondt_counts_first: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(p_min, p_max, **kwargs)
        self.dhondt_counts_first = dhondt_counts_first

    def _decide(self, queue: list[JobState], state: DeviceState, now: float,
                b: Mapping[str, Bounds]) -> dict[str, Allocation]:
        if not queue:
            return {}
        done = self._bounded_cases(queue, state, b)
        if done is not None:
            return done
        vacant = state.n_vacant
        if sum(b[js.id].floor for js in queue) <= vacant:
            self._case = 3
            return self._dhondt_case(queue, state, b, vacant)
        self._case = 4
        return self._share_case(queue, state, b)

    def _dhondt_case(self, queue: list[JobState], state: DeviceState, b: Mapping[str, Bounds],
                     vacant: int) -> dict[str, Allocation]:
        whole = [js for js in queue if b[js.id].hi >= 1 - EPS]
        small = [js for js in queue if b[js.id].hi < 1 - EPS]
        start = [b[js.id].floor for js in whole]
        seats = vacant - len(small) - sum(start)
        sizes = dhondt([b[js.id].hi for js in whole], seats, start, [round(b[js.id].hi) for js in whole],
                       count_start=self.dhondt_counts_first)
        out: dict[str, Allocation] = {}
        by_size = sorted(range(len(whole)), key=lambda k: -sizes[k])  # stable: policy order among equals
        for k in by_size:
            a = state.place(whole[k], float(sizes[k]))
            if a is not None:
                out[whole[k].id] = a
        for js in small:
            a = state.place(js, b[js.id].hi)
            if a is not None:
                out[js.id] = a
        return out

    def _share_case(self, queue: list[JobState], state: DeviceState,
                    b: Mapping[str, Bounds]) -> dict[str, Allocation]:
        """Case 4: pre-assign to the least-loaded GPU that can take the task (I2), then share it."""
        strict = state.strict
        pre: dict[tuple[int, int], list[JobState]] = {}
        pre_mem: dict[tuple[int, int], float] = {}
        pre_lo: dict[tuple[int, int], float] = {}
        exclusive: set[tuple[int, int]] = set()
        whole: list[tuple[JobState, dict[int, list[int]]]] = []
        devices = list(state.devices())

        def share_on(i: int, d: int, k: int) -> float:
            x = state.free(i, d) / k
            if strict:
                x = min(x, 1.0 / (len(state.shares[i][d]) + k))
            return unit_fraction_floor(x) if x > _TOL else 0.0

        # least-loaded first: a heap of (tasks on the device, server, device), stale entries skipped
        count = {(i, d): len(state.shares[i][d]) for i, d in devices}
        heap = [(count[dev], *dev) for dev in devices if state.free(*dev) > EPS]
        heapq.heapify(heap)
        failed: list[tuple[float, float]] = []  # (p_min, memory) no device could take: larger ones fail too

        def eligible(i: int, d: int, lo: float, mem: float) -> bool:
            k = len(pre.get((i, d), ())) + 1
            return (lo <= state.free(i, d) + EPS
                    and mem + pre_mem.get((i, d), 0.0) <= state.mem_free(i, d) + EPS
                    and share_on(i, d, k) >= max(lo, pre_lo.get((i, d), 0.0)) - _TOL
                    and state.sharing_ok(i, d, 0.0, joining=k))

        for js in queue:
            lo = b[js.id].lo
            mem = js.perf.device_mem_gb
            if lo >= 1 - EPS:  # I4: dedicated GPUs nobody else is pre-assigned to
                devs = state.choose_whole(round(lo), mem, exclude=exclusive | set(pre))
                if devs is not None:
                    exclusive.update((i, d) for i, ds in devs.items() for d in ds)
                    whole.append((js, devs))
                continue
            if any(lo >= flo - _TOL and mem >= fmem - EPS for flo, fmem in failed):
                continue
            skipped: list[tuple[int, int, int]] = []
            chosen: tuple[int, int] | None = None
            while heap:
                c, i, d = heapq.heappop(heap)
                if (i, d) in exclusive or c != count[(i, d)]:
                    continue
                if eligible(i, d, lo, mem):
                    chosen = (i, d)
                    break
                skipped.append((c, i, d))
            for entry in skipped:
                heapq.heappush(heap, entry)
            if chosen is None:
                failed.append((lo, mem))
                continue
            pre.setdefault(chosen, []).append(js)
            pre_mem[chosen] = pre_mem.get(chosen, 0.0) + mem
            pre_lo[chosen] = max(pre_lo.get(chosen, 0.0), lo)
            count[chosen] += 1
            heapq.heappush(heap, (count[chosen], *chosen))

        out: dict[str, Allocation] = {}
        for js, devs in whole:
            alloc = proportional_allocation(state.ledger, devs, js.perf.device_mem_gb)
            if state.fits(alloc):
                state.take(alloc)
                out[js.id] = alloc
        for (i, d), tasks in pre.items():
            share = share_on(i, d, len(tasks))
            for js in tasks:
                p = min(share, b[js.id].hi)
                if p >= 1 - EPS:
                    alloc = proportional_allocation(state.ledger, {i: [d]}, js.perf.device_mem_gb)
                else:
                    alloc = state.fraction_alloc(i, d, unit_fraction_floor(p), js.perf.device_mem_gb)
                if state.fits(alloc):  # always, by construction; kept as a guard
                    state.take(alloc)
                    out[js.id] = alloc
        # the result keeps the policy order of the queue
        return {js.id: out[js.id] for js in queue if js.id in out}


class MoldableEquipartition(_Equipartition):
    """§IV-A Moldable Equipartition: waiting tasks get sizes when they start; running tasks stay as they are."""

    name = "moldable-equipartition"
    preemptive = False
    malleable = False


class MalleableEquipartition(_Equipartition):
    """§IV-A Malleable Equipartition: every event re-distributes all GPUs among all active tasks."""

    name = "malleable-equipartition"
    preemptive = True
    malleable = True


class _Proportional(_Flexible):
    """§IV-B: sizes so that every task would finish at the same target makespan."""

    def __init__(self, p_min: float = DEFAULT_P_MIN, p_max: float = DEFAULT_P_MAX, *, weight: str = "work",
                 **kwargs: Any) -> None:
        super().__init__(p_min, p_max, **kwargs)
        if weight not in ("work", "gpus"):
            raise ValueError(f"weight must be 'work' (the paper) or 'gpus', got {weight!r}")
        self.weight = weight

    def _weight(self, js: JobState, now: float) -> float:
        return self.volume(js, now) if self.weight == "work" else js.job.gpus

    def _runtime(self, js: JobState, v: float, p: float) -> float:
        """``f(v, p)``: time to do ``v`` single-GPU seconds on ``p`` processors."""
        speed = js.perf.gpu_factor(p, 1.0) if self.weight == "work" else p
        return math.inf if speed <= 0 else v / speed

    def _decide(self, queue: list[JobState], state: DeviceState, now: float,
                b: Mapping[str, Bounds]) -> dict[str, Allocation]:
        if not queue:
            return {}
        done = self._bounded_cases(queue, state, b)
        if done is not None:
            return done
        self._case = 3
        v = {js.id: self._weight(js, now) for js in queue}
        t_trg = sum(v.values()) / state.p_avl
        self._extra["t_target"] = t_trg
        out: dict[str, Allocation] = {}
        for js in sorted(queue, key=lambda j: -v[j.id]):
            # no size above the cluster's GPUs can be placed: listing them all (p_max = 1e11) ran out of memory
            sizes = sizes_between(b[js.id].lo, max(b[js.id].lo, min(b[js.id].hi, float(state.cluster.total_gpus))))
            best = min(range(len(sizes)), key=lambda k: (abs(self._runtime(js, v[js.id], sizes[k]) - t_trg), k))
            for p in reversed(sizes[:best + 1]):  # I7: the chosen size, else the next smaller ones
                a = state.place(js, p)
                if a is not None:
                    out[js.id] = a
                    break
        return {js.id: out[js.id] for js in queue if js.id in out}


class MoldableProportional(_Proportional):
    """§IV-B Moldable Proportional: sizes for waiting tasks from a target makespan; running tasks untouched."""

    name = "moldable-proportional"
    preemptive = False
    malleable = False


class MalleableProportional(_Proportional):
    """§IV-B Malleable Proportional: every event re-sizes all active tasks to a common target makespan."""

    name = "malleable-proportional"
    preemptive = True
    malleable = True


# -- rigid baselines -------------------------------------------------------------------------------------
class RigidFCFS(Mechanism):
    """§V-B Rigid FCFS (with the FIFO policy) / Rigid Shortest (with ``ShortestFirst``): each task gets
    exactly its requested size, in policy order, non-preemptively. Blocking by default (I8)."""

    name = "rigid"
    preemptive = False
    round_based = False
    rigid = True

    def __init__(self, *, backfill: bool = False, strict_sharing: bool = True) -> None:
        super().__init__()
        self.backfill = backfill
        self.strict_sharing = strict_sharing

    @staticmethod
    def size(job: Job) -> float:
        """Whole GPUs for a request ≥ 1 (rounded up: 1.4 GPUs is 2, as the simulator's rigidity check and
        :meth:`Mechanism.min_devices` read it), else the requested fraction of one GPU."""
        return float(max(1, math.ceil(job.gpus - EPS))) if job.gpus >= 1 - EPS else float(job.gpus)

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        active = {js.id for js in ordered}
        out = {jid: a for jid, a in running.items() if jid in active}
        state = DeviceState(cluster, self.strict_sharing)
        for a in out.values():
            state.take(a)
        waiting = len(ordered) - len(out)
        skipped = blocked = 0
        ever_fits = _EverFits(cluster)
        for js in ordered:
            if js.id in out:
                continue
            p = self.size(js.job)
            if not ever_fits(js, p):  # I9: never blocks the queue
                skipped += 1
                continue
            a = state.place(js, p)
            if a is None:
                blocked += 1
                if not self.backfill:
                    break  # strict FCFS: the head of the queue waits, and so does everyone behind it
                continue
            out[js.id] = a
        self.last_stats = {"queued": float(waiting), "started": float(len(out) - (len(ordered) - waiting)),
                           "unschedulable": float(skipped), "blocked": float(blocked),
                           "gpus_allocated": float(sum(a.gpus for a in out.values()))}
        return out
