"""ANDREAS (seed 000) workloads and clusters, following the paper's recipes and named after them.

§V-B simulations (:func:`andreas_cluster`, :func:`andreas_trace`)
    *Stated*: N nodes, N from 10 to 100; J = 10N jobs; half of the nodes have Tesla V100 GPUs and half Turing
    (T4) GPUs; case 1: 2 V100 or 1 T4 per node, case 2: 4 V100 or 2 T4 per node; jobs drawn at random among
    DL jobs "with different characteristics in terms of batch sizes and number of required training epochs"
    (the §V applications); "a mixed rate" of arrivals, generated as in Saxena et al. [15]; ρ = 100.

    *Assumed* (the paper gives no more), each drawn independently per job:

    - the application: one of the four of Table V, uniformly (batch size: Table V's for that application);
    - the epochs, the due-date slack and the tardiness weight: each drawn from Table V's eight rows (a
      bootstrap of the only jobs the paper describes). The slack of a Table V row is its due date (relative
      to its submission, see below) over its run time on one V100 — 1.1× to 11.9× with the models of
      :mod:`perfpredict.sched.andreas_cards`; a job's due date is its arrival plus slack × its run time on one
      V100;
    - the "mixed" arrival rate: a Poisson process whose rate alternates every ``phase_h`` hours (1 h) between
      1.5× and 0.5× its mean, starting high. The mean is set by ``load``: the offered load on the cluster of
      the case simulated (N nodes), in V100-equivalents (a T4 counts as the mean T4 speed of the
      applications), 1.0 by default. Each case thus gets its own arrival rate (the case-2 trace arrives twice
      as fast). The paper does not say which; with one trace for both cases, case 2 runs at half the load and
      no method misses a due date there, which contradicts the ~30% penalty-driven gain the paper reports for
      it. ``andreas_trace(N, case=1)`` run on the case-2 cluster simulates the other reading.

Validation (§V-C, Table V; :func:`table_v_trace`, :func:`armida_cluster`)
    The eight jobs of Table V, submitted every 1200 s, on armida-05 (1 V100), armida-06 (2 V100) and
    armida-07 (1 T4); the optimizer runs every 5 minutes. Table V's d_j are read as relative to S_j: J1 is
    submitted at 6000 s with d_j = 5600 s, and the paper reports that every job met its due date.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfpredict.sched.andreas_cards import ANDREAS_APPS, ANDREAS_GPU_TYPES, andreas_model, gpu_hour_cost
from perfpredict.sched.cluster import MAX_SERVERS, MAX_TRACE_JOBS, ClusterSpec, ServerSpec
from perfpredict.sched.job import Job
from perfpredict.sim.spec_options import spec_options

__all__ = ["TABLE_V", "TableVJob", "andreas_cluster", "andreas_trace", "armida_cluster", "cluster_from_spec", "table_v_trace",
           "trace_from_spec"]

#: Host resources per GPU (not used by ANDREAS' models; the proportional share every job gets).
_CPUS_PER_GPU = 8.0
_MEM_PER_GPU_GB = 64.0


@dataclass(frozen=True)
class TableVJob:
    id: str
    app: str
    epochs: int
    batch_size: int
    submit_s: float
    due_s: float  # relative to submission
    weight: float


#: Table V, in its row order.
TABLE_V: tuple[TableVJob, ...] = (
    TableVJob("J6", "efficientnet", 80, 4096, 0, 3600, 4),
    TableVJob("J9", "convnet", 160, 8192, 1200, 2600, 2),
    TableVJob("J10", "convnet", 80, 8192, 2400, 7600, 3),
    TableVJob("J7", "lstm-big", 160, 8192, 3600, 17600, 3),
    TableVJob("J8", "lstm-small", 160, 8192, 4800, 7600, 3),
    TableVJob("J1", "lstm-big", 60, 8192, 6000, 5600, 5),
    TableVJob("J2", "lstm-small", 60, 8192, 7200, 12600, 2),
    TableVJob("J3", "efficientnet", 60, 4096, 8400, 11600, 1),
)


def _server(gpu_type: str, gpus: int) -> ServerSpec:
    return ServerSpec(gpus=gpus, cpus=_CPUS_PER_GPU * gpus, mem_gb=_MEM_PER_GPU_GB * gpus, gpu_type=gpu_type,
                      gpu_mem_gb=ANDREAS_GPU_TYPES[gpu_type].mem_gb, energy_cost=gpu_hour_cost(gpu_type))


def andreas_cluster(n_nodes: int, case: int = 1) -> ClusterSpec:
    """§V-B: ⌈N/2⌉ V100 nodes and ⌊N/2⌋ T4 nodes; case 1: 2 V100 / 1 T4 per node, case 2: 4 V100 / 2 T4."""
    if not 1 <= n_nodes <= MAX_SERVERS:
        raise ValueError(f"n_nodes must be from 1 to {MAX_SERVERS:,}, got {n_nodes}")
    if case not in (1, 2):
        raise ValueError(f"case is 1 (2 V100 / 1 T4 per node) or 2 (4 V100 / 2 T4), got {case}")
    v100, t4 = (2, 1) if case == 1 else (4, 2)
    n_v = (n_nodes + 1) // 2
    servers = (_server("V100", v100),) * n_v + (_server("T4", t4),) * (n_nodes - n_v)
    return ClusterSpec(servers=servers, name=f"andreas-case{case}-{n_nodes}nodes")


def armida_cluster() -> ClusterSpec:
    """§V-C's validation nodes: armida-05 (1 V100), armida-06 (2 V100), armida-07 (1 T4)."""
    return ClusterSpec(servers=(_server("V100", 1), _server("V100", 2), _server("T4", 1)), name="armida-05-06-07")


def _run_time_v100(app: str, epochs: int) -> float:
    return epochs * ANDREAS_APPS[app].epoch_s_v100


def table_v_slacks() -> np.ndarray:
    """Each Table V row's due date (relative to submission) over its run time on one V100."""
    return np.asarray([r.due_s / _run_time_v100(r.app, r.epochs) for r in TABLE_V])


def table_v_trace() -> list[Job]:
    """The eight validation jobs of Table V (work = run time on one V100; due date = S_j + d_j)."""
    return [Job(id=r.id, arrival=float(r.submit_s), gpus=1.0, work=_run_time_v100(r.app, r.epochs), model=r.app,
                task=ANDREAS_APPS[r.app].family, min_gpus=1.0, deadline=float(r.submit_s + r.due_s),
                weight=float(r.weight), epochs=r.epochs)
            for r in TABLE_V]


def mean_t4_speed() -> float:
    return float(np.mean([andreas_model(a).type_factor("T4") for a in ANDREAS_APPS]))


def andreas_trace(n_nodes: int, case: int = 1, *, n_jobs: int | None = None, load: float = 1.0,
                  phase_h: float = 1.0, high: float = 1.5, low: float = 0.5, seed: int = 0) -> list[Job]:
    """The §V-B workload for N = ``n_nodes`` (``n_jobs`` = 10N by default); see the module docstring.

    ``load``: mean offered load on the case-``case`` cluster of ``n_nodes`` nodes (V100-equivalent GPU-seconds
    asked per second over those available); ``high``/``low``: the mixed rate's two levels relative to the
    mean, alternating every ``phase_h`` hours. The jobs (application, epochs, slack, weight) depend on the seed
    only; the case and the load change only the arrival times. Job ids are arrival indices."""
    if n_nodes < 1 or load <= 0 or phase_h <= 0 or not 0 < low <= high:
        raise ValueError("need n_nodes >= 1, load > 0, phase_h > 0 and 0 < low <= high")
    n = 10 * n_nodes if n_jobs is None else int(n_jobs)
    if n > MAX_TRACE_JOBS:
        raise ValueError(f"{n:,} jobs, more than the {MAX_TRACE_JOBS:,} a generated trace may have")
    rng = np.random.default_rng(seed)
    apps = list(ANDREAS_APPS)
    slacks = table_v_slacks()
    rows = len(TABLE_V)
    app_idx = rng.integers(len(apps), size=n)
    epochs = np.asarray([r.epochs for r in TABLE_V])[rng.integers(rows, size=n)]
    slack = slacks[rng.integers(rows, size=n)]
    weight = np.asarray([r.weight for r in TABLE_V], dtype=float)[rng.integers(rows, size=n)]

    mean_work = float(np.mean([r.epochs for r in TABLE_V])) * float(np.mean([a.epoch_s_v100
                                                                             for a in ANDREAS_APPS.values()]))
    cluster = andreas_cluster(n_nodes, case)
    capacity = sum(s.gpus * (1.0 if s.gpu_type == "V100" else mean_t4_speed()) for s in cluster.servers)
    mean_rate = load * capacity / mean_work  # jobs per second
    phase = phase_h * 3600.0
    top = high * mean_rate
    arrivals = []
    t = 0.0
    while len(arrivals) < n:  # thinning of the piecewise-constant rate
        t += rng.exponential(1.0 / top)
        level = high if int(t // phase) % 2 == 0 else low
        if rng.random() < level / high:
            arrivals.append(t)
    jobs = []
    for i in range(n):
        app = apps[app_idx[i]]
        work = _run_time_v100(app, int(epochs[i]))
        jobs.append(Job(id=str(i), arrival=round(arrivals[i], 3), gpus=1.0, work=work, model=app,
                        task=ANDREAS_APPS[app].family, min_gpus=1.0,
                        deadline=round(arrivals[i] + slack[i] * work, 3), weight=float(weight[i]),
                        epochs=int(epochs[i])))
    return jobs


def cluster_from_spec(spec: str) -> ClusterSpec:
    """``andreas:nodes=N,case=1|2`` (§V-B) or ``armida`` (§V-C's three validation nodes)."""
    if spec == "armida":
        return armida_cluster()
    kv = spec_options(spec, {"nodes": int, "case": int})
    return andreas_cluster(kv.get("nodes", 10), kv.get("case", 1))


def trace_from_spec(spec: str, seed: int = 0) -> list[Job]:
    """``andreas:nodes=N[,case=1,jobs=10N,load=1,phase_h=1,seed=]`` (§V-B) or ``andreas-table5`` (Table V)."""
    if spec == "andreas-table5":
        return table_v_trace()
    kv = spec_options(spec, {"nodes": int, "case": int, "jobs": int, "load": float, "phase_h": float, "seed": int})
    return andreas_trace(kv.get("nodes", 10), kv.get("case", 1), n_jobs=kv.get("jobs"), load=kv.get("load", 1.0),
                         phase_h=kv.get("phase_h", 1.0), seed=kv.get("seed", seed))
