"""How fast a job runs on a given allocation: the one number a mechanism and the simulator need.

A :class:`PerfModel` combines two curves, either of which may be absent:

* a **sensitivity grid** ``W[c, m]`` over CPUs and memory *per GPU* (Synergy's resource-sensitivity matrix,
  seed 001 §3.1; measured by ``perfpredict profile --sensitivity`` or taken from a paper), and
* a **speedup curve** ``S(p)`` over the GPUs given, fractional ``p = 1/n`` included (seed 002 Fig. 1;
  measured by ``--colocation --scaling``).

``rate(alloc, ref_gpus)`` is the job's speed relative to its *reference* allocation (``ref_gpus`` GPUs, the
job's requested size, each with ``ref_cpus_per_gpu`` CPUs and ``ref_mem_per_gpu`` GB), the allocation a
trace's duration refers to. One model serves every job of that model, whatever GPU count each asks for:

    rate = S(g) / S(ref_gpus) × min over servers s of W(c_s/g_s, m_s/g_s) / W(ref_cpus_per_gpu, ref_mem_per_gpu)

The minimum over servers is Synergy's observation that a data-parallel job runs at the pace of its
worst-provisioned worker (§4.2). Without a speedup curve the job scales linearly in GPUs; without a grid it
is insensitive to CPU and memory. Between grid points ``W`` is interpolated bilinearly; above the grid it is
flat (more CPUs than profiled do not help); below the smallest CPU value it falls linearly to 0 at 0 CPUs
(a job with no CPU makes no progress); below the smallest memory value it is clamped.

A third, optional factor is the **GPU type** (ANDREAS, seed 000: t_jng depends on the node's GPU type):
``type_speed`` maps each GPU type to the job's throughput per GPU on it, relative to ``ref_gpu_type`` (the type
a trace's work refers to). Given the cluster, ``rate`` multiplies by the speed of the slowest GPU type in the
allocation (a data-parallel job runs at its slowest worker's pace). Without ``type_speed`` the GPU type is
ignored, as before. :meth:`PerfModel.from_cards` builds it from one card per GPU type.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from perfpredict.card import PerformanceCard
    from perfpredict.sched.cluster import Allocation, ClusterSpec

__all__ = ["PerfModel"]


@dataclass(frozen=True, eq=False)
class PerfModel:
    name: str
    cpus_per_gpu: tuple[float, ...] | None = None
    mem_per_gpu: tuple[float, ...] | None = None
    #: W[i][j]: throughput per GPU at cpus_per_gpu[i], mem_per_gpu[j] (any unit: only ratios are used)
    matrix: tuple[tuple[float, ...], ...] | None = None
    speedup: Callable[[float], float] | None = None
    ref_cpus_per_gpu: float = 3.0
    ref_mem_per_gpu: float = 62.5
    #: the job's GPU memory footprint per device (fractional sharing must fit it)
    device_mem_gb: float = 0.0
    source: str = "paper"
    #: throughput per GPU on each GPU type relative to ``ref_gpu_type`` (ANDREAS); None: type-insensitive.
    #: Given as a mapping, stored normalised (reference type = 1) as sorted ``(type, speed)`` pairs.
    type_speed: Mapping[str, float] | tuple[tuple[str, float], ...] | None = None
    ref_gpu_type: str | None = None
    #: the job's GPU utilisation running alone (fraction of time a kernel runs, NVML's definition), as its card
    #: predicts it: what a co-location scheduler (Horus, seed 004) packs by. None: unknown.
    gpu_util: float | None = None

    def __post_init__(self) -> None:
        if self.type_speed is not None:
            speeds = {str(k): float(v) for k, v in dict(self.type_speed).items()}
            if not speeds or any(not (math.isfinite(v) and v > 0) for v in speeds.values()):
                raise ValueError(f"{self.name}: type_speed values must be finite and > 0, got {speeds}")
            ref = self.ref_gpu_type if self.ref_gpu_type is not None else min(speeds, key=lambda k: (-speeds[k], k))
            if ref not in speeds:
                raise ValueError(f"{self.name}: ref_gpu_type {ref!r} is not in type_speed ({', '.join(speeds)})")
            base = speeds[ref]
            object.__setattr__(self, "type_speed", tuple(sorted((k, v / base) for k, v in speeds.items())))
            object.__setattr__(self, "ref_gpu_type", ref)
            object.__setattr__(self, "_type_speed", dict(self.type_speed))  # type: ignore[arg-type]
        if self.gpu_util is not None and not (math.isfinite(self.gpu_util) and self.gpu_util >= 0):
            raise ValueError(f"{self.name}: gpu_util must be a finite fraction >= 0, got {self.gpu_util}")
        if self.speedup is not None:
            if not callable(self.speedup):
                raise ValueError(f"{self.name}: speedup must be a function of the GPU count (e.g. a SpeedupCurve), "
                                 f"got {type(self.speedup).__name__}")
            s1 = self.speedup(1.0)
            if not (isinstance(s1, (int, float, np.floating, np.integer)) and math.isfinite(s1) and s1 > 0):
                raise ValueError(f"{self.name}: speedup(1) must be a finite number > 0, got {s1!r}")
        grid = (self.cpus_per_gpu, self.mem_per_gpu, self.matrix)
        if any(g is not None for g in grid) and any(g is None for g in grid):
            raise ValueError(f"{self.name}: cpus_per_gpu, mem_per_gpu and matrix go together")
        if self.matrix is not None:
            w = np.asarray(self.matrix, dtype=float)
            c, m = np.asarray(self.cpus_per_gpu, float), np.asarray(self.mem_per_gpu, float)
            if w.shape != (c.size, m.size):
                raise ValueError(f"{self.name}: matrix shape {w.shape} != ({c.size}, {m.size})")
            if np.any(np.diff(c) <= 0) or np.any(np.diff(m) <= 0):
                raise ValueError(f"{self.name}: cpus_per_gpu and mem_per_gpu must be strictly increasing")
            if not np.all(np.isfinite(w)) or np.any(w < 0) or w.max() <= 0:
                raise ValueError(f"{self.name}: matrix must be finite, >= 0 and not all zero")
            object.__setattr__(self, "_w", w)
            object.__setattr__(self, "_c", c)
            object.__setattr__(self, "_m", m)
        object.__setattr__(self, "_ref_w", self.w(self.ref_cpus_per_gpu, self.ref_mem_per_gpu)
                           if self.matrix is not None else 1.0)
        if self._ref_w <= 0:  # type: ignore[attr-defined]
            raise ValueError(f"{self.name}: throughput at the reference allocation is 0")

    # -- the grid --------------------------------------------------------------------------------------
    @property
    def has_grid(self) -> bool:
        return self.matrix is not None

    def w(self, cpus_per_gpu: float, mem_per_gpu: float) -> float:
        """Throughput per GPU at the given per-GPU CPUs and memory (grid units); 1.0 without a grid."""
        if self.matrix is None:
            return 1.0
        c, m, w = self._c, self._m, self._w  # type: ignore[attr-defined]
        scale = 1.0
        if cpus_per_gpu < c[0]:  # below the grid: linear to 0 (a grid starting at 0 CPUs has that row itself)
            scale = max(0.0, cpus_per_gpu) / c[0] if c[0] > 0 else 1.0
            cpus_per_gpu = c[0]
        col = np.array([np.interp(cpus_per_gpu, c, w[:, j]) for j in range(m.size)])
        return float(np.interp(mem_per_gpu, m, col)) * scale

    def relative_w(self, cpus_per_gpu: float, mem_per_gpu: float) -> float:
        """``w(c, m) / w(reference)``: the speed factor of a CPU/memory allocation alone."""
        return self.w(cpus_per_gpu, mem_per_gpu) / self._ref_w  # type: ignore[attr-defined]

    def demand(self, threshold: float = 0.1) -> tuple[float, float]:
        """Per-GPU (CPUs, memory) Synergy would ask for: the fewest CPUs, then the least memory, whose
        throughput is within ``threshold`` of the grid's best. The reference allocation without a grid."""
        if self.matrix is None:
            return self.ref_cpus_per_gpu, self.ref_mem_per_gpu
        w = self._w  # type: ignore[attr-defined]
        target = (1 - threshold) * w.max()
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                if w[i, j] >= target:
                    return float(self._c[i]), float(self._m[j])  # type: ignore[attr-defined]
        raise AssertionError("unreachable")  # pragma: no cover

    # -- speedup ---------------------------------------------------------------------------------------
    def gpu_factor(self, gpus: float, ref_gpus: float) -> float:
        """``S(gpus) / S(ref_gpus)``: linear without a curve."""
        if gpus <= 0:
            return 0.0
        if ref_gpus <= 0:
            raise ValueError(f"ref_gpus must be > 0, got {ref_gpus}")
        if self.speedup is None:
            return gpus / ref_gpus
        s, s_ref = self.speedup(gpus), self.speedup(ref_gpus)
        try:
            f = float(s) / float(s_ref)
        except (TypeError, ValueError, ZeroDivisionError):
            f = math.nan
        if not (0 <= f < math.inf):
            raise ValueError(f"{self.name}: speedup({gpus:g}) / speedup({ref_gpus:g}) = {s!r} / {s_ref!r} is not a "
                             f"finite number >= 0")
        return f

    # -- GPU types -------------------------------------------------------------------------------------
    def type_factor(self, gpu_type: str) -> float:
        """Throughput per GPU on ``gpu_type`` relative to the reference type (1.0 without ``type_speed``)."""
        if self.type_speed is None:
            return 1.0
        try:
            return self._type_speed[gpu_type]  # type: ignore[attr-defined]
        except KeyError:
            raise ValueError(f"{self.name}: no speed for GPU type {gpu_type!r} "
                             f"(known: {', '.join(self._type_speed)})") from None  # type: ignore[attr-defined]

    def exec_time(self, work: float, gpus: float, ref_gpus: float, gpu_type: str | None = None) -> float:
        """Seconds to do ``work`` reference seconds on ``gpus`` GPUs of ``gpu_type`` (reference CPUs and memory):
        ANDREAS' t_jng."""
        r = self.gpu_factor(gpus, ref_gpus) * (1.0 if gpu_type is None else self.type_factor(gpu_type))
        return math.inf if r <= 0 else work / r

    # -- the number everyone needs ---------------------------------------------------------------------
    def rate(self, alloc: Allocation, ref_gpus: float, cluster: ClusterSpec | None = None) -> float:
        """Speed on ``alloc`` relative to the reference allocation of ``ref_gpus`` GPUs (reference seconds of
        work per second): 1.0 on exactly the reference allocation. With ``cluster`` and ``type_speed``, times
        the speed of the slowest GPU type the allocation uses."""
        g = alloc.gpus
        if g <= 0:
            return 0.0
        factor = self.gpu_factor(g, ref_gpus)
        if self.matrix is not None:
            factor *= min(self.relative_w(s.cpus / s.gpus, s.mem_gb / s.gpus) for s in alloc.shares if s.gpus > 0)
        if self.type_speed is not None and cluster is not None:
            factor *= min(self.type_factor(cluster.servers[s.server].gpu_type) for s in alloc.shares if s.gpus > 0)
        return factor

    def rate_at(self, gpus: float, ref_gpus: float, cpus: float | None = None, mem_gb: float | None = None) -> float:
        """``rate`` of a single-server allocation given as totals (CPUs/memory default to the reference)."""
        c = self.ref_cpus_per_gpu * gpus if cpus is None else cpus
        m = self.ref_mem_per_gpu * gpus if mem_gb is None else mem_gb
        f = self.gpu_factor(gpus, ref_gpus)
        if gpus <= 0 or self.matrix is None:  # no GPU, no progress (as ``rate`` answers an allocation of none)
            return f
        return f * self.relative_w(c / gpus, m / gpus)

    # -- construction ----------------------------------------------------------------------------------
    @classmethod
    def from_card(cls, card: PerformanceCard, *, name: str | None = None, ref_cpus_per_gpu: float | None = None, ref_mem_per_gpu: float | None = None,
                  devices_profiled: int = 1) -> PerfModel:
        """A perf model from a card's ``sensitivity`` and ``speedup_curve`` sections (either may be absent).

        The card's sensitivity matrix is for the job on ``devices_profiled`` devices (1 for a CPU or
        single-GPU profile), so its CPU and memory values are divided by that to get per-GPU units. The
        reference defaults to the card's demand vector when it has one (what the job was profiled to need),
        else the middle of the grid.
        """
        from perfpredict.fit.speedup import SpeedupCurve

        sens = card.sensitivity
        pred = card.prediction
        kwargs: dict[str, Any] = {"name": name or card.model.name,
                                  "source": (sens.source if sens is not None else
                                             card.speedup_curve.source if card.speedup_curve else
                                             pred.source if pred is not None else "measured")}
        if sens is not None:
            c = tuple(v / devices_profiled for v in sens.cpu_values)
            # memory columns in ascending order, each column with its values (a card may list them the other
            # way: read as they stood, 250 GB was slower than 125 GB)
            order = sorted(range(len(sens.mem_values_gb)), key=lambda j: sens.mem_values_gb[j])
            m = tuple(sens.mem_values_gb[j] / devices_profiled for j in order)
            matrix = tuple(tuple(row[j] for j in order) for row in sens.matrix)
            kwargs.update(cpus_per_gpu=c, mem_per_gpu=_strictly_increasing(m), matrix=matrix)
            kwargs["ref_cpus_per_gpu"] = (ref_cpus_per_gpu if ref_cpus_per_gpu is not None
                                          else sens.demand.cpus / devices_profiled)
            kwargs["ref_mem_per_gpu"] = (ref_mem_per_gpu if ref_mem_per_gpu is not None
                                         else sens.demand.mem_gb / devices_profiled)
        if card.speedup_curve is not None and card.speedup_curve.fit:
            curve = SpeedupCurve.from_dict(card.speedup_curve.fit)
            kwargs["speedup"] = _Speedup(curve)
        kwargs.update(_device_footprint(card))
        return cls(**kwargs)

    @classmethod
    def from_cards(cls, cards: Mapping[str, PerformanceCard], *, ref_gpu_type: str, batch_size: float | None = None,
                   name: str | None = None, **kwargs: Any) -> PerfModel:
        """One model from one card per GPU type (``{"V100": card, "T4": card}``): the reference type's card gives
        the speedup curve and grid (:meth:`from_card`, ``kwargs`` passed on), and each card's throughput at
        ``batch_size`` (default: the reference card's largest successful batch) gives ``type_speed``. A card's
        throughput is its rate model's when it has one, else its measured (or paper) point at that batch size."""
        if ref_gpu_type not in cards:
            raise ValueError(f"no card for the reference GPU type {ref_gpu_type!r} (have {', '.join(cards)})")
        ref = cards[ref_gpu_type]
        bs = batch_size if batch_size is not None else ref.max_feasible_batch()
        if bs is None:
            raise ValueError(f"the {ref_gpu_type} card of {ref.model.name} has no successful throughput point")
        speeds = {t: _card_throughput(c, bs) for t, c in cards.items()}
        base = cls.from_card(ref, name=name, **kwargs)
        return replace(base, type_speed=speeds, ref_gpu_type=ref_gpu_type)

    def describe(self) -> str:
        parts = [self.name]
        if self.matrix is not None:
            c, m = self.demand()
            parts.append(f"demand {c:g} CPU/GPU, {m:g} GB/GPU")
        if self.speedup is not None:
            parts.append(f"S(4)/S(1) = {self.speedup(4) / self.speedup(1):.2f}")
        return ", ".join(parts)


def _device_footprint(card: PerformanceCard) -> dict[str, float]:
    """What a GPU-sharing scheduler packs by, from a CUDA card: ``device_mem_gb`` and ``gpu_util``.

    The batch a trace job runs at is not known, so the largest batch on the card stands for it (the larger
    footprint, the safe side for placement, Horus §4.1.1). Memory is what the device holds for the process:
    for a predicted card the upper quantile of NVML process memory (context + allocator reserve), else the
    measured NVML process memory, else torch's peak allocation. Utilisation is the predicted median or the
    measured NVML utilisation at that batch."""
    if card.device.kind != "cuda":
        return {}
    out: dict[str, float] = {}
    pred = card.prediction
    if pred is not None and pred.points:
        top = max(pred.points, key=lambda p: p.batch_size)
        mem = top.device_memory_safe_bytes or top.peak_memory_safe_bytes
        out["device_mem_gb"] = float(mem) / 1e9
        if top.gpu_utilization is not None:
            out["gpu_util"] = float(top.gpu_utilization)
        return out
    mem_pts = [p for p in card.memory if p.nvml_process_bytes or p.peak_bytes]
    if mem_pts:
        top_m = max(mem_pts, key=lambda p: p.batch_size)
        out["device_mem_gb"] = float(top_m.nvml_process_bytes or top_m.peak_bytes) / 1e9
    util = [e for e in (card.energy.points if card.energy else []) if e.gpu_utilization is not None]
    if util:
        out["gpu_util"] = float(max(util, key=lambda e: e.batch_size).gpu_utilization)
    return out


def _card_throughput(card: PerformanceCard, batch_size: float) -> float:
    if card.rate_model is not None:
        return card.throughput_at(batch_size)
    pts = [p for p in card.measured_points() if p.samples_per_s]
    if not pts:
        raise ValueError(f"card {card.model.name} on {card.device.name}: no throughput to compare GPU types with")
    p = min(pts, key=lambda p: abs(p.batch_size - batch_size))
    return float(p.samples_per_s)  # type: ignore[arg-type]


class _Speedup:
    """A picklable wrapper of a fitted curve (simulations may run in worker processes)."""

    def __init__(self, curve: Any) -> None:
        self.curve = curve

    def __call__(self, p: float) -> float:
        return float(self.curve.speedup(p))


def _strictly_increasing(values: Sequence[float]) -> tuple[float, ...]:
    """Sorted memory columns that are equal (or differ by less than float noise) are nudged apart so
    interpolation is defined."""
    out: list[float] = []
    for v in values:
        out.append(v if not out or v > out[-1] else math.nextafter(out[-1], math.inf))
    return tuple(out)
