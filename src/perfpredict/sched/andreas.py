"""ANDREAS' Job Optimizer (seed 000 §IV): the capacity-allocation problem at one rescheduling point, its proxy
objective f_OBJ (eq. 1), the Randomized Greedy (Alg. 1), and the exact MILP of App. A for small instances.

**The problem** (:class:`AndreasProblem`). At time T_c every submitted, unfinished job j has a due date d_j, a
tardiness weight ω_j and an execution time t_jng on g GPUs of node n (its remaining work, restarted from its
last epoch checkpoint, at the speed its card gives for that GPU type and count); node n costs c_ng per unit
time with g GPUs in use. Times are kept relative to T_c (``d_rel = d_j - T_c``). Nodes that are
interchangeable — same GPU type, GPU count and cost — form a *class*, and a *configuration* is (class, g), so
t_jng and c_ng are tables over configurations; the node itself matters for capacity and for the α term.

**f_OBJ** (:func:`objective`), eq. (1) with the definitions of App. A, in EUR:

    Σ_j ω_j (τ_j + ρ τ̂_j) / 3600  +  Σ_n π_(first-ending job on n)

with times in seconds and ω_j in EUR per hour of tardiness: a scheduled job has τ_j = max(0, t_jng - d_j)
and τ̂_j = max(0, -d_j); a postponed one τ_j = max(0, -d_j) and τ̂_j = max(0, H + M_j - d_j), M_j its slowest
execution time and H the rescheduling period (constraints 4i-4j). π_jn = t_jng · c_ng (4k) is counted for
the first-ending job of every used node (ties: the cheaper one), as §IV-A defines α_jn.

**Randomized Greedy** (:func:`randomized_greedy`, Alg. 1). Jobs are sorted by pressure Δ_j = T_c + min t_jng
- d_j (eq. 2), highest first. For each job, D*_j = {(n, g): T_c + t_jng < d_j}; the best configuration is the
cheapest (t·c) in D*_j, or the fastest overall when D*_j is empty. The job goes to a node of that class with
enough free GPUs (best fit: the fewest free GPUs that suffice; among those, the node that reached that count
last, untouched nodes in index order); if none has room, the
next configurations of D*_j by cost are tried (ASSIGN_TO_SUBOPTIMAL), and — our reading of "jobs are
executed as soon as resources are available" (App. A, 4n) — then the remaining ones, fastest first, so a job
is postponed only when no configuration fits. Iteration 0 is that deterministic greedy; every further
iteration (up to ``max_it``, the paper's MaxIt_RG = 1000) applies both randomisations: each job is swapped
with its successor in the sorted list with probability ∝ 1/ω_j (``swap_scale`` for the smallest weight),
and the configuration is drawn from D*_j with probability ∝ 1/(t·c) (∝ 1/t over all configurations when D*_j
is empty), weighted by the number of nodes of its class as if drawn over (n, g) pairs. The best f_OBJ wins,
so RG is never worse than its greedy. The iterations run as one batch (numpy arrays over iterations), which
is what makes 1000 iterations affordable in Python.

**Exact model** (:func:`solve_milp`): App. A's MINLP with the α·π product linearised — p_jn ≥ π_jn - M̂_j (1 -
α_jn), p_jn ≥ 0, M̂_j the job's largest deployment cost — solved by HiGHS through ``scipy.optimize.milp``.
``alpha="first-ending"`` adds big-M constraints making α_jn pick the first-ending job of its node (then the
MILP minimises exactly f_OBJ, and its optimum is a lower bound on RG's f_OBJ); ``alpha="appendix"`` leaves α
free as App. A writes it (any job on the node: the MILP picks the cheapest, a lower bound on that). Constraint
(4n), Σ w_n = min(N, J), is optional (``node_count``). Without it, f_OBJ can be driven to 0 by running nothing
while no due date is near (the α term only charges used nodes) — (4n) is there, App. A says, because "it is
always better to execute jobs as soon as resources are available". RG does not enforce (4n) itself (its best
fit may use fewer nodes) but never leaves a GPU idle while a job that could use it waits; ``work_conserving``
adds exactly that rule (a job is postponed only if no node has room for a configuration that can hold it), so
the MILP's optimum is the best schedule of the set RG searches, and RG's gap is measured against it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    from perfpredict.sched.cluster import ClusterSpec
    from perfpredict.sched.job import JobState

__all__ = [
    "AndreasProblem", "MilpResult", "NodeClass", "RGResult", "check_schedule", "greedy", "objective",
    "randomized_greedy", "solve_milp",
]

#: ρ: "The parameter ρ for penalizing jobs postponements has been set to 100" (§V-B).
RHO = 100.0
#: MaxIt_RG: "The Job Optimizer has been configured with MaxIt_RG = 1,000" (§V).
MAX_IT = 1000


@dataclass(frozen=True)
class NodeClass:
    """Interchangeable nodes: GPU type, GPUs per node, EUR per GPU-hour, and the cluster's server indices."""

    gpu_type: str
    gpus: int
    gpu_hour_cost: float
    servers: tuple[int, ...]
    #: device memory of each GPU (GB): a job whose device memory exceeds it has no configuration here
    gpu_mem_gb: float = math.inf


@dataclass
class AndreasProblem:
    """One rescheduling point. Arrays are per job (J) and per configuration (K = Σ_classes G_class)."""

    now: float
    job_ids: tuple[str, ...]
    #: d_j - T_c (s); +inf for a job without a due date
    d_rel: np.ndarray
    #: ω_j, EUR per hour of tardiness
    weight: np.ndarray
    #: t[j, k]: execution time (s) of job j's remaining work in configuration k
    t: np.ndarray
    classes: tuple[NodeClass, ...]
    rho: float = RHO
    #: H: the rescheduling period, after which a postponed job gets its next chance (4j)
    horizon_s: float = 300.0
    #: allowed[j, k]: configuration k can hold job j (its GPUs have the device memory the job needs); None: all.
    #: Alg. 1 never assigns a job to a configuration it cannot run in, and M_j, min t_jng range over the others.
    allowed: np.ndarray | None = None
    cfg_class: np.ndarray = field(init=False)
    cfg_gpus: np.ndarray = field(init=False)
    #: EUR per second of configuration k: c_ng = g × the class's GPU-hour cost / 3600
    cfg_cost: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.d_rel = np.asarray(self.d_rel, dtype=float)
        self.weight = np.asarray(self.weight, dtype=float)
        cls, gpus = [], []
        for c, nc in enumerate(self.classes):
            if nc.gpus < 1 or not nc.servers:
                raise ValueError(f"node class {c} needs GPUs and servers: {nc}")
            for g in range(1, nc.gpus + 1):
                cls.append(c)
                gpus.append(g)
        self.cfg_class = np.asarray(cls, dtype=np.int64)
        self.cfg_gpus = np.asarray(gpus, dtype=np.int64)
        self.cfg_cost = np.asarray([g * self.classes[c].gpu_hour_cost / 3600.0 for c, g in zip(cls, gpus)])
        J = len(self.job_ids)
        self.t = np.asarray(self.t, dtype=float).reshape(J, len(cls))
        if self.d_rel.shape != (J,) or self.weight.shape != (J,):
            raise ValueError("d_rel and weight need one value per job")
        if np.any(~np.isfinite(self.t)) or np.any(self.t <= 0):
            raise ValueError("execution times must be finite and > 0")
        if np.any(self.weight < 0):
            raise ValueError("tardiness weights must be >= 0")
        self.allowed = (np.ones(self.t.shape, dtype=bool) if self.allowed is None
                        else np.asarray(self.allowed, dtype=bool).reshape(self.t.shape))
        if J and not self.allowed.any(axis=1).all():
            bad = int(np.flatnonzero(~self.allowed.any(axis=1))[0])
            raise ValueError(f"job {self.job_ids[bad]} has no configuration that can hold it")

    # -- derived ---------------------------------------------------------------------------------------
    @property
    def n_jobs(self) -> int:
        return len(self.job_ids)

    @property
    def pi(self) -> np.ndarray:
        """π[j, k] = t_jk · c_k (EUR): the deployment cost of job j in configuration k."""
        return self.t * self.cfg_cost[None, :]

    @property
    def max_time(self) -> np.ndarray:
        """M_j: the slowest execution time of each job (over the configurations that can hold it)."""
        return np.where(self.allowed, self.t, -np.inf).max(axis=1)

    @property
    def node_class(self) -> np.ndarray:
        """Class index of every node; nodes are numbered class by class, in the order of ``classes``."""
        return np.repeat(np.arange(len(self.classes)), [len(c.servers) for c in self.classes])

    @property
    def node_gpus(self) -> np.ndarray:
        return np.asarray([c.gpus for c in self.classes for _ in c.servers], dtype=np.int64)

    @property
    def node_server(self) -> np.ndarray:
        return np.asarray([s for c in self.classes for s in c.servers], dtype=np.int64)

    def cfg_index(self, cls: int, gpus: int) -> int:
        return int(np.flatnonzero((self.cfg_class == cls) & (self.cfg_gpus == gpus))[0])

    def pressure(self) -> np.ndarray:
        """Δ_j of eq. (2), ``T_c + min t_jng - d_j = min t_jng - d_rel`` (higher: closer to violating)."""
        return np.where(self.allowed, self.t, np.inf).min(axis=1) - self.d_rel

    def preferences(self) -> np.ndarray:
        """Each job's configurations in the order Alg. 1 tries them: D*_j by cost (then time), then the rest by
        time (then cost); ties by configuration index. Row j's first entry is the best configuration. The
        configurations that cannot hold the job come last (see :attr:`allowed`)."""
        pi = self.pi
        in_d = (self.t < self.d_rel[:, None]) & self.allowed
        k = np.broadcast_to(np.arange(self.t.shape[1]), self.t.shape)
        key1 = np.where(in_d, pi, self.t)
        key2 = np.where(in_d, self.t, pi)
        return np.lexsort((k, key2, key1, ~in_d, ~self.allowed), axis=-1)

    # -- construction from simulator state -------------------------------------------------------------
    @classmethod
    def from_states(cls, states: Sequence[JobState], cluster: ClusterSpec, now: float, *, rho: float = RHO,
                    horizon_s: float = 300.0, classes: tuple[NodeClass, ...] | None = None) -> AndreasProblem:
        """The problem the Job Optimizer solves at ``now`` for ``states`` (active jobs) on ``cluster``.

        t_jng is the time from T_c to the job's completion in that configuration: its work left from its last
        epoch checkpoint (what a preempted, resumed or migrated job must redo), except in the configuration it
        runs in now, where it goes on from its current progress; speeds come from its perf model
        (``PerfModel.exec_time``).
        """
        classes = classes if classes is not None else node_classes(cluster)
        cfgs = [(c.gpu_type, g) for c in classes for g in range(1, c.gpus + 1)]
        class_of = {srv: c for c, nc in enumerate(classes) for srv in nc.servers}
        cfg_of = {(c, g): k for k, (c, g) in enumerate((c, g) for c, nc in enumerate(classes)
                                                        for g in range(1, nc.gpus + 1))}
        rate_cache: dict[tuple[int, float], np.ndarray] = {}
        t = np.empty((len(states), len(cfgs)))
        cfg_mem = np.asarray([classes[c].gpu_mem_gb for c, nc in enumerate(classes) for _ in range(nc.gpus)])
        allowed = np.asarray([js.perf.device_mem_gb for js in states], dtype=float)[:, None] <= cfg_mem[None, :] + 1e-9
        for i, js in enumerate(states):
            key = (id(js.perf), js.job.gpus)
            rates = rate_cache.get(key)
            if rates is None:
                rates = np.asarray([1.0 / js.perf.exec_time(1.0, g, js.job.gpus, gt) for gt, g in cfgs])
                rate_cache[key] = rates
            t[i] = max(js.checkpoint_remaining(now), 1e-9) / rates
            a = js.allocation
            if a is not None and len(a.shares) == 1 and a.shares[0].server in class_of:
                k = cfg_of.get((class_of[a.shares[0].server], int(round(a.gpus))))
                if k is not None and abs(a.gpus - round(a.gpus)) < 1e-9:
                    left = max(js.remaining_at(now), 1e-9) / rates[k]
                    t[i, k] = left + max(0.0, js.overhead_until - now)
        d = np.asarray([math.inf if js.job.deadline is None else js.job.deadline - now for js in states], dtype=float)
        w = np.asarray([js.job.weight for js in states], dtype=float)
        return cls(now=now, job_ids=tuple(js.id for js in states), d_rel=d, weight=w, t=t, classes=classes,
                   rho=rho, horizon_s=horizon_s, allowed=allowed)


def node_classes(cluster: ClusterSpec) -> tuple[NodeClass, ...]:
    """Group the cluster's GPU servers by (GPU type, GPUs, energy cost, device memory), in order of first
    appearance."""
    groups: dict[tuple[str, int, float, float], list[int]] = {}
    for i, s in enumerate(cluster.servers):
        if s.gpus <= 0:
            continue
        groups.setdefault((s.gpu_type, s.gpus, float(s.energy_cost or 0.0), float(s.gpu_mem_gb)), []).append(i)
    return tuple(NodeClass(gt, g, c, tuple(idx), mem) for (gt, g, c, mem), idx in groups.items())


# ---------------------------------------------------------------------------------------------------------
# f_OBJ
# ---------------------------------------------------------------------------------------------------------
def _tardiness_terms(p: AndreasProblem, cfg: np.ndarray) -> np.ndarray:
    """Σ_j ω_j (τ_j + ρ τ̂_j) / 3600 for each row of ``cfg`` (..., J): configuration per job, -1 = postponed."""
    J = p.n_jobs
    assigned = cfg >= 0
    t_sel = np.where(assigned, p.t[np.arange(J), np.maximum(cfg, 0)], 0.0)
    d = p.d_rel
    with np.errstate(invalid="ignore"):
        tau = np.where(assigned, np.maximum(0.0, t_sel - d), np.maximum(0.0, -d))
        tau_hat = np.where(assigned, np.maximum(0.0, -d), np.maximum(0.0, p.horizon_s + p.max_time - d))
    return (p.weight * (tau + p.rho * tau_hat)).sum(axis=-1) / 3600.0


def objective(p: AndreasProblem, node: np.ndarray, cfg: np.ndarray) -> float:
    """f_OBJ (eq. 1) of a schedule: ``node[j]`` and ``cfg[j]`` (-1 and -1 for a postponed job)."""
    node = np.asarray(node, dtype=np.int64)
    cfg = np.asarray(cfg, dtype=np.int64)
    total = float(_tardiness_terms(p, cfg))
    pi = p.pi
    first: dict[int, tuple[float, float]] = {}
    for j in np.flatnonzero(cfg >= 0):
        key = (float(p.t[j, cfg[j]]), float(pi[j, cfg[j]]))
        n = int(node[j])
        if n not in first or key < first[n]:
            first[n] = key
    return total + sum(v[1] for v in first.values())


def check_schedule(p: AndreasProblem, node: np.ndarray, cfg: np.ndarray) -> None:
    """Raise ValueError unless every scheduled job sits on a node of its configuration's class and no node is
    over-committed."""
    node_class, node_gpus = p.node_class, p.node_gpus
    used = np.zeros(len(node_gpus), dtype=np.int64)
    for j in range(p.n_jobs):
        if cfg[j] < 0:
            if node[j] >= 0:
                raise ValueError(f"job {p.job_ids[j]}: postponed but on node {node[j]}")
            continue
        if node_class[node[j]] != p.cfg_class[cfg[j]]:
            raise ValueError(f"job {p.job_ids[j]}: configuration of class {p.cfg_class[cfg[j]]} on node {node[j]}")
        if not p.allowed[j, cfg[j]]:
            raise ValueError(f"job {p.job_ids[j]}: configuration {cfg[j]} cannot hold it (device memory)")
        used[node[j]] += p.cfg_gpus[cfg[j]]
    if np.any(used > node_gpus):
        raise ValueError(f"over-committed nodes: {np.flatnonzero(used > node_gpus).tolist()}")


# ---------------------------------------------------------------------------------------------------------
# the greedy construction (sequential reference) and Randomized Greedy (batched)
# ---------------------------------------------------------------------------------------------------------
def greedy(p: AndreasProblem, order: Sequence[int] | None = None,
           choice: Mapping[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One construction of Alg. 1, plainly, job by job: ``order`` (default: pressure, highest first) and an
    optional forced first choice per job (default: the best configuration). Returns ``(node, cfg)``.

    Node choice (also :func:`randomized_greedy`'s): best fit — a node of the class with the fewest free GPUs
    that suffice; among those, the one that most recently reached that free count (untouched nodes in index
    order)."""
    J = p.n_jobs
    pref = p.preferences()
    if order is None:
        order = np.argsort(-p.pressure(), kind="stable")
    node_class = p.node_class
    # stacks[c][f]: nodes of class c with f free GPUs; the top (end) is taken first
    stacks = [[[] for _ in range(nc.gpus + 1)] for nc in p.classes]
    for c, nc in enumerate(p.classes):
        stacks[c][nc.gpus] = list(np.flatnonzero(node_class == c)[::-1])
    node = np.full(J, -1, dtype=np.int64)
    cfg = np.full(J, -1, dtype=np.int64)
    for j in order:
        first = pref[j, 0] if choice is None or j not in choice else choice[j]
        for k in (first, *pref[j]):
            if not p.allowed[j, k]:
                continue
            c, g = int(p.cfg_class[k]), int(p.cfg_gpus[k])
            f = next((f for f in range(g, p.classes[c].gpus + 1) if stacks[c][f]), None)
            if f is not None:
                n = stacks[c][f].pop()
                stacks[c][f - g].append(n)
                node[j], cfg[j] = n, k
                break
    return node, cfg


@dataclass(frozen=True)
class RGResult:
    node: np.ndarray
    cfg: np.ndarray
    f_obj: float
    #: f_OBJ of iteration 0, the deterministic greedy
    f_greedy: float
    iterations: int
    best_iteration: int
    seconds: float
    #: CPU time of this process (less sensitive than ``seconds`` to other processes sharing the machine)
    cpu_seconds: float = 0.0


def _positions_reached(p: AndreasProblem, base: np.ndarray, can: np.ndarray) -> int:
    """How many positions of a job list (``base`` order, swaps of one position either way) Randomized Greedy can
    reach with device-memory masks. A job may then fit nowhere while GPUs it cannot use are free: it is postponed
    without taking a GPU and the jobs after it still get their turn. A class c takes no job past the last one it
    can hold, nor past the (all GPUs + 2)-th job whose 1-GPU configuration it can hold (by then c or the cluster
    is full): the positions cover the latest of those over the classes, one position of swap either side."""
    total = int(p.node_gpus.sum())
    last = -1
    for c in range(len(p.classes)):
        any_c = np.flatnonzero(can[base, c])
        one_c = np.flatnonzero(p.allowed[base, p.cfg_index(c, 1)])
        end = any_c[-1] if any_c.size else -1
        if one_c.size > total + 1:
            end = min(end, one_c[total + 1])
        last = max(last, int(end))
    return min(len(base), last + 3)


def randomized_greedy(p: AndreasProblem, max_it: int = MAX_IT, rng: np.random.Generator | int | None = 0, *,
                      swap_scale: float = 0.5) -> RGResult:
    """Alg. 1 with ``max_it`` iterations (iteration 0 deterministic), all built at once; see the module
    docstring. ``swap_scale`` is the swap probability of the lowest-weight job (others ∝ 1/ω_j).

    The iterations advance together, one position of their job lists per step. Each (iteration, class) keeps
    its nodes in buckets by free GPUs — a bit mask of the non-empty buckets, a count and a stack of nodes per
    bucket — so finding and updating the best-fit node costs a few array operations per step whatever the
    number of nodes; each step runs until every iteration's cluster is full, or with device-memory limits until
    no job still to come can use a free GPU (the remaining jobs are postponed)."""
    t0, c0 = time.perf_counter(), time.process_time()
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    J, K = p.t.shape
    if J == 0:
        e = np.zeros(0, dtype=np.int64)
        return RGResult(e, e, 0.0, 0.0, 0, 0, time.perf_counter() - t0, time.process_time() - c0)
    if isinstance(max_it, bool) or not isinstance(max_it, (int, float, np.integer)) or not 1 <= max_it < 2**31 \
            or max_it != int(max_it):
        raise ValueError(f"MaxIt_RG must be a whole number >= 1, got {max_it!r}")
    It = int(max_it)
    t, pi = p.t, p.pi
    pref = p.preferences()
    allowed = p.allowed
    masked = not allowed.all()  # only a cluster whose GPUs differ in device memory pays for the masks below
    in_d = (t < p.d_rel[:, None]) & allowed
    has_d = in_d.any(axis=1)
    n_nodes = np.asarray([len(c.servers) for c in p.classes], dtype=float)[p.cfg_class]
    with np.errstate(divide="ignore"):
        w = np.where(has_d[:, None], np.where(in_d, n_nodes / np.maximum(pi, 1e-300), 0.0), n_nodes / t)
    w = np.where(np.isfinite(w), w, 1e300)
    if masked:
        w = np.where(allowed, w, 0.0)
    cw = np.cumsum(w, axis=1)
    cw /= cw[:, -1:]
    cw[:, -1] = 2.0  # u < 1 always lands

    # job lists: row 0 by pressure; the others with random adjacent swaps, probability ∝ 1/ω. Only the first
    # S positions are ever reached (each placed job takes a GPU; once none is free the rest are postponed;
    # with device-memory masks, _positions_reached), so only they are shuffled (a job cannot move forward past
    # position S+1, the sort keys being i or i+1.5).
    node_gpus = p.node_gpus
    base = np.argsort(-p.pressure(), kind="stable")
    C = len(p.classes)
    can = np.stack([allowed[:, p.cfg_class == c].any(axis=1) for c in range(C)], axis=1)  # class c can hold job j
    S = _positions_reached(p, base, can) if masked else min(J, int(node_gpus.sum()) + 2)
    pos = p.weight > 0
    wmin = p.weight[pos].min() if pos.any() else 1.0
    p_swap = np.minimum(1.0, swap_scale * wmin / np.where(pos, p.weight, wmin / 1e9))[base[:S]]
    perm = np.empty((It, S), dtype=np.int64)
    perm[0] = base[:S]
    if It > 1:
        keys = np.arange(S)[None, :] + 1.5 * (rng.random((It - 1, S)) < p_swap[None, :])
        perm[1:] = base[np.argsort(keys, axis=1, kind="stable")]
    perm_t = np.ascontiguousarray(perm.T)  # position-major, for the step loop
    # first-choice configuration of every (iteration, job): row 0 the best one, the others drawn
    u = rng.random((It, J))
    choice_job = np.zeros((It, J), dtype=np.int64)
    for kk in range(K - 1):
        choice_job += u >= cw[None, :, kk]
    choice_job[0, base] = pref[base, 0]
    if masked:  # rounding at the top of cw can land past the last allowed configuration
        miss = ~allowed[np.arange(J)[None, :], choice_job]
        choice_job[miss] = np.broadcast_to(pref[:, 0], choice_job.shape)[miss]
    choice_t = choice_job.reshape(-1)[np.arange(It)[None, :] * J + perm_t]
    pref_class, pref_gpus = p.cfg_class[pref], p.cfg_gpus[pref]
    pref_ok = np.take_along_axis(allowed, pref, axis=1) if masked else None

    # tardiness terms: every job starts postponed; placing job j in configuration k changes f by gain[j, k]
    d = p.d_rel
    with np.errstate(invalid="ignore"):
        cost_post = p.weight * (np.maximum(0.0, -d) + p.rho * np.maximum(0.0, p.horizon_s + p.max_time - d)) / 3600
        cost_run = p.weight[:, None] * (np.maximum(0.0, t - d[:, None]) + p.rho * np.maximum(0.0, -d)[:, None]) / 3600
    gain = cost_run - cost_post[:, None]
    f = np.full(It, float(cost_post.sum()))

    # per (iteration, class): buckets f = 0..Gmax of nodes with f free GPUs (a count and a stack of nodes each)
    G1 = max(c.gpus for c in p.classes) + 1
    node_class = p.node_class
    lo = np.searchsorted(node_class, np.arange(C))
    n_max = max(len(c.servers) for c in p.classes)
    cnt = np.zeros((It * C, G1), dtype=np.int64)
    stack = np.zeros((It, C, G1, n_max), dtype=np.int64)
    for c, nc in enumerate(p.classes):
        cnt.reshape(It, C, G1)[:, c, nc.gpus] = len(nc.servers)
        stack[:, c, nc.gpus, :len(nc.servers)] = np.arange(len(nc.servers))[::-1]
    cnt_flat = cnt.reshape(-1)
    stack = stack.reshape(-1)
    pow2 = 1 << np.arange(G1)
    pattern = (cnt > 0) @ pow2  # per (iteration, class): bit f set while bucket f is non-empty
    # best_f[g, pattern]: the smallest f >= g whose bucket is non-empty (bit f of pattern), -1 if none
    best_f = np.full((G1, 1 << G1), -1, dtype=np.int64)
    for g in range(1, G1):
        for m in range(1 << G1):
            best_f[g, m] = next((f for f in range(g, G1) if m >> f & 1), -1)

    Nn = len(node_class)
    # the first-ending job of every (iteration, node) as t + iπ: complex numbers compare lexicographically
    first_end = np.full(It * Nn, complex(np.inf, 0.0))
    key = t + 1j * pi
    code_pos = np.full((S, It), -1, dtype=np.int64)  # cfg * Nn + node of each placed (position, iteration)
    cfg_class, cfg_gpus = p.cfg_class, p.cfg_gpus
    total_free = np.full(It, int(node_gpus.sum()), dtype=np.int64)
    if masked:
        # an iteration is done once no job still to come can use a class with free GPUs: free GPUs per
        # (iteration, class) and the last position of each iteration's list holding a job that class can hold
        free_cls = np.tile(np.asarray([c.gpus * len(c.servers) for c in p.classes], dtype=np.int64), (It, 1))
        last_pos = np.empty((It, C), dtype=np.int64)
        for c in range(C):
            rev = can[perm[:, ::-1], c]
            last_pos[:, c] = np.where(rev.any(axis=1), S - 1 - rev.argmax(axis=1), -1)
    active = np.arange(It)
    for k in range(S):
        if active.size == 0:
            break
        ch = choice_t[k][active]
        j = perm_t[k][active]
        step = active  # the iterations that place job j at this position
        rc = active * C + cfg_class[ch]
        pat = pattern[rc]
        fs = best_f[cfg_gpus[ch], pat]
        bad = fs < 0
        if bad.any():  # ASSIGN_TO_SUBOPTIMAL: the first configuration in preference order that fits
            bi = np.flatnonzero(bad)
            jb = j[bi]
            fits = best_f[pref_gpus[jb], pattern[(active[bi] * C)[:, None] + pref_class[jb]]] >= 0
            if masked:
                fits &= pref_ok[jb]
            first = fits.argmax(axis=1)
            ch[bi] = np.where(fits[np.arange(bi.size), first], pref[jb, first], -1)
            placed = ch >= 0
            if not placed.all():  # no configuration of this job fits: it is postponed (only GPUs that cannot
                # hold it are free; without masks that never happens, a full cluster having left ``active``)
                step, ch, j = active[placed], ch[placed], j[placed]
            rc = step * C + cfg_class[ch]
            pat = pattern[rc]
            fs = best_f[cfg_gpus[ch], pat]
        g = cfg_gpus[ch]
        b_from = rc * G1 + fs
        b_to = b_from - g
        top = cnt_flat[b_from] - 1
        local = stack[b_from * n_max + top]
        cnt_flat[b_from] = top
        dest = cnt_flat[b_to]
        stack[b_to * n_max + dest] = local
        cnt_flat[b_to] = dest + 1
        pattern[rc] = (pat & ~((top == 0) << fs)) | (1 << b_to % G1)
        n = lo[cfg_class[ch]] + local
        kj = key[j, ch]
        flat = step * Nn + n
        cur = first_end[flat]
        better = kj < cur
        f[step] += gain[j, ch] + np.where(better, kj.imag - cur.imag, 0.0)
        first_end[flat[better]] = kj[better]
        code_pos[k, step] = ch * Nn + n
        total_free[step] -= g
        if masked:
            np.subtract.at(free_cls, (step, cfg_class[ch]), g)
            active = active[((free_cls[active] > 0) & (last_pos[active] > k)).any(axis=1)]
        else:
            active = active[total_free[active] > 0]

    best = int(np.argmin(f))
    node = np.full(J, -1, dtype=np.int64)
    cfg = np.full(J, -1, dtype=np.int64)
    code = code_pos[:, best]
    placed = code >= 0
    node[perm[best][placed]] = code[placed] % Nn
    cfg[perm[best][placed]] = code[placed] // Nn
    return RGResult(node=node, cfg=cfg, f_obj=float(f[best]), f_greedy=float(f[0]),
                    iterations=It, best_iteration=best, seconds=time.perf_counter() - t0,
                    cpu_seconds=time.process_time() - c0)


@dataclass(frozen=True)
class MilpResult:
    node: np.ndarray
    cfg: np.ndarray
    objective: float
    status: str
    optimal: bool
    seconds: float
    mip_gap: float | None = None


def solve_milp(p: AndreasProblem, *, alpha: Literal["first-ending", "appendix"] = "first-ending",
               node_count: bool = False, work_conserving: bool = False, time_limit_s: float = 60.0,
               mip_rel_gap: float = 1e-9) -> MilpResult:
    """Solve App. A's model for ``p`` exactly with HiGHS (see the module docstring for ``alpha``,
    ``node_count`` and ``work_conserving``). ``mip_rel_gap`` is tight by default: HiGHS' own 1e-4 let a
    schedule 1e-5 above the optimum pass as optimal, which would bias RG's reported gap. Variables: x_jng, z_jn, w_n, y_gn, α_jn (binary); τ_j, τ̂_j,
    π_jn, p_jn ≥ 0."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    t0 = time.perf_counter()
    J = p.n_jobs
    node_class, node_gpus = p.node_class, p.node_gpus
    N = len(node_gpus)
    # configurations of each node: (n, g) -> k
    ng = [(n, g) for n in range(N) for g in range(1, int(node_gpus[n]) + 1)]
    k_of = {(n, g): p.cfg_index(int(node_class[n]), g) for n, g in ng}
    pi = p.pi
    M = p.max_time
    M_hat = pi.max(axis=1)
    t_max = float(p.t.max()) if J else 0.0

    idx: dict[tuple, int] = {}

    def var(*key: object) -> int:
        idx[key] = len(idx)
        return idx[key]

    for j in range(J):
        for n, g in ng:
            var("x", j, n, g)
    for j in range(J):
        for n in range(N):
            var("z", j, n)
            var("a", j, n)
            var("pi", j, n)
            var("p", j, n)
    for n in range(N):
        var("w", n)
        for g in range(1, int(node_gpus[n]) + 1):
            var("y", g, n)
    for j in range(J):
        var("tau", j)
        var("tauh", j)
    nv = len(idx)
    c = np.zeros(nv)
    integrality = np.zeros(nv)
    lb, ub = np.zeros(nv), np.full(nv, np.inf)
    for key, i in idx.items():
        if key[0] in ("x", "z", "a", "w", "y"):
            integrality[i] = 1
            ub[i] = 1
        if key[0] == "x" and not p.allowed[key[1], k_of[key[2], key[3]]]:
            ub[i] = 0  # a configuration that cannot hold the job (device memory)
    for j in range(J):
        c[idx["tau", j]] = p.weight[j] / 3600.0
        c[idx["tauh", j]] = p.rho * p.weight[j] / 3600.0
        for n in range(N):
            c[idx["p", j, n]] = 1.0

    rows, cols, vals, rlo, rhi = [], [], [], [], []

    def add(terms: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(rlo)
        for col, v in terms:
            rows.append(r)
            cols.append(col)
            vals.append(v)
        rlo.append(low)
        rhi.append(high)

    gs = {n: range(1, int(node_gpus[n]) + 1) for n in range(N)}
    for j in range(J):
        for n in range(N):
            z = idx["z", j, n]
            add([(idx["x", j, n, g], 1.0) for g in gs[n]] + [(z, -1.0)], -np.inf, 0.0)          # 4a
            add([(z, 1.0), (idx["w", n], -1.0)], -np.inf, 0.0)                                  # 4b
            for g in gs[n]:
                add([(idx["x", j, n, g], 1.0), (z, -1.0)], -np.inf, 0.0)                        # 4c
            add([(idx["x", j, n, g], p.t[j, k_of[n, g]] * p.cfg_cost[k_of[n, g]]) for g in gs[n]]
                + [(idx["pi", j, n], -1.0)], -np.inf, 0.0)                                      # 4k
            add([(idx["a", j, n], 1.0), (z, -1.0)], -np.inf, 0.0)                               # 4m
            # linearised α·π: p_jn >= π_jn - M̂_j (1 - α_jn)
            add([(idx["p", j, n], 1.0), (idx["pi", j, n], -1.0), (idx["a", j, n], -M_hat[j])], -M_hat[j], np.inf)
        add([(idx["z", j, n], 1.0) for n in range(N)], -np.inf, 1.0)                            # 4d
        add([(idx["x", j, n, g], 1.0) for n, g in ng] + [(idx["z", j, n], -1.0) for n in range(N)], 0.0, 0.0)  # 4e
        if math.isfinite(p.d_rel[j]):
            add([(idx["x", j, n, g], p.t[j, k_of[n, g]]) for n, g in ng] + [(idx["tau", j], -1.0)],
                -np.inf, float(p.d_rel[j]))                                                      # 4i
            hm = p.horizon_s + M[j]
            add([(idx["z", j, n], -hm) for n in range(N)] + [(idx["tauh", j], -1.0)],
                -np.inf, float(p.d_rel[j]) - hm)                                                 # 4j
    for n in range(N):
        load = [(idx["x", j, n, gb], float(gb)) for j in range(J) for gb in gs[n]]
        add([(idx["y", g, n], 1.0) for g in gs[n]] + [(idx["w", n], -1.0)], 0.0, 0.0)           # 4f
        G = float(node_gpus[n])
        for g in gs[n]:
            add(load + [(idx["y", g, n], G - g)], -np.inf, G)                                    # 4g
            add([(idx["y", g, n], float(g))] + [(col, -v) for col, v in load], -np.inf, 0.0)     # 4h
        add([(idx["a", j, n], 1.0) for j in range(J)] + [(idx["w", n], -1.0)], 0.0, 0.0)        # 4l
        if alpha == "first-ending":
            # α_jn = 1 and z_kn = 1  =>  T_jn <= T_kn, with T_jn = Σ_g t_jng x_jng
            for j in range(J):
                for kq in range(J):
                    if kq == j:
                        continue
                    add([(idx["x", j, n, g], p.t[j, k_of[n, g]]) for g in gs[n]]
                        + [(idx["x", kq, n, g], -p.t[kq, k_of[n, g]]) for g in gs[n]]
                        + [(idx["a", j, n], t_max), (idx["z", kq, n], t_max)], -np.inf, 2 * t_max)
        elif alpha != "appendix":
            raise ValueError(f"alpha must be 'first-ending' or 'appendix', got {alpha!r}")
    if node_count:
        add([(idx["w", n], 1.0) for n in range(N)], float(min(N, J)), float(min(N, J)))         # 4n
    if work_conserving:
        # a postponed job leaves no GPU idle that it could use: on every node where its smallest allowed
        # configuration takes g0 GPUs, fewer than g0 are free, G_n - Σ g x_.n. <= g0 - 1 + G_n Σ_n' z_jn' (g0 = 1
        # without device-memory masks; nodes that cannot hold the job at all are exempt, as in RG)
        for j in range(J):
            for n in range(N):
                G = float(node_gpus[n])
                g0 = next((g for g in gs[n] if p.allowed[j, k_of[n, g]]), None)
                if g0 is None:
                    continue
                add([(idx["x", jq, n, g], -float(g)) for jq in range(J) for g in gs[n]]
                    + [(idx["z", j, nq], -G) for nq in range(N)], -np.inf, g0 - 1 - G)

    A = coo_matrix((vals, (rows, cols)), shape=(len(rlo), nv)).tocsr()
    res = milp(c, constraints=LinearConstraint(A, rlo, rhi), integrality=integrality, bounds=Bounds(lb, ub),
               options={"time_limit": time_limit_s, "disp": False, "mip_rel_gap": mip_rel_gap})
    node = np.full(J, -1, dtype=np.int64)
    cfg = np.full(J, -1, dtype=np.int64)
    if res.x is not None:
        x = res.x
        for j in range(J):
            for n, g in ng:
                if x[idx["x", j, n, g]] > 0.5:
                    node[j], cfg[j] = n, k_of[n, g]
    return MilpResult(node=node, cfg=cfg, objective=float(res.fun) if res.x is not None else math.nan,
                      status=str(res.message), optimal=res.status == 0, seconds=time.perf_counter() - t0,
                      mip_gap=getattr(res, "mip_gap", None))
