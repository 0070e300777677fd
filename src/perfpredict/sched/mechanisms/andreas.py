"""ANDREAS (seed 000) as mechanisms: the Randomized Greedy Job Optimizer and the first-principle baselines.

``andreas`` (:class:`AndreasRG`) — §III-IV. At every rescheduling point (a job arrives or finishes, and every
``period_s``, 300 s by default: the Job Manager's periodic call) it builds the capacity-allocation problem of
:mod:`perfpredict.sched.andreas` for *every* active job, running or not, and solves it with Alg. 1
(``max_it`` = MaxIt_RG iterations, ρ = 100). Jobs it does not schedule are preempted (they restart from
their last epoch checkpoint later); a job whose (GPU type, GPU count) changes is migrated (same). The node
within a class of identical nodes is a free choice as far as the real cost goes (only the proxy's α term
depends on how jobs are packed), so running jobs that keep their configuration stay on their GPUs and the
others go best-fit into the rest; only if that fragments a class does the mechanism take RG's own packing.

``andreas-baseline`` (:class:`AndreasBaseline`) — §V-B's FIFO, EDF and Priority Scheduling, by ``--policy
fifo|edf|priority``. Non-preemptive: "first-principle methods never change the configuration assigned to a
job once it has been started". Waiting jobs are taken in policy order; each gets, among the free GPUs, the
configuration Alg. 1's deterministic rule would pick (the cheapest that meets its due date, else the
fastest), and keeps it to completion. The baselines thus share RG's configuration rule and differ from it
in job order, in preemption/migration and in the randomised search: the comparison isolates those.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

import numpy as np

from perfpredict.sched.andreas import (
    MAX_IT,
    RHO,
    AndreasProblem,
    NodeClass,
    node_classes,
    randomized_greedy,
)
from perfpredict.sched.base import Mechanism
from perfpredict.sched.cluster import Allocation, ClusterSpec, Ledger
from perfpredict.sched.job import JobState
from perfpredict.sched.placement import proportional_allocation

__all__ = ["AndreasBaseline", "AndreasRG"]


def _best_fit(ledger: Ledger, servers: Sequence[int], g: int) -> int | None:
    best = None
    for s in servers:
        f = ledger.free_whole[s]
        if f >= g and (best is None or f < ledger.free_whole[best]):
            best = s
    return best


class _Classes:
    """Node classes of a cluster, computed once per cluster."""

    def __init__(self) -> None:
        self._cluster: ClusterSpec | None = None
        self._classes: tuple[NodeClass, ...] = ()
        self._class_of: dict[int, int] = {}

    def get(self, cluster: ClusterSpec) -> tuple[tuple[NodeClass, ...], dict[int, int]]:
        if cluster is not self._cluster:
            self._cluster = cluster
            self._classes = node_classes(cluster)
            self._class_of = {s: c for c, nc in enumerate(self._classes) for s in nc.servers}
        return self._classes, self._class_of


class AndreasRG(Mechanism):
    """ANDREAS' Job Optimizer: Randomized Greedy at every rescheduling point, with preemption and migration."""

    name = "andreas"
    preemptive = True
    round_based = False
    period_s = 300.0

    def __init__(self, max_it: int = MAX_IT, rho: float = RHO, seed: int = 0, swap_scale: float = 0.5,
                 period_s: float | None = 300.0, record_problems: bool = False) -> None:
        super().__init__()
        if isinstance(max_it, bool) or not isinstance(max_it, (int, float, np.integer)) or not 1 <= max_it <= 10**6 \
                or max_it != int(max_it):  # RG holds an array of MaxIt_RG rows: 2e9 asked for 45 GB
            raise ValueError(f"max_it (MaxIt_RG) must be a whole number from 1 to 1,000,000, got {max_it!r}")
        if period_s is not None and not (math.isfinite(period_s) and period_s >= 1.0):
            raise ValueError(f"period_s must be at least 1 second (or None: no periodic call), got {period_s!r}")
        if not (math.isfinite(rho) and rho >= 0) or not (math.isfinite(swap_scale) and swap_scale >= 0):
            raise ValueError(f"rho and swap_scale must be finite and >= 0, got {rho!r}, {swap_scale!r}")
        self.max_it, self.rho, self.swap_scale = int(max_it), float(rho), float(swap_scale)
        self.period_s = period_s
        self.seed = seed
        self._classes = _Classes()
        self.record_problems = record_problems
        self.reset()

    def reset(self) -> None:
        """A run starts: the random generator from its seed again, and no calls or problems recorded."""
        self.rng = np.random.default_rng(self.seed)
        #: one entry per call: jobs in the problem, RG and whole-call seconds (wall and CPU), f_OBJ, the greedy's
        #: f_OBJ
        self.calls: list[dict[str, float]] = []
        self.problems: list[AndreasProblem] = []

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        t0, c0 = time.perf_counter(), time.process_time()
        classes, class_of = self._classes.get(cluster)
        states = list(ordered)
        if not states or not classes:
            return {}
        p = AndreasProblem.from_states(states, cluster, now, rho=self.rho, horizon_s=self.period_s or 300.0,
                                       classes=classes)
        rg = randomized_greedy(p, self.max_it, self.rng, swap_scale=self.swap_scale)
        if self.record_problems:
            self.problems.append(p)
        out, packed = self._place(p, rg.node, rg.cfg, states, cluster, running, class_of)
        total = time.perf_counter() - t0
        stats = {"jobs": float(p.n_jobs), "scheduled": float(np.count_nonzero(rg.cfg >= 0)), "rg_s": rg.seconds,
                 "rg_cpu_s": rg.cpu_seconds, "call_s": total, "call_cpu_s": time.process_time() - c0,
                 "f_obj": rg.f_obj, "f_greedy": rg.f_greedy, "rg_packing": float(packed)}
        self.calls.append(stats)
        self.last_stats = stats
        return out

    def _place(self, p: AndreasProblem, node: np.ndarray, cfg: np.ndarray, states: Sequence[JobState],
               cluster: ClusterSpec, running: Mapping[str, Allocation],
               class_of: dict[int, int]) -> tuple[dict[str, Allocation], bool]:
        want = {}
        for i, js in enumerate(states):
            if cfg[i] >= 0:
                want[js.id] = (int(p.cfg_class[cfg[i]]), int(p.cfg_gpus[cfg[i]]), i)
        ledger = Ledger(cluster)
        out: dict[str, Allocation] = {}
        for jid, (c, g, _) in want.items():
            prev = running.get(jid)
            if (prev is not None and len(prev.shares) == 1 and not prev.is_fractional
                    and class_of.get(prev.shares[0].server) == c and abs(prev.gpus - g) < 1e-9):
                ledger.take(prev)
                out[jid] = prev
        movers = sorted((jid for jid in want if jid not in out), key=lambda jid: (-want[jid][1], want[jid][2]))
        by_id = {js.id: js for js in states}
        for jid in movers:
            c, g, _ = want[jid]
            s = _best_fit(ledger, p.classes[c].servers, g)
            if s is None:
                return self._place_packed(p, node, cfg, states, cluster, running), True
            dm = by_id[jid].perf.device_mem_gb
            alloc = proportional_allocation(ledger, {s: ledger.free_devices(s)[:g]}, dm)
            ledger.take(alloc)
            out[jid] = alloc
        return out, False

    @staticmethod
    def _place_packed(p: AndreasProblem, node: np.ndarray, cfg: np.ndarray, states: Sequence[JobState],
                      cluster: ClusterSpec, running: Mapping[str, Allocation]) -> dict[str, Allocation]:
        """RG's own node packing (always feasible). Nodes of a class are interchangeable, so RG's nodes are
        matched to the class's servers to keep the most jobs in place (an assignment problem per class); a job
        whose server and GPU count are unchanged keeps its devices, the others take free devices there."""
        from scipy.optimize import linear_sum_assignment

        node_class, node_server = p.node_class, p.node_server
        bins: dict[int, list[tuple[JobState, int]]] = {}
        for i, js in enumerate(states):
            if cfg[i] >= 0:
                bins.setdefault(int(node[i]), []).append((js, int(p.cfg_gpus[cfg[i]])))
        server_for: dict[int, int] = {}
        for c in range(len(p.classes)):
            nodes = np.flatnonzero(node_class == c)
            servers = node_server[nodes]
            col = {int(srv): i for i, srv in enumerate(servers)}
            keep = np.zeros((len(nodes), len(nodes)))
            for a, n in enumerate(nodes):
                for js, g in bins.get(int(n), []):
                    prev = running.get(js.id)
                    if (prev is not None and len(prev.shares) == 1 and prev.shares[0].server in col
                            and not prev.is_fractional and abs(prev.gpus - g) < 1e-9):
                        keep[a, col[prev.shares[0].server]] += 1
            rows, cols = linear_sum_assignment(keep, maximize=True)
            server_for.update({int(nodes[a]): int(servers[b]) for a, b in zip(rows, cols, strict=True)})
        ledger = Ledger(cluster)
        out: dict[str, Allocation] = {}
        todo = []
        for n, members in bins.items():
            s = server_for[n]
            for js, g in members:
                prev = running.get(js.id)
                if (prev is not None and len(prev.shares) == 1 and prev.shares[0].server == s
                        and not prev.is_fractional and abs(prev.gpus - g) < 1e-9 and ledger.fits(prev) is None):
                    ledger.take(prev)
                    out[js.id] = prev
                else:
                    todo.append((js, s, g))
        for js, s, g in todo:
            alloc = proportional_allocation(ledger, {s: ledger.free_devices(s)[:g]}, js.perf.device_mem_gb)
            ledger.take(alloc)
            out[js.id] = alloc
        return out


class AndreasBaseline(Mechanism):
    """§V-B's first-principle methods (order from the policy: fifo, edf, priority): non-preemptive, each job
    started on the configuration Alg. 1's deterministic rule picks among the free GPUs, kept to completion."""

    name = "andreas-baseline"
    preemptive = False
    round_based = False

    def __init__(self) -> None:
        super().__init__()
        self._classes = _Classes()

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        out = dict(running)
        waiting = [js for js in ordered if js.id not in running]
        if not waiting:
            return out
        ledger = self.current_ledger(cluster, running)
        if ledger.total_free_gpus == 0:
            return out
        classes, _ = self._classes.get(cluster)
        # only as many waiting jobs as there are free GPUs can start (each takes at least one), taken in order a
        # block at a time: with device-memory limits a job may fit nowhere while GPUs it cannot use are free, and
        # the jobs after the block still get those GPUs (without limits the first block fills the cluster)
        # A job needing more device memory than every class with a free GPU has cannot start in this call (the
        # free GPUs only shrink): it is dropped before its row is built, so a queue of jobs that fit none of the
        # free GPUs costs one pass, not one problem per job (a block of one per job made a run quadratic).
        todo = waiting
        while ledger.total_free_gpus > 0:
            free_mem = max((nc.gpu_mem_gb for nc in classes if any(ledger.free_whole[s] >= 1 for s in nc.servers)),
                           default=-math.inf)
            todo = [js for js in todo if js.perf.device_mem_gb <= free_mem + 1e-9]
            if not todo:
                break
            head, todo = todo[:ledger.total_free_gpus], todo[ledger.total_free_gpus:]
            p = AndreasProblem.from_states(head, cluster, now, classes=classes)
            pref = p.preferences()
            for i, js in enumerate(head):
                if ledger.total_free_gpus == 0:
                    break
                for k in pref[i]:
                    if not p.allowed[i, k]:
                        break  # the configurations that cannot hold the job come last
                    c, g = int(p.cfg_class[k]), int(p.cfg_gpus[k])
                    s = _best_fit(ledger, classes[c].servers, g)
                    if s is not None:
                        alloc = proportional_allocation(ledger, {s: ledger.free_devices(s)[:g]},
                                                        js.perf.device_mem_gb)
                        ledger.take(alloc)
                        out[js.id] = alloc
                        break
        return out
