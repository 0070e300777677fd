"""GPU sharing in the simulator (Horus, seed 004): what co-located jobs really use and how they slow each other.

A scheduler decides with *predictions* (a job's card: predicted GPU utilisation ``PerfModel.gpu_util`` and
device memory ``PerfModel.device_mem_gb``); the simulator runs the jobs with the *truth*: the utilisation and
device memory measured for that job alone (``Sharing.truth``, keyed by ``Job.model``; a job missing from it is
taken to behave as predicted). With :class:`Sharing` in :class:`~perfpredict.sim.simulator.SimConfig`:

* **interference**: every job holding a device through a *shared* share
  (:class:`~perfpredict.sched.cluster.Share` ``shared=True``) together with at least one other job runs at
  ``1 / (1 + T_deg(U))`` of its solo speed, where ``U`` is the sum of the measured solo utilisations of all the
  jobs on that device (Horus §3.2: slowdown tracks the cumulative utilisation, linear up to 100 %, quadratic
  beyond). A multi-device job runs at its slowest device's pace. Rates are recomputed whenever a device's set
  of jobs changes, so completion times stay exact;
* **out of memory**: when the measured device memory of the jobs on a device exceeds the device, the jobs
  placed last on it fail (last first, until the rest fit). A failed job goes back to the queue, hidden from
  the scheduler for ``oom_delay_s`` (the monitor noticing the failure and resubmitting it, §4.2.3), with its
  memory request raised to at least the memory that was available to it where it failed ("GPU memory must be
  equal or greater than the memory available previously placed"; 1 MB more than the GPU when it failed with the
  GPU to itself, so that it is not put back on one of that size); after ``max_oom_retries`` failures it asks for
  at least the whole device. The request becomes the device memory of the job's card (``JobState.perf``), so
  every mechanism reserves and places by it. The failure is immediate (no progress is lost: jobs run out of
  memory while allocating their first iteration) and counted in ``JobState.ooms``;
* **utilisation as NVML measures it**: each device is busy ``min(1, U)`` of the time; the simulator records
  the cluster's total (``SimResult.busy``), the ``busy_gpu_util`` metric.

The slowdown curve ``T_deg(U)`` comes from :func:`slowdown_model`: ``"measured"`` is Horus's model refitted on
perfpredict's 36 co-located pairs on an H100 (``trained_models/cuda_h100/interference.json``); ``"paper"`` and
``"paper-1080"`` are the quadratics Horus reports (footnotes 4 and 3: RTX 2080 and GTX 1080). The paper gives
them as ``x²·a + x·b + c`` with ``x`` the cumulative utilisation and no unit for the output; we read ``x`` as a
fraction (1.0 = 100 %) and the output as the JCT ratio ``T_colo / T_solo`` (so ``T_deg = f(x) − 1``), the only
reading consistent with §3.2's "JCT increase between 1.5x–3x" for over-committed pairs (``f`` is 1.16-1.32 at
100 % and 3 at about 150 %). The paper reports no coefficients for the linear branch below 100 %; we use the line
from no slowdown at ``U = 0`` to the quadratic's value at 100 %.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["PAPER_QUADRATICS", "PaperSlowdown", "Sharing", "slowdown_model"]

#: Horus's over-commitment quadratics (coefficients lowest order first), footnotes 3 and 4 of §3.2.
PAPER_QUADRATICS: dict[str, tuple[float, float, float]] = {
    "paper": (4e-5, -0.00302, 1.16664),  # Nvidia RTX 2080 (the testbed's GPU, §5.1)
    "paper-1080": (6e-5, -0.00728, 1.32198),  # Nvidia GTX 1080
}


@dataclass(frozen=True)
class PaperSlowdown:
    """``T_deg(U)`` from one of the paper's quadratics (see the module docstring for the reading)."""

    name: str
    quadratic: tuple[float, float, float]
    knee: float = 1.0

    def __call__(self, u: float) -> float:
        return float(self.many(np.asarray(u, float)))

    def many(self, u: np.ndarray) -> np.ndarray:
        """Vectorised ``T_deg`` of an array of cumulative utilisations."""
        c0, c1, c2 = self.quadratic
        at_knee = c0 + c1 * self.knee + c2 * self.knee ** 2 - 1.0
        u = np.asarray(u, float)
        out = np.where(u <= self.knee, at_knee * u / self.knee, c0 + c1 * u + c2 * u * u - 1.0)
        return np.maximum(out, 0.0)

    def describe(self) -> str:
        c0, c1, c2 = self.quadratic
        return (f"{self.name}: Horus's quadratic {c2:g}x² {c1:+g}x {c0:+g} read as the JCT ratio above 100 %, "
                f"a line from 0 below")


@dataclass(frozen=True)
class MeasuredSlowdown:
    """``T_deg(U)`` of a fitted :class:`~perfpredict.fit.interference.InterferenceModel` (clipped at 0)."""

    name: str
    model: object  # InterferenceModel

    def __call__(self, u: float) -> float:
        return float(self.model.predict(u))  # type: ignore[attr-defined]

    def many(self, u: np.ndarray) -> np.ndarray:
        """Vectorised ``T_deg`` of an array of cumulative utilisations."""
        return np.asarray(self.model.predict(np.asarray(u, float)), float)  # type: ignore[attr-defined]

    def describe(self) -> str:
        m = self.model
        return (f"{self.name}: refitted on perfpredict's co-located pairs, linear {m.linear} up to "  # type: ignore[attr-defined]
                f"{m.knee:g}, quadratic {m.quadratic} above (lowest order first)")  # type: ignore[attr-defined]


def _models_dir() -> Path:
    from perfpredict.predictor import default_models_dir

    return default_models_dir()


def slowdown_model(source: str = "measured", device: str = "cuda_h100") -> Callable[[float], float]:
    """The slowdown ``T_deg(U)`` of co-located jobs at cumulative utilisation ``U`` (fraction): ``measured``
    (perfpredict's refit for ``device``), ``paper`` (Horus, RTX 2080) or ``paper-1080`` (Horus, GTX 1080)."""
    if source in PAPER_QUADRATICS:
        return PaperSlowdown(source, PAPER_QUADRATICS[source])
    if source == "measured":
        from perfpredict.fit.interference import InterferenceModel

        path = _models_dir() / device / "interference.json"
        if not path.is_file():
            raise ValueError(f"no measured interference model at {path} (collect co-location pairs and run "
                             "`perfpredict train`, or use source 'paper')")
        return MeasuredSlowdown(f"measured ({device})", InterferenceModel.from_dict(json.loads(path.read_text())))
    raise ValueError(f"unknown interference source {source!r}; use measured, paper or paper-1080")


@dataclass(frozen=True)
class Sharing:
    """What the simulator needs to run shared devices (see the module docstring).

    ``truth`` maps a job's model to its measured ``(solo GPU utilisation, device memory GB)``; ``slowdown`` is
    ``T_deg(U)``. ``record`` keeps a per-device snapshot after every change (for tests; costs memory).
    """

    slowdown: Callable[[float], float]
    truth: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    oom_delay_s: float = 30.0
    max_oom_retries: int = 3
    record: bool = False

    def __post_init__(self) -> None:
        if self.oom_delay_s < 0 or self.max_oom_retries < 1:
            raise ValueError("need oom_delay_s >= 0 and max_oom_retries >= 1")

    def job_truth(self, model: str, predicted_util: float | None, predicted_mem_gb: float) -> tuple[float, float]:
        """(solo utilisation, device memory GB) the job really has: measured, else as predicted (a job with no
        utilisation at all is taken to keep its GPU busy)."""
        t = self.truth.get(model)
        if t is not None:
            return float(t[0]), float(t[1])
        return (1.0 if predicted_util is None else float(predicted_util)), float(predicted_mem_gb)

    def factor(self, cumulative_util: float, n_jobs: int) -> float:
        """Speed of each of ``n_jobs`` jobs sharing a device at cumulative utilisation ``U``, relative to solo."""
        if n_jobs < 2:
            return 1.0
        return 1.0 / (1.0 + max(0.0, float(self.slowdown(cumulative_util))))


def busy_series_util(busy: list[tuple[float, float]], total_gpus: int, start: float, end: float) -> float:
    """Time-weighted mean of the busy-GPU series over ``[start, end]`` as a fraction of ``total_gpus``."""
    if not busy or not end > start or total_gpus <= 0:
        return float("nan")
    b = sorted(busy, key=lambda r: r[0])
    t = np.array([r[0] for r in b], float)
    v = np.array([r[1] for r in b], float)
    nxt = np.append(t[1:], np.inf)
    dur = np.clip(np.minimum(nxt, end) - np.maximum(t, start), 0.0, None)
    return float(dur @ v / (end - start) / total_gpus)
