"""Metrics of a simulated schedule, in the two seed papers' terms.

Input: the simulator's job states (finished ones carry ``first_start``, ``finish``, ``run_time``,
``preemptions``), its usage series ``(time, GPUs, CPUs, memory GB)`` allocated after every change (piecewise
constant until the next sample), and the cluster. Unfinished states (``finish is None``) are counted and
left out of every per-job statistic.

Synergy (seed 001 §5.1): job completion time ``JCT = finish - arrival``, its average and 99th percentile
over the jobs in *steady state* — Synergy reports "a set of 1000 jobs in cluster steady state", i.e. jobs by
arrival index (``steady=(1000, 2000)``: the 1001st to the 2000th arrival), or by arrival time
(``arrival_window=(t0, t1)``); makespan ``last finish - first arrival`` (static traces); queueing delay
``JCT - run time``; cluster utilisation.

Moldable/malleable (seed 002 §III-C):
    * per-task flow time ``t_flo = t_cmp - t_arr`` (the JCT) and stretch ``s = t_flo / v`` where ``v`` is the
      task's *computational volume*, "the task's runtime when run alone on a single GPU": ``work`` (reference
      seconds at the job's ``gpus``) times ``S(gpus) / S(1)`` from its perf model (``work × gpus`` under a
      linear speedup, seed 002's ``runtime × procs`` for HPC2N);
    * per-job flow time and stretch, where a *job* is a user's bag of tasks: "tasks that start during or
      within one minute after finishing the execution of another task of the same user". The grouping must
      not depend on the schedule being measured (or two schedulers would be scored on different jobs), so
      it uses the trace's own execution interval of a task, ``[arrival, arrival + work]``: a task joins the
      user's current job if it arrives before that job's latest trace-end plus ``job_gap_s`` (60 s). A job's
      flow time is its last completion minus its first arrival; its stretch that flow time over the sum of
      its tasks' volumes (§V-D: "the jobs' runtime divided by the jobs' total computational volume"). Tasks
      without a user form jobs of one. Jobs are formed from every task, finished or not, and a job with an
      unfinished task is left out of the per-job statistics (``n_user_jobs`` counts the finished jobs);
    * system utilisation ``u = Σ v / (|G| · (max t_cmp - min t_arr))`` (can exceed 1 when co-location makes
      fractional GPUs worth more than their share).

ANDREAS (seed 000 §IV, §V-B): a job's tardiness ``τ_j = max(0, finish - d_j)`` (0 without a due date), its
penalty ``ω_j · τ_j`` with ``ω_j`` (``Job.weight``) read as EUR per hour of tardiness, and its energy cost (the
simulator's ``JobState.energy_cost``: GPU-hours held on each server times the server's ``energy_cost``); the
*total cost* is energy plus penalties over the finished jobs. Work lost to restarts from epoch checkpoints is
summed too.

Horus (seed 004 §5.2): *job waiting time* from arrival to the job's first placement (``first_start - arrival``),
*JCT* "commencing from the start of job execution" (``finish - first_start``, here ``avg_exec_jct_s``; the
``avg_jct_s`` above also counts the wait), makespan, and *cluster GPU utilisation* as NVML measures it: a
device is busy ``min(1, Σ solo utilisations)`` of the time (``busy_gpu_util``, from the simulator's busy
series when devices are shared, :mod:`perfpredict.sim.sharing`; NaN otherwise). ``n_ooms`` counts
out-of-memory failures.

Windows: the steady-state selection applies to the per-task statistics (JCT, queueing delay, flow time,
stretch); makespan, utilisation, preemptions and the per-job statistics use every finished job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from perfpredict.sched.cluster import ClusterSpec
from perfpredict.sched.job import JobState

__all__ = ["SimMetrics", "compute_metrics", "jct_cdf", "metrics_from_result", "select_steady", "tardiness",
           "task_volume", "user_jobs", "utilization", "utilization_series"]

Usage = Sequence[tuple[float, float, float, float]]


@dataclass(frozen=True)
class SimMetrics:
    """Aggregate metrics of one simulation (seconds unless stated; NaN where there is nothing to average)."""

    n_jobs: int
    n_finished: int
    n_unfinished: int
    #: jobs the per-task statistics are over (the steady-state window)
    n_measured: int
    window: str
    avg_jct_s: float
    p50_jct_s: float
    p99_jct_s: float
    max_jct_s: float
    avg_queue_delay_s: float
    p99_queue_delay_s: float
    makespan_s: float
    total_preemptions: int
    #: seed 002 per task: flow time = JCT; stretch = flow time / single-GPU volume
    avg_flow_time_s: float
    max_flow_time_s: float
    avg_stretch: float
    max_stretch: float
    #: seed 002 per job (a user's bag of tasks)
    n_user_jobs: int
    avg_job_flow_time_s: float
    max_job_flow_time_s: float
    avg_job_stretch: float
    max_job_stretch: float
    #: allocated / capacity, time-weighted over [first arrival, last finish]
    gpu_util: float
    cpu_util: float
    mem_util: float
    #: seed 002's system utilisation Σ v / (|G| · makespan), v at the reference allocation (3 CPUs and 62.5 GB
    #: per GPU): above 1 when jobs run faster than that, e.g. CPU-hungry ones on servers with more CPUs per GPU
    volume_util: float
    #: ANDREAS (finished jobs): energy (EUR), tardiness penalties Σ ω τ (EUR, ω per hour), their sum
    energy_cost: float = 0.0
    tardiness_cost: float = 0.0
    total_cost: float = 0.0
    avg_tardiness_s: float = math.nan
    max_tardiness_s: float = math.nan
    n_late: int = 0
    #: reference seconds of work redone after restarts from the last epoch checkpoint
    lost_work_s: float = 0.0
    #: Horus: waiting time to the first placement, JCT from the first placement, NVML-style busy GPU
    #: utilisation (shared devices only, else NaN) and out-of-memory failures
    avg_wait_s: float = math.nan
    p50_wait_s: float = math.nan
    avg_exec_jct_s: float = math.nan
    busy_gpu_util: float = math.nan
    n_ooms: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def task_volume(js: JobState) -> float:
    """Seed 002's computational volume: the task's run time alone on one whole GPU (reference CPU/memory)."""
    return js.job.work * js.perf.gpu_factor(js.job.gpus, 1.0)


def _natural(s: str) -> tuple:
    """Sort key that orders "2" before "10" (trace ids are usually integers)."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s))


def _arrival_order(states: Iterable[JobState]) -> list[JobState]:
    # trace order on ties; a state made outside a run (or a stand-in with .job and .id) has no position
    return sorted(states, key=lambda js: (js.job.arrival, getattr(js, "seq", 0), _natural(js.id)))


def select_steady(states: Sequence[JobState], *, steady: tuple[int, int] | None = None,
                  arrival_window: tuple[float, float] | None = None) -> list[JobState]:
    """The states in the measurement window, in arrival order.

    ``steady=(i, j)``: the i-th to (j-1)-th job by arrival (ties in trace order, as the simulator served them;
    states made outside a run, by id numerically), counting every state
    given, finished or not, so the window is the same whatever finished. ``arrival_window=(t0, t1)``: jobs
    arriving in ``[t0, t1)``. Both: both conditions. Neither: all.
    """
    ordered = _arrival_order(states)
    if steady is not None:
        lo, hi = steady
        if lo < 0 or hi < lo:
            raise ValueError(f"steady must be (start, end) arrival indices with 0 <= start <= end, got {steady}")
        ordered = ordered[lo:hi]
    if arrival_window is not None:
        t0, t1 = arrival_window
        if t1 < t0:
            raise ValueError(f"arrival_window must be (t0, t1) with t0 <= t1, got {arrival_window}")
        ordered = [js for js in ordered if t0 <= js.job.arrival < t1]
    return ordered


def _finished(states: Iterable[JobState]) -> list[JobState]:
    return [js for js in states if js.finish is not None]


def _jct(js: JobState) -> float:
    assert js.finish is not None
    return js.finish - js.job.arrival


def jct_cdf(states: Sequence[JobState], *, steady: tuple[int, int] | None = None,
            arrival_window: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(sorted JCTs, cumulative fraction)`` of the finished jobs in the window, for a step plot of the CDF
    (the fraction at the k-th smallest JCT is k/n)."""
    jcts = np.sort([_jct(js) for js in _finished(select_steady(states, steady=steady,
                                                               arrival_window=arrival_window))])
    n = jcts.size
    return jcts, np.arange(1, n + 1) / n if n else np.zeros(0)


def user_jobs(states: Sequence[JobState], gap_s: float = 60.0) -> list[list[JobState]]:
    """Seed 002's jobs: a user's tasks grouped by overlapping trace execution (see the module docstring)."""
    by_user: dict[str, list[JobState]] = {}
    singles: list[list[JobState]] = []
    for js in states:
        if js.job.user:
            by_user.setdefault(js.job.user, []).append(js)
        else:
            singles.append([js])
    groups: list[list[JobState]] = []
    for tasks in by_user.values():
        current: list[JobState] = []
        end = -math.inf
        for js in _arrival_order(tasks):
            if current and js.job.arrival <= end + gap_s:
                current.append(js)
            else:
                if current:
                    groups.append(current)
                current = [js]
                end = -math.inf
            end = max(end, js.job.arrival + js.job.work)
        if current:
            groups.append(current)
    return groups + singles


def tardiness(js: JobState) -> float:
    """``max(0, finish - due date)``: 0 without a due date or before the job finishes, and 0 for a finish within
    float round-off of the due date (on time, as ``jobs.csv``'s ``met_deadline`` and GENIE's QoS guarantee read it:
    :func:`perfpredict.sched.genie.meets_ect`), so that ``n_late`` counts the jobs the records call late."""
    from perfpredict.sched.genie import meets_ect

    d = js.job.deadline
    if d is None or js.finish is None or meets_ect(js.finish, d):
        return 0.0
    return max(0.0, js.finish - d)


def _mean(x: Sequence[float]) -> float:
    return float(np.mean(x)) if len(x) else math.nan


def _pct(x: Sequence[float], q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else math.nan


def _max(x: Sequence[float]) -> float:
    return float(np.max(x)) if len(x) else math.nan


def utilization_series(usage: Usage, cluster: ClusterSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(t, gpu, cpu, mem)``: the allocated fraction of each resource from each sample time on (step plot,
    ``where="post"``). Samples at the same time keep the last."""
    if not usage:
        z = np.zeros(0)
        return z, z, z, z
    u = np.asarray(sorted(usage, key=lambda r: r[0]), dtype=float)
    _, last = np.unique(u[::-1, 0], return_index=True)  # last sample per distinct time
    u = u[::-1][last]
    caps = [max(cluster.total_gpus, 1e-12), max(cluster.total_cpus, 1e-12), max(cluster.total_mem_gb, 1e-12)]
    return u[:, 0], u[:, 1] / caps[0], u[:, 2] / caps[1], u[:, 3] / caps[2]


def utilization(usage: Usage, cluster: ClusterSpec, start: float, end: float) -> tuple[float, float, float]:
    """Time-weighted (GPU, CPU, memory) utilisation over ``[start, end]``: each sample's value holds until the
    next sample (the last one until ``end``); before the first sample nothing is allocated."""
    if not end > start:
        return math.nan, math.nan, math.nan
    t, g, c, m = utilization_series(usage, cluster)
    if t.size == 0:
        return 0.0, 0.0, 0.0
    nxt = np.append(t[1:], np.inf)
    dur = np.clip(np.minimum(nxt, end) - np.maximum(t, start), 0.0, None)
    span = end - start
    return float(dur @ g / span), float(dur @ c / span), float(dur @ m / span)


def compute_metrics(states: Sequence[JobState], usage: Usage, cluster: ClusterSpec, *,
                    steady: tuple[int, int] | None = None, arrival_window: tuple[float, float] | None = None,
                    job_gap_s: float = 60.0, busy: Sequence[tuple[float, float]] | None = None) -> SimMetrics:
    """All the metrics of one simulation; see the module docstring for each definition and the windows."""
    done = _finished(states)
    window = select_steady(states, steady=steady, arrival_window=arrival_window)
    measured = _finished(window)
    jcts = [_jct(js) for js in measured]
    queue = [max(0.0, _jct(js) - js.run_time) for js in measured]
    waits = [js.first_start - js.job.arrival for js in measured if js.first_start is not None]
    exec_jct = [js.finish - js.first_start for js in measured  # type: ignore[operator]
                if js.first_start is not None]
    stretch = [_jct(js) / task_volume(js) for js in measured]

    # jobs are grouped over every state (finished or not), so that a task left unfinished does not split its
    # user's bag into smaller "finished" jobs; a job with an unfinished task has no flow time and is left out
    groups = [g for g in user_jobs(states, job_gap_s) if all(js.finish is not None for js in g)]
    g_flow = [max(js.finish for js in g) - min(js.job.arrival for js in g) for g in groups]  # type: ignore[type-var]
    g_stretch = [f / sum(task_volume(js) for js in g) for f, g in zip(g_flow, groups, strict=True)]

    if done:
        start = min(js.job.arrival for js in done)
        end = max(js.finish for js in done)  # type: ignore[type-var]
        makespan = end - start
        gpu_u, cpu_u, mem_u = utilization(usage, cluster, start, end)
        if busy:
            from perfpredict.sim.sharing import busy_series_util

            busy_u = busy_series_util(list(busy), cluster.total_gpus, start, end)
        vol_u = (sum(task_volume(js) for js in done) / (cluster.total_gpus * makespan)
                 if makespan > 0 and cluster.total_gpus > 0 else math.nan)
    else:
        makespan = gpu_u = cpu_u = mem_u = vol_u = math.nan

    if not done or not busy:
        busy_u = math.nan
    tard = [tardiness(js) for js in done]
    energy = float(sum(js.energy_cost for js in done))
    penalty = float(sum(js.job.weight * t / 3600.0 for js, t in zip(done, tard, strict=True)))

    parts = []
    if steady is not None:
        parts.append(f"arrival index [{steady[0]}, {steady[1]})")
    if arrival_window is not None:
        parts.append(f"arrival time [{arrival_window[0]:g}, {arrival_window[1]:g}) s")
    return SimMetrics(
        n_jobs=len(states), n_finished=len(done), n_unfinished=len(states) - len(done), n_measured=len(measured),
        window=" and ".join(parts) or "all jobs",
        avg_jct_s=_mean(jcts), p50_jct_s=_pct(jcts, 50), p99_jct_s=_pct(jcts, 99), max_jct_s=_max(jcts),
        avg_queue_delay_s=_mean(queue), p99_queue_delay_s=_pct(queue, 99),
        makespan_s=float(makespan), total_preemptions=sum(js.preemptions for js in states),
        avg_flow_time_s=_mean(jcts), max_flow_time_s=_max(jcts), avg_stretch=_mean(stretch), max_stretch=_max(stretch),
        n_user_jobs=len(groups), avg_job_flow_time_s=_mean(g_flow), max_job_flow_time_s=_max(g_flow),
        avg_job_stretch=_mean(g_stretch), max_job_stretch=_max(g_stretch),
        gpu_util=float(gpu_u), cpu_util=float(cpu_u), mem_util=float(mem_u), volume_util=float(vol_u),
        energy_cost=energy, tardiness_cost=penalty, total_cost=energy + penalty, avg_tardiness_s=_mean(tard),
        max_tardiness_s=_max(tard), n_late=sum(1 for t in tard if t > 0),
        lost_work_s=float(sum(js.lost_work for js in states)),
        avg_wait_s=_mean(waits), p50_wait_s=_pct(waits, 50), avg_exec_jct_s=_mean(exec_jct),
        busy_gpu_util=float(busy_u), n_ooms=sum(js.ooms for js in states))


def metrics_from_result(result: Any, **kwargs: Any) -> SimMetrics:
    """:func:`compute_metrics` of a simulator result (anything with ``finished``, ``unfinished``, ``usage`` and
    ``cluster``); keyword arguments as for :func:`compute_metrics`."""
    kwargs.setdefault("busy", getattr(result, "busy", None))
    return compute_metrics(list(result.finished) + list(result.unfinished), result.usage, result.cluster, **kwargs)
