"""The timing loop: warm up, then time iterations until the median is stable or a cap is hit.

Device-agnostic: the caller passes ``step`` (one training or inference iteration) and ``sync`` (a no-op on
CPU, ``torch.cuda.synchronize`` on CUDA). Each iteration is timed individually with ``perf_counter``
after a ``sync``, so the time covers the whole iteration including kernel launches and the queue drain.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class TimingConfig:
    """When to stop warming up and when to stop timing.

    Warm-up lasts at least ``warmup_iters`` iterations and ``warmup_s`` seconds. Timing stops once there
    are at least ``min_iters`` iterations and ``min_time_s`` seconds of them *and* the running median has
    moved by less than ``rel_tol`` over the last ``stable_window`` iterations; or at ``max_iters``; or when
    the timed window reaches ``max_time_s`` (after at least 3 iterations, so a slow model still gets a
    median and spread).
    """

    warmup_iters: int = 2
    warmup_s: float = 0.25
    min_iters: int = 10
    max_iters: int = 500
    min_time_s: float = 2.0
    max_time_s: float = 15.0
    rel_tol: float = 0.01
    stable_window: int = 5

    def __post_init__(self) -> None:
        import math

        for name in ("warmup_s", "min_time_s", "max_time_s", "rel_tol"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or v < 0:
                raise ValueError(f"TimingConfig.{name} must be a number >= 0, got {v!r}")
        for name in ("warmup_iters", "min_iters", "max_iters", "stable_window"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name in ("max_iters", "stable_window") else 0):
                raise ValueError(f"TimingConfig.{name} must be a whole number >= "
                                 f"{1 if name in ('max_iters', 'stable_window') else 0}, got {v!r}")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class TimingResult:
    times_s: list[float]
    warmup_times_s: list[float]
    stop_reason: str
    #: CPUs other processes on the host kept busy, on average, during the timed window (see host_load)
    other_cpus: float | None = None

    @property
    def first_iter_s(self) -> float:
        return self.warmup_times_s[0] if self.warmup_times_s else self.times_s[0]

    def stats(self) -> dict:
        t = np.asarray(self.times_s)
        mean = float(t.mean())
        std = float(t.std(ddof=1)) if len(t) > 1 else 0.0
        return {
            "median_s": float(np.median(t)),
            "p10_s": float(np.percentile(t, 10)),
            "p90_s": float(np.percentile(t, 90)),
            "mean_s": mean,
            "std_s": std,
            "cv": std / mean if mean > 0 else 0.0,
            "iterations": len(t),
            "timed_s": float(t.sum()),
            "warmup_iterations": len(self.warmup_times_s),
            "warmup_s": float(sum(self.warmup_times_s)),
            "stop_reason": self.stop_reason,
            "other_cpus": self.other_cpus,
        }


def time_iterations(step: Callable[[], object], sync: Callable[[], None], cfg: TimingConfig | None = None,
                    before_timed: Callable[[], None] | None = None) -> TimingResult:
    """Run ``step`` through warm-up and the timed window; return every iteration's wall time.

    ``before_timed()`` runs once between warm-up and the first timed iteration (e.g. to start counters).
    Exceptions from ``step`` propagate unchanged: the caller knows which phase failed.
    """
    cfg = cfg or TimingConfig()
    clock = time.perf_counter
    warm: list[float] = []
    start = clock()
    sync()
    while len(warm) < cfg.warmup_iters or (clock() - start) < cfg.warmup_s:
        t0 = clock()
        step()
        sync()
        warm.append(clock() - t0)
        if len(warm) >= cfg.warmup_iters and sum(warm) > cfg.max_time_s:
            break  # a very slow model: do not spend the whole budget warming up

    if before_timed is not None:
        before_timed()
    from perfpredict.profile.host_load import OtherLoad

    others = OtherLoad()
    others.start()
    times: list[float] = []
    medians: list[float] = []
    reason = "max_iters"
    while len(times) < cfg.max_iters:
        t0 = clock()
        step()
        sync()
        dt = clock() - t0
        times.append(dt)
        medians.append(float(np.median(times)))
        elapsed = sum(times)
        if len(times) >= cfg.min_iters and elapsed >= cfg.min_time_s and _stable(medians, cfg):
            reason = "stable"
            break
        if elapsed >= cfg.max_time_s and len(times) >= 3:
            reason = "time_cap"
            break
    return TimingResult(times, warm, reason, others.stop())


def _stable(medians: list[float], cfg: TimingConfig) -> bool:
    if len(medians) < cfg.stable_window:
        return False
    recent = medians[-cfg.stable_window:]
    ref = medians[-1]
    return ref > 0 and max(abs(m - ref) for m in recent) / ref <= cfg.rel_tol
