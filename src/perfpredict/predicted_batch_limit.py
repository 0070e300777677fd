"""The largest batch size predicted to fit a memory budget, for a job nobody has run (``Predictor.largest_batch``).

The answer comes from the memory estimator of a model set: on a CUDA set the GPU memory NVML attributes to the
process (CUDA context + the caching allocator's reserve), which is what has to fit the card; on a CPU set the
peak RSS increase of a step. By default the q90 of the calibrated interval is held to the budget, because
over-estimating memory is what keeps a placement from running out of it (Horus §4.1.1).

The search evaluates batch sizes by doubling, then bisects between the last one predicted to fit and the first
one predicted not to. It assumes the predicted memory grows with the batch size, which the estimators' baseline
(parameters + batch x per-sample activations) makes so; the probes are returned so that can be checked.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from perfpredict.errors import UsageError
from perfpredict.estimators.arch import ArchFeatures
from perfpredict.profile.batch_search import BatchLimit, BatchProbe, check_search_args, round_down_to

#: How far past the largest batch the nearest profiled architecture was measured at the widened memory q90 of an
#: fp32 CPU training step was checked on held-out points and held (6% and 0% above it at 2x and 4x); at 16x and 64x
#: it did not (18% and 29%: wide MLPs, since the transient term; 18% and 43% before it), where an inference pass's
#: held (9% and 0%) and a bf16 training step's too (0% at every distance; benchmarks/memory_past_trained_batches.py).
FAR_CHECKED_FACTOR = 4


def memory_target(ms: Any) -> str:
    """The estimator whose prediction has to fit: device memory on a CUDA set that has it, else peak memory."""
    return "device_memory" if ms.device_kind == "cuda" and "device_memory" in ms.targets else "peak_memory"


def check_limit_args(memory_limit_bytes: Any, quantile: Any, multiple_of: Any, max_batch: Any) -> tuple[int, int]:
    """``(max_batch, first batch)`` for a search, or a :class:`UsageError` naming the argument that is wrong."""
    from perfpredict.predictor import MAX_BATCH_SIZE

    if isinstance(memory_limit_bytes, bool) or not isinstance(memory_limit_bytes, (int, float)) \
            or not 1 <= memory_limit_bytes <= 1e30:  # a 10**400 int passed and overflowed in the notes
        raise UsageError(f"memory_limit_bytes must be a number of bytes from 1 to 1e30, got {memory_limit_bytes!r}"[:200],
                         step="predict")
    if quantile not in ("q90", "median"):
        raise UsageError(f"quantile must be 'q90' or 'median', got {quantile!r}", step="predict")
    max_batch = MAX_BATCH_SIZE if max_batch is None else max_batch
    first = check_search_args(multiple_of, max_batch, None)
    if max_batch > MAX_BATCH_SIZE:
        raise UsageError(f"max_batch is at most {MAX_BATCH_SIZE:,} for a prediction, got {max_batch:,}", step="predict")
    return max_batch, first


def predicted_largest_batch(predictor: Any, arch: ArchFeatures, memory_limit_bytes: int, *,
                            device_type: str | None = None, mode: str | None = None, precision: str | None = None,
                            quantile: Literal["q90", "median"] = "q90", multiple_of: int = 1,
                            max_batch: int | None = None) -> BatchLimit:
    """The largest multiple of ``multiple_of`` up to ``max_batch`` whose predicted memory (its ``quantile``)
    is at most ``memory_limit_bytes``, with the predicted iteration time there. Nothing is run."""
    from perfpredict.predictor import MAX_BATCH_SIZES

    max_batch, first = check_limit_args(memory_limit_bytes, quantile, multiple_of, max_batch)
    t0 = time.perf_counter()
    ms, precision_note = predictor._set_for(arch, device_type, mode, precision)
    target = memory_target(ms)
    probes: dict[int, BatchProbe] = {}
    reach: dict[str, Any] = {}  # the nearest profiled architecture and its largest batch, as predict_values says

    def evaluate(batches: list[int]) -> None:
        for i in range(0, len(batches), MAX_BATCH_SIZES):
            chunk = batches[i:i + MAX_BATCH_SIZES]
            # the set chosen above, named whole: a model file's PRECISION must not pick another one here
            v = predictor.predict_values(arch, chunk, device_type=ms.name, mode=ms.mode, precision=ms.precision)
            reach.update(near=v["nearest_profiled"], top=v["largest_measured_batch"])
            for j, b in enumerate(chunk):
                med, q90 = v[target]["median"][j], v[target]["q90"][j]
                used = max(med, q90) if quantile == "q90" else med
                # the figure held to the limit is the one a probe shows: device memory on a CUDA set, else the
                # peak memory's own quantile (its median was shown beside a "no" the q90 gave)
                probes[b] = BatchProbe(batch_size=b, status="ok" if used <= memory_limit_bytes else "oom",
                                       peak_bytes=int(used if target == "peak_memory" else v["peak_memory"]["median"][j]),
                                       device_bytes=int(used) if target == "device_memory" else None,
                                       iter_time_s=float(v["iter_time"]["median"][j]), seconds=0.0)

    top = round_down_to(max_batch, multiple_of)
    ladder, b = [], first
    while b < top:
        ladder.append(b)
        b *= 2
    ladder.append(top)
    evaluate(ladder)
    hi = next((b for b in ladder if probes[b].status != "ok"), None)
    lo = top if hi is None else next((a for a, b in zip(ladder, ladder[1:]) if b == hi), None)
    for b in ladder:  # the ladder is evaluated whole (one call); past the first that does not fit is noise
        if hi is not None and b > hi:
            del probes[b]
    while lo is not None and hi is not None and hi - lo > multiple_of:
        mid = round_down_to((lo + hi) // 2, multiple_of)
        if mid <= lo:
            break
        evaluate([mid])
        lo, hi = (mid, hi) if probes[mid].status == "ok" else (lo, mid)
    what = {"device_memory": "GPU memory (NVML: CUDA context + allocator reserve)", "peak_memory": "peak memory"}
    if hi is None:
        reason = f"every batch size up to max_batch {max_batch:,} is predicted to fit"
    elif lo is None:
        reason = f"the smallest batch size, {hi}, is predicted not to fit"
    else:
        reason = f"batch size {hi} is predicted not to fit"
    notes = [f"predicted by model set {ms.name} ({ms.precision} {ms.mode}, {ms.device_name}); the {quantile} of the "
             f"predicted {what[target]} is held to the limit"] + ([precision_note] if precision_note else [])
    cap = ms.device_memory_bytes if ms.device_kind == "cuda" else None
    if cap and memory_limit_bytes > cap:
        notes.append(f"the limit ({memory_limit_bytes / 2**30:.1f} GiB) is more than one {ms.device_name} holds "
                     f"({cap / 2**30:.1f} GiB): batch sizes between the two fit the limit but not the device")
    near, hi_t, lo_t = reach["near"], reach["top"], min(ms.trained_batches)
    if lo is not None and not lo_t <= lo <= hi_t:
        t = ms.targets[target]
        notes.append(f"the answer is outside the batch sizes the estimators were trained on for models like this one "
                     f"({lo_t}-{hi_t}; {hi_t} is the largest the nearest profiled architecture, {near}, was measured "
                     "at): the memory there follows the estimators' baseline (parameters + batch x activations per "
                     "sample), extrapolated"
                     + (f", its q90 widened by x{t.q90_growth_per_doubling:.3f} per doubling past {hi_t} (calibrated "
                        "at training on each architecture's largest batch sizes)"
                        if t.upper_extrapolation_margin and lo > hi_t else "")
                     + "; confirm with `perfpredict max-batch` on the device")
        if (ms.device_kind, ms.mode, ms.precision) == ("cpu", "train", "fp32") and lo > FAR_CHECKED_FACTOR * hi_t:
            notes.append(f"held-out fp32 CPU training steps more than {FAR_CHECKED_FACTOR}x past the batch sizes "
                         "their architectures were trained at exceeded the predicted q90 for models with wide "
                         "fully-connected layers, whose freed activations glibc keeps in the heap "
                         "(benchmarks/memory_past_trained_batches.py): this far out the q90 is no safe bound")
    ordered = [probes[b] for b in sorted(probes)]
    return BatchLimit(model=arch.name or "features", source="predicted", device=ms.device_kind,
                      device_name=ms.device_name, mode=ms.mode, precision=ms.precision,
                      compiled=False, memory_limit_bytes=int(memory_limit_bytes), multiple_of=multiple_of,
                      max_batch=max_batch, largest_ok=lo, smallest_failed=hi, stopped_because=reason,
                      probes=ordered, wall_s=time.perf_counter() - t0, notes=notes, model_set=ms.name)
