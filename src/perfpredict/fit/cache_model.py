"""The memory dimension of Synergy's sensitivity matrix, filled analytically with a MinIO cache model.

Optimistic profiling (§3.1 of Synergy, OSDI'22) measures a job only at full memory, i.e. with the whole
dataset cached, because memory is cheap to model and expensive to measure (each memory size would need a
steady-state epoch). What memory buys an input pipeline is cache: with MinIO — an application-level cache
that keeps the *first* items it reads until it is full and never evicts — a cache of ``m`` bytes over a
``D``-byte dataset holds a fixed fraction ``h = min(1, m/D)`` of the items, and since every epoch reads
every item once, exactly that fraction hits in every epoch after the first. Unlike LRU/page-cache, whose
hit rate under random epoch order collapses towards zero for ``m < D`` (each item is evicted before it is
seen again), MinIO's hit rate is the best achievable and, crucially, *predictable*.

The misses (fraction ``1 - h``) are read from storage at ``B`` bytes/s. With items of ``s`` bytes on
average, storage alone can deliver ``B / ((1 - h)·s)`` samples/s. The CPU side (decode, augment, collate,
and the training step) delivers ``T_cpu`` samples/s, measured at full memory for each CPU count.

Two ways to combine them:

``overlap=True`` (default): ``T = min(T_cpu, B / ((1 - h)·s))``
    A prefetching DataLoader keeps several batches in flight across workers, so reading one sample from
    storage overlaps preprocessing others and training on earlier batches: the slower stage is the
    bottleneck. This is an *upper bound* (an asymptotic bound of a closed queueing network). It is tight
    when the storage rate is well below the CPU rate, and optimistic near the knee where the two are
    equal, because a DataLoader worker reads and preprocesses its items one after the other — while it
    waits on storage its CPU share sits idle — so the overlap is only as deep as the number of workers.
    ``workers=W`` adds that limit: ``T = min(1 / (1/T_cpu + (1 - h)·s / (W·B)), B / ((1 - h)·s))``.
``overlap=False``: ``T = 1 / (1/T_cpu + (1 - h)·s / B)``
    Reading and preprocessing are serial (one worker, no prefetch): the times add. A lower bound for a
    prefetching pipeline (and the same as ``workers=1``).

Measured (``benchmarks/cache_model_accuracy.py``, real files behind a bandwidth cap, 2 cores, caches of
25/50/75% of the dataset): storage-bound at all three sizes, plain ``min`` is within ~5% for 2 to 6
workers. With preprocessing heavy enough that the 75% cache reaches the knee (storage rate 1.0–1.2× the
CPU rate), plain ``min`` is 8% optimistic there with 6 workers, 18% with 4 and 60% with 2 (one per core);
``workers=W`` cuts that to 5%, 3% and 15%. So pass ``workers`` when the loader has few workers per core.

Units: bytes and samples/s throughout; ``cache_bytes`` is the memory given to the cache, not the job's
total memory (add the process's own footprint outside this module).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["cached_throughput", "demand_vector", "hit_fraction", "sensitivity_matrix"]

ArrayLike = float | Sequence[float] | np.ndarray


def _scalar_or_array(x: np.ndarray) -> float | np.ndarray:
    return float(x) if x.ndim == 0 else x


def hit_fraction(cache_bytes: ArrayLike, dataset_bytes: float) -> float | np.ndarray:
    """Fraction of items a MinIO cache of ``cache_bytes`` serves in each epoch after the first.

    ``min(1, cache_bytes / dataset_bytes)``: the cache holds a fixed subset of that many bytes' worth of
    items and every epoch reads each item once. (A real cache holds whole items, so the true fraction is
    lower by at most one item's share; negligible for datasets of many items.) An empty dataset hits
    fully: there is nothing to read. Broadcasts over arrays of cache sizes.
    """
    if not dataset_bytes >= 0 or not math.isfinite(dataset_bytes):  # NaN fails both comparisons
        raise ValueError(f"dataset_bytes must be finite and >= 0, got {dataset_bytes!r}")
    m = np.asarray(cache_bytes, dtype=float)
    if np.any(m < 0) or not np.all(np.isfinite(m)):
        raise ValueError(f"cache_bytes must be finite and >= 0, got {cache_bytes!r}")
    if dataset_bytes == 0:
        return _scalar_or_array(np.ones_like(m))
    return _scalar_or_array(np.minimum(1.0, m / float(dataset_bytes)))


def cached_throughput(cpu_throughput: ArrayLike, cache_bytes: ArrayLike, dataset_bytes: float,
                      storage_bytes_per_s: float, mean_item_bytes: float, *, overlap: bool = True,
                      workers: ArrayLike | None = None) -> float | np.ndarray:
    """Samples/s of a pipeline whose CPU side runs at ``cpu_throughput`` with a MinIO cache of ``cache_bytes``.

    See the module docstring for the forms. ``cpu_throughput`` is the throughput measured with the whole
    dataset cached (no storage reads); with a full cache the result equals it. ``cpu_throughput``,
    ``cache_bytes`` and ``workers`` broadcast against each other (numpy rules).

    ``workers`` (overlapped form only): the number of DataLoader workers, if the overlap is to be limited
    by it. Each worker reads and preprocesses its items in turn, so W workers overlap storage with CPU
    only W ways: ``T = min(1 / (1/T_cpu + t_io/W), 1/t_io)`` with ``t_io = (1 - h)·item/B`` the storage
    seconds per sample — the other asymptotic bound of the closed queueing network. ``None`` means
    unlimited (plain ``min``); ``W = 1`` is the serial form.
    """
    if not storage_bytes_per_s > 0 or math.isnan(storage_bytes_per_s):
        raise ValueError(f"storage_bytes_per_s must be > 0, got {storage_bytes_per_s!r}")
    if not mean_item_bytes >= 0 or not math.isfinite(mean_item_bytes):
        raise ValueError(f"mean_item_bytes must be finite and >= 0, got {mean_item_bytes!r}")
    cpu = np.asarray(cpu_throughput, dtype=float)
    if np.any(cpu < 0) or not np.all(np.isfinite(cpu)):
        raise ValueError(f"cpu_throughput must be finite and >= 0, got {cpu_throughput!r}")
    if workers is not None:
        if not overlap:
            raise ValueError("workers applies to the overlapped form only (the serial form is workers=1)")
        w = np.asarray(workers, dtype=float)
        if np.any(w < 1) or not np.all(np.isfinite(w)):
            raise ValueError(f"workers must be >= 1, got {workers!r}")
    else:
        w = np.asarray(np.inf if overlap else 1.0)
    miss = 1.0 - np.asarray(hit_fraction(cache_bytes, dataset_bytes), dtype=float)
    # Seconds of storage time per sample, averaged over hits (0) and misses.
    io_s = miss * float(mean_item_bytes) / float(storage_bytes_per_s)
    with np.errstate(divide="ignore"):
        cpu_s = 1.0 / cpu  # inf where the CPU side delivers nothing
        io_rate = 1.0 / io_s  # inf where nothing is read
        if overlap and workers is None:
            out = np.minimum(cpu, io_rate)
        else:
            out = np.minimum(1.0 / (cpu_s + io_s / w), io_rate)
    # Nothing read from storage: exactly the CPU side's throughput (1 / (1 / T) can be an ulp off T).
    out = np.where(io_s == 0, cpu, out)
    return _scalar_or_array(np.asarray(out, dtype=float))


def sensitivity_matrix(cpu_values: Sequence[int], cpu_curve: Sequence[float], mem_values_bytes: Sequence[float],
                       dataset_bytes: float, storage_bytes_per_s: float, mean_item_bytes: float, *,
                       overlap: bool = True, workers: int | Sequence[int] | None = None) -> np.ndarray:
    """Synergy's ``W[c, m]`` (samples/s): row i is ``cpu_values[i]``, column j is cache size ``mem_values_bytes[j]``.

    ``cpu_curve[i]`` is the throughput at ``cpu_values[i]`` CPUs with the dataset fully cached (what
    optimistic profiling measures); each column applies :func:`cached_throughput` with that cache size.
    Non-decreasing along m by construction (more cache never means more reads). ``workers``: see
    :func:`cached_throughput`; one number, or one per CPU count (e.g. ``cpu_values`` itself when the
    loader runs one worker per CPU).
    """
    curve = np.asarray(cpu_curve, dtype=float)
    mem = np.asarray(mem_values_bytes, dtype=float)
    if curve.ndim != 1 or len(cpu_values) != curve.size:
        raise ValueError(f"cpu_curve must have one value per CPU count: {len(cpu_values)} CPU values, "
                         f"curve of shape {curve.shape}")
    if mem.ndim != 1 or mem.size == 0 or curve.size == 0:
        raise ValueError("cpu_values and mem_values_bytes must be non-empty 1-d sequences")
    w = None
    if workers is not None:
        w = np.asarray(workers, dtype=float)
        if w.ndim == 1:
            if w.size != curve.size:
                raise ValueError(f"workers must be one number or one per CPU count, got {w.size} for "
                                 f"{curve.size} CPU values")
            w = w[:, None]
    out = cached_throughput(curve[:, None], mem[None, :], dataset_bytes, storage_bytes_per_s, mean_item_bytes,
                            overlap=overlap, workers=w)
    return np.asarray(out, dtype=float).reshape(curve.size, mem.size)


def demand_vector(cpu_values: Sequence[int], mem_values: Sequence[float], W: np.ndarray | Sequence[Sequence[float]],
                  threshold: float = 0.1) -> tuple[int, float]:
    """The job's demand ``(cpus, mem)``: the fewest CPUs, then the least memory, within ``threshold`` of the best.

    Rule: among the cells with ``W[c, m] >= (1 - threshold)·max(W)``, take the smallest ``c``, and at that
    ``c`` the smallest ``m``. CPUs are minimised first because they are the scarcer resource per GPU
    (Synergy's motivation: CPU is the dimension jobs fight over, memory is relatively plentiful) and because
    the two are not interchangeable: a cache cannot make preprocessing faster, while more CPUs can make the
    pipeline storage-bound and so increase the memory it needs. Returns the values from ``cpu_values`` and
    ``mem_values`` (whatever units the caller uses, e.g. bytes of total memory), not indices.
    """
    w = np.asarray(W, dtype=float)
    if w.shape != (len(cpu_values), len(mem_values)):
        raise ValueError(f"W has shape {w.shape}; expected (len(cpu_values), len(mem_values)) = "
                         f"({len(cpu_values)}, {len(mem_values)})")
    if w.size == 0:
        raise ValueError("W is empty")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("W must be finite and >= 0 (throughputs)")
    if not np.all(np.isfinite(np.asarray(mem_values, dtype=float))):
        raise ValueError(f"mem_values must be finite, got {list(mem_values)!r}")
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold must be in [0, 1), got {threshold!r}")
    target = (1.0 - threshold) * float(w.max())
    ok = w >= target
    cpu_order = np.argsort(np.asarray(cpu_values), kind="stable")
    mem_order = np.argsort(np.asarray(mem_values, dtype=float), kind="stable")
    for i in cpu_order:
        for j in mem_order:
            if ok[i, j]:
                return int(cpu_values[i]), float(mem_values[j])
    raise AssertionError("unreachable: the maximum always qualifies")  # pragma: no cover
