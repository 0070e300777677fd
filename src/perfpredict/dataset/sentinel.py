"""A speed sentinel for dataset collection: one fixed step, timed again and again through a run.

A dataset's rows are fitted jointly, so they must come from one machine at one speed. A cloud VM's host can
slow it with nothing else running on it: on the Xeon VM of ``datasets/calibrations/`` the same set's calibration
factor read 1.02 and then 1.67 within about 1.5 h. No single row shows that. Timing the same step at the start
of a run, between architectures every ``every_s`` seconds, and at the end does.

One timing is not enough for that: the same step timed in six fresh processes back to back on a Xeon VM of the
same CPU model (2026-11-26) varied by
23-31% (a 150 ms step) and 38-102% (a 3 ms step) between its slowest and fastest process. So a reading is the
median of ``repeats`` fresh processes, its own spread is kept as the run's *noise*, and the run's *drift* (the
slowest reading's median over the fastest's) is only called a drift when it passes both :data:`DRIFT_WARN` and
that noise. Both are written into the run's provenance; the collector warns on a drift, and ``perfpredict
train`` names such a run in the trained set's report.

The sentinel is the plan's architecture of median cost at its smallest batch size, so a resumed run of the same
command times the same step. Readings are taken between architectures, never inside one.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perfpredict.dataset.collect import ArchPlan

#: Drift (slowest reading's median over the fastest's, minus one) past which, if it also passes the readings' own
#: noise, the collector warns that a run's rows are not one speed.
DRIFT_WARN = 0.10


def choose_sentinel(plans: Sequence[ArchPlan]) -> tuple[ArchPlan, int] | None:
    """The plan's architecture of median forward GMACs per sample (the lower middle; ties by config name) and its
    smallest batch size; None for an empty plan."""
    if not plans:
        return None
    ranked = sorted(plans, key=lambda p: (p.gmacs_per_sample, p.config))
    plan = ranked[(len(ranked) - 1) // 2]
    return plan, min(plan.batch_sizes)


def _spread(times: Sequence[float]) -> float | None:
    return round(max(times) / min(times) - 1.0, 4) if len(times) >= 2 else None


@dataclass
class SpeedSentinel:
    """Readings of one step through a collection run. ``every_s`` = 0 reads before every architecture."""

    config: str
    batch_size: int
    every_s: float
    #: times the step in a fresh measuring process and returns the worker's result (``status``, ``timing``)
    measure: Callable[[], dict[str, Any]]
    #: fresh processes per reading; the reading is their median
    repeats: int = 3
    #: called with each reading as it is taken (the collector prints it)
    on_reading: Callable[[dict[str, Any]], None] | None = None
    readings: list[dict[str, Any]] = field(default_factory=list)
    _started: float = field(default_factory=time.monotonic)
    _last: float | None = None

    def due(self) -> bool:
        return self._last is None or time.monotonic() - self._last >= self.every_s

    def read(self, after_rows: int, final: bool = False) -> dict[str, Any]:
        """Time the step ``repeats`` times now and keep the reading: the median of the timed ones, and their
        spread (a reading none of whose processes timed the step keeps the first status and error). It is the
        run's ``start`` reading, a ``between`` one, or with ``final`` its ``end``."""
        where = "end" if final else "between" if self.readings else "start"
        times, failed = [], None
        for _ in range(self.repeats):
            res = self.measure()
            t = (res.get("timing") or {}).get("median_s")
            if res.get("status") == "ok" and isinstance(t, (int, float)) and math.isfinite(t) and t > 0:
                times.append(float(t))
            elif failed is None:
                failed = res
        self._last = time.monotonic()
        reading = {"at_s": round(self._last - self._started, 1), "after_rows": after_rows, "where": where,
                   "status": "ok" if times else (failed or {}).get("status", "error"),
                   "iter_time_s": statistics.median(times) if times else None,
                   "times_s": times, "spread": _spread(times)}
        if not times and (failed or {}).get("error"):
            reading["error"] = str(failed["error"])[:200]
        self.readings.append(reading)
        if self.on_reading:
            self.on_reading(reading)
        return reading

    @property
    def drift(self) -> float | None:
        return speed_drift(self.readings)

    @property
    def noise(self) -> float | None:
        return speed_noise(self.readings)

    def as_dict(self) -> dict[str, Any]:
        return {"config": self.config, "batch_size": self.batch_size, "every_s": self.every_s,
                "repeats": self.repeats, "readings": list(self.readings), "drift": self.drift,
                "noise": self.noise, "warn_above": DRIFT_WARN}


def speed_drift(readings: Sequence[dict[str, Any]]) -> float | None:
    """The slowest reading's median over the fastest's, minus one (0.25: the step took 25% longer at the slowest
    reading); None with fewer than two timed readings."""
    return _spread([r["iter_time_s"] for r in readings if isinstance(r.get("iter_time_s"), (int, float))])


def speed_noise(readings: Sequence[dict[str, Any]]) -> float | None:
    """The median spread within one reading (slowest over fastest of its back-to-back processes, minus one): how
    far two timings of the same step differ with no drift between them; None when no reading has two timings."""
    spreads = [r["spread"] for r in readings if isinstance(r.get("spread"), (int, float))]
    return round(statistics.median(spreads), 4) if spreads else None


def drifted(drift: float | None, noise: float | None) -> bool:
    """Whether a run's speed moved: its drift passes :data:`DRIFT_WARN` and its readings' own noise."""
    return drift is not None and drift > DRIFT_WARN and drift > (noise or 0.0)


def run_sentinel(run: Any) -> dict[str, float | None] | None:
    """The drift and noise of one run of a dataset's provenance, None when its sentinel (if any) had fewer than
    two timed readings: runs from before the sentinel, or from a hand-edited file, have none."""
    s = run.get("speed_sentinel") if isinstance(run, dict) else None
    if not (isinstance(s, dict) and isinstance(s.get("drift"), (int, float)) and math.isfinite(s["drift"])):
        return None
    noise = s.get("noise")
    return {"drift": float(s["drift"]), "noise": float(noise) if isinstance(noise, (int, float)) else None}


def drift_warning(drift: float | None, noise: float | None, what: str) -> str | None:
    """The warning for a run whose speed moved (:func:`drifted`), or None."""
    if not drifted(drift, noise):
        return None
    return (f"{what}: the speed sentinel's readings differ by {drift:.0%} (slowest over fastest, each the median "
            f"of its processes; back-to-back processes differed by {noise or 0:.0%}), so this machine's speed moved "
            "during the run and its rows are not one speed; collect again on a steadier machine, or keep the file "
            "and read its estimators' error with that in mind")


__all__ = ["DRIFT_WARN", "SpeedSentinel", "choose_sentinel", "drift_warning", "drifted", "run_sentinel",
           "speed_drift", "speed_noise"]
