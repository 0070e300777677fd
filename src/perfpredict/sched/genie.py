"""GENIE (seed 003): the platform and task models, QoS classes, the cost model and SWAF's Algorithm 1.

The paper's notation (Table 2), as implemented here:

* platform ``P = ⟨N, G, Comm(·)⟩`` (eq. 1): ``N`` nodes of ``G`` GPUs (:class:`Platform`, read from a
  homogeneous :class:`~perfpredict.sched.cluster.ClusterSpec`); ``Comm`` is eq. 8 with the task type's γ and λ,
  which perfpredict fits per type (:mod:`perfpredict.fit.comm`) and keeps in the type's card;
* task ``t = ⟨w_type, w_bat, w_iter⟩`` (eq. 2), training or inference: the simulator's
  :class:`~perfpredict.sched.job.Job` with ``model = "genie/<type>/<train|infer>/b<w_bat>"`` (its
  :class:`GeniePerfModel`), ``qos`` the class and ``deadline`` the absolute ECT (arrival + eq. 9);
* placement ``s = ⟨d_node, d_g/n⟩`` (eq. 3): :class:`Placement`, ``d_node`` nodes with ``d_g/n`` GPUs each;
* ``Lat(t, s) = w_bat·w_iter / PR(t, s) + ν`` (eq. 4), ``PR(t, s) = (d_node·d_g/n − Comm(s))·sPR(w_bat / n)``
  (eq. 5-6), ``sPR`` the card's rate model (eq. 7, :mod:`perfpredict.fit.rate`), ``Comm = 0`` for inference;
* QoS classes and ECTs (eq. 9): Urgent 0, Prior ``Lat(t, ⟨1,1⟩)``, Normal ``2·Lat(t, ⟨1,1⟩)``, relative to the
  task's arrival (the ECT is an absolute time in eq. 12: ``l + t_curr ≤ e``);
* ``Cost(s) = n/(N·G) + θ·d_node/N`` (eq. 10, θ = 0.4) and ``CER(t, s) = PR(t, s)/Cost(s)`` (eq. 11);
* SWAF (Alg. 1, :func:`swaf_select`): among the placements whose latency meets the ECT from now (eq. 12), the
  one with the highest CER, else the highest CER of all; waiting allowance ``w = e − (l* + t_curr)`` (eq. 13);
  the queue is served by ascending ``w``.

Where the paper is silent or self-contradictory, these readings (checked against the text, not chosen by result):

* ``M_i`` (Alg. 1 line 3, "all placements for task t_i under the limitations of platform P") is every
  ``⟨d_node, d_g/n⟩`` with ``d_node ≤ N`` and ``d_g/n ≤ G``. §5.3's constraint reads ``d_node < N, d_g/n < G``;
  taken literally no task could use a whole node, and §5.2.2 calls N and G "the upper limits of d_node and
  d_g/n", §4.2 says placements "cannot exceed the upper limits": ``≤``. The placements are not limited to the
  GPUs free now (P is the platform, not its load). Placements with more GPUs than samples in the global batch
  are left out (a local batch below one sample; the paper does not say).
* Eq. 9's ECTs are latencies; eq. 12 (``l + t_curr ≤ e``) compares them with absolute time, so a task's ECT is
  its arrival plus eq. 9 (an Urgent task's is its arrival).
* A negative allowance is used as it is: "The order of all tasks is determined by the waiting allowances. The task
  with a smaller w in the task queue has a higher priority. [...] Obviously, w could be negative, which has no
  impact on the task ordering" (§5.4). A task past its ECT therefore goes before every task that can still meet
  its own. Setting such tasks aside instead would contradict §5.2.1, where Urgent tasks — whose allowance is
  always negative — "have the highest priorities".
* Equal allowances: arrival order (the paper's heapsort does not say).

Deliberate deviation: sPR is the card's rate model, eq. 7's quadratic or the linear iteration-time form, whichever
has the lower leave-one-out error (the linear form for five of the six types); eq. 7 prescribes the quadratic.
The same model is the simulator's ground truth, so SWAF and the Tetris variants (which use "our prediction
model" too, §7.1) predict exactly, where the paper's predictor errs by up to 11% (Fig. 15).

Work units. The simulator measures a job's work in *reference seconds* at its requested GPUs (``Job.gpus``).
For a GENIE task the reference placement is ``⟨1, gpus⟩`` — the request packed on one node (the user's request
is what the black-box baselines of §7.1 allocate; SWAF and the Tetris variants choose their own placement) —
so ``work = w_bat·w_iter / PR(t, ⟨1, gpus⟩)`` and a placement ``s`` runs at ``PR(t, s) / PR(t, ⟨1, gpus⟩)``
reference seconds per second. ``ν`` is paid once at start (``SimConfig.start_overhead_s``).

Placements the simulator may see that are not symmetric (a black-box baseline spreading 3 + 1 GPUs) get eq. 8's
*average path length* generalised: each GPU on a server with ``g_s`` of the job's ``n`` GPUs talks to
``n − g_s`` GPUs across nodes and ``g_s − 1`` within its node, averaged over the job's GPUs; for a symmetric
placement this is exactly eq. 8.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfpredict.sched.base import UnsupportedInput
from perfpredict.sched.cluster import EPS, Allocation, ClusterSpec, Ledger
from perfpredict.sched.job import Job, JobState
from perfpredict.sched.perf import PerfModel

__all__ = [
    "QOS_CLASSES", "THETA", "GeniePerfModel", "Placement", "Platform", "TaskView", "cer", "cost", "ect_offset",
    "genie_model_key", "meets_ect", "parse_model_key", "realize", "swaf_select", "swaf_select_many", "task_ect",
]

#: §5.2.2, Fig. 10: the cost model's weight of the node term.
THETA = 0.4
#: eq. 9's user priorities, most urgent first.
QOS_CLASSES = ("urgent", "prior", "normal")
#: relative slack when comparing a completion time with an ECT (float round-off of equal quantities)
ECT_RTOL = 1e-9


@dataclass(frozen=True, order=True)
class Placement:
    """``⟨d_node, d_g/n⟩``: ``d_node`` nodes with ``d_gn`` GPUs each (eq. 3)."""

    d_node: int
    d_gn: int

    def __post_init__(self) -> None:
        if self.d_node < 1 or self.d_gn < 1:
            raise ValueError(f"a placement needs d_node, d_gn >= 1, got ⟨{self.d_node},{self.d_gn}⟩")

    @property
    def n(self) -> int:
        return self.d_node * self.d_gn

    def __str__(self) -> str:
        return f"⟨{self.d_node},{self.d_gn}⟩"


@dataclass(frozen=True)
class Platform:
    """``⟨N, G⟩`` of eq. 1 (Comm is per task type, in its :class:`GeniePerfModel`)."""

    n_nodes: int
    gpus_per_node: int

    def __post_init__(self) -> None:
        if self.n_nodes < 1 or self.gpus_per_node < 1:
            raise ValueError(f"a platform needs N, G >= 1, got ⟨{self.n_nodes},{self.gpus_per_node}⟩")

    @classmethod
    def from_cluster(cls, cluster: ClusterSpec) -> Platform:
        """N servers of G GPUs; GENIE assumes a symmetric cluster (§4.2), so every server must have G GPUs."""
        counts = {s.gpus for s in cluster.servers}
        if len(counts) != 1 or 0 in counts:
            raise UnsupportedInput(f"GENIE assumes a symmetric cluster (every node the same number of GPUs); "
                             f"{cluster.name} has {sorted(counts)}")
        return cls(cluster.n_servers, counts.pop())

    @property
    def total_gpus(self) -> int:
        return self.n_nodes * self.gpus_per_node

    def placements(self, max_gpus: float | None = None) -> tuple[Placement, ...]:
        """Every ``⟨d_node, d_g/n⟩`` within the platform (Alg. 1 line 3), at most ``max_gpus`` GPUs in all,
        ordered by GPU count then nodes (ties in CER go to the smaller placement)."""
        out = [Placement(a, b) for a in range(1, self.n_nodes + 1) for b in range(1, self.gpus_per_node + 1)
               if max_gpus is None or a * b <= max_gpus + EPS]
        return tuple(sorted(out, key=lambda s: (s.n, s.d_node)))


def cost(s: Placement, platform: Platform, theta: float = THETA) -> float:
    """Eq. 10: ``n/(N·G) + θ·d_node/N``."""
    return s.n / platform.total_gpus + theta * s.d_node / platform.n_nodes


def comm_generic(gpus_per_server: Sequence[int], gamma: float, lam: float) -> float:
    """Eq. 8's average-path-length penalty for any split of a job's GPUs over servers (devices lost)."""
    g = [int(x) for x in gpus_per_server if x > 0]
    n = sum(g)
    if n <= 1:
        return 0.0
    cross = sum(x * (n - x) for x in g)
    intra = sum(x * (x - 1) for x in g)
    return gamma * (cross + lam * intra) / (n * (n - 1))


@dataclass(frozen=True, eq=False)
class GeniePerfModel(PerfModel):
    """One GENIE task model: a task type, training or inference, at a global batch size (``w_type``, ``w_bat``).

    ``spr(b)``: samples/s of one GPU at local batch ``b`` (eq. 7: the card's rate model, times
    ``infer_factor`` for inference); ``gamma``/``lam``: eq. 8's coefficients (the card's comm model; unused for
    inference); ``nu_s``: eq. 4's start-up overhead. ``rate`` and ``gpu_factor`` implement the simulator's
    contract (see the module docstring): speed relative to the request packed on one node.
    """

    task_type: str = ""
    training: bool = True
    batch: float = 32.0
    spr: Callable[[float], float] | None = None
    gamma: float = 0.0
    lam: float = 0.0
    nu_s: float = 0.0
    spr_source: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.spr is None:
            raise ValueError(f"{self.name}: a GENIE task model needs sPR")
        if not self.batch > 0:
            raise ValueError(f"{self.name}: batch must be > 0, got {self.batch}")
        if self.gamma < 0 or self.lam < 0 or self.nu_s < 0:
            raise ValueError(f"{self.name}: γ, λ and ν must be >= 0")
        object.__setattr__(self, "_pr_cache", {})

    # -- eq. 5-8 ---------------------------------------------------------------------------------------
    def comm(self, s: Placement) -> float:
        """Eq. 8 (0 on one GPU, and always 0 for inference: no synchronisation)."""
        if not self.training or s.n == 1:
            return 0.0
        return comm_generic([s.d_gn] * s.d_node, self.gamma, self.lam)

    def pr(self, s: Placement) -> float:
        """Eq. 5: ``(n − Comm(s))·sPR(w_bat / n)`` samples/s, at least 0."""
        key = (s.d_node, s.d_gn)
        cache: dict = self._pr_cache  # type: ignore[attr-defined]
        v = cache.get(key)
        if v is None:
            v = max(0.0, (s.n - self.comm(s)) * float(self.spr(self.batch / s.n)))  # type: ignore[misc]
            cache[key] = v
        return v

    def pr_split(self, gpus_per_server: Sequence[int]) -> float:
        """Eq. 5 for any whole-GPU split over servers (symmetric splits are exactly :meth:`pr`)."""
        g = sorted(int(x) for x in gpus_per_server if x > 0)
        if not g:
            return 0.0
        if g[0] == g[-1]:
            return self.pr(Placement(len(g), g[0]))
        n = sum(g)
        c = comm_generic(g, self.gamma, self.lam) if self.training else 0.0
        return max(0.0, (n - c) * float(self.spr(self.batch / n)))  # type: ignore[misc]

    def reference_pr(self, ref_gpus: float) -> float:
        """PR at the reference placement ``⟨1, ref_gpus⟩`` (a fraction of a GPU: that share of one GPU)."""
        if ref_gpus < 1 - EPS:
            return ref_gpus * self.pr(Placement(1, 1))
        return self.pr(Placement(1, int(round(ref_gpus))))

    # -- the simulator's contract ----------------------------------------------------------------------
    def rate(self, alloc: Allocation, ref_gpus: float, cluster: ClusterSpec | None = None) -> float:
        if alloc.gpus <= 0:
            return 0.0
        if alloc.is_fractional:
            pr = alloc.gpus * self.pr(Placement(1, 1))
        else:
            pr = self.pr_split([int(round(sh.gpus)) for sh in alloc.shares])
        return pr / self.reference_pr(ref_gpus)

    def gpu_factor(self, gpus: float, ref_gpus: float) -> float:
        if gpus <= 0:
            return 0.0
        return self.reference_pr(gpus) / self.reference_pr(ref_gpus)

    # -- the task's quantities -------------------------------------------------------------------------
    def samples(self, job: Job) -> float:
        """``w_bat·w_iter``: the task's whole computation (samples)."""
        return job.work * self.reference_pr(job.gpus)

    def iterations(self, job: Job) -> float:
        return self.samples(job) / self.batch

    def lat(self, job: Job, s: Placement) -> float:
        """Eq. 4: ``w_bat·w_iter / PR(t, s) + ν`` seconds (inf where PR is 0)."""
        pr = self.pr(s)
        return math.inf if pr <= 0 else self.samples(job) / pr + self.nu_s

    def lat_single(self, job: Job) -> float:
        """``Lat(t, ⟨1,1⟩)``: the baseline latency of eq. 9 and eq. 16."""
        return self.lat(job, Placement(1, 1))


def genie_model_key(task_type: str, training: bool, batch: float) -> str:
    """``genie/<type>/<train|infer>/b<batch>``: the ``Job.model`` of a GENIE task."""
    b = int(batch) if float(batch).is_integer() else batch
    return f"genie/{task_type}/{'train' if training else 'infer'}/b{b}"


def parse_model_key(key: str) -> tuple[str, bool, float]:
    """Inverse of :func:`genie_model_key`; ``ValueError`` for anything else."""
    parts = key.split("/")
    if len(parts) != 4 or parts[0] != "genie" or parts[2] not in ("train", "infer") or not parts[3].startswith("b"):
        raise ValueError(f"not a GENIE task model key (genie/<type>/<train|infer>/b<batch>): {key!r}")
    try:
        batch = float(parts[3][1:])
    except ValueError:
        raise ValueError(f"bad batch size in {key!r}") from None
    return parts[1], parts[2] == "train", batch


def ect_offset(qos: str | None, lat_single: float) -> float:
    """Eq. 9: the ECT relative to arrival — Urgent 0, Prior ``Lat(t,⟨1,1⟩)``, Normal ``2·Lat(t,⟨1,1⟩)``.
    No class is Normal."""
    q = (qos or "normal").lower()
    if q == "urgent":
        return 0.0
    if q == "prior":
        return lat_single
    if q == "normal":
        return 2.0 * lat_single
    raise ValueError(f"unknown QoS class {qos!r}; GENIE's are {', '.join(QOS_CLASSES)}")


def meets_ect(finish: float, ect: float) -> bool:
    """``finish ≤ ECT`` up to float round-off (a Prior task started at arrival on one GPU ends exactly at it)."""
    return finish <= ect + ECT_RTOL * max(1.0, abs(ect))


def cer(model: GeniePerfModel, s: Placement, platform: Platform, theta: float = THETA) -> float:
    """Eq. 11: ``PR(t, s) / Cost(s)``."""
    return model.pr(s) / cost(s, platform, theta)


# ---------------------------------------------------------------------------------------------------------
# Algorithm 1
# ---------------------------------------------------------------------------------------------------------
@dataclass
class TaskView:
    """A waiting task as Alg. 1 sees it: its ECT ``e`` (absolute) and, for every placement of the platform, its
    PR, latency ``l`` (eq. 4) and CER ``r`` (eq. 11). Placements outside ``M_i`` (more GPUs than samples in the
    global batch, or a rate of 0) have ``l = inf`` and ``r = −inf``. Time-independent: computed once per task."""

    id: str
    arrival_key: tuple[float, int, str]
    ect: float
    placements: tuple[Placement, ...]
    lat: np.ndarray
    cer: np.ndarray
    pr: np.ndarray

    @classmethod
    def of(cls, js: JobState, platform: Platform, theta: float = THETA) -> TaskView:
        m = js.perf
        if not isinstance(m, GeniePerfModel):
            raise UnsupportedInput(f"job {js.id}: GENIE schedulers need a GENIE task model "
                                   f"(genie/<type>/<mode>/b<batch>, as a genie:... trace gives), got {m.name!r}")
        places = platform.placements()
        pr = np.array([m.pr(s) for s in places])
        # a global batch splits into local batches of at least one sample
        valid = np.array([s.n <= m.batch + EPS for s in places]) & (pr > 0)
        valid[0] |= not valid.any()  # ⟨1,1⟩ always exists
        costs = np.array([cost(s, platform, theta) for s in places])
        samples = m.samples(js.job)
        with np.errstate(divide="ignore"):
            lat = np.where(valid, samples / np.where(pr > 0, pr, 1.0) + m.nu_s, np.inf)
        return cls(js.id, js.arrival_key, task_ect(js), places, lat, np.where(valid, pr / costs, -np.inf),
                   np.where(valid, pr, 0.0))


def task_ect(js: JobState) -> float:
    """The absolute ECT: ``Job.deadline`` when the trace gives it, else arrival + eq. 9 of ``Job.qos``."""
    if js.job.deadline is not None:
        return float(js.job.deadline)
    m = js.perf
    if not isinstance(m, GeniePerfModel):
        raise ValueError(f"job {js.id}: no ECT (deadline) and no GENIE model to compute eq. 9 from")
    try:
        offset = ect_offset(js.job.qos, m.lat_single(js.job))
    except ValueError as e:  # the trace's QoS class, not a bug: a usage error naming the job
        raise UnsupportedInput(f"job {js.id}: {e}, and it has no deadline to schedule by") from None
    return js.job.arrival + offset


def swaf_select(task: TaskView, now: float) -> tuple[int, float, bool]:
    """Alg. 1 lines 2-14 for one task: ``(index of s_i*, waiting allowance w_i, whether s_i* meets the ECT)``.

    ``M'_i`` = placements with ``l + now ≤ e`` (eq. 12); ``s_i*`` = the highest CER in ``M'_i``, else in
    ``M_i``; ``w_i = e − (l_i* + now)`` (eq. 13)."""
    j, w, ok = swaf_select_many(task.lat[None, :], task.cer[None, :], np.array([task.ect]), now)
    return int(j[0]), float(w[0]), bool(ok[0])


def swaf_select_many(lat: np.ndarray, cer: np.ndarray, ect: np.ndarray,
                     now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`swaf_select` for ``n`` tasks at once (``lat``, ``cer``: n × q; ``ect``: n)."""
    ok = lat + now <= (ect + ECT_RTOL * np.maximum(1.0, np.abs(ect)))[:, None]
    any_ok = ok.any(axis=1)
    j = np.where(any_ok, np.argmax(np.where(ok, cer, -np.inf), axis=1), np.argmax(cer, axis=1))
    rows = np.arange(len(j))
    return j, ect - (lat[rows, j] + now), ok[rows, j]


def realize(ledger: Ledger, s: Placement) -> dict[int, list[int]] | None:
    """Concrete devices for ``s`` on the free GPUs: ``d_node`` servers with at least ``d_g/n`` free GPUs each,
    best fit (the fullest servers that still fit, to keep whole nodes free); None if there are not enough."""
    fit = sorted((ledger.free_whole[i], i) for i in range(ledger.spec.n_servers) if ledger.free_whole[i] >= s.d_gn)
    if len(fit) < s.d_node:
        return None
    return {i: ledger.free_devices(i)[:s.d_gn] for _, i in fit[:s.d_node]}


def describe(model: GeniePerfModel, platform: Platform, job: Job | None = None,
             theta: float = THETA) -> list[dict[str, Any]]:
    """Per placement: PR, Comm, Cost, CER (and Lat for ``job``): for reports and docs/simulator.md."""
    rows = []
    for s in platform.placements(max_gpus=model.batch):
        row: dict[str, Any] = {"placement": str(s), "gpus": s.n, "comm": model.comm(s), "pr": model.pr(s),
                               "cost": cost(s, platform, theta), "cer": cer(model, s, platform, theta)}
        if job is not None:
            row["lat_s"] = model.lat(job, s)
        rows.append(row)
    return rows

