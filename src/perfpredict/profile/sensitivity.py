"""Synergy's optimistic profiling of the CPU dimension: measure a few CPU counts, interpolate the rest.

Synergy (OSDI'22, §3.1) profiles a job's throughput at every CPU count it might be given, at full memory.
Measuring every value is what makes profiling expensive (each point is a real run of the input pipeline),
and most jobs' curves are boring over most of the range: linear while CPU-bound, then flat once the GPU (or
storage) is the bottleneck. The paper's rule: start at the maximum CPU allocation and binary-search
downwards, spending probes only where throughput changes by more than a threshold (10%).

The paper's description ("continue on the lower half, else profile more points on the upper half") is a
single path down the search tree, which is ill-defined once the curve has more than one knee. This module
uses a well-defined recursive form of the same idea, on the *sorted* ``cpu_values`` in index space:

1. Probe ``max(cpu_values)`` (first, as the paper does) and ``min(cpu_values)``.
2. For an interval of indices ``[i, j]`` whose endpoints are probed:

   - if ``j - i <= 1`` there is nothing inside to probe;
   - if the endpoint throughputs differ by less than ``threshold`` relative to the larger one, the
     interval is *flat*: nothing inside is probed and the curve there is the straight line between the
     endpoints;
   - otherwise probe the midpoint ``k = (i + j) // 2`` and judge ``[k, j]`` (upper half first, the
     paper's preference) and ``[i, k]`` by the same rule.

Each value is measured at most once (results are cached) and the number of probes never exceeds
``len(cpu_values)``. Flat stretches cost nothing beyond their boundaries (found in O(log n) probes each);
steep stretches, where neighbouring values differ by more than ``threshold``, are probed densely, because
there every CPU counts.

The reconstructed curve is exact where probed and linear (in c, not in index) between neighbouring probed
values; a measured curve that is piecewise linear with knees at probed values is reconstructed exactly.

Known failure mode (inherent to any endpoint test): a *non-monotone middle*. If throughput rises and falls
again inside an interval whose endpoints happen to agree within ``threshold`` — e.g. a bump at 8 CPUs over
1..16 that is back down at 16 (oversubscription, NUMA, a dataloader that thrashes with too many workers)
while 1 CPU also happens to match — the interval is declared flat and the bump is never seen; the
reconstruction is then wrong by the bump's height. With the usual shapes (non-decreasing, concave or
saturating) this cannot happen, because equal endpoints imply a flat interior. ``max_gap`` is the cheap
guard: it forces a probe inside any flat interval wider than ``max_gap`` index steps, so no run of more than
``max_gap - 1`` consecutive values goes unmeasured, at the price of a few more probes on genuinely flat
curves. It narrows the blind spot, it does not remove it: a bump narrower than the gap can still hide.

The threshold judges *relative* differences, so a low-throughput region with large relative steps (1 → 2
CPUs doubles throughput) is probed densely even though the absolute change is small: that is intended,
since halving a job's CPUs there halves its speed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["CpuSearchResult", "exhaustive_cpu_sweep", "max_relative_error", "optimistic_cpu_search"]


@dataclass(frozen=True)
class CpuSearchResult:
    """Outcome of a CPU search: what was measured and the curve reconstructed from it.

    Attributes:
        cpu_values: the candidate CPU counts, sorted ascending.
        probed: ``(cpus, samples_per_s)`` for each measured value, in the order they were measured.
        curve: throughput for each of ``cpu_values`` (same order): measured where probed, linearly
            interpolated between the neighbouring probed values otherwise.
    """

    cpu_values: tuple[int, ...]
    probed: tuple[tuple[int, float], ...]
    curve: tuple[float, ...]

    @property
    def n_probes(self) -> int:
        """How many measurements the search cost."""
        return len(self.probed)

    @property
    def probed_cpu_values(self) -> tuple[int, ...]:
        """The measured CPU counts, sorted ascending."""
        return tuple(sorted(c for c, _ in self.probed))

    def value_at(self, cpus: int) -> float:
        """The curve's throughput at one of ``cpu_values``."""
        try:
            return self.curve[self.cpu_values.index(cpus)]
        except ValueError:
            raise ValueError(f"{cpus} is not one of the searched CPU values {list(self.cpu_values)}") from None

    def demand(self, threshold: float = 0.1) -> int:
        """The smallest CPU count whose throughput is within ``threshold`` of the curve's maximum.

        "Within" means ``curve[c] >= (1 - threshold) * max(curve)``: the CPUs the job needs before more
        CPUs stop paying off, which is what a scheduler should allocate (Synergy's CPU demand). Judged on
        the reconstructed curve, so it is only as good as the interpolation.
        """
        if not 0.0 <= threshold < 1.0:
            raise ValueError(f"threshold must be in [0, 1), got {threshold!r}")
        target = (1.0 - threshold) * max(self.curve)
        return next(c for c, t in zip(self.cpu_values, self.curve) if t >= target)


def _validate(cpu_values: Sequence[int]) -> list[int]:
    values = list(cpu_values)
    if not values:
        raise ValueError("cpu_values is empty: give at least one CPU count to profile")
    for c in values:
        if isinstance(c, bool) or not isinstance(c, int):
            raise TypeError(f"cpu_values must be integers, got {c!r} ({type(c).__name__})")
        if c <= 0:
            raise ValueError(f"cpu_values must be positive CPU counts, got {c}")
    dupes = sorted({c for c in values if values.count(c) > 1})
    if dupes:
        raise ValueError(f"cpu_values has duplicates: {dupes}")
    return sorted(values)


def _checked(c: int, value: float) -> float:
    """A measured throughput, refusing values the interpolation cannot work with."""
    t = float(value)
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"measure({c}) returned {value!r}; a throughput must be finite and >= 0")
    return t


def _interpolate(values: list[int], measured: dict[int, float]) -> tuple[float, ...]:
    """Throughput for every value: measured where probed, linear in c between probed neighbours."""
    known = sorted(measured)
    out: list[float] = []
    k = 0
    for c in values:
        if c in measured:
            out.append(measured[c])
            continue
        while known[k + 1] < c:
            k += 1
        c0, c1 = known[k], known[k + 1]
        w = (c - c0) / (c1 - c0)
        out.append(measured[c0] + w * (measured[c1] - measured[c0]))
    return tuple(out)


def _flat(a: float, b: float, threshold: float) -> bool:
    hi = max(a, b)
    return hi == 0.0 or abs(a - b) < threshold * hi


def optimistic_cpu_search(measure: Callable[[int], float], cpu_values: Sequence[int], threshold: float = 0.1,
                          *, max_gap: int | None = None) -> CpuSearchResult:
    """Measure throughput at a few of ``cpu_values``, chosen by recursive bisection; interpolate the rest.

    Args:
        measure: ``measure(c)`` → samples/s with ``c`` CPUs (at full memory). Called at most once per
            value; whatever it raises propagates (the search is not resumable, and a half-measured curve
            is not a result).
        cpu_values: candidate CPU counts: distinct positive integers, in any order.
        threshold: two probed neighbours whose throughputs differ by less than this fraction of the larger
            one bound a flat interval, which is not probed inside. In (0, 1).
        max_gap: if given, a flat interval spanning more than ``max_gap`` index steps is still bisected
            (a guard against a bump both endpoints miss; see the module docstring). ``>= 1``.

    Returns:
        The probes in measurement order and the reconstructed curve over all ``cpu_values``.
    """
    values = _validate(cpu_values)
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold!r}")
    if max_gap is not None and (isinstance(max_gap, bool) or not isinstance(max_gap, int) or max_gap < 1):
        raise ValueError(f"max_gap must be a positive integer or None, got {max_gap!r}")

    measured: dict[int, float] = {}
    order: list[tuple[int, float]] = []

    def probe(i: int) -> float:
        c = values[i]
        if c not in measured:
            measured[c] = _checked(c, measure(c))
            order.append((c, measured[c]))
        return measured[c]

    def refine(i: int, j: int) -> None:
        # Recursion depth is log2(len(values)): no risk of hitting Python's limit.
        if j - i <= 1:
            return
        if _flat(measured[values[i]], measured[values[j]], threshold) and (max_gap is None or j - i <= max_gap):
            return
        k = (i + j) // 2
        probe(k)
        refine(k, j)
        refine(i, k)

    last = len(values) - 1
    probe(last)
    probe(0)
    refine(0, last)
    return CpuSearchResult(cpu_values=tuple(values), probed=tuple(order), curve=_interpolate(values, measured))


def exhaustive_cpu_sweep(measure: Callable[[int], float], cpu_values: Sequence[int]) -> CpuSearchResult:
    """Measure every one of ``cpu_values`` (ascending): the baseline optimistic profiling is judged against."""
    values = _validate(cpu_values)
    probed = tuple((c, _checked(c, measure(c))) for c in values)
    return CpuSearchResult(cpu_values=tuple(values), probed=probed, curve=tuple(t for _, t in probed))


def max_relative_error(curve_a: Sequence[float], curve_b: Sequence[float]) -> float:
    """``max_i |a_i - b_i| / |b_i|``: how far ``curve_a`` strays from the reference ``curve_b``.

    Not symmetric on purpose: ``curve_b`` is the truth (e.g. an exhaustive sweep), and errors are judged
    relative to it. A reference point of 0 contributes 0 if ``a`` is also 0 there, else ``inf``.
    """
    a, b = [float(x) for x in curve_a], [float(x) for x in curve_b]
    if len(a) != len(b):
        raise ValueError(f"curves differ in length: {len(a)} vs {len(b)}")
    if not a:
        raise ValueError("curves are empty")
    worst = 0.0
    for x, y in zip(a, b):
        if y == 0.0:
            err = 0.0 if x == 0.0 else math.inf
        else:
            err = abs(x - y) / abs(y)
        worst = max(worst, err)
    return worst
