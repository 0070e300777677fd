"""Per-job requests of a decision: demand vectors, fallback vectors and the GPU-proportional floor, cached
per perf model."""

from __future__ import annotations

import math
from collections.abc import Sequence

from perfpredict.sched.cluster import EPS, ClusterSpec
from perfpredict.sched.job import JobState
from perfpredict.sched.mechanisms.synergy.share import _RTOL, _WTOL, _gpus_of, proportional_share
from perfpredict.sched.perf import PerfModel


class _Req:
    """One job's request for a decision (built by :class:`_RequestBuilder`)."""

    __slots__ = ("js", "idx", "g", "c", "m", "w_prop", "fb_c", "fb_m", "ok", "id", "perf", "gf", "_w_fb")

    def __init__(self, js: JobState, idx: int, g: int, c: float, m: float, w_prop: float, fb_c: float,
                 fb_m: float, ok: tuple[bool, ...] | None = None, gf: float | None = None) -> None:
        self.js = js
        self.idx = idx            # position in policy order
        self.g = g                # whole GPUs
        self.c = c                # per-GPU demand vector
        self.m = m
        self.w_prop = w_prop      # relative w on the proportional share (1.0 without a grid)
        self.fb_c = fb_c          # fallback vector (≤ proportional in every dimension, ≥ proportional throughput)
        self.fb_m = fb_m
        self.ok = ok              # servers whose devices hold the job's device memory (None: all)
        self.id: str = js.id
        self.perf: PerfModel = js.perf
        #: perf.gpu_factor(g, job.gpus), the GPU part of ``rate``
        self.gf = js.perf.gpu_factor(g, js.job.gpus) if gf is None else gf
        self._w_fb: float | None = None

    def __repr__(self) -> str:
        return f"_Req({self.id!r}, idx={self.idx}, g={self.g}, c={self.c:g}, m={self.m:g})"

    def above_prop(self, pc: float, pm: float) -> bool:
        return self.c > pc + _RTOL or self.m > pm + _RTOL

    def w(self, c: float, m: float) -> float:
        return _relative_w(self.perf, c, m)

    def w_fb(self) -> float:
        """``w(fb_c, fb_m)``."""
        if self._w_fb is None:
            self._w_fb = self.w(self.fb_c, self.fb_m)
        return self._w_fb

    def rate(self, c: float, m: float) -> float:
        """Rate on its GPU demand with (c, m) per GPU on every server (what a proportional split gives)."""
        return self.gf * self.w(c, m)


_W_MEMO: dict[tuple[int, float, float], tuple[PerfModel, float]] = {}


def _relative_w(perf: PerfModel, c: float, m: float) -> float:
    """``perf.relative_w`` memoised (mechanisms ask for the same few points over and over)."""
    if not perf.has_grid:
        return 1.0
    key = (id(perf), c, m)
    hit = _W_MEMO.get(key)
    if hit is None or hit[0] is not perf:
        if len(_W_MEMO) > 200_000:
            _W_MEMO.clear()
        hit = (perf, perf.relative_w(c, m))
        _W_MEMO[key] = hit
    return hit[1]


def _grid_order(perf: PerfModel) -> list[tuple[float, float, float]]:
    """Grid points (c, m, w) in the order :meth:`PerfModel.demand` scans them: fewest CPUs, then memory."""
    c, m, w = perf._c, perf._m, perf._w  # type: ignore[attr-defined]
    return [(float(c[i]), float(m[j]), float(w[i, j])) for i in range(c.size) for j in range(m.size)]


def _demand_vectors(perf: PerfModel, threshold: float, share: tuple[float, float],
                    floor_fix: bool) -> tuple[float, float, float, float, float]:
    """(c, m, w_prop, fb_c, fb_m) per GPU for one perf model (see the module docstring)."""
    pc, pm = share
    c, m = perf.demand(threshold)
    if not perf.has_grid:
        return c, m, 1.0, min(c, pc), min(m, pm)
    w_prop = perf.relative_w(pc, pm)
    if floor_fix and perf.relative_w(c, m) < w_prop - _WTOL:
        target = perf.w(pc, pm) - _WTOL * perf._ref_w  # type: ignore[attr-defined]
        for ci, mi, wi in _grid_order(perf):
            if wi >= target:
                c, m = ci, mi
                break
    fb_c, fb_m = min(c, pc), min(m, pm)
    if perf.relative_w(fb_c, fb_m) < w_prop - _WTOL:
        fb_c, fb_m = pc, pm
    return c, m, w_prop, fb_c, fb_m


def _fits_empty(cluster: ClusterSpec, g: int, c: float, m: float, ok: Sequence[bool] | None = None) -> bool:
    """Could a g-GPU job with per-GPU (c, m) be placed on the empty cluster (spread allowed)?"""
    total = 0
    for i, s in enumerate(cluster.servers):
        if ok is not None and not ok[i]:
            continue
        k = s.gpus
        if c > 0:
            k = min(k, math.floor(s.cpus / c + _RTOL))
        if m > 0:
            k = min(k, math.floor(s.mem_gb / m + _RTOL))
        total += max(0, k)
    return total >= g


class _RequestBuilder:
    """Demand vectors per perf model, cached across calls (perf models are shared by many jobs), and per
    (perf model, GPU demand) on the last cluster seen: everything in a request but its policy position
    depends only on those immutable inputs, so a decision only looks them up."""

    def __init__(self, threshold: float, floor_fix: bool) -> None:
        self.threshold = threshold
        self.floor_fix = floor_fix
        self._cache: dict[tuple[int, tuple[float, float]], tuple[PerfModel, tuple]] = {}
        self._cluster: ClusterSpec | None = None
        #: (id(perf), job.gpus, clamp) -> (perf, None if the job fits no server's devices, else the
        #: request's fields but js and idx), for ``self._cluster``
        self._per_job: dict[tuple[int, float, bool], tuple[PerfModel, tuple | None]] = {}
        self._share: tuple[float, float] = (0.0, 0.0)
        self._ok_by_mem: dict[float, tuple[bool, ...] | None] = {}
        self._fits_empty: dict[tuple, bool] = {}

    def _for_cluster(self, cluster: ClusterSpec) -> None:
        if cluster is not self._cluster or len(self._per_job) > 100_000:
            self._cluster = cluster
            self._share = proportional_share(cluster)
            self._per_job = {}
            self._ok_by_mem = {}
            self._fits_empty = {}

    def _fields(self, js: JobState, cluster: ClusterSpec, clamp_to_cluster: bool) -> tuple | None:
        """(g, c, m, w_prop, fb_c, fb_m, ok, gf) of the job's request, None if no server's devices hold it."""
        perf = js.perf
        key = (id(perf), js.job.gpus, clamp_to_cluster)
        hit = self._per_job.get(key)
        if hit is not None and hit[0] is perf:
            return hit[1]
        dm = perf.device_mem_gb
        if dm in self._ok_by_mem:
            ok = self._ok_by_mem[dm]
        else:
            mask = tuple(s.gpus > 0 and s.gpu_mem_gb + EPS >= dm for s in cluster.servers)
            ok = None if all(mask) else mask
            if dm == dm:  # not NaN
                self._ok_by_mem[dm] = ok
        if ok is not None and not any(ok):
            fields = None
        else:
            share = self._share
            dkey = (id(perf), share)
            dhit = self._cache.get(dkey)
            if dhit is None or dhit[0] is not perf:
                dhit = (perf, _demand_vectors(perf, self.threshold, share, self.floor_fix))
                self._cache[dkey] = dhit
            c, m, w_prop, fb_c, fb_m = dhit[1]
            g = _gpus_of(js)
            if clamp_to_cluster:
                fkey = (g, c, m, ok)
                if fkey not in self._fits_empty:
                    self._fits_empty[fkey] = _fits_empty(cluster, g, c, m, ok)
                if not self._fits_empty[fkey]:
                    # A demand no empty cluster could hold would starve the job forever: ask for the share.
                    c, m = fb_c, fb_m
            fields = (g, c, m, w_prop, fb_c, fb_m, ok, perf.gpu_factor(g, js.job.gpus))
        self._per_job[key] = (perf, fields)
        return fields

    def build(self, ordered: Sequence[JobState], cluster: ClusterSpec,
              clamp_to_cluster: bool = True) -> list[_Req]:
        """One request per job that can run on this cluster at all (jobs whose device-memory footprint fits
        no server's GPUs are left out)."""
        self._for_cluster(cluster)
        out = []
        for idx, js in enumerate(ordered):
            f = self._fields(js, cluster, clamp_to_cluster)
            if f is not None:
                out.append(_Req(js, idx, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]))
        return out

    def runnable(self, ordered: Sequence[JobState], cluster: ClusterSpec) -> list[_Req]:
        """``_select(self.build(ordered, cluster), cluster.total_gpus)`` without building the requests of the
        jobs after the point where the GPUs run out."""
        self._for_cluster(cluster)
        left = cluster.total_gpus
        out = []
        for idx, js in enumerate(ordered):
            if left <= 0:
                break
            f = self._fields(js, cluster, True)
            if f is not None and f[0] <= left:
                out.append(_Req(js, idx, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]))
                left -= f[0]
        return out


def _select(reqs: Sequence[_Req], total_gpus: int) -> list[_Req]:
    """Synergy's runnable set: in policy order, each job whose (whole) GPU demand still fits the GPUs left;
    one that does not is skipped, not waited for (as :func:`~perfpredict.sched.placement.select_by_gpus`)."""
    left, out = total_gpus, []
    for r in reqs:
        if left <= 0:
            break
        if r.g <= left:
            out.append(r)
            left -= r.g
    return out
