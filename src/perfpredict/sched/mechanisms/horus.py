"""Horus (seed 004) and its baselines: interference-aware co-location of DL jobs on shared GPUs.

Every mechanism here is event-driven and places each job on ``⌈gpus⌉`` whole devices; the co-locating ones
(Horus, OBP, PAB) use *shared* shares (:class:`~perfpredict.sched.cluster.Share` ``shared=True``), which other
jobs may join. They decide with the job's *predictions*: ``PerfModel.gpu_util`` (predicted solo GPU
utilisation; unknown = 1.0, a job that keeps its GPU busy) and the device memory to reserve
(``JobState.device_mem_request_gb``: the card's predicted footprint, raised after an out-of-memory failure).
The simulator runs them with the measured values (:mod:`perfpredict.sim.sharing`).

* :class:`Horus` — Algorithm 1: pending jobs in ``k`` k-means queues on the four features of §4.2.2, rounds of
  β jobs picked by weighted fairness (:mod:`perfpredict.sched.horus`), each placed on the top-λ lowest-cost
  devices of eq. 7-10 among those passing the capacity check. Rounds go on "while queues in Q is not empty":
  a picked job leaves its queue, placed or not, so one decision tries every pending job once, in the order
  the rounds give (one that does not fit waits for the next decision; the queues are rebuilt each time).
  A buffer is served in weighted-fair-queuing order ("all pending jobs are now well
  ordered ... according to the weighted fairness"): the p-th job of queue x gets the virtual finish tag
  p / w_x, smallest first, so each queue is served in proportion to its weight, longest-waiting first within
  it. ``k = 1`` is Horus, ``k = 3`` Horus-f (:class:`HorusF`), β = 15 (§5.2).

  The capacity check (line 7: "CPUs, Mems, GPU Mems"; §4.2.2: "in terms of CPU, memory and GPU memory";
  eq. 5 over R = {CPU, RAM, GMem}, Table 5 giving a capacity CP only for GMem) is device memory, host CPUs
  and memory, and the operator's over-commitment threshold, which §4.3 puts on "the number of co-located
  jobs or device memory usage" (``max_colocated``). GPU utilisation enters through eq. 9's cost only: an
  over-committed device (``GUtil_jng > 100``) stays a candidate, "penalized" by ``f+``, not excluded
  (``overcommit="none"``, the default). §4.1.2's "GUtil and GMem will be used for node capacity check" gives
  no rule; two readings of it are options: ``overcommit="breakeven"`` lets a device take another job only
  while the interference model predicts that its jobs together progress at least as fast as without it:
  ``(m+1)/(1+f(U+u)) >= m/(1+f(U))`` for ``m`` jobs at predicted cumulative utilisation ``U`` (always true
  on an idle device; for a pair, ``f(U+u) <= 1``: 171 % with the measured H100 model, 131 % with the
  paper's RTX 2080 one); a number caps the predicted cumulative utilisation of a device that already has a
  job (an idle one takes any job).
* :class:`OpportunisticBinPacking` (OBP) — jobs in policy order; each goes to the devices with the most free
  (predicted) memory that fit it, "similar to least-loaded" (§5.2); one that fits nowhere is skipped.
* :class:`PerformanceAwareBinPacking` (PAB) — OBP's placement, then after a warm-up (60 s, §5.2: "0-60s") the
  co-runners' measured speed (the simulator's ``JobState.rate``) is compared with theirs before the job
  arrived; if it dropped by ``threshold`` (50 %: "if performance drops by 50 percent") or more, the job is
  re-queued (it restarts from its last epoch checkpoint; a decision right after tries it again) and is not put
  with those jobs again. A placement on an idle device needs no measurement; co-locations are measured one at
  a time, which is the "total of n jobs multiply by T_wait" the paper charges PAB with.
* :class:`FifoExclusive` (FIFO) — "assigns the incoming DL job onto an idle GPU without job colocation":
  whole devices, best fit, in arrival order, a job that does not fit is skipped (Kubernetes-like: a pending
  pod does not block the ones behind it).

The over-commitment limit (§4.3: "can be configured based on the number of co-located jobs or device memory
usage"): ``max_colocated`` jobs per device, 2 by default for every co-locating mechanism, because both the
paper's and perfpredict's interference models were fitted on *pairs* of jobs; beyond that they extrapolate.
Host CPUs and memory: each job takes ``1 / max_colocated`` of its server's per-GPU share per device, so they
never bind before the device limit does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from perfpredict.sched.base import Mechanism
from perfpredict.sched.cluster import EPS, Allocation, ClusterSpec, Ledger, Share
from perfpredict.sched.horus import job_features, kmeans_l1, placement_cost, weighted_fair_quota
from perfpredict.sched.job import JobState
from perfpredict.sched.placement import choose_devices, proportional_allocation

__all__ = ["FifoExclusive", "Horus", "HorusF", "OpportunisticBinPacking", "PerformanceAwareBinPacking"]


def predicted_util(js: JobState) -> float:
    """The job's predicted solo GPU utilisation (1.0 when its card has none)."""
    u = js.perf.gpu_util
    return 1.0 if u is None else float(u)


def _lam(js: JobState) -> int:
    return max(1, math.ceil(js.job.gpus - EPS))


def _median_wait(queue: Sequence[JobState], now: float) -> float:
    """Median waiting time of a queue sorted by arrival (O(1))."""
    n = len(queue)
    if n == 0:
        return 0.0
    a, b = queue[(n - 1) // 2].job.arrival, queue[n // 2].job.arrival
    return now - (a + b) / 2


class _Devices:
    """Flat per-device view of the cluster for one decision (device memory, sharers, predicted utilisation)."""

    def __init__(self, ledger: Ledger, statics: tuple[np.ndarray, np.ndarray, np.ndarray], util: np.ndarray,
                 jobs: Mapping[int, Sequence[str]]) -> None:
        self.ledger = ledger
        self.offset, self.server_of, self.cap = statics
        self.used_mem = np.fromiter((m for row in ledger.device_mem_used for m in row), float, len(self.cap))
        self.sharers = np.fromiter((n for row in ledger.device_sharers for n in row), int, len(self.cap))
        self.free = np.fromiter((f for row in ledger.device_free for f in row), float, len(self.cap))
        self.util = util.copy()
        self._base_jobs = jobs
        self._new_jobs: dict[int, list[str]] = {}

    def jobs_on(self, i: int) -> list[str]:
        """Ids of the jobs on device ``i`` (running ones and those placed in this decision)."""
        return [*self._base_jobs.get(i, ()), *self._new_jobs.get(i, ())]

    def occupied(self) -> list[int]:
        return sorted(set(self._base_jobs) | set(self._new_jobs))

    def feasible(self, mem_gb: float, max_colocated: int, exclusive: bool = False) -> np.ndarray:
        if exclusive:
            ok = (self.free >= 1 - EPS) & (self.sharers == 0)
        else:
            ok = (self.sharers < max_colocated) & ((self.sharers > 0) | (self.free >= 1 - EPS))
        return ok & (self.used_mem + mem_gb <= self.cap + EPS)

    def n_open(self, max_colocated: int) -> int:
        """Devices that could take one more job (memory aside)."""
        return int(np.count_nonzero((self.sharers < max_colocated) & ((self.sharers > 0) | (self.free >= 1 - EPS))))

    def key(self, i: int) -> tuple[int, int]:
        s = int(self.server_of[i])
        return s, i - int(self.offset[s])

    def pick(self, candidates: Sequence[int], lam: int, cpus: Sequence[float], mem: Sequence[float]) -> list[int] | None:
        """The first ``lam`` candidates (in the given order) whose servers still have host CPUs/memory (a job
        takes ``cpus[s]`` and ``mem[s]`` per device on server ``s``)."""
        taken: dict[int, int] = {}
        out: list[int] = []
        for i in candidates:
            s = int(self.server_of[i])
            n = taken.get(s, 0) + 1
            if self.ledger.free_cpus[s] + EPS < n * cpus[s] or self.ledger.free_mem[s] + EPS < n * mem[s]:
                continue
            taken[s] = n
            out.append(int(i))
            if len(out) == lam:
                return out
        return None

    def place(self, js: JobState, devs: Sequence[int], util: float, mem_gb: float, cpus: Sequence[float],
              mem: Sequence[float]) -> Allocation:
        """Put ``js`` on devices ``devs`` (shared shares; host CPUs and memory per device as in :meth:`pick`)."""
        by_server: dict[int, list[int]] = {}
        for i in devs:
            s, d = self.key(i)
            by_server.setdefault(s, []).append(d)
        alloc = Allocation(tuple(Share(server=s, gpus=float(len(ds)), cpus=cpus[s] * len(ds), mem_gb=mem[s] * len(ds),
                                       devices=tuple(sorted(ds)), device_mem_gb=mem_gb, shared=True)
                                 for s, ds in sorted(by_server.items())))
        self.ledger.take(alloc)
        for i in devs:
            self.used_mem[i] += mem_gb
            self.sharers[i] += 1
            self.free[i] = 0.0
            self.util[i] += util
            self._new_jobs.setdefault(i, []).append(js.id)
        return alloc


class _SharingBase(Mechanism):
    """Common set-up: non-preemptive, event-driven, every job gets exactly its (whole) GPU demand: a demand
    below one GPU gets one device, which it shares with the jobs co-located on it (Horus' sharing is of whole
    devices by predicted utilisation, not of fractions handed out)."""

    preemptive = False
    round_based = False
    rigid = True
    whole_gpus = True
    #: runs need GPU sharing in the simulator (``SimConfig.sharing``): ``run_simulation`` adds it
    shares_devices = True

    def __init__(self, max_colocated: int = 2) -> None:
        super().__init__()
        if int(max_colocated) < 1:
            raise ValueError(f"max_colocated must be >= 1, got {max_colocated}")
        self.max_colocated = int(max_colocated)
        self.reset()

    def reset(self) -> None:
        self._statics: tuple[ClusterSpec, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None
        # predicted utilisation per device of the running jobs, kept across decisions (running sets change little)
        self._util = np.zeros(0)
        self._on: dict[int, list[str]] = {}
        self._placed: dict[str, tuple[list[int], float]] = {}

    def _view(self, cluster: ClusterSpec, ledger: Ledger, ordered: Sequence[JobState],
              running_ids: Iterable[str]) -> _Devices:
        if self._statics is None or self._statics[0] is not cluster:
            counts = [s.gpus for s in cluster.servers]
            offset = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int)
            server_of = np.repeat(np.arange(len(counts)), counts)
            cap = np.repeat([s.gpu_mem_gb for s in cluster.servers], counts).astype(float)
            self._statics = (cluster, (offset, server_of, cap))
            self._util, self._on, self._placed = np.zeros(len(cap)), {}, {}
        offset = self._statics[1][0]
        ids = set(running_ids)
        for jid in self._placed.keys() - ids:
            idxs, u = self._placed.pop(jid)
            for i in idxs:
                self._util[i] -= u
                self._on[i].remove(jid)
                if not self._on[i]:
                    del self._on[i]
                    self._util[i] = 0.0
        new = ids - self._placed.keys()
        if new:
            for js in ordered:
                if js.id in new and js.allocation is not None:
                    idxs = [int(offset[sh.server]) + d for sh in js.allocation.shares for d in sh.devices]
                    u = predicted_util(js)
                    self._placed[js.id] = (idxs, u)
                    for i in idxs:
                        self._util[i] += u
                        self._on.setdefault(i, []).append(js.id)
        return _Devices(ledger, self._statics[1], self._util, self._on)

    def _host(self, cluster: ClusterSpec) -> tuple[list[float], list[float]]:
        """Host CPUs and memory a job takes per device on each server (see the module docstring)."""
        k = self.max_colocated
        return [s.cpus_per_gpu / k for s in cluster.servers], [s.mem_per_gpu / k for s in cluster.servers]

    def _start(self, cluster: ClusterSpec, running: Mapping[str, Allocation], ordered: Sequence[JobState]):
        out: dict[str, Allocation] = dict(running)
        ledger = self.current_ledger(cluster, running)
        pending = [js for js in ordered if js.id not in running]
        return out, ledger, pending


class Horus(_SharingBase):
    """Algorithm 1 (see the module docstring). ``interference`` picks the cost's ``f``: ``measured`` (perfpredict's
    H100 refit), ``paper`` (Horus, RTX 2080) or ``paper-1080``; ``w_mem``/``w_util`` are eq. 7's ω1/ω2."""

    name = "horus"

    def __init__(self, k: int = 1, beta: int = 15, interference: str = "measured", w_mem: float = 1.0,
                 w_util: float = 1.0, max_colocated: int = 2, overcommit: str | float = "none") -> None:
        super().__init__(max_colocated)
        from perfpredict.sim.sharing import slowdown_model

        if int(k) < 1 or int(beta) < 1:
            raise ValueError(f"need k >= 1 and beta >= 1, got k={k}, beta={beta}")
        self.k, self.beta = int(k), int(beta)
        self.interference = interference
        self.slowdown = slowdown_model(interference)
        self.w_mem, self.w_util = float(w_mem), float(w_util)
        if overcommit in ("breakeven", "none"):
            self.overcommit: str | float = str(overcommit)
        else:
            try:
                self.overcommit = float(overcommit)
            except (TypeError, ValueError):
                raise ValueError(f"overcommit must be 'breakeven', 'none' or a utilisation cap, got {overcommit!r}")\
                    from None
            if not self.overcommit > 0:
                raise ValueError(f"a utilisation cap must be > 0, got {overcommit}")
            if self.overcommit > self.max_colocated:
                # a fraction of the device's time (1.5 = 150 %), as the utilisations it is compared with are: the
                # paper's GUtil is in percent, and overcommit=150 read as 150 % capped nothing (150 = 15 000 %)
                raise ValueError(f"the utilisation cap is a fraction of the device's time (1.5 = 150 %); "
                                 f"{overcommit} is more than {self.max_colocated} co-located jobs "
                                 f"(max_colocated) can reach and would cap nothing: a percentage?")

    def reset(self) -> None:
        super().reset()
        #: each job's k-means features, by job id (the next trace reuses the ids)
        self._features: dict[tuple[str, float], tuple[float, float, float, float]] = {}

    def _many(self, u: np.ndarray) -> np.ndarray:
        many = getattr(self.slowdown, "many", None)
        return (np.asarray(many(u), float) if many is not None
                else np.fromiter((self.slowdown(float(x)) for x in u), float, count=len(u)))

    def admits(self, n_jobs: np.ndarray, util: np.ndarray, job_util: float) -> np.ndarray:
        """The utilisation part of the capacity check for devices with ``n_jobs`` jobs at predicted cumulative
        utilisation ``util`` (see the module docstring)."""
        n = np.asarray(n_jobs, float)
        u = np.asarray(util, float)
        if self.overcommit == "none":
            return np.ones(n.shape, bool)
        if not isinstance(self.overcommit, str):
            # an idle device takes any job, as under the break-even rule: a cap below a job's own predicted
            # utilisation would otherwise leave it waiting for ever
            return (u + job_util <= self.overcommit + 1e-9) | (n == 0)
        before = np.where(n >= 2, n / (1.0 + self._many(u)), n)
        after = (n + 1) / (1.0 + self._many(u + job_util))
        return after >= before - 1e-12

    def queues(self, pending: Sequence[JobState], cluster: ClusterSpec) -> list[list[JobState]]:
        """Line 2: the pending jobs in k-means queues, each longest-waiting first."""
        if self.k == 1:
            return [sorted(pending, key=lambda js: js.arrival_key)]
        gpn = max((s.gpus for s in cluster.servers), default=1)
        X = []
        for js in pending:
            key = (js.id, js.device_mem_request_gb)
            f = self._features.get(key)
            if f is None:
                f = self._features[key] = job_features(js.job.gpus, predicted_util(js), js.device_mem_request_gb, gpn)
            X.append(f)
        labels = kmeans_l1(np.array(X, float).reshape(len(pending), 4), self.k)
        qs: list[list[JobState]] = [[] for _ in range(int(labels.max()) + 1 if len(labels) else 0)]
        for js, q in zip(pending, labels, strict=True):
            qs[int(q)].append(js)
        for q in qs:
            q.sort(key=lambda js: js.arrival_key)
        return qs

    def rounds(self, pending: Sequence[JobState], cluster: ClusterSpec, now: float) -> list[list[JobState]]:
        """Lines 2-4: the scheduling rounds of one decision, each a buffer of up to β jobs in the order they are
        tried. Every pending job is in exactly one round; the rounds take jobs from the k queues by
        weighted fairness, recomputed on what is left of the queues."""
        queues = self.queues(pending, cluster)
        out: list[list[JobState]] = []
        while any(queues):
            lengths = [len(q) for q in queues]
            waits = [_median_wait(q, now) for q in queues]
            quota = weighted_fair_quota(lengths, waits, self.beta)
            weights = [max(n, m * n) for n, m in zip(lengths, waits, strict=True)]
            tagged = [((p + 1) / weights[x], js.arrival_key, js)
                      for x, (q, n) in enumerate(zip(queues, quota, strict=True)) for p, js in enumerate(q[:n])]
            tagged.sort(key=lambda t: (t[0], t[1]))  # weighted fair queuing order (virtual finish tags)
            out.append([js for _, _, js in tagged])
            queues = [q[n:] for q, n in zip(queues, quota, strict=True)]
        return out

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        out, ledger, pending = self._start(cluster, running, ordered)
        if not pending:
            return out
        view = self._view(cluster, ledger, ordered, running)
        cpus, mem = self._host(cluster)
        n_open = view.n_open(self.max_colocated)
        rounds = self.rounds(pending, cluster, now)
        placed = 0
        for buffer in rounds:
            for js in buffer:
                if n_open < _lam(js):  # line 6: no allocatable resources for it
                    continue
                alloc = self._place(js, view, cluster, cpus, mem)
                if alloc is not None:
                    out[js.id] = alloc
                    placed += 1
                    n_open = view.n_open(self.max_colocated)
            if n_open == 0:
                break
        self.last_stats = {"rounds": float(len(rounds)), "placed": float(placed)}
        return out

    def _place(self, js: JobState, view: _Devices, cluster: ClusterSpec, cpus: Sequence[float],
               mem: Sequence[float]) -> Allocation | None:
        lam = _lam(js)
        need = js.device_mem_request_gb
        u = predicted_util(js)
        ok = view.feasible(need, self.max_colocated)
        cand = np.flatnonzero(ok)
        if len(cand):
            cand = cand[self.admits(view.sharers[cand], view.util[cand], u)]
        if len(cand) < lam:
            return None
        gpn = max(s.gpus for s in cluster.servers)
        sigma = math.ceil(lam / gpn)
        if len(np.unique(view.server_of[cand])) < sigma:  # lines 9-12: not enough nodes pass the check
            return None
        cost = placement_cost(view.used_mem[cand], view.cap[cand], view.util[cand], need, u, self.slowdown,
                              self.w_mem, self.w_util)
        order = cand[np.argsort(cost, kind="stable")]  # top-λ lowest cost (ties: lower device index)
        devs = view.pick(order, lam, cpus, mem)
        if devs is None:
            return None
        return view.place(js, devs, u, need, cpus, mem)


class HorusF(Horus):
    """Horus-f: Horus with k = 3 queues (fairness, §4.2.2 and §6.2)."""

    name = "horus-f"

    def __init__(self, k: int = 3, **kwargs) -> None:
        super().__init__(k=k, **kwargs)


class OpportunisticBinPacking(_SharingBase):
    """OBP (see the module docstring)."""

    name = "obp"

    def _choose(self, js: JobState, view: _Devices, cpus: Sequence[float], mem: Sequence[float],
                avoid: set[int] | None = None) -> list[int] | None:
        need = js.device_mem_request_gb
        ok = view.feasible(need, self.max_colocated)
        if avoid:
            ok[list(avoid)] = False
        cand = np.flatnonzero(ok)
        if len(cand) < _lam(js):
            return None
        free_mem = view.cap[cand] - view.used_mem[cand]
        order = cand[np.lexsort((cand, view.sharers[cand], -free_mem))]  # most free memory first
        return view.pick(order, _lam(js), cpus, mem)

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        out, ledger, pending = self._start(cluster, running, ordered)
        if not pending:
            return out
        view = self._view(cluster, ledger, ordered, running)
        cpus, mem = self._host(cluster)
        n_open = view.n_open(self.max_colocated)
        for js in pending:
            if n_open < _lam(js):
                continue
            devs = self._choose(js, view, cpus, mem)
            if devs is not None:
                out[js.id] = view.place(js, devs, predicted_util(js), js.device_mem_request_gb, cpus, mem)
                n_open = view.n_open(self.max_colocated)
        return out


class PerformanceAwareBinPacking(OpportunisticBinPacking):
    """PAB (see the module docstring)."""

    name = "pab"
    preemptive = True  # it re-queues jobs

    def __init__(self, warmup_s: float = 60.0, threshold: float = 0.5, max_colocated: int = 2) -> None:
        super().__init__(max_colocated)
        if not warmup_s > 0 or not 0 < threshold <= 1:
            raise ValueError(f"need warmup_s > 0 and 0 < threshold <= 1, got {warmup_s}, {threshold}")
        self.warmup_s, self.threshold = float(warmup_s), float(threshold)

    def reset(self) -> None:
        super().reset()
        self._wake: list[float] = []  # a decision at the end of every warm-up
        #: job on probation -> (placed at, its co-runners' speeds just before)
        self.probation: dict[str, tuple[float, dict[str, float]]] = {}
        #: job -> jobs it slowed down too much (never co-located with them again)
        self.avoid: dict[str, set[str]] = {}
        self.requeues = 0

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        states = {js.id: js for js in ordered}
        out: dict[str, Allocation] = dict(running)
        requeued: set[str] = set()
        for jid, (t0, before) in list(self.probation.items()):
            if jid not in running:
                del self.probation[jid]
                continue
            if now + 1e-9 < t0 + self.warmup_s:
                continue
            del self.probation[jid]
            drops = [1.0 - states[c].rate / r for c, r in before.items() if c in running and c in states and r > 0]
            if drops and max(drops) >= self.threshold - 1e-12:
                del out[jid]
                requeued.add(jid)
                self.avoid.setdefault(jid, set()).update(before)
                self.requeues += 1
        ledger = self.current_ledger(cluster, running)
        for jid in requeued:
            ledger.release(running[jid])
        if requeued:
            # back in the queue: tried again at a decision right after this one (without it the job waited for
            # the next arrival or completion, however long, even with a GPU idle)
            self._wake.append(math.nextafter(now, math.inf))
        view = self._view(cluster, ledger, ordered, out)
        cpus, mem = self._host(cluster)
        for js in ordered:
            if js.id in out or js.id in requeued:
                continue
            bad = self.avoid.get(js.id)
            avoid = {i for i in view.occupied() if bad & set(view.jobs_on(i))} if bad else None
            devs = self._choose(js, view, cpus, mem, avoid)
            if devs is None:
                continue
            corunners = {c for i in devs for c in view.jobs_on(i)}
            if corunners and self.probation:
                continue  # co-locations are measured one at a time
            out[js.id] = view.place(js, devs, predicted_util(js), js.device_mem_request_gb, cpus, mem)
            if corunners:
                self.probation[js.id] = (now, {c: states[c].rate for c in corunners})
                self._wake.append(now + self.warmup_s)
        self.last_stats = {"requeued": float(len(requeued)), "probation": float(len(self.probation))}
        return out


    def pop_wakeups(self) -> list[float]:
        """The simulator asks after every decision: the ends of the warm-ups started since."""
        out, self._wake = self._wake, []
        return out


class FifoExclusive(_SharingBase):
    """FIFO with exclusive GPUs (see the module docstring)."""

    name = "fifo-exclusive"

    def __init__(self) -> None:
        super().__init__(max_colocated=1)

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        out, ledger, pending = self._start(cluster, running, ordered)
        for js in pending:
            free = ledger.total_free_gpus
            if free == 0:
                break  # every job needs a whole device: none of the rest can start
            if free < _lam(js):
                continue
            devices = choose_devices(ledger, _lam(js), device_mem_gb=js.device_mem_request_gb)
            if devices is None:
                continue
            alloc = proportional_allocation(ledger, devices, js.device_mem_request_gb)
            if ledger.fits(alloc) is not None:
                continue
            ledger.take(alloc)
            out[js.id] = alloc
        return out
