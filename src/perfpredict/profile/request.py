"""What the parent asks one measuring process to do (kept free of heavy imports: the parent needs it too)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from perfpredict.errors import UsageError

from perfpredict.profile.timing import TimingConfig
from perfpredict.workload.spec import WorkloadRef


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


def check_run_args(timeout_s: Any, threads: Any) -> None:
    """A measuring run's ``timeout_s`` (a positive, finite number of seconds) and ``threads`` (None or >= 1)."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < math.inf:
        raise UsageError(f"timeout must be a positive number of seconds, got {timeout_s!r}", step="arguments")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UsageError(f"threads must be a whole number >= 1 (or None: every core), got {threads!r}",
                         step="arguments")
