"""The largest batch size that fits, found by running it: doubling until a step runs out of memory, then bisection.

Every probe is a few real training (or inference) steps in a fresh measuring process, so the peak is that
batch size's own and an out-of-memory error cannot poison the next probe. What "fits" means is the device's:

- CUDA: the step does not raise CUDA's out-of-memory error. With ``memory_limit_bytes`` the caching allocator is
  capped at that many bytes of the device (``torch.cuda.set_per_process_memory_fraction``): "what fits on a
  40 GB card" from an 80 GB one. The CUDA context (300-600 MB) is outside that cap.
- CPU: the step's peak RSS increase over the measuring process's start stays within ``memory_limit_bytes``
  (default 90 % of the memory available now). Its private memory is capped there as in ``perfpredict
  profile`` (RLIMIT_DATA), so an oversized step fails with an allocation error instead of swapping.

A failure other than running out of memory (a model error, a NaN loss) ends the search with that error: it is
the model, not the batch size. A probe past its time limit counts as not fitting, and the result says so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, Field

from perfpredict.errors import PerfPredictError, UsageError
from perfpredict.profile.request import check_run_args, same_inputs_as
from perfpredict.profile.timing import TimingConfig
from perfpredict.workload.spec import Workload

#: A probe's steps: one warm-up and two timed. The peak needs the optimizer state, which exists after the
#: first step, next to a second step's activations; the time is a rough figure, not a profile.
PROBE_TIMING = TimingConfig(warmup_iters=1, warmup_s=0.0, min_iters=2, max_iters=2, min_time_s=0.0, max_time_s=60.0)
DEFAULT_MAX_BATCH = 65536
#: the largest batch a measured search may try: far past any real step, and a cap on a model that ignores it
MAX_SEARCH_BATCH = 2**24


class BatchProbe(BaseModel):
    batch_size: int
    status: Literal["ok", "oom", "timeout", "error", "nonfinite"]
    peak_bytes: int | None = Field(None, description="cpu: peak RSS increase; cuda: torch peak allocated "
                                   "(predicted: its median, or on a set without device memory the quantile held "
                                   "to the limit)")
    device_bytes: int | None = Field(None, description="cuda: NVML process memory (context + allocator reserve)")
    iter_time_s: float | None = Field(None, description="median of two steps: rough")
    seconds: float = Field(description="wall time of the probe, process start to answer")
    error: str | None = None
    phase: str | None = Field(None, description="the step that failed (build_model, forward, ...)")


class BatchLimit(BaseModel):
    """What :func:`find_largest_batch` found: ``largest_ok`` ran, ``smallest_failed`` did not (None when
    nothing failed up to ``max_batch``)."""

    model: str
    source: Literal["measured", "predicted"] = "measured"
    device: str
    device_name: str | None = None
    mode: str
    precision: str
    compiled: bool
    memory_limit_bytes: int | None = Field(description="cpu: the peak RSS increase allowed; cuda: the caching "
                                                       "allocator's cap (None: the whole device); predicted: the "
                                                       "budget the predicted memory is held to")
    multiple_of: int
    max_batch: int
    largest_ok: int | None
    smallest_failed: int | None
    stopped_because: str
    interrupted: bool = False
    model_error: str | None = Field(None, description="a failure that is not memory (an exception, a NaN loss) "
                                                      "ended the search: largest_ok is then no memory limit")
    probes: list[BatchProbe]
    wall_s: float
    notes: list[str] = Field(default_factory=list)
    model_set: str | None = Field(None, description="predicted: the model set that answered")

    def probe(self, batch_size: int | None) -> BatchProbe | None:
        return next((p for p in self.probes if p.batch_size == batch_size), None)


def round_down_to(b: int, multiple_of: int) -> int:
    return max(multiple_of, b // multiple_of * multiple_of)


def check_search_args(multiple_of: int, max_batch: int, start: int | None) -> int:
    """The first batch to try; a :class:`UsageError` for arguments that leave nothing to search."""
    for name, v in (("multiple_of", multiple_of), ("max_batch", max_batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UsageError(f"{name} must be a whole number >= 1, got {v!r}", step="arguments")
    first = multiple_of if start is None else start
    if isinstance(first, bool) or not isinstance(first, int) or first < 1:
        raise UsageError(f"start must be a whole number >= 1, got {start!r}", step="arguments")
    if first % multiple_of:
        raise UsageError(f"start {first} is not a multiple of {multiple_of}", step="arguments")
    if max_batch < first:
        raise UsageError(f"max_batch {max_batch} is below the first batch size to try ({first})", step="arguments")
    if max_batch > MAX_SEARCH_BATCH:
        raise UsageError(f"max_batch is at most {MAX_SEARCH_BATCH:,}, got {max_batch:,}", step="arguments")
    return first


def find_largest_batch(workload: Workload, *, device: str = "auto", mode: str = "train",
                       memory_limit_bytes: int | None = None, multiple_of: int = 1, max_batch: int = DEFAULT_MAX_BATCH,
                       start: int | None = None, threads: int | None = None, timeout_s: float = 600.0,
                       on_probe: Callable[[BatchProbe], None] | None = None,
                       on_start: Callable[[int], None] | None = None,
                       return_on_interrupt: bool = False) -> BatchLimit:
    """The largest batch size (a multiple of ``multiple_of``, at most ``max_batch``) whose step runs on ``device``
    within its memory. Doubles from ``start`` (default ``multiple_of``) until a step runs out of memory, then
    bisects to one ``multiple_of``. ``on_start(b)``/``on_probe(probe)`` report progress.

    Raises :class:`PerfPredictError` when the first probe fails for a reason other than memory (the model
    itself is broken); a later such failure ends the search with ``model_error`` set. A Ctrl-C raises
    KeyboardInterrupt, or with ``return_on_interrupt`` ends the search with the probes finished so far
    (``interrupted`` set; the CLI writes them)."""
    from perfpredict.profile import runner
    from perfpredict.profile.device import describe_device, resolve_device
    from perfpredict.profile.main_guard import check_main_guard
    from perfpredict.profile.memory import available_memory_bytes
    from perfpredict.profile.request import PointRequest

    check_main_guard("find_largest_batch()")  # the probes' processes import the caller's script again
    if mode not in ("train", "infer"):
        raise UsageError(f"mode must be 'train' or 'infer', got {mode!r}", step="arguments")
    if memory_limit_bytes is not None and (isinstance(memory_limit_bytes, bool)
                                           or not isinstance(memory_limit_bytes, (int, float))
                                           or not 1 <= memory_limit_bytes < math.inf):
        raise UsageError(f"memory_limit_bytes must be a positive number of bytes, got {memory_limit_bytes!r}",
                         step="arguments")
    first = check_search_args(multiple_of, max_batch, start)
    check_run_args(timeout_s, threads)
    t0 = time.perf_counter()
    dev = resolve_device(device)
    runner.warm_up()
    limit = None if memory_limit_bytes is None else int(memory_limit_bytes)
    if dev == "cpu" and limit is None:
        limit = int(available_memory_bytes() * 0.9)
    probes: list[BatchProbe] = []
    info: dict = {}
    signatures: dict[int, object] = {}  # batch size -> its inputs' shapes (input_signature), for ok probes

    def probe(b: int) -> BatchProbe:
        if on_start is not None:
            on_start(b)
        req = PointRequest(ref=workload.ref, batch_size=b, mode=mode, device=dev, timing=PROBE_TIMING,
                           threads=threads, memory_limit_bytes=limit, measure_energy=False, check_denormals=False)
        t = time.perf_counter()
        res = runner.run_in_subprocess(req, timeout_s)
        mem = res.get("memory") or {}
        p = BatchProbe(batch_size=b, status=res.get("status", "error"), peak_bytes=mem.get("peak_bytes"),
                       device_bytes=mem.get("nvml_process_bytes"),
                       iter_time_s=(res.get("timing") or {}).get("median_s"), seconds=time.perf_counter() - t,
                       error=res.get("error"), phase=res.get("phase"))
        if dev == "cpu" and p.status == "ok" and limit is not None and (p.peak_bytes or 0) > limit:
            # RLIMIT_DATA caps private memory; the pages of torch's code it faulted in come on top. The
            # limit is held to the peak RSS increase, what the CPU memory estimators predict.
            p.status, p.error = "oom", (f"ran, but its peak RSS increase ({p.peak_bytes / 2**20:.1f} MiB) is "
                                        f"{(p.peak_bytes - limit) / 2**20:.2g} MiB above the limit "
                                        f"({limit / 2**20:.1f} MiB)")
        if res.get("device_info") and not info:
            info.update(res["device_info"])
        if p.status == "ok":
            same = same_inputs_as(signatures, b, res)
            if same is not None:
                # Every larger batch would run too: say so now instead of doubling to max_batch.
                p.status = "error"
                p.error = (f"example_inputs returned the same inputs at batch size {same} and {b} (the same tensor "
                           "shapes and numbers), so the step's memory does not depend on the batch size: the model "
                           "ignores its batch_size argument")
                p.phase = "example_inputs"
        probes.append(p)
        if on_probe is not None:
            on_probe(p)
        return p

    bounds: dict[str, int | None] = {"lo": None, "hi": None}
    skipped: list[BatchProbe] = []
    interrupted = False
    try:
        reason = _search(probe, bounds, first, multiple_of, max_batch, workload.name, skipped)
    except KeyboardInterrupt:  # the probes so far are the result; the caller says it was cut short
        if not return_on_interrupt:
            raise
        interrupted = True
        reason = ("interrupted by the user" if probes else
                  "interrupted by the user before any batch size finished")
    lo, hi = bounds["lo"], bounds["hi"]
    if not reason:
        failed = next(x for x in probes if x.batch_size == hi)
        what = (f"took longer than {timeout_s:g} s" if failed.status == "timeout" else
                failed.error if (failed.error or "").startswith("ran, but") else "ran out of memory")
        reason = (f"batch size {hi} {what}" if lo is not None else f"the smallest batch size tried, {hi}, {what}")
    model_error = reason if "other than memory" in reason else None
    notes = []
    if skipped:
        notes.append(f"batch size {skipped[0].batch_size} failed for a reason other than memory ({skipped[0].error}), "
                     f"and the search went on from batch size "
                     f"{_doubled(skipped[0].batch_size, max_batch, multiple_of)}: the model does not run at that size "
                     "at all")
    if any(x.status == "timeout" for x in probes):
        notes.append(f"a probe past its {timeout_s:g} s limit counted as not fitting: the limit found may be "
                     "time's, not memory's (raise --timeout)")
    if dev == "cpu":
        notes.append("CPU: a batch fits when its step's peak RSS increase over the measuring process's start "
                     "stays within the limit (its private memory is capped there too, RLIMIT_DATA, so an "
                     "oversized step fails instead of swapping)")
    elif memory_limit_bytes is not None:
        notes.append("CUDA: the limit caps torch's caching allocator; the CUDA context comes on top of it")
    return BatchLimit(model=workload.name, device=dev, device_name=info.get("name") or _device_name(dev, describe_device),
                      mode=mode, precision=workload.precision, compiled=workload.compile, memory_limit_bytes=limit,
                      multiple_of=multiple_of, max_batch=max_batch, largest_ok=lo, smallest_failed=hi,
                      stopped_because=reason, interrupted=interrupted, model_error=model_error, probes=probes,
                      wall_s=time.perf_counter() - t0, notes=notes)


def _doubled(b: int, max_batch: int, multiple_of: int) -> int:
    """The doubling search's next batch size after ``b`` (a multiple of ``multiple_of``): twice it, held to the
    largest multiple within ``max_batch``."""
    return min(b * 2, round_down_to(max_batch, multiple_of))


def _search(probe: Callable[[int], BatchProbe], bounds: dict[str, int | None], first: int, multiple_of: int,
            max_batch: int, name: str, skipped: list[BatchProbe]) -> str:
    """Doubling, then bisection, keeping the largest batch that ran (``lo``) and the smallest that did not
    (``hi``) in ``bounds`` as they change, so an interrupt keeps them. Returns why it stopped, or "" when a batch
    ran out of memory (the caller words that). The first batch size failing for a reason other than memory is
    passed over once, into ``skipped``, and the search goes on from the next one."""
    b = first
    while True:  # doubling
        p = probe(b)
        if p.status == "ok":
            bounds["lo"] = b
            b = _doubled(b, max_batch, multiple_of)
            if b <= bounds["lo"]:
                return f"every batch size tried up to max_batch {max_batch} ran"
            continue
        if p.status in ("oom", "timeout"):
            bounds["hi"] = b
            break
        if bounds["lo"] is None and b == first and not skipped and _doubled(b, max_batch, multiple_of) > b:
            # the smallest batch alone may be what fails (BatchNorm in training needs two samples per channel):
            # the search goes on from the next size, and the result says so
            skipped.append(p)
            b = _doubled(b, max_batch, multiple_of)
            continue
        bounds["hi"] = b
        if bounds["lo"] is None:
            also = (f" (and batch size {skipped[0].batch_size} before it: {skipped[0].error})"
                    if skipped and skipped[0].error != p.error else "")
            raise PerfPredictError(f"batch size {b} failed for a reason other than memory ({p.status}): {p.error}"
                                   f"{also}; fix the model first", source=name, step=p.phase or "max batch")
        return f"batch size {b} failed for a reason other than memory ({p.status}): {p.error}"
    while bounds["lo"] is not None and bounds["hi"] - bounds["lo"] > multiple_of:  # bisection
        mid = round_down_to((bounds["lo"] + bounds["hi"]) // 2, multiple_of)
        if mid <= bounds["lo"]:
            break
        p = probe(mid)
        if p.status == "ok":
            bounds["lo"] = mid
            continue
        bounds["hi"] = mid
        if p.status not in ("oom", "timeout"):
            return f"batch size {mid} failed for a reason other than memory ({p.status}): {p.error}"
    return ""


def _device_name(dev: str, describe_device) -> str | None:
    if dev != "cpu":  # described in the measuring process only: the parent never opens a CUDA context
        return None
    try:
        return describe_device(dev, None).get("name")
    except Exception:  # noqa: BLE001 - a name is a nicety
        return None
