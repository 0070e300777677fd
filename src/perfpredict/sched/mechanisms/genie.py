"""GENIE (seed 003) as mechanisms: SWAF (Alg. 1) and the six baselines of §7.1.

All are event-driven (a decision at every arrival and completion, §5.4), give GPUs exclusively (whole devices,
§4.1 Obs. 2) and never preempt: a running task keeps its GPUs until it completes (§6). Each has its own task
order, so the ``--policy`` given to the simulator is ignored. They need GENIE task models
(:class:`~perfpredict.sched.genie.GeniePerfModel`, ``genie/<type>/<train|infer>/b<batch>``).

``swaf`` (:class:`SWAF`)
    At each decision point every waiting task gets its placement and waiting allowance from Alg. 1 (eq. 12 then
    the highest CER, eq. 13), over *all* placements ``⟨d_node, d_g/n⟩`` of the platform (line 3: "under the
    limitations of platform P", not of the GPUs free now); the queue is reordered by ascending allowance
    (negative ones included, as they are: "w could be negative, which has no impact on the task ordering") and
    tasks are launched in that order while their placement fits the free GPUs. "When the cluster cannot meet the
    resource requirements, the tasks in the waiting queue keep waiting" (§5.4) and "when the cluster has enough
    idle resources, the task with the maximum priority is popped from the queue" (§6): the first task that does
    not fit stops the launching. Fig. 12's caption ("the ready task is popped") could be read as launching any
    task that fits; the two sentences of the text cannot, so they decide. ``backfill=True`` lets later tasks
    that fit go ahead instead (not in the paper; shown beside it in ``experiments/genie_qos.py``). "Fits" means
    ``d_node`` nodes with ``d_g/n`` free GPUs each: the placement Alg. 1 chose, never another one.

The black-box baselines (FIFO, Capacity, Min-Min, Weighted Fair) "treat DL tasks as black boxes and place tasks
with simple heuristics" (§7.2.1): a task gets the GPUs its user asked for (``Job.gpus``), packed on the fullest
node that has them (best fit), else spread over the fewest nodes; they launch in their order and, like SWAF,
stop at the first task that does not fit.

``genie-fifo`` (:class:`GenieFIFO`)
    Arrival order.
``genie-capacity`` (:class:`GenieCapacity`)
    One queue per model type with a capacity guarantee: the GPUs are split equally among the types (largest
    remainder, at least one each), and "each model type can only access its own allocated resources"; FIFO within a queue (a task
    that does not fit its queue's remaining quota blocks that queue only); a request above the quota is cut to it.
``genie-min-min`` (:class:`GenieMinMin`)
    Earliest ECT first.
``genie-weighted-fair`` (:class:`GenieWeightedFair`)
    Ascending weighted average of arrival time and ECT (``alpha`` on the arrival, 0.5).

Tetris with GENIE's models (``genie-tetris-perf`` / ``genie-tetris-cer``, :class:`GenieTetris`)
    Each task's placement is fixed: the highest PR (eq. 5) — "the resource allocation with the highest processing
    rate" — or the highest CER (eq. 11), without considering QoS. Tetris packs: among the waiting tasks whose
    placement fits the free GPUs now, it repeatedly launches the one with the best score, the alignment of its
    demand with the free GPUs of the nodes it would use (Σ (d_g/n / G)·(free / G) / N, Tetris' dot product)
    plus ``srtf_weight·(1 − rank/n)`` for its rank by predicted latency (Tetris' shortest-remaining-time term),
    until nothing fits.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence

import numpy as np

from perfpredict.sched.base import Mechanism, UnsupportedInput
from perfpredict.sched.cluster import Allocation, ClusterSpec, Ledger
from perfpredict.sched.genie import THETA, GeniePerfModel, Placement, Platform, TaskView, realize, swaf_select_many
from perfpredict.sched.job import JobState
from perfpredict.sched.placement import choose_devices, proportional_allocation, whole_gpus

__all__ = ["SWAF", "GenieCapacity", "GenieFIFO", "GenieMinMin", "GenieTetris", "GenieTetrisCER", "GenieTetrisPerf",
           "GenieWeightedFair"]


def _placement_alloc(ledger: Ledger, s: Placement) -> Allocation | None:
    devices = realize(ledger, s)
    return None if devices is None else proportional_allocation(ledger, devices)


def _request_alloc(ledger: Ledger, gpus: int) -> Allocation | None:
    if ledger.total_free_gpus < gpus:
        return None
    devices = choose_devices(ledger, gpus)
    return None if devices is None else proportional_allocation(ledger, devices)


class _Genie(Mechanism):
    """Keeps running tasks, hands the waiting ones (in the simulator's order) to :meth:`dispatch`."""

    preemptive = False
    round_based = False
    rigid = False

    def __init__(self, theta: float = THETA) -> None:
        super().__init__()
        self.theta = float(theta)
        self.reset()

    def reset(self) -> None:
        self._views: dict[str, TaskView] = {}
        self._cluster: ClusterSpec | None = None
        self._platform: Platform | None = None
        self.active: dict[str, JobState] = {}

    def platform(self, cluster: ClusterSpec) -> Platform:
        if cluster is not self._cluster:
            self._cluster, self._platform = cluster, Platform.from_cluster(cluster)
            self._views.clear()
        assert self._platform is not None
        return self._platform

    def view(self, js: JobState, platform: Platform) -> TaskView:
        v = self._views.get(js.id)
        if v is None:
            v = TaskView.of(js, platform, self.theta)
            self._views[js.id] = v
        return v

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        platform = self.platform(cluster)
        out: dict[str, Allocation] = dict(running)
        waiting = [js for js in ordered if js.id not in running]
        #: every active task (running ones included), for dispatchers that look at what runs
        self.active = {js.id: js for js in ordered}
        if len(self._views) > 2 * len(ordered) + 64:  # forget finished tasks
            active = {js.id for js in ordered}
            self._views = {k: v for k, v in self._views.items() if k in active}
        launched: dict[str, Allocation] = {}
        ledger = self.current_ledger(cluster, running)
        if waiting and ledger.total_free_gpus > 0:
            launched = self.dispatch(waiting, ledger, platform, now, running)
        out.update(launched)
        self.last_stats = {"waiting": float(len(waiting)), "launched": float(len(launched))}
        return out

    @abstractmethod
    def dispatch(self, waiting: list[JobState], ledger: Ledger, platform: Platform, now: float,
                 running: Mapping[str, Allocation]) -> dict[str, Allocation]:
        """The tasks of ``waiting`` to launch now on what ``ledger`` has free, and their placements: each
        scheduler's own rule (SWAF, the black-box orders, Capacity, Tetris)."""


class SWAF(_Genie):
    """GENIE's QoS-aware scheduler: Alg. 1 at every event, then launch by shortest waiting allowance first."""

    name = "swaf"

    def __init__(self, theta: float = THETA, backfill: bool = False) -> None:
        super().__init__(theta)
        self.backfill = bool(backfill)
        #: the last decision's queue: (task id, placement, waiting allowance, meets its ECT) in SWAF order
        #: (empty when no GPU was free: nothing can start, so Alg. 1 is not run)
        self.last_queue: list[tuple[str, Placement, float, bool]] = []

    def allocate(self, ordered, cluster, running, now):
        self.last_queue = []  # stays empty when no GPU is free (Alg. 1 is not run then)
        return super().allocate(ordered, cluster, running, now)

    def dispatch(self, waiting, ledger, platform, now, running):
        views = [self.view(js, platform) for js in waiting]
        lat = np.stack([v.lat for v in views])
        cer = np.stack([v.cer for v in views])
        ect = np.array([v.ect for v in views])
        j, w, ok = swaf_select_many(lat, cer, ect, now)
        order = sorted(range(len(views)), key=lambda i: (w[i], views[i].arrival_key))
        self.last_queue = [(views[i].id, views[i].placements[j[i]], float(w[i]), bool(ok[i])) for i in order]
        out: dict[str, Allocation] = {}
        for tid, s, _, _ in self.last_queue:
            if ledger.total_free_gpus == 0:
                break
            alloc = _placement_alloc(ledger, s)
            if alloc is None:
                if self.backfill:
                    continue
                break
            ledger.take(alloc)
            out[tid] = alloc
        return out


class _BlackBox(_Genie):
    """Launch in :meth:`key` order with the user's request, stopping at the first task that does not fit."""

    @abstractmethod
    def key(self, js: JobState, view: TaskView) -> float:
        """The launch order's key, smallest first (arrival for FIFO, ECT for Min-Min, ...)."""

    def dispatch(self, waiting, ledger, platform, now, running):
        keyed = sorted(waiting, key=lambda js: (self.key(js, self.view(js, platform)), js.arrival_key))
        out: dict[str, Allocation] = {}
        for js in keyed:
            alloc = _request_alloc(ledger, whole_gpus(js.job.gpus))
            if alloc is None:
                break
            ledger.take(alloc)
            out[js.id] = alloc
        return out


class GenieFIFO(_BlackBox):
    """§7.1 FIFO: arrival order, the user's request, best fit."""

    name = "genie-fifo"

    def key(self, js, view):
        return js.job.arrival


class GenieMinMin(_BlackBox):
    """§7.1 Min-Min: earlier ECT first."""

    name = "genie-min-min"

    def key(self, js, view):
        return view.ect


class GenieWeightedFair(_BlackBox):
    """§7.1 Weighted Fair: ascending ``alpha·arrival + (1 − alpha)·ECT``."""

    name = "genie-weighted-fair"

    def __init__(self, theta: float = THETA, alpha: float = 0.5) -> None:
        super().__init__(theta)
        if not 0 <= alpha <= 1:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        self.alpha = float(alpha)

    def key(self, js, view):
        return self.alpha * js.job.arrival + (1 - self.alpha) * view.ect


class GenieCapacity(_Genie):
    """§7.1 Capacity: an equal GPU quota per model type, FIFO within each type's queue."""

    name = "genie-capacity"

    def __init__(self, theta: float = THETA, queues: Sequence[str] | None = None) -> None:
        super().__init__(theta)
        if queues is None:
            from perfpredict.sched.genie_cards import GENIE_TYPES

            queues = tuple(GENIE_TYPES)
        if not queues:
            raise ValueError("Capacity needs at least one queue")
        self.queues = tuple(queues)

    def quotas(self, total_gpus: int) -> dict[str, int]:
        """Equal shares of the GPUs, whole GPUs by largest remainder (earlier queues take the ties), at least one
        per queue: on a cluster with fewer GPUs than queues no type starves, and the quotas then add up to more
        than the cluster (queues compete for the GPUs beyond their guarantee)."""
        k = len(self.queues)
        base, extra = divmod(total_gpus, k)
        return {q: max(1, base + (1 if i < extra else 0)) for i, q in enumerate(self.queues)}

    def _queue(self, js: JobState) -> str:
        m = js.perf
        q = m.task_type if isinstance(m, GeniePerfModel) else js.job.task
        if q not in self.queues:
            raise UnsupportedInput(f"job {js.id}: model type {q!r} has no Capacity queue (queues: {', '.join(self.queues)})")
        return q

    def dispatch(self, waiting, ledger, platform, now, running):
        quota = self.quotas(platform.total_gpus)
        used = dict.fromkeys(self.queues, 0)
        for jid, alloc in running.items():
            used[self._queue(self.active[jid])] += int(round(alloc.gpus))
        blocked: set[str] = set()
        out: dict[str, Allocation] = {}
        for js in sorted(waiting, key=lambda js: js.arrival_key):
            q = self._queue(js)
            if q in blocked:
                continue
            need = min(whole_gpus(js.job.gpus), quota[q])
            alloc = _request_alloc(ledger, need) if need > 0 and used[q] + need <= quota[q] else None
            if alloc is None:
                blocked.add(q)
                continue
            ledger.take(alloc)
            used[q] += need
            out[js.id] = alloc
        return out


class GenieTetris(_Genie):
    """Tetris with GENIE's models: a fixed highest-PR (``objective="perf"``) or highest-CER placement per task,
    packed by alignment plus a shortest-latency term."""

    name = "genie-tetris"

    def __init__(self, objective: str = "cer", theta: float = THETA, srtf_weight: float = 1.0) -> None:
        super().__init__(theta)
        if objective not in ("cer", "perf"):
            raise ValueError(f"objective is 'cer' or 'perf', got {objective!r}")
        self.objective = objective
        self.srtf_weight = float(srtf_weight)
        self.name = f"genie-tetris-{objective}"

    def choice(self, view: TaskView) -> int:
        return int(np.argmax(view.cer if self.objective == "cer" else view.pr))

    def dispatch(self, waiting, ledger, platform, now, running):
        G, N = platform.gpus_per_node, platform.n_nodes
        items = []
        for js in waiting:
            v = self.view(js, platform)
            j = self.choice(v)
            items.append((v.lat[j], js.arrival_key, js.id, v.placements[j]))
        items.sort(key=lambda t: (t[0], t[1]))
        n = len(items)
        bonus = [self.srtf_weight * (1.0 - r / n) for r in range(n)]
        pending = list(range(n))
        out: dict[str, Allocation] = {}
        while pending and ledger.total_free_gpus > 0:
            best, best_i, best_dev = -np.inf, -1, None
            free_total = ledger.total_free_gpus
            for i in pending:
                s = items[i][3]
                if s.n > free_total:
                    continue
                devices = realize(ledger, s)
                if devices is None:
                    continue
                align = sum(s.d_gn / G * ledger.free_whole[srv] / G for srv in devices) / N
                score = align + bonus[i]
                if score > best:
                    best, best_i, best_dev = score, i, devices
            if best_i < 0:
                break
            alloc = proportional_allocation(ledger, best_dev)  # type: ignore[arg-type]
            ledger.take(alloc)
            out[items[best_i][2]] = alloc
            pending.remove(best_i)
        return out


class GenieTetrisPerf(GenieTetris):
    """§7.1 Tetris+Perf: the placement with the highest processing rate."""

    def __init__(self, theta: float = THETA, srtf_weight: float = 1.0) -> None:
        super().__init__("perf", theta, srtf_weight)


class GenieTetrisCER(GenieTetris):
    """§7.1 Tetris+CER: the placement with the highest CER, QoS not considered."""

    def __init__(self, theta: float = THETA, srtf_weight: float = 1.0) -> None:
        super().__init__("cer", theta, srtf_weight)
