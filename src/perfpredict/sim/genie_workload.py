"""GENIE (seed 003) workloads, platform and metrics, following §7.1 and Table 3 and named after them.

Table 3 task queues (:func:`genie_trace`)
    *Stated*: six model types (AlexNet, GoogleNet, ResNet50, Inception-v3, Regularized LSTM, Seq2seq); 50%
    training and 50% inference; QoS classes Urgent/Prior/Normal in proportions 5/35/60; Poisson arrivals of 5,
    10 or 20 tasks per hour over 24 hours; "model type, calculation type, and application configurations (such
    as batch size and number of iterations) are generated with uniform distribution".

    *Assumed* (the paper gives no values), each drawn independently per task:

    - the model type uniformly; the calculation type and the QoS class in exact proportions (largest remainder,
      shuffled), so that every queue has Table 3's split;
    - the global batch size uniformly from 8, 16, 32, 64, 128 (the batch sizes the rate curves were measured at);
    - the number of iterations uniformly in [10 000, 500 000]: with the measured rates the mean single-GPU
      latency is about 1.1 h, so the offered load on 16 GPUs goes from about a third (5 tasks/h) to about 1.4
      (20 tasks/h) of the cluster, the span over which the paper sees QoS degrade (§7.2.2);
    - the GPUs the user asks for, uniformly 1, 2 or 4 (a node's worth at most): what the black-box baselines
      allocate (Table 2's task has no such field; SWAF and the Tetris variants choose their own placement).

    A task is a :class:`~perfpredict.sched.job.Job` with ``model = genie/<type>/<train|infer>/b<batch>``, ``task``
    its model type, ``qos`` its class, ``deadline`` its absolute ECT (arrival + eq. 9), ``gpus`` the request and
    ``work`` its reference seconds (:mod:`perfpredict.sched.genie`).

Platform (:func:`genie_cluster`)
    §7.1 / Table 1: 4 nodes × 4 GPUs (2 × 10-core CPUs and 64 GB per node); "16-128 GPUs" at scale (§7.3) as
    4, 8, 16 and 32 such nodes. The GPUs are H100s: the rate curves were measured on one.

Metrics (:func:`genie_metrics`, §7.1)
    QoS-guarantee percentage ``Q = NUM_comp / NUM_task`` (eq. 14: tasks completed by their ECT over all tasks;
    an unfinished task has not met it); makespan (last completion − first arrival); average normalised latency
    (eq. 15-16), ``L_wall / Lat(t, ⟨1,1⟩)`` with ``L_wall`` "the walltime of task t_i under a selected placement
    during runtime" (eq. 16): completion − start, the run under the placement the scheduler chose, ν included,
    queueing excluded. The paper's reading of Fig. 13(c) needs this: Tetris+Perf "can identify the most effective
    placement solutions" (the lowest normalised latency) although its tasks wait longest (§7.2.1). The response
    time normalised the same way (completion − arrival, waiting included) is ``avg_norm_response``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from perfpredict.sched.cluster import MAX_TRACE_JOBS, ClusterSpec
from perfpredict.sched.genie import (
    QOS_CLASSES,
    GeniePerfModel,
    ect_offset,
    genie_model_key,
    meets_ect,
    parse_model_key,
    task_ect,
)
from perfpredict.sched.genie_cards import DEFAULT_BATCHES, GENIE_TYPES, genie_model
from perfpredict.sched.job import Job, JobState
from perfpredict.sim.spec_options import spec_options

__all__ = ["DEFAULT_ITERATIONS", "DEFAULT_MIX", "DEFAULT_REQUESTS", "cluster_from_spec", "describe_trace",
           "genie_cluster", "genie_metrics", "genie_trace", "lat_single", "trace_from_spec"]

#: Table 3: Urgent / Prior / Normal, percent
DEFAULT_MIX = (5.0, 35.0, 60.0)
#: assumed: iterations ~ U[lo, hi] (see the module docstring)
DEFAULT_ITERATIONS = (10_000, 500_000)
#: assumed: GPUs a user asks for
DEFAULT_REQUESTS = (1, 2, 4)
_PRIORITY = {"urgent": 2, "prior": 1, "normal": 0}


def genie_cluster(nodes: int = 4, gpus_per_node: int = 4) -> ClusterSpec:
    """``nodes`` GENIE nodes (Table 1's: 4 GPUs, 20 CPU cores, 64 GB), H100 GPUs."""
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError(f"need nodes >= 1 and gpus_per_node >= 1, got {nodes}, {gpus_per_node}")
    return ClusterSpec.homogeneous(nodes, gpus=gpus_per_node, cpus=20, mem_gb=64.0, gpu_type="H100", gpu_mem_gb=80.0,
                                   name=f"genie-{nodes}x{gpus_per_node}")


def _exact(fractions: Sequence[float], n: int, rng: np.random.Generator) -> np.ndarray:
    """Labels 0..k-1 in exact proportions (largest remainder), shuffled."""
    f = np.asarray(fractions, dtype=float)
    if f.ndim != 1 or f.size == 0 or np.any(f < 0) or not np.all(np.isfinite(f)) or f.sum() <= 0:
        raise ValueError(f"proportions must be non-negative and not all zero, got {list(fractions)}")
    f = f / f.sum()
    counts = np.floor(f * n).astype(int)
    rest = n - counts.sum()
    counts[np.argsort(-(f * n - counts), kind="stable")[:rest]] += 1
    labels = np.repeat(np.arange(f.size), counts)
    rng.shuffle(labels)
    return labels


def genie_trace(rate_per_hour: float = 10.0, hours: float = 24.0, *, mix: Sequence[float] = DEFAULT_MIX,
                training_share: float = 0.5, batches: Sequence[int] = DEFAULT_BATCHES,
                iterations: tuple[int, int] = DEFAULT_ITERATIONS, requests: Sequence[int] = DEFAULT_REQUESTS,
                types: Sequence[str] | None = None, seed: int = 0) -> list[Job]:
    """A Table 3 task queue: Poisson arrivals at ``rate_per_hour`` over ``hours`` (see the module docstring).

    ``mix``: Urgent/Prior/Normal proportions; ``training_share``: fraction of training tasks. Job ids are
    arrival indices."""
    if not (rate_per_hour > 0 and math.isfinite(rate_per_hour)) or not (hours > 0 and math.isfinite(hours)):
        raise ValueError(f"need rate_per_hour > 0 and hours > 0 (finite), got {rate_per_hour}, {hours}")
    if rate_per_hour * hours > MAX_TRACE_JOBS:  # the arrival loop would run (and allocate) for ever
        raise ValueError(f"rate x hours = {rate_per_hour * hours:,.0f} tasks, more than the {MAX_TRACE_JOBS:,} a "
                         "generated trace may have")
    if not 0 <= training_share <= 1:
        raise ValueError(f"training_share must be in [0, 1], got {training_share}")
    lo, hi = (int(x) for x in iterations)
    if not 1 <= lo <= hi:
        raise ValueError(f"iterations must be (lo, hi) with 1 <= lo <= hi, got {iterations}")
    if len(mix) != 3:
        raise ValueError(f"mix is three proportions (urgent, prior, normal), got {list(mix)}")
    if not batches or any(not 1 <= b <= 2**31 for b in batches) or not requests \
            or any(not 1 <= r <= 2**31 for r in requests):
        raise ValueError("batches and requests must be non-empty lists of whole numbers from 1 to 2^31")
    names = list(types) if types is not None else list(GENIE_TYPES)
    for t in names:
        if t not in GENIE_TYPES:
            raise ValueError(f"unknown model type {t!r}; Table 3's are {', '.join(GENIE_TYPES)}")
    arr_rng, type_rng, mode_rng, qos_rng, bat_rng, it_rng, req_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(7))
    horizon = hours * 3600.0
    arrivals: list[float] = []
    t = arr_rng.exponential(3600.0 / rate_per_hour)
    while t < horizon:
        arrivals.append(float(t))
        t += arr_rng.exponential(3600.0 / rate_per_hour)
    n = len(arrivals)
    kinds = type_rng.integers(len(names), size=n)
    training = _exact([training_share, 1 - training_share], n, mode_rng) == 0
    qos = _exact(mix, n, qos_rng)
    bats = bat_rng.choice(np.asarray(batches, dtype=int), size=n)
    iters = it_rng.integers(lo, hi + 1, size=n)
    reqs = req_rng.choice(np.asarray(requests, dtype=int), size=n)
    jobs = []
    for i in range(n):
        ttype, tr, b, g = names[int(kinds[i])], bool(training[i]), int(bats[i]), int(reqs[i])
        m = genie_model(ttype, tr, float(b))
        samples = float(b) * float(iters[i])
        work = samples / m.reference_pr(g)
        cls = QOS_CLASSES[int(qos[i])]
        lat11 = samples / m.pr_split([1]) + m.nu_s
        jobs.append(Job(id=str(i), arrival=round(arrivals[i], 3), gpus=float(g), work=work,
                        model=genie_model_key(ttype, tr, b), task=ttype, qos=cls, priority=_PRIORITY[cls],
                        deadline=round(arrivals[i], 3) + ect_offset(cls, lat11)))
    return jobs


def _states(x: Any) -> list[JobState]:
    if hasattr(x, "finished") and hasattr(x, "unfinished"):
        return list(x.finished) + list(x.unfinished)
    return list(x)


def lat_single(js: JobState) -> float:
    """``Lat(t, ⟨1,1⟩)`` of a task (eq. 4 on one GPU)."""
    m = js.perf
    if isinstance(m, GeniePerfModel):
        return m.lat_single(js.job)
    return js.job.work * m.gpu_factor(js.job.gpus, 1.0)


def _ect_or_none(js: JobState) -> float | None:
    """The ECT SWAF and Min-Min schedule by (:func:`~perfpredict.sched.genie.task_ect`: the trace's deadline, else
    arrival + eq. 9 of the task's QoS class); None for a task that has neither (no deadline, and not a GENIE model
    or a class eq. 9 does not know, which a mechanism that never reads ECTs runs all the same): it meets none."""
    try:
        return task_ect(js)
    except ValueError:
        return None


def genie_metrics(result_or_states: Any) -> dict[str, Any]:
    """§7.1's metrics of a simulation (a :class:`~perfpredict.sim.simulator.SimResult` or job states).

    ``qos_guarantee``: eq. 14 over every task (``nan`` without tasks); ``qos_by_class``: the same per class;
    ``makespan_s``; ``avg_norm_latency``: eq. 15-16 over the finished tasks (run walltime, start to completion,
    over ``Lat(t, ⟨1,1⟩)``); ``avg_norm_response``: completion − arrival over ``Lat(t, ⟨1,1⟩)``."""
    states = _states(result_or_states)
    n = len(states)
    ects = [_ect_or_none(js) for js in states]
    met = [js.finish is not None and e is not None and meets_ect(js.finish, e)
           for js, e in zip(states, ects, strict=True)]
    done = [js for js in states if js.finish is not None]
    by_class: dict[str, float] = {}
    for c in QOS_CLASSES:
        idx = [i for i, js in enumerate(states) if (js.job.qos or "normal").lower() == c]
        by_class[c] = float(np.mean([met[i] for i in idx])) if idx else math.nan
    # eq. 16: L_wall is the task's walltime under its placement (start to completion, ν included)
    if any(js.first_start is None for js in done):
        raise ValueError("a finished task without a start time: eq. 16's walltime needs JobState.first_start")
    norm = [(js.finish - js.first_start) / lat_single(js) for js in done]  # type: ignore[operator]
    norm_resp = [(js.finish - js.job.arrival) / lat_single(js) for js in done]  # type: ignore[operator]
    first = min((js.job.arrival for js in states), default=math.nan)
    makespan = max(js.finish for js in done) - first if done else math.nan  # type: ignore[type-var]
    return {"n_tasks": n, "n_finished": len(done), "n_met": int(sum(met)),
            "qos_guarantee": float(np.mean(met)) if n else math.nan, "qos_by_class": by_class,
            "makespan_s": float(makespan), "avg_norm_latency": float(np.mean(norm)) if norm else math.nan,
            "avg_norm_response": float(np.mean(norm_resp)) if norm_resp else math.nan,
            "avg_jct_s": float(np.mean([js.finish - js.job.arrival for js in done]))  # type: ignore[operator]
            if done else math.nan}


def _ints(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("/") if x)


def _floats(v: str) -> tuple[float, ...]:
    return tuple(float(x) for x in v.split("/") if x)


def cluster_from_spec(spec: str) -> ClusterSpec:
    """``genie[:nodes=4,gpus=4]``."""
    kv = spec_options(spec, {"nodes": int, "gpus": int})
    return genie_cluster(kv.get("nodes", 4), kv.get("gpus", 4))


def trace_from_spec(spec: str, seed: int = 0) -> list[Job]:
    """``genie[:rate=10,hours=24,mix=5/35/60,train=0.5,batches=8/16/32/64/128,iters=10000/500000,
    requests=1/2/4,seed=]`` (Table 3)."""
    kv = spec_options(spec, {"rate": float, "hours": float, "mix": _floats, "train": float, "batches": _ints,
                         "iters": _ints, "requests": _ints, "seed": int})
    iters = kv.get("iters", DEFAULT_ITERATIONS)
    if len(iters) != 2:
        raise ValueError(f"iters is LO/HI, got {iters}")
    return genie_trace(kv.get("rate", 10.0), kv.get("hours", 24.0), mix=kv.get("mix", DEFAULT_MIX),
                       training_share=kv.get("train", 0.5), batches=kv.get("batches", DEFAULT_BATCHES),
                       iterations=(iters[0], iters[1]), requests=kv.get("requests", DEFAULT_REQUESTS),
                       seed=kv.get("seed", seed))


def describe_trace(jobs: Iterable[Job], total_gpus: int | None = None, hours: float | None = None) -> dict[str, Any]:
    """Counts by class, calculation type and model type, the mean single-GPU latency ``Lat(t, ⟨1,1⟩)`` (h) and,
    given the cluster's GPUs and the arrival window, the offered load (single-GPU hours asked per GPU-hour)."""
    js = list(jobs)
    out: dict[str, Any] = {"n": len(js)}
    out["qos"] = {c: sum(1 for j in js if j.qos == c) for c in QOS_CLASSES}
    out["training"] = sum(1 for j in js if "/train/" in j.model)
    out["types"] = {t: sum(1 for j in js if j.task == t) for t in GENIE_TYPES}
    lat = [genie_model(*parse_model_key(j.model)).lat_single(j) for j in js]
    out["mean_lat_single_h"] = float(np.mean(lat)) / 3600 if lat else math.nan
    if total_gpus and hours:
        out["offered_load"] = float(np.sum(lat)) / (total_gpus * hours * 3600.0)
    return out
