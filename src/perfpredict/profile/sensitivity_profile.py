"""Synergy's optimistic profiling of a live job: CPU curve by binary search, memory dimension by the cache model.

1. Measure the job (input pipeline + training step) at c CPUs, memory at its maximum (dataset fully cached),
   for the c values :func:`perfpredict.profile.sensitivity.optimistic_cpu_search` chooses.
2. Fill W[c, m] analytically: with a MinIO cache of m − (process memory) bytes, a fixed fraction of items hits
   every epoch and the misses are read at the storage bandwidth (:mod:`perfpredict.fit.cache_model`).

The storage bandwidth is the dataset's own (``storage_bytes_per_s`` attribute, e.g. a bandwidth-capped file
dataset), or the one the caller configures; a dataset with neither lives in memory and the matrix is flat in
m, which the card says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from perfpredict.card import SensitivityCard, SensitivityDemand
from perfpredict.errors import PerfPredictError, error_line
from perfpredict.profile.scaling import available_cpus
from perfpredict.workload.spec import WorkloadRef

GB = 1e9


def raw_item_bytes(item) -> int:
    """Bytes of one raw dataset item as read from storage (bytes / arrays / tensors, or a tuple of them)."""
    import torch

    if isinstance(item, (bytes, bytearray, memoryview)):
        return len(item)
    if isinstance(item, torch.Tensor):
        return item.numel() * item.element_size()
    if isinstance(item, np.ndarray):
        return int(item.nbytes)
    if isinstance(item, (tuple, list)):
        return sum(raw_item_bytes(x) for x in item)
    return 0


def dataset_stats(ref: WorkloadRef, sample: int = 64) -> dict:
    """Size of the workload's dataset: items, bytes, mean item bytes, storage bandwidth if it declares one."""
    wl = ref.load()
    if wl.make_dataset is None:
        raise PerfPredictError("defines no make_dataset() hook, so it has no input pipeline to profile",
                               source=ref.describe(), step="make_dataset")
    # the user's code runs here: its failure is the section's, one line on the card, not an internal error
    try:
        ds = wl.make_dataset()
    except Exception as e:  # noqa: BLE001
        raise PerfPredictError(f"make_dataset() failed: {error_line(e)}", source=ref.describe(),
                               step="make_dataset") from None
    try:
        n = len(ds)
    except TypeError:
        raise PerfPredictError(f"make_dataset() returned a {type(ds).__name__}, not a dataset with len() and "
                               "indexing (a torch Dataset, a list)", source=ref.describe(), step="make_dataset") from None
    declared = getattr(ds, "dataset_bytes", None)
    if declared:
        total = int(declared)
    else:
        idx = np.linspace(0, n - 1, num=min(n, sample)).astype(int)
        try:
            items = [ds[int(i)] for i in idx]
        except Exception as e:  # noqa: BLE001
            raise PerfPredictError(f"reading the dataset's items to size it failed: {error_line(e)}",
                                   source=ref.describe(), step="make_dataset") from None
        total = int(np.mean([raw_item_bytes(x) for x in items]) * n) if n else 0
    return {"items": n, "dataset_bytes": total, "mean_item_bytes": total / n if n else 0.0,
            "storage_bytes_per_s": getattr(ds, "storage_bytes_per_s", None)}


def cpu_candidates(max_cpus: int | None = None) -> list[int]:
    cpus = available_cpus()
    top = min(len(cpus), max_cpus or len(cpus))
    return list(range(1, top + 1))


#: the start of the sensitivity busy-host note (one per card, replaced when the sensitivity is measured again)
BUSY_NOTE = "sensitivity: the host was busy"


def busy_host_note(sens: SensitivityCard, cpus: int) -> str | None:
    """A note naming the CPU probes during which other processes competed with the job for the host's ``cpus``
    CPUs (the single-job rule of :func:`perfpredict.profile.host_load.competed`, with the probe's c CPUs as its
    threads), or None. Such a probe reads slow, and the optimistic search then buys CPUs the job does not need."""
    from perfpredict.profile.host_load import competed

    if not sens.device or not sens.device.startswith("cpu"):
        return None
    runs = [(c, o) for c, o in zip(sens.profiled_cpu_values, sens.probed_other_cpus) if competed(o, c, cpus)]
    if not runs:
        return None
    return (f"{BUSY_NOTE}: other processes kept up to {max(o for _, o in runs if o is not None):.2f} of its {cpus} "
            f"CPUs busy while the probe(s) at {', '.join(str(c) for c, _ in runs)} CPU(s) were timed, so those "
            "throughputs, and the CPU demand found from them, likely differ from an idle machine's (see "
            "sensitivity.probed_other_cpus)")


def profile_sensitivity(ref: WorkloadRef, batch_size: int, *, device: str = "cpu",
                        cpu_values: Sequence[int] | None = None, mem_fractions: Sequence[float] = (0, .25, .5, .75, 1),
                        process_bytes: int = 0, storage_bytes_per_s: float | None = None, threshold: float = 0.1,
                        window_s: float = 3.0, timeout_s: float = 600.0, exhaustive: bool = False,
                        on_probe: Callable[[int, dict], None] | None = None) -> SensitivityCard:
    """Build the job's sensitivity card. ``process_bytes`` is the job's memory without any cache (e.g. its
    measured peak RSS); memory values are process_bytes + the cache sizes ``mem_fractions`` × dataset."""
    from perfpredict.fit.cache_model import demand_vector, sensitivity_matrix
    from perfpredict.profile.pipeline_worker import PipelineRequest
    from perfpredict.profile.runner import run_pipeline_in_subprocess
    from perfpredict.profile.sensitivity import (
        exhaustive_cpu_sweep,
        optimistic_cpu_search,
    )

    stats = dataset_stats(ref)
    cores = available_cpus()
    cpu_values = sorted(set(int(c) for c in (cpu_values or cpu_candidates())))
    if cpu_values[-1] > len(cores):
        raise PerfPredictError(f"asked for {cpu_values[-1]} CPUs; this process may use {len(cores)}",
                               source=ref.describe(), step="sensitivity")
    failures: list[str] = []
    other_cpus: dict[int, float | None] = {}

    def measure(c: int) -> float:
        res = run_pipeline_in_subprocess(PipelineRequest(ref, batch_size, tuple(cores[:c]), device=device,
                                                         window_s=window_s), timeout_s)
        other_cpus[c] = res.get("other_cpus")
        if on_probe is not None:
            on_probe(c, res)
        if res.get("status") != "ok":
            failures.append(f"{c} CPUs: {res.get('error')}")
            raise PerfPredictError(f"measuring the input pipeline at {c} CPUs failed: {res.get('error')}",
                                   source=ref.describe(), step=res.get("phase") or "sensitivity")
        return float(res["samples_per_s"])

    search = (exhaustive_cpu_sweep if exhaustive else optimistic_cpu_search)(
        measure, cpu_values, **({} if exhaustive else {"threshold": threshold}))
    curve = [float(v) for v in search.curve]
    bw = storage_bytes_per_s or stats["storage_bytes_per_s"]
    fractions = sorted(set(float(f) for f in mem_fractions))
    cache_sizes = [f * stats["dataset_bytes"] for f in fractions]
    mem_values = [process_bytes + s for s in cache_sizes]
    if bw:
        # The pipeline runs one DataLoader worker per CPU, which bounds how far storage reads overlap the
        # CPU work (see perfpredict.fit.cache_model).
        w = sensitivity_matrix(cpu_values, curve, cache_sizes, stats["dataset_bytes"], bw, stats["mean_item_bytes"],
                               workers=list(cpu_values))
        note = None
    else:
        w = np.tile(np.asarray(curve, dtype=float)[:, None], (1, len(mem_values)))
        note = ("dataset lives in memory (no storage bandwidth declared or configured): throughput does not depend "
                "on the cache size, so W is flat in m")
    cpus_needed, mem_needed = demand_vector(cpu_values, mem_values, w, threshold)
    return SensitivityCard(
        cpu_values=list(cpu_values), mem_values_gb=[m / GB for m in mem_values], matrix=np.asarray(w).tolist(),
        profiled_cpu_values=[int(c) for c, _ in search.probed], probed_throughput=[float(t) for _, t in search.probed],
        probed_other_cpus=[other_cpus.get(int(c)) for c, _ in search.probed],
        exhaustive_probes=len(cpu_values), demand=SensitivityDemand(cpus=int(cpus_needed), mem_gb=mem_needed / GB),
        threshold=threshold, cache_fractions=fractions, process_gb=process_bytes / GB,
        dataset_bytes=stats["dataset_bytes"], storage_bytes_per_s=bw,
        mean_item_bytes=stats["mean_item_bytes"], note=note, device=device)
