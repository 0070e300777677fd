"""Horus (seed 004) workloads and clusters, following the paper's recipe (§5) and named after it, on jobs
perfpredict measured on an H100.

Jobs (:func:`horus_jobs_table`)
    Every job is one of perfpredict's measured training points: a zoo architecture at one batch size from
    ``datasets/cuda_h100.csv`` (zoo architectures × batch 8-128 on an H100 80GB). What the job *really* does in
    the simulation is what was measured for that point: its solo GPU utilisation (NVML, Horus's definition)
    and its device memory (NVML process memory: the CUDA context plus everything the caching allocator
    reserved). What the schedulers *see* is what perfpredict's Predictor (``trained_models/cuda_h100``)
    predicts from the architecture's graph features (``datasets/zoo_features.csv``): the GPU utilisation
    (median) and the device memory to reserve — the Predictor's NVML-process-memory target (CUDA context +
    the allocator's reserve), its q90 "safe" value or, with ``memory="median"``, its median. (Model sets
    trained before that target existed fall back to peak allocated memory plus the CUDA context δ of Horus
    eq. 2, a device constant: the median NVML process memory above what torch reserved, 0.79 GB here.) Prediction error therefore has consequences: a job
    whose memory is under-predicted can run out of memory next to another; one whose utilisation is
    mispredicted is co-located where it should not be.

    The Predictor was trained on these very points, so what the schedulers see is close to the truth (utilisation
    MAE 0.006). ``predictions="family-cv"`` gives the honest case, a job of a kind never seen before: for each
    architecture family, the shipped estimators (same kinds and hyper-parameters, ``metadata.json``'s
    ``point_kind``) refitted on every *other* family's rows predict that family's points
    (:func:`family_cv_predictions`). ``predictions="paper-mix"`` is the paper's testbed (§5, l. 319: "50 percent
    new DL jobs not used in predictor training"): the estimators refitted without half of the architectures
    (:func:`paper_mix_predictions`).

Testbed workloads (:func:`horus_trace`, ``workload="small"`` / ``"large"``): W-Small and W-Large
    *Stated* (§5.2): 100 single-GPU jobs per run, "job type distributions between 3 minutes to 2 hours
    following DL job sizes derived from production systems"; jobs are short (≤ 800 s) or long, light (< 60 %
    GPU utilisation) or heavy; W-Small has "a higher proportion of short and small jobs", W-Large is "long with
    diverse utilization"; "JCT was controlled by terminating jobs at specified epoch numbers"; 12 GPUs.

    *Assumed* (the paper gives no more): W-Small is 70 % short and 30 % heavy, W-Large 70 % long and 50 %
    heavy; durations log-uniform in [180, 800] s (short) or (800, 7200] s (long); a job's point drawn
    uniformly among the measured points of its class (light/heavy by the measured utilisation); its epochs
    the duration over its measured epoch time (50,000 samples per epoch, CIFAR-10's training set, at its
    measured iteration time), at least one, which sets its checkpoint granularity; arrivals a Poisson
    process, one job every ``interarrival_s`` (36 s) on average, so the 100 jobs arrive within about an hour
    and a queue forms, as in the testbed (FIFO's makespan there is about 1.5× the ideal). ``interarrival_s=0``
    enqueues the whole workload at once (the other reading of §5.2's "makespan ... from en-queuing").

At scale (:func:`horus_trace`, ``workload="scale"``; :func:`horus_cluster` ``"scale"``)
    *Stated*: 128 nodes × 8 GPUs, 128 CPU cores and 512 GB each; jobs with the GPU counts and execution times
    of a production trace (not public). *Assumed*: W-Large's job mix, GPU demands from
    :data:`perfpredict.sim.traces.PHILLY_LIKE_GPU_DEMAND` (1-16 GPUs), Poisson arrivals at an offered load
    ``load`` (1.3) of the cluster's GPUs (exclusive GPU-seconds asked per second) for ``n`` jobs.

Clusters (:func:`horus_cluster`)
    ``testbed``: 3 nodes × 4 GPUs (§5.1: 12 GPUs, 4 per node, a 12-core/24-thread CPU and 128 GB each) — of
    the H100 80GB type the jobs were measured on (the paper's were RTX 2080s); ``scale``: 128 × 8.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from perfpredict.sched.cluster import MAX_SERVERS, MAX_TRACE_JOBS, ClusterSpec, ServerSpec
from perfpredict.sched.job import Job
from perfpredict.sched.perf import PerfModel

__all__ = ["HORUS_WORKLOADS", "PREDICTIONS", "HorusPoint", "cluster_from_spec", "family_cv_predictions",
           "horus_cluster", "horus_jobs_table", "horus_perf_models", "horus_sharing", "horus_trace", "horus_truth",
           "is_horus_model", "perf_models_from_spec", "prepare_sharing", "trace_from_spec"]

REPO = Path(__file__).resolve().parents[3]
#: Samples per epoch (CIFAR-10's training set), for the epoch count of a job.
SAMPLES_PER_EPOCH = 50_000
#: §5.2: short jobs run at most 800 s, light jobs use less than 60 % of the GPU.
SHORT_S, HEAVY_UTIL = 800.0, 0.6
MIN_S, MAX_S = 180.0, 7200.0
#: workload -> (share of short jobs, share of heavy jobs); see the module docstring
HORUS_WORKLOADS: dict[str, tuple[float, float]] = {"small": (0.7, 0.3), "large": (0.3, 0.5), "scale": (0.3, 0.5)}


@lru_cache(maxsize=None)
def h100_memory_gb(meta: Path = REPO / "datasets" / "cuda_h100.meta.json") -> float:
    """The device memory (decimal GB, the unit the simulator's jobs are in) of the GPU a dataset was measured
    on, as its provenance recorded it (torch's total memory: 85.0 GB for the "H100 80GB", 80 GiB less the
    driver's reserve). A constant of 80 GB gave the simulated H100 6% less memory than the one the jobs' memory
    was measured on, and less than ``perfpredict colocate`` fits a pair to."""
    runs = json.loads(meta.read_text())["runs"]
    sizes = {r["device_info"]["memory_bytes"] for r in runs if (r.get("device_info") or {}).get("memory_bytes")}
    if len(sizes) != 1:
        raise ValueError(f"{meta} records {len(sizes)} device memory sizes, not one: {sorted(sizes)}")
    return sizes.pop() / 1e9


MODEL_SEP = "@b"
#: what the schedulers see: the shipped Predictor (trained on these points), leave-one-family-out refits, or
#: the paper's testbed mix (§5, l. 319: "50 percent new DL jobs not used in predictor training")
PREDICTIONS = ("trained", "family-cv", "paper-mix")
#: share of architectures kept out of training for ``paper-mix``
PAPER_UNSEEN_SHARE = 0.5
MODEL_SET = "cuda_h100"


@dataclass(frozen=True)
class HorusPoint:
    """One measured training point and what the Predictor says about it (memory in GB, decimal)."""

    model: str  # "<config>@b<batch>"
    config: str
    family: str
    batch: int
    util: float  # measured solo GPU utilisation
    mem_gb: float  # measured device memory (NVML process memory)
    iter_time_s: float
    pred_util: float
    pred_mem_gb: float  # reserved by the schedulers: predicted device memory (safe q90 or median)
    pred_mem_median_gb: float

    @property
    def epoch_s(self) -> float:
        return SAMPLES_PER_EPOCH / self.batch * self.iter_time_s


def is_horus_model(name: str) -> bool:
    return MODEL_SEP in name


def horus_jobs_table(memory: str = "safe", dataset: str | None = None, features: str | None = None,
                     models_dir: str | None = None, predictions: str = "trained") -> tuple[HorusPoint, ...]:
    """Every measured point with its predictions (see the module docstring); cached per process.
    ``predictions``: ``trained`` (the shipped Predictor), ``family-cv`` (each family predicted by the shipped
    estimators refitted without it) or ``paper-mix`` (refitted without half of the architectures, §5)."""
    if memory not in ("safe", "median"):
        raise ValueError(f"memory must be 'safe' or 'median', got {memory!r}")
    if predictions not in PREDICTIONS:
        raise ValueError(f"predictions must be one of {', '.join(PREDICTIONS)}, got {predictions!r}")
    return _jobs_table(memory, dataset, features, models_dir, predictions)


def _paths(dataset: str | None, features: str | None) -> tuple[Path, Path]:
    return (Path(dataset) if dataset else REPO / "datasets" / "cuda_h100.csv",
            Path(features) if features else REPO / "datasets" / "zoo_features.csv")


@lru_cache(maxsize=8)
def _jobs_table(memory: str, dataset: str | None, features: str | None, models_dir: str | None,
                predictions: str) -> tuple[HorusPoint, ...]:
    from perfpredict.estimators.arch import from_table_row

    ds, fs = _paths(dataset, features)
    with open(ds, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["status"] == "ok" and r.get("gpu_utilization")]
    with open(fs, newline="") as f:
        archs = {r["config"]: from_table_row(r) for r in csv.DictReader(f)}
    ctx = [float(r["nvml_process_bytes"]) - float(r["cuda_reserved_bytes"]) for r in rows
           if r.get("nvml_process_bytes") and r.get("cuda_reserved_bytes")]
    delta_gb = float(np.median(ctx)) / 1e9 if ctx else 0.0
    by_config: dict[str, list[dict]] = {}
    for r in rows:
        by_config.setdefault(r["config"], []).append(r)
    if predictions in ("family-cv", "paper-mix"):
        cv = (family_cv_predictions(str(ds), str(fs), models_dir) if predictions == "family-cv"
              else paper_mix_predictions(str(ds), str(fs), models_dir))

        def values(config: str, batches: list[int]) -> dict | None:
            pts = [cv.get((config, b)) for b in batches]
            if any(p is None for p in pts):
                return None
            return {t: {"median": [p[t][0] for p in pts], "q90": [p[t][1] for p in pts]} for t in pts[0]}
    else:
        from perfpredict.predictor import Predictor

        pred = Predictor.load(models_dir)

        def values(config: str, batches: list[int]) -> dict | None:
            return pred.predict_values(archs[config], batches, device_type=MODEL_SET)
    out: list[HorusPoint] = []
    for config, rs in sorted(by_config.items()):
        if config not in archs:
            continue
        batches = sorted(int(r["batch_size"]) for r in rs)
        v = values(config, batches)
        if v is None:
            continue
        for r in rs:
            i = batches.index(int(r["batch_size"]))
            if "device_memory" in v:  # predicted directly: what NVML will see, context included
                med = v["device_memory"]["median"][i]
                safe, ctx_gb = max(v["device_memory"]["q90"][i], med), 0.0
            else:
                med = v["peak_memory"]["median"][i]
                safe, ctx_gb = max(v["peak_memory"]["q90"][i], med), delta_gb
            out.append(HorusPoint(
                model=f"{config}{MODEL_SEP}{int(r['batch_size'])}", config=config, family=r["family"],
                batch=int(r["batch_size"]), util=float(r["gpu_utilization"]),
                mem_gb=float(r["nvml_process_bytes"]) / 1e9, iter_time_s=float(r["iter_time_s"]),
                pred_util=float(v["gpu_utilization"]["median"][i]),
                pred_mem_gb=(safe if memory == "safe" else med) / 1e9 + ctx_gb,
                pred_mem_median_gb=med / 1e9 + ctx_gb))
    return tuple(out)


def family_cv_predictions(dataset: str, features: str, models_dir: str | None = None
                          ) -> dict[tuple[str, int], dict[str, tuple[float, float]]]:
    """Leave-one-family-out predictions of every point of ``dataset``: (config, batch) -> target ->
    (median, q90), for GPU utilisation and device memory (peak memory for model sets without it).

    For each family, the estimators shipped in ``models_dir``'s ``cuda_h100`` set (the kind its
    ``metadata.json`` names as ``point_kind``, built by :mod:`perfpredict.estimators` with the same
    hyper-parameters) are refitted on all other families' rows and predict this family's points, as the
    Predictor would (quantiles sorted, utilisation clipped). A family's predictions therefore do not depend on
    its own measurements. Deterministic; cached per process (about 17 s on 2 cores for 11 families)."""
    return _cached_refit("family-cv", _cache_key(dataset, features, models_dir), _family_cv_refit)


def _cache_key(dataset: str, features: str, models_dir: str | None) -> tuple[str, str, str | None]:
    """One spelling per set of files, so that the caches below are not missed (and a refit paid again) because
    one caller passed ``models_dir`` and another left it out, or spelled a path differently."""
    return (str(Path(dataset).resolve()), str(Path(features).resolve()),
            None if models_dir is None else str(Path(models_dir).resolve()))


#: Refitted predictions by (kind, dataset, features, models_dir): a refit takes ~17 s on 2 cores, so it is made
#: once per process, and handed to worker processes, which start empty (:func:`refit_cache_entries`).
_REFITS: dict[tuple[str, str, str, str | None], dict[tuple[str, int], dict[str, tuple[float, float]]]] = {}
_MAX_REFITS = 8


def _cached_refit(kind: str, key: tuple[str, str, str | None], compute: Callable[..., dict]) -> dict:
    k = (kind, *key)
    if k not in _REFITS:
        value = compute(*key)
        while len(_REFITS) >= _MAX_REFITS:
            _REFITS.pop(next(iter(_REFITS)))
        _REFITS[k] = value
    return _REFITS[k]


def refit_cache_entries() -> dict:
    """This process's refitted predictions, to seed a worker process with (:func:`prime_refit_cache`):
    ``perfpredict compare -j`` workers each paid the family-CV refit again before."""
    return dict(_REFITS)


def prime_refit_cache(entries: dict) -> None:
    """Take refitted predictions made in another process (:func:`refit_cache_entries`); entries already here stay."""
    for k, v in entries.items():
        if k not in _REFITS and len(_REFITS) < _MAX_REFITS:
            _REFITS[k] = v


def _family_cv_refit(dataset: str, features: str, models_dir: str | None
                     ) -> dict[tuple[str, int], dict[str, tuple[float, float]]]:
    from perfpredict.estimators.data import load_training_data

    data = load_training_data(dataset, features)
    fams = data.families
    shipped = _shipped_targets(models_dir)

    def widening(name: str, fam: str) -> dict[str, float]:  # the calibration fitted on the *other* families
        cal = shipped[name].get("evaluation", {}).get("interval_calibration", {})
        if "margin_by_held_out_family" in cal:
            return {"margin": cal["margin_by_held_out_family"].get(fam, 0.0)}
        return {"scale": cal.get("scale_by_held_out_family", {}).get(fam, 1.0)}  # sets trained before the margin

    folds = [(fams != f, np.flatnonzero(fams == f), lambda name, f=str(f): widening(name, f))
             for f in sorted(set(fams.tolist()))]
    return _refit_predictions(data, shipped, folds)


def _shipped_targets(models_dir: str | None) -> dict:
    from perfpredict.predictor import default_models_dir

    root = Path(models_dir) if models_dir else default_models_dir()
    return json.loads((root / MODEL_SET / "metadata.json").read_text())["targets"]


def _refit_predictions(data, shipped: dict, folds) -> dict[tuple[str, int], dict[str, tuple[float, float]]]:
    """(config, batch) -> target -> (median, q90) for GPU utilisation and device memory (peak memory for model
    sets without it). Each fold ``(train rows mask, test row indices, interval widening by target)`` refits the
    shipped estimator kinds (``metadata.json``'s ``point_kind``, same hyper-parameters) on its training rows
    that have the target and predicts its test rows as the Predictor would: quantiles sorted, utilisation
    clipped, memory's q90 widened as the fold's calibration says (:func:`~perfpredict.estimators.evaluate.
    calibrated`'s keyword arguments)."""
    from perfpredict.estimators.evaluate import aux_values, calibrated, valid_rows
    from perfpredict.estimators.targets import targets_for

    mem_target = "device_memory" if "device_memory" in shipped else "peak_memory"
    out: dict[tuple[str, int], dict[str, tuple[float, float]]] = {
        (str(c), int(b)): {} for c, b in zip(data.configs, data.batch)}
    for name in ("gpu_utilization", mem_target):
        spec, kind = targets_for("cuda")[name], shipped[name]["point_kind"]
        y, aux = data.column(spec.column), aux_values(data, spec)
        valid = valid_rows(data, spec)
        for train_mask, test, widening_of in folds:
            train = valid & train_mask
            X, yt, Xt = data.X[train], y[train], data.X[test]
            at = None if aux is None else aux[train]
            med = spec.from_model(spec.fit_model(spec.make_model(kind), X, yt, at).predict(Xt), Xt)
            q90 = med  # the schedulers use the median utilisation only
            if name == mem_target:
                q = np.sort(spec.from_model(spec.fit_model(spec.make_quantile_model(kind), X, yt, at).predict(Xt),
                                            Xt), axis=1)
                q90 = calibrated(q, **widening_of(name))[:, -1]
            for j, i in enumerate(test):
                out[(str(data.configs[i]), int(data.batch[i]))][name] = (float(med[j]), float(q90[j]))
    return out


def unseen_architectures(configs, share: float = PAPER_UNSEEN_SHARE) -> frozenset[str]:
    """The architectures kept out of training for ``paper-mix``: the first ``share`` of them in the order of
    their names' SHA-256 (deterministic, and blind to what they measure)."""
    import hashlib

    names = sorted(set(map(str, configs)), key=lambda c: hashlib.sha256(c.encode()).hexdigest())
    return frozenset(names[: int(round(share * len(names)))])


def paper_mix_predictions(dataset: str, features: str, models_dir: str | None = None
                          ) -> dict[tuple[str, int], dict[str, tuple[float, float]]]:
    """Predictions for the Horus testbed's mix: the shipped estimator kinds refitted on the rows of the half of
    the architectures that :func:`unseen_architectures` does not pick, predicting every point. Half the jobs
    are then new to the predictor (their family may not be), as in seed 004 §5; the other half are its
    training points. Same format as :func:`family_cv_predictions`; memory's q90 widened by the shipped
    interval calibration, as the Predictor does. Cached per process."""
    return _cached_refit("paper-mix", _cache_key(dataset, features, models_dir), _paper_mix_refit)


def _paper_mix_refit(dataset: str, features: str, models_dir: str | None
                     ) -> dict[tuple[str, int], dict[str, tuple[float, float]]]:
    from perfpredict.estimators.data import load_training_data

    data = load_training_data(dataset, features)
    shipped = _shipped_targets(models_dir)
    unseen = unseen_architectures(data.configs)
    seen = np.array([str(c) not in unseen for c in data.configs])
    folds = [(seen, np.arange(len(data.configs)), lambda name: _shipped_widening(shipped[name]))]
    return _refit_predictions(data, shipped, folds)


def _shipped_widening(target: dict) -> dict[str, float]:
    """The interval widening a shipped target's metadata says the Predictor applies."""
    return {"margin": float(target.get("interval_log_margin", 0.0)),
            "scale": float(target.get("interval_scale", 1.0))}


def horus_perf_models(memory: str = "safe", predictions: str = "trained") -> dict[str, PerfModel]:
    """A perf model per measured point: no CPU/memory sensitivity (single-GPU jobs), the *predicted* GPU
    utilisation and device memory (``predictions``: see :func:`horus_jobs_table`)."""
    source = "predicted" if predictions == "trained" else f"predicted ({predictions})"
    return {p.model: PerfModel(p.model, device_mem_gb=p.pred_mem_gb, gpu_util=p.pred_util, source=source)
            for p in horus_jobs_table(memory, predictions=predictions)}


def horus_truth() -> dict[str, tuple[float, float]]:
    """model -> (measured solo GPU utilisation, measured device memory GB)."""
    return {p.model: (p.util, p.mem_gb) for p in horus_jobs_table("safe")}


def horus_sharing(interference: str = "measured", *, oom_delay_s: float = 30.0, record: bool = False):
    """The simulator's :class:`~perfpredict.sim.sharing.Sharing` for these jobs: measured utilisation and memory,
    slowdown from ``interference`` (``measured``: perfpredict's H100 refit, the truth for H100 jobs)."""
    from perfpredict.sim.sharing import Sharing, slowdown_model

    return Sharing(slowdown=slowdown_model(interference), truth=horus_truth(), oom_delay_s=oom_delay_s,
                   record=record)


def horus_cluster(kind: str = "testbed", *, gpu_mem_gb: float | None = None) -> ClusterSpec:
    """``testbed``: 3 nodes × 4 GPUs, 24 CPUs and 128 GB each; ``scale``: 128 × 8, 128 CPUs and 512 GB. Each
    GPU holds ``gpu_mem_gb``, by default the measured H100's (:func:`h100_memory_gb`)."""
    gpu_mem_gb = h100_memory_gb() if gpu_mem_gb is None else gpu_mem_gb
    if kind == "testbed":
        srv = ServerSpec(gpus=4, cpus=24, mem_gb=128.0, gpu_type="H100", gpu_mem_gb=gpu_mem_gb)
        return ClusterSpec((srv,) * 3, name="horus-testbed (3x4 H100)")
    if kind == "scale":
        srv = ServerSpec(gpus=8, cpus=128, mem_gb=512.0, gpu_type="H100", gpu_mem_gb=gpu_mem_gb)
        return ClusterSpec((srv,) * 128, name="horus-scale (128x8 H100)")
    raise ValueError(f"unknown Horus cluster {kind!r}; use testbed or scale")


def horus_trace(workload: str = "large", n: int | None = None, *, seed: int = 0, interarrival_s: float = 36.0,
                load: float = 1.3, gpus_total: int = 1024) -> list[Job]:
    """W-Small / W-Large (``n`` = 100 by default) or the at-scale trace (``n`` = 4000; see the module
    docstring). Jobs name their measured point as ``model``; ``task`` is the architecture family."""
    if workload not in HORUS_WORKLOADS:
        raise ValueError(f"unknown Horus workload {workload!r}; use {', '.join(HORUS_WORKLOADS)}")
    n = n if n is not None else (4000 if workload == "scale" else 100)
    if not 1 <= n <= MAX_TRACE_JOBS:
        raise ValueError(f"need from 1 to {MAX_TRACE_JOBS:,} jobs, got n={n}")
    if not (math.isfinite(interarrival_s) and interarrival_s >= 0):
        raise ValueError(f"interarrival must be >= 0 seconds (0: all jobs at once), got {interarrival_s!r}")
    if not (math.isfinite(load) and load > 0) or gpus_total < 1:
        raise ValueError(f"need load > 0 and gpus >= 1, got load={load!r}, gpus={gpus_total!r}")
    p_short, p_heavy = HORUS_WORKLOADS[workload]
    pts = horus_jobs_table()
    heavy = [p for p in pts if p.util >= HEAVY_UTIL]
    light = [p for p in pts if p.util < HEAVY_UTIL]
    rng = np.random.default_rng(seed)
    r_kind, r_dur, r_pick, r_arr, r_gpu = (np.random.default_rng(s) for s in rng.integers(0, 2**63 - 1, 5))
    is_short = r_kind.random(n) < p_short
    is_heavy = r_kind.random(n) < p_heavy
    lo = np.where(is_short, math.log(MIN_S), math.log(SHORT_S))
    hi = np.where(is_short, math.log(SHORT_S), math.log(MAX_S))
    dur = np.exp(lo + (hi - lo) * r_dur.random(n))
    if workload == "scale":
        from perfpredict.sim.traces import PHILLY_LIKE_GPU_DEMAND

        sizes = np.array(sorted(PHILLY_LIKE_GPU_DEMAND))
        probs = np.array([PHILLY_LIKE_GPU_DEMAND[s] for s in sizes])
        gpus = r_gpu.choice(sizes, size=n, p=probs / probs.sum())
        # offered load: GPU-seconds asked per second over the cluster's GPUs
        mean_demand = float(np.mean(dur * gpus))
        rate = load * gpus_total / mean_demand
    else:
        gpus = np.ones(n, int)
        rate = 1.0 / interarrival_s if interarrival_s > 0 else math.inf
    if math.isinf(rate):
        arrivals = np.zeros(n)  # the whole workload is enqueued at once
    else:
        arrivals = np.cumsum(r_arr.exponential(1.0 / rate, n))
        arrivals -= arrivals[0]
    jobs = []
    for i in range(n):
        pool = heavy if is_heavy[i] else light
        p = pool[int(r_pick.integers(len(pool)))]
        epochs = max(1, int(round(dur[i] / p.epoch_s)))
        jobs.append(Job(id=f"h{i}", arrival=float(arrivals[i]), gpus=float(gpus[i]), work=float(dur[i]),
                        model=p.model, task=p.family, epochs=epochs))
    return jobs


def _kv(spec: str) -> dict[str, str]:
    out = {}
    for item in filter(None, spec.split(",")):
        k, sep, v = item.partition("=")
        if not sep:
            raise ValueError(f"expected key=value, got {item!r}")
        out[k.strip()] = v.strip()
    return out


def trace_from_spec(spec: str, seed: int = 0) -> list[Job]:
    """``horus-small`` / ``horus-large`` / ``horus-scale``, or ``horus:workload=large,n=100,seed=0,
    interarrival=36,load=1.3,gpus=1024``."""
    names = {"horus-small": "small", "horus-large": "large", "horus-scale": "scale"}
    if spec in names:
        return horus_trace(names[spec], seed=seed)
    head, _, opts = spec.partition(":")
    if head != "horus":
        raise ValueError(f"not a Horus trace: {spec!r}")
    kv = _kv(opts)
    allowed = {"workload", "n", "seed", "interarrival", "load", "gpus"}
    if set(kv) - allowed:
        raise ValueError(f"unknown option(s) {sorted(set(kv) - allowed)}; use {sorted(allowed)}")
    return horus_trace(kv.get("workload", "large"), int(kv["n"]) if "n" in kv else None,
                       seed=int(kv.get("seed", seed)), interarrival_s=float(kv.get("interarrival", 36.0)),
                       load=float(kv.get("load", 1.3)), gpus_total=int(kv.get("gpus", 1024)))


def cluster_from_spec(spec: str) -> ClusterSpec:
    """``horus-testbed`` / ``horus-scale``, or ``horus:nodes=3,gpus=4,gpu_mem=80`` (testbed-like nodes)."""
    if spec in ("horus-testbed", "horus"):
        return horus_cluster("testbed")
    if spec == "horus-scale":
        return horus_cluster("scale")
    head, _, opts = spec.partition(":")
    if head != "horus":
        raise ValueError(f"not a Horus cluster: {spec!r}")
    kv = _kv(opts)
    allowed = {"nodes", "gpus", "gpu_mem", "cpus", "mem"}
    if set(kv) - allowed:
        raise ValueError(f"unknown option(s) {sorted(set(kv) - allowed)}; use {sorted(allowed)}")
    g = int(kv.get("gpus", 4))
    srv = ServerSpec(gpus=g, cpus=float(kv.get("cpus", 6 * g)), mem_gb=float(kv.get("mem", 32 * g)),
                     gpu_type="H100", gpu_mem_gb=float(kv["gpu_mem"]) if "gpu_mem" in kv else h100_memory_gb())
    nodes = int(kv.get("nodes", 3))
    if not 1 <= nodes <= MAX_SERVERS:  # before the tuple of servers is built
        raise ValueError(f"nodes must be from 1 to {MAX_SERVERS:,}, got {nodes}")
    return ClusterSpec((srv,) * nodes, name=f"horus ({nodes}x{g} H100, {srv.gpu_mem_gb:g} GB)")


def perf_models_from_spec(spec: str) -> dict[str, PerfModel]:
    """``horus`` or ``horus:predictions=trained|family-cv|paper-mix,memory=safe|median``: :func:`horus_perf_models`."""
    head, _, opts = spec.partition(":")
    if head != "horus":
        raise ValueError(f"not a Horus cards spec: {spec!r}")
    kv = _kv(opts)
    allowed = {"predictions", "memory"}
    if set(kv) - allowed:
        raise ValueError(f"unknown option(s) {sorted(set(kv) - allowed)}; use {sorted(allowed)}")
    return horus_perf_models(kv.get("memory", "safe"), kv.get("predictions", "trained"))


def prepare_sharing(jobs, models: dict[str, PerfModel], mechanism, config):
    """What ``run_simulation`` needs for Horus: the predicted perf models of the measured points the trace uses
    (added to ``models`` unless a card of that name was given), and GPU sharing (measured utilisation and
    memory, the measured H100 interference) when the trace has such jobs or the mechanism shares devices.
    Returns ``(models, config)``; ``config`` unchanged if it already has ``sharing``."""
    from dataclasses import replace

    horus_jobs = any(is_horus_model(j.model) for j in jobs)
    if horus_jobs:
        missing = {j.model for j in jobs if j.model not in models}
        if missing:
            models = {**{k: v for k, v in horus_perf_models().items() if k in missing}, **models}
    if config.sharing is None and (horus_jobs or getattr(mechanism, "shares_devices", False)):
        config = replace(config, sharing=horus_sharing() if horus_jobs else _default_sharing())
    return models, config


def _default_sharing():
    from perfpredict.sim.sharing import Sharing, slowdown_model

    return Sharing(slowdown=slowdown_model("measured"))
