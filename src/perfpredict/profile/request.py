"""What the parent asks one measuring process to do (kept free of heavy imports: the parent needs it too)."""

from __future__ import annotations

from dataclasses import dataclass, field

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
