"""What the parent asks one measuring process to do (kept free of heavy imports: the parent needs it too)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from perfpredict.errors import UsageError
from perfpredict.profile.timing import TimingConfig
from perfpredict.workload.ref import WorkloadRef


@dataclass(frozen=True)
class PointRequest:
    ref: WorkloadRef
    batch_size: int
    mode: str = "train"  # "train" | "infer"
    device: str = "cpu"  # "cpu" | "cuda:<i>"
    timing: TimingConfig = field(default_factory=TimingConfig)
    threads: int | None = None
    #: CPU: data memory allowed beyond the process's baseline (RLIMIT_DATA); CUDA: the caching allocator's cap
    memory_limit_bytes: int | None = None
    seed: int = 0
    measure_energy: bool = True
    #: CPU only: after the timed window, time a few steps with denormals flushed to zero (worker._denormal_check)
    check_denormals: bool = True


#: At most this many torch threads per CPU the process may use (and never fewer than MIN_THREADS_CAP allowed): threads
#: beyond the cores only time-share them, and on the 2-vCPU VM 4096 made the measuring process die (exit 1, or
#: SIGSEGV at 100 000) inside torch's OpenMP runtime, which the search then blamed on the model.
THREADS_PER_CPU_CAP = 8
MIN_THREADS_CAP = 64


def check_threads(threads: Any, option: str = "threads") -> None:
    """``threads``: None (every core) or a whole number from 1 to the cap (8 per usable CPU, at least 64)."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise UsageError(f"{option} must be a whole number >= 1 (or left out: every core), got {threads!r}",
                         step="arguments")
    from perfpredict.profile.device import usable_cpus

    cpus = usable_cpus()
    cap = max(MIN_THREADS_CAP, THREADS_PER_CPU_CAP * cpus)
    if threads > cap:
        raise UsageError(f"{option} {threads} is more than {cap} ({THREADS_PER_CPU_CAP} per CPU; this process may use "
                         f"{cpus}): threads beyond the cores only time-share them, and thousands crash torch's "
                         "OpenMP runtime", step="arguments")


def check_run_args(timeout_s: Any, threads: Any) -> None:
    """A measuring run's ``timeout_s`` (a positive, finite number of seconds) and ``threads``
    (:func:`check_threads`)."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < math.inf:
        raise UsageError(f"timeout must be a positive number of seconds, got {timeout_s!r}", step="arguments")
    check_threads(threads)


def same_inputs_as(seen: dict[int, Any], batch_size: int, result: dict[str, Any]) -> int | None:
    """The batch size measured before whose inputs had the same shapes as ``result``'s (a measuring process's
    answer, with ``input_signature`` when it ran), else None; ``seen`` keeps each batch size's signature. Two
    batch sizes with one signature mean ``example_inputs`` ignores its ``batch_size``."""
    sig = result.get("input_signature") if result.get("status") == "ok" else None
    if sig is None:
        return None
    same = next((b0 for b0, s0 in seen.items() if s0 == sig and b0 != batch_size), None)
    seen.setdefault(batch_size, sig)
    return same
