"""Synergy's placement mechanisms (seed 001, OSDI'22) and the big-data baselines it is compared with.

All five give every job it places exactly its GPU demand in whole GPUs (Synergy keeps the GPU demand fixed,
§4.2); what they decide is *which* servers and devices, and how many CPUs and how much memory per GPU. A job
spread over several servers always gets CPU and memory in proportion to its GPUs there
(:meth:`~perfpredict.sched.cluster.Allocation.proportional`), because a data-parallel job runs at the pace of
its worst-provisioned worker.

Shared vocabulary
-----------------
* **Demand vector** (§3.2): per GPU, the fewest CPUs and then the least memory whose throughput is within
  ``threshold`` (default 10%) of the best in the job's sensitivity grid, :meth:`PerfModel.demand`. Greedy,
  DRF and Tetris use it as is ("best-case demands", §5.7). Synergy-Tune raises it, when needed, to the
  cheapest grid point that is at least as fast as the GPU-proportional share (otherwise a job placed "at its
  demand" could run slower than the baseline, breaking §4.2's guarantee).
* **GPU-proportional share**: per GPU, the cluster's smallest ``cpus_per_gpu`` and ``mem_per_gpu`` over its
  servers: on a homogeneous cluster (Synergy's setting) exactly each server's share, 3 CPUs and 62.5 GB on
  Synergy's 8-GPU/24-CPU/500-GB servers. The *floor* of a job is its rate on that share
  (:func:`proportional_rate`); Tune and Opt never place a job below it.
* **Fallback vector**: what "switch the job to its GPU-proportional share" means here: per GPU
  ``(min(c, Cg), min(m, Mg))`` if that is still at least as fast as the share itself (it never uses more of
  anything than the share, and frees what the demand held beyond it), else exactly ``(Cg, Mg)``.

Mechanisms
----------
* :class:`SynergyGreedy` (``greedy``, §3.3): every active job in policy order, first-fit of its full demand
  vector (lowest-numbered server that fits it in every dimension; a multi-GPU job that fits no single server is
  spread first-fit over servers, each taking as many GPUs as its free CPUs/memory allow); a job that fits
  nowhere is skipped this round and the next one is tried — which is what strands GPUs when CPU or memory
  run out first (§5.4).
* :class:`SynergyTune` (``tune``, §4.2), see its docstring; optional hand-out of leftover CPU/memory.
* :class:`SynergyOpt` (``opt``, §4.1 + Appendix A): the two LPs with SciPy's HiGHS, see its docstring. It
  returns realisable allocations (LP2 rounded to whole GPUs, repaired like Tune) and reports LP1's bound.
* :class:`DRF` (``drf``, §5.7) and :class:`Tetris` (``tetris``, §5.7): static best-case demand vectors,
  all-or-nothing, no tuning; see their docstrings.

Common rules
------------
* Whole GPUs: a fractional GPU request gets ``ceil`` whole GPUs (all five are ``rigid``), like
  :class:`~perfpredict.sched.mechanisms.proportional.GpuProportional`.
* A job whose ``device_mem_gb`` exceeds a server's ``gpu_mem_gb`` is never placed there; a job that fits no
  server's devices is left out.
* A demand vector that even the empty cluster could not hold (e.g. 8 GPUs x 24 CPUs on 24-CPU servers) is
  replaced by the fallback vector, so Greedy/DRF/Tetris do not starve the job forever.
* Stickiness: a job that was running keeps its devices when they are still free and its resources fit there
  (Synergy's lease renewal, §4.3), and new placements avoid, where they can, devices other running jobs hold.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from perfpredict.sched.base import Mechanism
from perfpredict.sched.cluster import EPS, Allocation, ClusterSpec, Ledger
from perfpredict.sched.job import JobState
from perfpredict.sched.perf import PerfModel

__all__ = [
    "DRF",
    "SynergyGreedy",
    "SynergyOpt",
    "SynergyTune",
    "Tetris",
    "consolidation_caps",
    "proportional_floor_violations",
    "proportional_rate",
    "proportional_rate_floor_ok",
    "proportional_share",
]

#: Slack when comparing throughputs (relative-w values of order 1).
_WTOL = 1e-12
#: Resource slack used by this module's own fit checks: tighter than the ledger's EPS so a decision taken
#: here never trips the ledger.
_RTOL = 1e-10

DevicesByServer = dict[int, list[int]]


# ---------------------------------------------------------------------------------------------------------
# Public helpers
# ---------------------------------------------------------------------------------------------------------
def proportional_share(cluster: ClusterSpec) -> tuple[float, float]:
    """Per-GPU (CPUs, memory) of a GPU-proportional allocation: the smallest over the servers with GPUs (on
    a homogeneous cluster, every server's share)."""
    with_gpus = [s for s in cluster.servers if s.gpus > 0]
    if not with_gpus:
        return 0.0, 0.0
    return min(s.cpus_per_gpu for s in with_gpus), min(s.mem_per_gpu for s in with_gpus)


def _gpus_of(js: JobState) -> int:
    """Whole GPUs Synergy gives a job: its demand (rounded up if a trace asks for a fraction)."""
    return max(1, math.ceil(js.job.gpus - EPS))


def proportional_rate(js: JobState, cluster: ClusterSpec) -> float:
    """The job's rate on its GPU demand with the GPU-proportional share of CPUs and memory: the floor Synergy
    guarantees (§4.2)."""
    pc, pm = proportional_share(cluster)
    g = _gpus_of(js)
    f = js.perf.gpu_factor(g, js.job.gpus)
    return f * js.perf.relative_w(pc, pm) if js.perf.has_grid else f


def proportional_floor_violations(alloc_map: Mapping[str, Allocation], jobs: Sequence[JobState],
                                  cluster: ClusterSpec, tol: float = 1e-9) -> list[str]:
    """Jobs of ``alloc_map`` whose rate is below their GPU-proportional rate (by more than ``tol``,
    relative), as readable lines; empty when the guarantee holds."""
    by_id = {js.id: js for js in jobs}
    out = []
    for jid, alloc in alloc_map.items():
        js = by_id[jid]
        r, floor = js.rate_on(alloc), proportional_rate(js, cluster)
        if r < floor * (1 - tol) - tol:
            out.append(f"{jid}: rate {r:.6g} < proportional {floor:.6g}")
    return out


def proportional_rate_floor_ok(alloc_map: Mapping[str, Allocation], jobs: Sequence[JobState],
                               cluster: ClusterSpec, tol: float = 1e-9) -> bool:
    """True if every allocated job runs at least as fast as on a GPU-proportional allocation."""
    return not proportional_floor_violations(alloc_map, jobs, cluster, tol)


# ---------------------------------------------------------------------------------------------------------
# Per-job requests
# ---------------------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------------------
# Device choice
# ---------------------------------------------------------------------------------------------------------
class _DevicePicker:
    """Picks free devices on a server, preferring the job's previous ones, then devices no other running job
    holds (so it can keep them), then the rest.

    ``memo`` (job id -> (allocation, what this class derives from it)) may be kept across decisions by a
    mechanism: running allocations are immutable, so a job still running on the very same allocation object
    is not looked at again."""

    def __init__(self, running: Mapping[str, Allocation],
                 memo: dict[str, tuple[Allocation, tuple | None]] | None = None) -> None:
        self.running = running
        #: per server, the devices running jobs hold
        reserved: dict[int, set[int]] = {}
        for a in running.values():
            for sh in a.shares:
                if sh.devices:
                    held = reserved.get(sh.server)
                    if held is None:
                        reserved[sh.server] = set(sh.devices)
                    else:
                        held.update(sh.devices)
        self.reserved = reserved
        if memo is None:
            memo = {}
        elif len(memo) > 2 * len(running) + 64:  # forget jobs that no longer run
            for jid in [j for j in memo if j not in running]:
                del memo[jid]
        self._memo = memo

    def _prev(self, jid: str) -> tuple | None:
        """(whole GPUs, {server: devices}, {server: sorted devices} or None, {server: count}) of the job's
        running allocation; None if it has none or it holds a fraction of a device. Shared, not to be changed."""
        a = self.running.get(jid)
        if a is None:
            return None
        hit = self._memo.get(jid)
        if hit is not None and hit[0] is a:
            return hit[1]
        gpus = 0.0
        info: tuple | None = None
        for sh in a.shares:
            gpus += sh.gpus
            if 0 < sh.gpus < 1 - EPS:
                break
        else:
            devs = {sh.server: list(sh.devices) for sh in a.shares}
            # what devices() picks for these counts when all of them are free: the job's own devices, sorted
            mine = {s: sorted(d) for s, d in devs.items()} if all(devs.values()) else None
            info = (gpus, devs, mine, {s: len(d) for s, d in devs.items()})
        self._memo[jid] = (a, info)
        return info

    def pick(self, ledger: Ledger, jid: str, server: int, k: int) -> list[int]:
        free = ledger.free_devices(server)
        if len(free) < k:
            raise AssertionError(f"server {server}: {k} devices asked, {len(free)} free")  # pragma: no cover
        if len(free) == k:
            return free
        own: set[int] = set()
        a = self.running.get(jid)
        if a is not None:
            for sh in a.shares:
                if sh.server == server:
                    own.update(sh.devices)
        reserved = self.reserved.get(server, ())
        # (rank, device) order: the job's own devices, then devices nobody running holds, then the rest
        first = [d for d in free if d in own]
        if len(first) >= k:
            return first[:k]
        first += [d for d in free if d not in own and d not in reserved]
        if len(first) < k:
            first += [d for d in free if d not in own and d in reserved]
        return sorted(first[:k])

    def devices(self, ledger: Ledger, jid: str, counts: Mapping[int, int]) -> DevicesByServer:
        return {s: self.pick(ledger, jid, s, k) for s, k in counts.items() if k > 0}

    def _prev_if_free(self, ledger: Ledger, jid: str, g: int) -> tuple | None:
        prev = self._prev(jid)
        if prev is None or abs(prev[0] - g) > EPS:
            return None
        device_free = ledger.device_free
        for s, devs in prev[1].items():
            free = device_free[s]
            for d in devs:
                if free[d] < 1 - EPS:
                    return None
        return prev

    def previous(self, ledger: Ledger, jid: str, g: int) -> DevicesByServer | None:
        """The job's previous devices if it had exactly ``g`` whole GPUs and they are all free."""
        prev = self._prev_if_free(ledger, jid, g)
        return None if prev is None else {s: list(devs) for s, devs in prev[1].items()}

    def previous_placement(self, ledger: Ledger, jid: str, g: int
                           ) -> tuple[DevicesByServer, dict[int, int]] | None | bool:
        """For the counts of :meth:`previous` (the job's previous devices per server), ``(self.devices(ledger,
        jid, counts), counts)``, i.e. its previous devices sorted, when :meth:`previous` finds them all free;
        else None. ``False`` where :meth:`previous` would find them but an odd allocation (a share without
        devices) needs the general path. The dicts are shared: callers must not change them."""
        prev = self._prev_if_free(ledger, jid, g)
        if prev is None:
            return None
        if prev[2] is None:
            return False
        return prev[2], prev[3]


def _fits(ledger: Ledger, counts: Mapping[int, int], c: float, m: float) -> bool:
    for s, k in counts.items():
        if ledger.free_gpus(s) < k or k * c > ledger.free_cpus[s] + _RTOL or k * m > ledger.free_mem[s] + _RTOL:
            return False
    return True


def _capacity(ledger: Ledger, s: int, c: float, m: float) -> int:
    """How many GPUs of a job with per-GPU (c, m) server ``s`` can take now."""
    k = ledger.free_gpus(s)
    if c > 0:
        k = min(k, math.floor((ledger.free_cpus[s] + _RTOL) / c))
    if m > 0:
        k = min(k, math.floor((ledger.free_mem[s] + _RTOL) / m))
    return max(0, k)


def _servers(ledger: Ledger, ok: Sequence[bool] | None) -> list[int]:
    return [s for s in range(ledger.spec.n_servers) if ok is None or ok[s]]


def _first_fit(ledger: Ledger, g: int, c: float, m: float, ok: Sequence[bool] | None = None) -> dict[int, int] | None:
    """Lowest-numbered server that fits (g, g·c, g·m); for multi-GPU jobs that fit no single server, spread
    first-fit over servers by index. None if it does not fit."""
    servers = _servers(ledger, ok)
    for s in servers:
        if ledger.free_gpus(s) >= g and g * c <= ledger.free_cpus[s] + _RTOL and g * m <= ledger.free_mem[s] + _RTOL:
            return {s: g}
    if g <= 1:
        return None
    need, out = g, {}
    for s in servers:
        k = min(_capacity(ledger, s, c, m), need)
        if k > 0:
            out[s] = k
            need -= k
            if need == 0:
                return out
    return None


def _gpu_min_servers(ledger: Ledger, g: int, ok: Sequence[bool] | None = None) -> int | None:
    """The fewest servers whose free GPUs hold ``g`` (None if the cluster has fewer free)."""
    free = sorted((ledger.free_gpus(s) for s in _servers(ledger, ok)), reverse=True)
    acc = 0
    for i, f in enumerate(free):
        acc += f
        if acc >= g:
            return i + 1
    return None


def _best_fit(ledger: Ledger, g: int, c: float, m: float, ok: Sequence[bool] | None = None) -> dict[int, int] | None:
    """Tune's packing: the server with the least free resources that fits the whole demand vector (fewest free
    GPUs, then least free CPU+memory, normalised); a job that needs several servers for its GPUs alone goes
    on that many servers, the ones that can take most of it first. None if it does not fit like that."""
    spec = ledger.spec
    servers = _servers(ledger, ok)
    best, best_key = None, None
    for s in servers:
        fg = ledger.free_gpus(s)
        if fg < g or g * c > ledger.free_cpus[s] + _RTOL or g * m > ledger.free_mem[s] + _RTOL:
            continue
        srv = spec.servers[s]
        key = (fg, ledger.free_cpus[s] / max(srv.cpus, EPS) + ledger.free_mem[s] / max(srv.mem_gb, EPS), s)
        if best_key is None or key < best_key:
            best, best_key = s, key
    if best is not None:
        return {best: g}
    k_min = _gpu_min_servers(ledger, g, ok)
    if g <= 1 or k_min is None or k_min <= 1:
        return None
    caps = sorted(((_capacity(ledger, s, c, m), s) for s in servers), key=lambda t: (-t[0], t[1]))
    need, out = g, {}
    for k, s in caps[:k_min]:
        take = min(k, need)
        if take > 0:
            out[s] = take
            need -= take
    return out if need == 0 else None


def _gpu_best_fit(ledger: Ledger, g: int, ok: Sequence[bool] | None = None) -> dict[int, int] | None:
    """GPUs only: the single server with the fewest free GPUs that holds ``g`` (ties: most free CPU+memory),
    else the fewest servers, largest free first."""
    spec = ledger.spec
    servers = _servers(ledger, ok)
    cands = []
    for s in servers:
        fg = ledger.free_gpus(s)
        if fg >= g:
            srv = spec.servers[s]
            cands.append((fg, -(ledger.free_cpus[s] / max(srv.cpus, EPS) + ledger.free_mem[s] / max(srv.mem_gb, EPS)), s))
    if cands:
        return {min(cands)[2]: g}
    free = sorted(((ledger.free_gpus(s), s) for s in servers), key=lambda t: (-t[0], t[1]))
    need, out = g, {}
    for f, s in free:
        if need == 0 or f == 0:
            break
        out[s] = min(f, need)
        need -= out[s]
    return out if need == 0 else None


def _alloc(devices: DevicesByServer, g: int, c: float, m: float, perf: PerfModel) -> Allocation:
    return Allocation.proportional(devices, cpus=g * c, mem_gb=g * m, device_mem_gb=perf.device_mem_gb)


# ---------------------------------------------------------------------------------------------------------
# The packer Tune and Opt share: placements that can be switched back to their proportional share
# ---------------------------------------------------------------------------------------------------------
class _Placed:
    """A job the packer placed: its devices (fixed once placed) and (c, m) per GPU (changed by resizes)."""

    __slots__ = ("req", "devices", "c", "m", "counts", "_w")

    def __init__(self, req: _Req, devices: DevicesByServer, c: float, m: float,
                 counts: dict[int, int] | None = None) -> None:
        self.req = req
        self.devices = devices
        self.c = c
        self.m = m
        self.counts: dict[int, int] = {s: len(d) for s, d in devices.items()} if counts is None else counts
        self._w: float | None = None

    def w(self) -> float:
        """``req.w(c, m)``, the relative w where it stands now."""
        if self._w is None:
            self._w = self.req.w(self.c, self.m)
        return self._w

    @property
    def alloc(self) -> Allocation:
        return _alloc(self.devices, self.req.g, self.c, self.m, self.req.perf)


class _Packer:
    """A ledger plus who holds what, able to switch placed jobs back to their fallback (≤ proportional)
    vector to make room (§4.2 step 2)."""

    def __init__(self, cluster: ClusterSpec) -> None:
        self.ledger = Ledger(cluster)
        self.pc, self.pm = proportional_share(cluster)
        self.placed: dict[str, _Placed] = {}
        self.on_server: list[set[str]] = [set() for _ in range(cluster.n_servers)]
        self.reverted = 0

    def place(self, req: _Req, devices: DevicesByServer, c: float, m: float,
              counts: dict[int, int] | None = None) -> _Placed:
        """Place ``req`` on ``devices`` at (c, m) per GPU (``counts``: the number of devices per server, if the
        caller has it). The ledger takes exactly what ``Allocation.proportional`` would hold; the allocation
        itself is only built by :meth:`result`."""
        self.ledger.take_proportional(devices, req.g * c, req.g * m, req.perf.device_mem_gb)
        p = _Placed(req, devices, c, m, counts)
        self.placed[req.id] = p
        for s in devices:
            self.on_server[s].add(req.id)
        return p

    def resize(self, p: _Placed, c: float, m: float) -> None:
        led, g, dm = self.ledger, p.req.g, p.req.perf.device_mem_gb
        led.release_proportional(p.devices, g * p.c, g * p.m, dm)
        try:
            led.take_proportional(p.devices, g * c, g * m, dm)
        except Exception:
            led.take_proportional(p.devices, g * p.c, g * p.m, dm)
            raise
        p.c, p.m, p._w = c, m, None

    # -- making room -----------------------------------------------------------------------------------
    def _deficit(self, s: int, want_c: float, want_m: float) -> tuple[float, float]:
        return want_c - self.ledger.free_cpus[s], want_m - self.ledger.free_mem[s]

    def free_up(self, s: int, want_c: float, want_m: float, exclude: set[str]) -> bool:
        """Revert jobs on server ``s`` holding more than their fallback until ``want_c`` CPUs and ``want_m``
        GB are free there. Jobs losing the least throughput per resource freed go first."""
        dc, dm = self._deficit(s, want_c, want_m)
        if dc <= _RTOL and dm <= _RTOL:
            return True
        srv = self.ledger.spec.servers[s]
        cands = []
        for jid in self.on_server[s]:
            if jid in exclude:
                continue
            p = self.placed[jid]
            req = p.req
            k = len(p.devices[s])
            free_c = k * max(0.0, p.c - req.fb_c)
            free_m = k * max(0.0, p.m - req.fb_m)
            gain = (free_c / max(srv.cpus, EPS) if dc > _RTOL else 0.0) + (free_m / max(srv.mem_gb, EPS) if dm > _RTOL else 0.0)
            if gain <= 0:
                continue
            loss = max(0.0, p.w() - req.w_fb())
            cands.append((loss / gain, req.idx, jid))
        for _, _, jid in sorted(cands):
            self.revert(self.placed[jid], exclude | {jid})
            dc, dm = self._deficit(s, want_c, want_m)
            if dc <= _RTOL and dm <= _RTOL:
                return True
        return False

    def revert(self, p: _Placed, exclude: set[str]) -> bool:
        """Switch ``p`` to its fallback vector. Usually that only frees resources; when the fallback is the
        exact share and holds more of one resource than ``p`` did, room for the increase is made first."""
        fc, fm = p.req.fb_c, p.req.fb_m
        if abs(p.c - fc) <= _RTOL and abs(p.m - fm) <= _RTOL:
            return True
        for _ in range(len(self.placed) + 1):
            short = [(s, k * (fc - p.c), k * (fm - p.m)) for s, k in p.counts.items()]
            short = [(s, ic, im) for s, ic, im in short
                     if ic > self.ledger.free_cpus[s] + _RTOL or im > self.ledger.free_mem[s] + _RTOL]
            if not short:
                self.resize(p, fc, fm)
                self.reverted += 1
                return True
            progress = False
            for s, ic, im in short:
                before = self.reverted
                self.free_up(s, max(ic, 0.0), max(im, 0.0), exclude | {p.req.id})
                progress |= self.reverted > before
            if not progress:
                return False
        return False  # pragma: no cover

    def ensure(self, counts: Mapping[int, int], c: float, m: float, exclude: set[str]) -> bool:
        """Make (k·c, k·m) free on every server of ``counts`` by reverting others (§4.2 step 2)."""
        for _ in range(len(self.placed) + 1):
            short = [s for s, k in counts.items()
                     if k * c > self.ledger.free_cpus[s] + _RTOL or k * m > self.ledger.free_mem[s] + _RTOL]
            if not short:
                return True
            before = self.reverted
            for s in short:
                self.free_up(s, counts[s] * c, counts[s] * m, exclude)
            if self.reverted == before:
                return False
        return False  # pragma: no cover

    # -- leftovers -------------------------------------------------------------------------------------
    def hand_out_leftovers(self, order: Sequence[str]) -> int:
        """Give spare CPU/memory to jobs that run faster with it: each job in ``order`` moves to the fastest
        grid point that fits what it holds plus what is free on its servers (ties: fewest CPUs, then least
        memory). Returns how many moved."""
        moved = 0
        free_cpus, free_mem = self.ledger.free_cpus, self.ledger.free_mem
        for jid in order:
            p = self.placed.get(jid)
            if p is None or not p.req.perf.has_grid:
                continue
            counts = p.counts
            if len(counts) == 1:
                [(s, k)] = counts.items()
                c_lim = (free_cpus[s] + k * p.c) / k
                m_lim = (free_mem[s] + k * p.m) / k
            else:
                c_lim = min((free_cpus[s] + k * p.c) / k for s, k in counts.items())
                m_lim = min((free_mem[s] + k * p.m) / k for s, k in counts.items())
            c_vals, m_vals, best = _grid_best_within(p.req.perf)
            pt = best[bisect_right(c_vals, c_lim + _RTOL / 8)][bisect_right(m_vals, m_lim + _RTOL / 8)]
            if pt is not None and pt[2] > p.w() + 1e-9:
                self.resize(p, pt[0], pt[1])
                moved += 1
        return moved

    def result(self, cache: dict[str, tuple[tuple, Allocation]] | None = None) -> dict[str, Allocation]:
        """The allocations. With ``cache`` (job id -> (how its last allocation was built, the allocation)),
        a job whose allocation is built from exactly the same devices and amounts as last time gets the same
        (immutable) object back instead of a new equal one; ``cache`` is then refreshed to this decision's."""
        if cache is None:
            return {jid: p.alloc for jid, p in self.placed.items()}
        out: dict[str, Allocation] = {}
        fresh: dict[str, tuple[tuple, Allocation]] = {}
        for jid, p in self.placed.items():
            g, dm = p.req.g, p.req.perf.device_mem_gb
            key = (p.devices, g * p.c, g * p.m, dm)  # devices are never changed once placed
            hit = cache.get(jid)
            if hit is not None and hit[0] == key:
                alloc = hit[1]
            else:
                alloc = _alloc(p.devices, g, p.c, p.m, p.req.perf)
            out[jid] = alloc
            fresh[jid] = (key, alloc)
        cache.clear()
        cache.update(fresh)
        return out


_GRID_CACHE: dict[int, tuple[PerfModel, tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
_BEST_WITHIN_CACHE: dict[int, tuple[PerfModel, tuple[list[float], list[float], list[list]]]] = {}


def _grid_arrays(perf: PerfModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flattened grid (c, m, relative w) per GPU of a perf model with a grid."""
    hit = _GRID_CACHE.get(id(perf))
    if hit is None or hit[0] is not perf:
        c, m, w = perf._c, perf._m, perf._w  # type: ignore[attr-defined]
        cc, mm = np.meshgrid(c, m, indexing="ij")
        arrs = (cc.ravel().astype(float), mm.ravel().astype(float), (w / perf._ref_w).ravel())  # type: ignore[attr-defined]
        hit = (perf, arrs)
        _GRID_CACHE[id(perf)] = hit
    return hit[1]


def _grid_best_within(perf: PerfModel) -> tuple[list[float], list[float], list[list[tuple[float, float, float] | None]]]:
    """For a perf model with a grid: its CPU values, its memory values and a table ``best[i][j]``, the fastest
    grid point (c, m, relative w) among those with the ``i`` smallest CPU values and the ``j`` smallest memory
    values (ties: fewest CPUs, then least memory, then grid order, as ``np.lexsort((m, c, -w))`` over the
    points of :func:`_grid_arrays`; None when ``i`` or ``j`` is 0). So the fastest point with ``c <= c_lim`` and
    ``m <= m_lim`` is ``best[bisect_right(c_vals, c_lim)][bisect_right(m_vals, m_lim)]``."""
    hit = _BEST_WITHIN_CACHE.get(id(perf))
    if hit is None or hit[0] is not perf:
        pc, pm, pw = _grid_arrays(perf)
        c_vals = perf._c.astype(float).tolist()  # type: ignore[attr-defined]
        m_vals = perf._m.astype(float).tolist()  # type: ignore[attr-defined]
        nc, nm = len(c_vals), len(m_vals)
        order = np.lexsort((pm, pc, -pw))  # order[r]: the point of rank r
        rank = np.empty(pw.size, dtype=np.intp)
        rank[order] = np.arange(pw.size)
        # the best (lowest) rank over every prefix rectangle of the (CPU, memory) grid: a 2-D running minimum
        first = np.minimum.accumulate(np.minimum.accumulate(rank.reshape(nc, nm), axis=0), axis=1)
        idx = order[first]
        cs, ms, ws = pc[idx].tolist(), pm[idx].tolist(), pw[idx].tolist()
        best: list[list[tuple[float, float, float] | None]] = [[None] * (nm + 1)]
        best += [[None, *zip(cs[i], ms[i], ws[i], strict=True)] for i in range(nc)]
        hit = (perf, (c_vals, m_vals, best))
        _BEST_WITHIN_CACHE[id(perf)] = hit
    return hit[1]


def _place_with_repair(packer: _Packer, req: _Req, counts: Mapping[int, int], picker: _DevicePicker,
                       c: float, m: float, devices: DevicesByServer | None = None) -> _Placed | None:
    """Place ``req`` on ``counts`` GPUs per server at (c, m) per GPU if it fits; else at its fallback if (c, m)
    is above the share; else make room by reverting others there. ``devices``: what ``picker.devices`` picks
    for ``counts`` if the caller knows it already (making room only resizes others' CPUs and memory, so it
    does not change which devices are free)."""
    led = packer.ledger
    if _fits(led, counts, c, m):
        return packer.place(req, devices or picker.devices(led, req.id, counts), c, m)
    if c > req.fb_c + _RTOL or m > req.fb_m + _RTOL:
        c, m = req.fb_c, req.fb_m
        if _fits(led, counts, c, m):
            return packer.place(req, devices or picker.devices(led, req.id, counts), c, m)
    if packer.ensure(counts, c, m, exclude={req.id}) and _fits(led, counts, c, m):
        return packer.place(req, devices or picker.devices(led, req.id, counts), c, m)
    return None


def _best_point_that_fits(packer: _Packer, req: _Req, counts: Mapping[int, int]) -> tuple[float, float] | None:
    """The fastest grid point, at least as fast as the proportional share, that fits what is free now on the
    servers of ``counts`` (None if none does)."""
    if not req.perf.has_grid:
        return None
    led = packer.ledger
    c_lim = min((led.free_cpus[s] + _RTOL / 2) / k for s, k in counts.items())
    m_lim = min((led.free_mem[s] + _RTOL / 2) / k for s, k in counts.items())
    pc, pm, pw = _grid_arrays(req.perf)
    ok = (pc <= c_lim) & (pm <= m_lim) & (pw >= req.w_prop - _WTOL)
    if not ok.any():
        return None
    i = np.flatnonzero(ok)
    best = i[np.lexsort((pm[i], pc[i], -pw[i]))[0]]
    return float(pc[best]), float(pm[best])


# ---------------------------------------------------------------------------------------------------------
# Synergy-Greedy
# ---------------------------------------------------------------------------------------------------------
class SynergyGreedy(Mechanism):
    """First-fit of each job's full demand vector in policy order; a job that does not fit in every dimension
    is skipped this round (§3.3). ``last_stats``: ``placed``, ``skipped`` (jobs passed over although GPUs
    were free for them), ``idle_gpus``."""

    name = "greedy"
    rigid = True

    def __init__(self, threshold: float = 0.1) -> None:
        super().__init__()
        self._requests = _RequestBuilder(threshold, floor_fix=False)

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        ledger = Ledger(cluster)
        picker = _DevicePicker(running)
        out: dict[str, Allocation] = {}
        skipped = 0
        for r in self._requests.build(ordered, cluster):
            free = ledger.total_free_gpus
            if free == 0:
                break
            devices = picker.previous(ledger, r.id, r.g)
            if devices is None or not _fits(ledger, {s: len(d) for s, d in devices.items()}, r.c, r.m):
                counts = _first_fit(ledger, r.g, r.c, r.m, r.ok)
                if counts is None:
                    skipped += int(r.g <= free)
                    continue
                devices = picker.devices(ledger, r.id, counts)
            alloc = _alloc(devices, r.g, r.c, r.m, r.perf)
            ledger.take(alloc)
            out[r.id] = alloc
        self.last_stats = {"placed": float(len(out)), "skipped": float(skipped),
                           "idle_gpus": float(ledger.total_free_gpus)}
        return out


# ---------------------------------------------------------------------------------------------------------
# Synergy-Tune
# ---------------------------------------------------------------------------------------------------------
class SynergyTune(Mechanism):
    """Synergy-Tune (§4.2).

    1. Runnable set: the top jobs in policy order whose GPU demands fit the cluster's GPUs
       (as :func:`~perfpredict.sched.placement.select_by_gpus`); CPU and memory never exclude a job.
    2. Jobs that were running and whose devices are still free are placed first, on those devices (lease
       renewal, §4.3); the rest follow. Each group is sorted by GPU, then CPU, then memory demand (largest
       first) and placed best-fit: the server with the least free resources that fits the whole demand
       vector; a job that needs several servers for its GPUs goes on that minimum number of servers with its
       CPU/memory split in proportion to GPUs.
    3. If it does not fit: (1) a demand above the proportional share is switched to the fallback vector and
       retried; (2) otherwise (or if still no fit) the job goes on the GPU-best-fit servers, and jobs there
       holding more than their share are switched to their fallback — least throughput lost per resource
       freed first — until it fits. Every placed job is at its demand, a grid point above it (leftovers) or
       its fallback, all at least as fast as the GPU-proportional share, so no job runs below it.
    4. ``redistribute=True`` (default): CPU and memory left free are then handed, in policy order, to jobs
       that run faster with more (each moves to the fastest grid point that fits what is free on its
       servers); the paper does this at low load (§5.3). ``False`` keeps jobs at their demand vectors.

    ``last_stats``: ``placed``, ``reverted`` (switches to the share to make room), ``fallback`` (jobs
    placed at their fallback in step 3.1), ``upgraded`` (leftover hand-outs), ``total_rate``.

    Speed: what an instance keeps between calls is only caches keyed by immutable inputs (each job's request
    per perf model and GPU demand on the cluster; what it derived from the running allocations, reused while
    a job's allocation is the very same object; the allocations it returned, handed back unchanged when a
    job's devices and amounts are unchanged), so a decision depends only on the call's arguments.
    ``tests/test_synergy_mechanisms.py`` pins the decisions against ones recorded before these caches.
    """

    name = "tune"
    rigid = True

    def __init__(self, threshold: float = 0.1, redistribute: bool = True) -> None:
        super().__init__()
        self.redistribute = redistribute
        self._requests = _RequestBuilder(threshold, floor_fix=True)
        #: the last decision's allocations and how they were built (see _Packer.result), and what the device
        #: picker derived from the running allocations (see _DevicePicker): kept across decisions
        self._allocs: dict[str, tuple[tuple, Allocation]] = {}
        self._picker_memo: dict[str, tuple[Allocation, tuple | None]] = {}

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        reqs = self._requests.runnable(ordered, cluster)
        packer = _Packer(cluster)
        picker = _DevicePicker(running, self._picker_memo)
        fallback = 0

        def size_key(r: _Req) -> tuple:
            return (-r.g, -r.g * r.c, -r.g * r.m, r.idx)

        sticky, fresh = [], []
        for r in reqs:
            (sticky if r.id in running else fresh).append(r)
        for r in sorted(sticky, key=size_key) + sorted(fresh, key=size_key):
            led = packer.ledger
            prev = picker.previous_placement(led, r.id, r.g)
            if prev:
                devices, counts = prev
                if _fits(led, counts, r.c, r.m):  # (what _place_with_repair tries first)
                    packer.place(r, devices, r.c, r.m, counts)
                    continue
                if _place_with_repair(packer, r, counts, picker, r.c, r.m, devices) is not None:
                    continue
            elif prev is False and (prev_devices := picker.previous(led, r.id, r.g)) is not None:
                counts = {s: len(d) for s, d in prev_devices.items()}
                if _place_with_repair(packer, r, counts, picker, r.c, r.m) is not None:
                    continue
            counts = _best_fit(led, r.g, r.c, r.m, r.ok)
            c, m = r.c, r.m
            if counts is None and r.above_prop(packer.pc, packer.pm):  # step (1)
                c, m = r.fb_c, r.fb_m
                counts = _best_fit(led, r.g, c, m, r.ok)
                fallback += counts is not None
            if counts is not None:
                packer.place(r, picker.devices(led, r.id, counts), c, m)
                continue
            counts = _gpu_best_fit(led, r.g, r.ok)  # step (2)
            if counts is not None and packer.ensure(counts, c, m, exclude={r.id}) and _fits(led, counts, c, m):
                packer.place(r, picker.devices(led, r.id, counts), c, m)
        upgraded = packer.hand_out_leftovers([r.id for r in reqs]) if self.redistribute else 0
        self.last_stats = {"placed": float(len(packer.placed)), "reverted": float(packer.reverted),
                           "fallback": float(fallback), "upgraded": float(upgraded),
                           "total_rate": float(sum(p.req.gf * p.w() for p in packer.placed.values()))}
        return packer.result(self._allocs)


# ---------------------------------------------------------------------------------------------------------
# Synergy-Opt
# ---------------------------------------------------------------------------------------------------------
@dataclass
class _Candidates:
    """LP1 candidate points of one job, per GPU: c, m, relative w."""

    c: np.ndarray
    m: np.ndarray
    w: np.ndarray


def _lp1_candidates(r: _Req, share: tuple[float, float], extended: bool) -> _Candidates:
    """The job's configurations for LP1.

    ``extended=False`` (the ILP): the sensitivity grid plus the proportional share and the fallback vector, so
    every allocation Tune can make is a candidate. ``extended=True`` (the LP bound): additionally a zero-CPU
    row (W = 0; :class:`PerfModel` falls linearly to 0 below the grid's first CPU value) and a zero-memory
    column (W as at the first memory value; it clamps below the grid). Bilinear interpolation is a convex
    combination of the four surrounding grid points with the same resource use, so the LP over these points
    contains every allocation the perf model can rate: its optimum bounds any mechanism's total rate.
    """
    pc, pm = share
    perf = r.perf
    if not perf.has_grid:
        # Insensitive job: rate 1 whatever it gets; the cheapest sensible point is its demand capped by the share.
        return _Candidates(np.array([min(r.c, pc)]), np.array([min(r.m, pm)]), np.array([1.0]))
    c_grid, m_grid = perf._c.astype(float), perf._m.astype(float)  # type: ignore[attr-defined]
    w_rel = perf._w / perf._ref_w  # type: ignore[attr-defined]
    if extended:
        if c_grid[0] > 0:
            c_grid = np.concatenate([[0.0], c_grid])
            w_rel = np.vstack([np.zeros((1, w_rel.shape[1])), w_rel])
        if m_grid[0] > 0:
            m_grid = np.concatenate([[0.0], m_grid])
            w_rel = np.hstack([w_rel[:, :1], w_rel])
    cc, mm = np.meshgrid(c_grid, m_grid, indexing="ij")
    c = [cc.ravel(), np.array([pc, r.fb_c])]
    m = [mm.ravel(), np.array([pm, r.fb_m])]
    w = [w_rel.ravel(), np.array([r.w(pc, pm), r.w(r.fb_c, r.fb_m)])]
    return _Candidates(np.concatenate(c), np.concatenate(m), np.concatenate(w))


def consolidation_caps(g: int, cluster: ClusterSpec) -> tuple[float, float]:
    """Per-GPU (CPUs, memory) a ``g``-GPU job can get at most when it is kept on the fewest servers that hold its
    GPUs (seed 001 §6: "no more than a server's worth of CPU or memory resources can be allocated to a job if
    its GPU demands can be satisfied by one server"; §4.2 puts a larger job on "a minimum set of servers with
    sufficient GPU availability"): the CPUs and memory of the fewest (largest) servers with ``g`` GPUs,
    divided by ``g``. Synergy-Tune stays within it whenever that many servers have the GPUs free; it spreads a
    job further (and may exceed it) only when the free GPUs are fragmented."""
    servers = sorted((s for s in cluster.servers if s.gpus > 0), key=lambda s: (-s.gpus, -s.cpus, -s.mem_gb))
    cpus = mem = 0.0
    got = 0
    for s in servers:
        if got >= g:
            break
        got += s.gpus
        cpus, mem = cpus + s.cpus, mem + s.mem_gb
    return cpus / g, mem / g


def _whole_server_jobs(reqs: Sequence[_Req], cluster: ClusterSpec) -> list[int]:
    """Indices of the jobs that, kept on the fewest servers, fill whole servers: on a homogeneous cluster, GPU
    demands that are a multiple of a server's GPUs (an 8-GPU job on 8-GPU servers). Empty otherwise."""
    with_gpus = [s for s in cluster.servers if s.gpus > 0]
    if not with_gpus or len({(s.gpus, s.cpus, s.mem_gb) for s in with_gpus}) != 1:
        return []
    k = with_gpus[0].gpus
    return [j for j, r in enumerate(reqs) if r.g % k == 0]


def _capped(cd: _Candidates, r: _Req, cap: tuple[float, float]) -> _Candidates:
    """``cd`` without the points above ``cap`` per GPU, plus the grid's values on the cap's row and column (so
    every allocation inside the cap stays a convex combination of candidates: a valid bound)."""
    cc, cm = cap
    keep = (cd.c <= cc + _RTOL) & (cd.m <= cm + _RTOL)
    c, m, w = [cd.c[keep]], [cd.m[keep]], [cd.w[keep]]
    if r.perf.has_grid:
        cs = np.unique(np.concatenate([cd.c[cd.c <= cc + _RTOL], [min(cc, float(cd.c.max()))]]))
        ms = np.unique(np.concatenate([cd.m[cd.m <= cm + _RTOL], [min(cm, float(cd.m.max()))]]))
        extra = [(cc, mi) for mi in ms] + [(ci, cm) for ci in cs]
        extra = [(ci, mi) for ci, mi in extra if ci <= cc + _RTOL and mi <= cm + _RTOL]
        c.append(np.array([e[0] for e in extra]))
        m.append(np.array([e[1] for e in extra]))
        w.append(np.array([r.w(ci, mi) if ci > 0 else 0.0 for ci, mi in extra]))
    return _Candidates(np.concatenate(c), np.concatenate(m), np.concatenate(w))


class SynergyOpt(Mechanism):
    """Synergy-Opt (§4.1, Appendix A), solved with SciPy's HiGHS.

    The runnable set is Tune's (top jobs in policy order whose GPU demands fit the cluster's GPUs).

    The bound assumes every runnable job is placed, which Tune and Opt always do on a homogeneous cluster
    (the runnable set fits the GPUs and the proportional share always fits); with device-memory limits on
    heterogeneous servers a job may find no device, and a mechanism running fewer jobs can exceed it.

    **LP1** (eqs. 1–5, idealised single super-server). Variables ``y[j,p] ∈ [0,1]`` for every job ``j`` and
    configuration ``p = (c, m)`` per GPU of its candidate set. Maximise ``Σ W_j[p]·y[j,p]`` with ``W`` the
    job's rate factor (relative to its reference allocation), subject to ``Σ g_j·c_p·y ≤ C`` and
    ``Σ g_j·m_p·y ≤ M`` (cluster totals), ``Σ_p y[j,p] = 1`` per job, and ``Σ_p W_j[p]·y[j,p] ≥ W_j[Cg, Mg]``
    per job (the GPU-proportional floor). Solved twice:

    * as an **LP relaxation** over the *extended* candidate set (see :func:`_lp1_candidates`): its optimum is
      ``last_stats["opt_bound"]``, an upper bound on the total rate any allocation of the runnable set can
      reach under this perf model (fractional y = interpolated allocations);
    * as the paper's **ILP** (``ilp=True``, default; binary y over the grid plus the share and fallback
      points, ``time_limit`` seconds, ``mip_rel_gap``), whose choice gives each job its (c*_j, m*_j). Its
      value is ``ilp_value``. With ``ilp=False``, or if the ILP returns no solution in time, each job takes
      its LP point of largest weight instead.

    **LP2** (Appendix A.1.3). Variables ``x[i,j] ≥ 0``: the fraction of job j's vector (g_j, g_j·c*_j,
    g_j·m*_j) on server i, with ``Σ_i x[i,j] = 1`` per job and per-server GPU, CPU and memory capacities.
    The paper's objective (fewest split jobs) is not linear; like its Theorem A.2 we rely on a *vertex*
    solution (dual simplex), in which at most 3·s jobs are split, and use the cost vector to prefer the
    servers a job already ran on (``1 − share of its previous GPUs there``) and, lightly, lower-numbered
    servers (consolidation). Jobs with more than one positive ``x`` are ``fragmented_jobs``. If LP2 is
    infeasible (heterogeneous servers), it is re-solved with every job at its fallback vector, and if that
    fails too the jobs are placed by Tune's packing.

    **Rounding** to a realisable allocation: job j gets ``⌊x[i,j]·g_j⌋`` GPUs on server i; its remaining GPUs
    go one at a time to the servers with the largest fractional part (then those it already uses, then most
    free GPUs) that still have unassigned GPUs — always possible since the runnable set fits the GPUs. Every
    job then gets (c*_j, m*_j) per GPU, split in proportion to its GPUs; jobs LP2 placed whole go first,
    previously running jobs keep their devices when they stay on a server. Where the rounding overfills a
    server's CPU or memory, the job first shrinks to the fastest grid point that fits what is free on its
    servers and is still at least as fast as the share (``shrunk``); failing that Tune's repair applies
    (fallback vector, then reverting jobs above their share), so every job keeps at least its
    GPU-proportional rate. (Placing split jobs best-fit instead of rounding was tried and realised less.) Spare CPU/memory is then handed out as in Tune
    (``redistribute``). These rounded allocations are what a simulation runs; ``opt_bound`` is what "Opt"
    means in the paper's results (its allocations are an upper bound, not deployed, §5.2).

    ``last_stats``: ``opt_bound``, ``ilp_value`` (nan without), ``ilp_optimal`` (1/0), ``fragmented_jobs``,
    ``rounded_jobs`` (split jobs whose GPU counts had to be rounded), ``shrunk``, ``reverted``,
    ``realised_rate``, ``jobs``, ``lp1_s``, ``ilp_s``, ``lp2_s``, ``solve_s`` (the three solves) and
    ``wall_s`` (the whole call).
    """

    name = "opt"
    rigid = True

    def __init__(self, threshold: float = 0.1, ilp: bool = True, time_limit: float = 10.0,
                 mip_rel_gap: float = 1e-4, redistribute: bool = True) -> None:
        super().__init__()
        self.ilp = ilp
        self.time_limit = time_limit
        self.mip_rel_gap = mip_rel_gap
        self.redistribute = redistribute
        self._requests = _RequestBuilder(threshold, floor_fix=True)

    # -- LP1 -------------------------------------------------------------------------------------------
    @staticmethod
    def _lp1_matrices(reqs: Sequence[_Req], cands: Sequence[_Candidates]):
        from scipy import sparse

        sizes = np.array([len(cd.w) for cd in cands])
        offs = np.concatenate([[0], np.cumsum(sizes)])
        nvar = int(offs[-1])
        n = len(reqs)
        g = np.repeat(np.array([r.g for r in reqs], dtype=float), sizes)
        cvec = np.concatenate([cd.c for cd in cands]) * g
        mvec = np.concatenate([cd.m for cd in cands]) * g
        wvec = np.concatenate([cd.w for cd in cands])
        job_of = np.repeat(np.arange(n), sizes)
        cols = np.arange(nvar)
        a_eq = sparse.csr_matrix((np.ones(nvar), (job_of, cols)), shape=(n, nvar))
        a_floor = sparse.csr_matrix((-wvec, (job_of, cols)), shape=(n, nvar))
        a_res = sparse.csr_matrix(np.vstack([cvec, mvec]))
        a_ub = sparse.vstack([a_res, a_floor]).tocsr()
        return wvec, a_ub, a_eq, offs

    def _lp1_relaxation(self, reqs: Sequence[_Req], cluster: ClusterSpec, share: tuple[float, float],
                        consolidated: bool = False):
        """LP1's relaxation over the extended candidates: (scipy result, extended candidates, offsets)."""
        from scipy.optimize import linprog

        floors = np.array([r.w_prop for r in reqs])
        ext = [_lp1_candidates(r, share, extended=True) for r in reqs]
        cap_c, cap_m = cluster.total_cpus, cluster.total_mem_gb
        whole: list[int] = []
        if consolidated:
            ext = [_capped(cd, r, consolidation_caps(r.g, cluster)) for cd, r in zip(ext, reqs, strict=True)]
            whole = _whole_server_jobs(reqs, cluster)
            if whole:
                # Such a job fills whole servers whose CPUs and memory nobody else can use: its own (capped)
                # candidates keep it within them, so it leaves the pooled rows and its servers leave the pool.
                srv = cluster.servers[0]
                k = sum(reqs[j].g // srv.gpus for j in whole)
                cap_c, cap_m = cap_c - k * srv.cpus, cap_m - k * srv.mem_gb
        w, a_ub, a_eq, offs = self._lp1_matrices(reqs, ext)
        if consolidated and whole:
            a_ub = a_ub.tolil()
            for j in whole:
                a_ub[0, offs[j]:offs[j + 1]] = 0.0
                a_ub[1, offs[j]:offs[j + 1]] = 0.0
            a_ub = a_ub.tocsr()
        b_ub = np.concatenate([[cap_c, cap_m], -floors + _WTOL])
        res = linprog(-w, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.ones(len(reqs)), bounds=(0, 1), method="highs")
        if res.status != 0:  # pragma: no cover - all-proportional is always feasible
            raise RuntimeError(f"Synergy-Opt LP1 failed: {res.message}")
        return res, ext, offs

    def bound(self, ordered: Sequence[JobState], cluster: ClusterSpec, consolidated: bool = False) -> float:
        """LP1's upper bound on the total rate of the runnable set of ``ordered`` (what ``allocate`` reports as
        ``last_stats["opt_bound"]``), without the ILP, LP2 or rounding: cheap enough to sample during a
        simulation run by another mechanism, e.g. to compare Synergy-Tune's allocations with it (§5.6).

        ``consolidated=True`` adds §6's consolidation assumption to LP1: no job gets more CPU or memory per GPU
        than the fewest servers holding its GPUs have (:func:`consolidation_caps`), and on a homogeneous
        cluster a job that fills whole servers that way (8 or 16 GPUs on 8-GPU servers) keeps their CPUs and
        memory to itself: they leave the pooled totals. That bounds every allocation that keeps each job on the
        fewest servers its GPUs need on an empty cluster, as Tune does unless free GPUs are fragmented (a
        diagnostic, not a bound on every Tune round). The plain bound also counts CPUs that only splitting jobs
        over more servers than their GPUs need could reach, e.g. the CPUs left over on a server an 8-GPU
        language job fills (Opt's LP2 may split jobs; Tune does not, §4.2, §6)."""
        reqs = _select(self._requests.build(ordered, cluster), cluster.total_gpus)
        if not reqs:
            return 0.0
        res, _, _ = self._lp1_relaxation(reqs, cluster, proportional_share(cluster), consolidated=consolidated)
        return float(-res.fun)

    def _solve_lp1(self, reqs: Sequence[_Req], cluster: ClusterSpec, share: tuple[float, float]):
        from scipy.optimize import Bounds, LinearConstraint, milp

        floors = np.array([r.w_prop for r in reqs])
        cap = [cluster.total_cpus, cluster.total_mem_gb]
        stats: dict[str, float] = {}

        # The bound: LP relaxation on the extended candidates.
        t0 = time.perf_counter()
        res, ext, offs = self._lp1_relaxation(reqs, cluster, share)
        stats["lp1_s"] = time.perf_counter() - t0
        stats["opt_bound"] = float(-res.fun)

        # The configurations: ILP (the paper's) or the LP's heaviest point.
        cands = [_lp1_candidates(r, share, extended=False) for r in reqs]
        choice: list[int] | None = None
        stats["ilp_value"], stats["ilp_optimal"], stats["ilp_s"] = math.nan, 0.0, 0.0
        if self.ilp:
            t0 = time.perf_counter()
            w2, a_ub2, a_eq2, offs2 = self._lp1_matrices(reqs, cands)
            cons = [LinearConstraint(a_ub2, -np.inf, np.concatenate([cap, -floors + _WTOL])),
                    LinearConstraint(a_eq2, 1, 1)]
            r2 = milp(-w2, constraints=cons, integrality=np.ones_like(w2), bounds=Bounds(0, 1),
                      options={"time_limit": self.time_limit, "mip_rel_gap": self.mip_rel_gap, "presolve": True})
            stats["ilp_s"] = time.perf_counter() - t0
            if r2.x is not None:
                stats["ilp_value"] = float(-r2.fun)
                stats["ilp_optimal"] = float(r2.status == 0)
                choice = [int(np.argmax(r2.x[offs2[j]:offs2[j + 1]])) for j in range(len(reqs))]
        if choice is None:
            # LP weights over the extended set -> nearest realisable point: the heaviest non-extended one.
            choice = []
            for j, r in enumerate(reqs):
                y = res.x[offs[j]:offs[j + 1]]
                cd, ex = cands[j], ext[j]
                # score each realisable candidate by the LP weight on the identical point of the extended set
                score = np.array([y[(np.abs(ex.c - c) < 1e-12) & (np.abs(ex.m - m) < 1e-12)].sum()
                                  for c, m in zip(cd.c, cd.m, strict=True)])
                choice.append(int(np.argmax(score)) if score.max() > 0 else len(cd.w) - 1)  # else the fallback
        per_gpu = [(float(cands[j].c[k]), float(cands[j].m[k])) for j, k in enumerate(choice)]
        return per_gpu, stats

    # -- LP2 -------------------------------------------------------------------------------------------
    @staticmethod
    def _solve_lp2(reqs: Sequence[_Req], per_gpu: Sequence[tuple[float, float]], cluster: ClusterSpec,
                   running: Mapping[str, Allocation]) -> np.ndarray | None:
        from scipy import sparse
        from scipy.optimize import linprog

        s_n, n = cluster.n_servers, len(reqs)
        g = np.array([r.g for r in reqs], dtype=float)
        cj = np.array([r.g * c for r, (c, _) in zip(reqs, per_gpu, strict=True)])
        mj = np.array([r.g * m for r, (_, m) in zip(reqs, per_gpu, strict=True)])
        # variable index: i * n + j
        cost = np.ones((s_n, n))
        for j, r in enumerate(reqs):
            prev = running.get(r.id)
            if prev is not None and prev.gpus > 0:
                for sh in prev.shares:
                    if 0 <= sh.server < s_n:
                        cost[sh.server, j] -= sh.gpus / prev.gpus
        cost += 1e-3 * (np.arange(s_n) / max(1, s_n))[:, None]
        rows_i = np.repeat(np.arange(s_n), n)
        cols = np.arange(s_n * n)
        blocks = [sparse.csr_matrix((np.tile(v, s_n), (rows_i, cols)), shape=(s_n, s_n * n)) for v in (g, cj, mj)]
        a_ub = sparse.vstack(blocks).tocsr()
        b_ub = np.concatenate([[s.gpus for s in cluster.servers], [s.cpus for s in cluster.servers],
                               [s.mem_gb for s in cluster.servers]]).astype(float)
        a_eq = sparse.csr_matrix((np.ones(s_n * n), (np.tile(np.arange(n), s_n), cols)), shape=(n, s_n * n))
        ub = np.ones((s_n, n))
        for j, r in enumerate(reqs):
            if r.ok is not None:
                ub[~np.asarray(r.ok), j] = 0.0
        bounds = np.column_stack([np.zeros(s_n * n), ub.ravel()])
        res = linprog(cost.ravel(), A_ub=a_ub, b_ub=b_ub + 1e-9, A_eq=a_eq, b_eq=np.ones(n), bounds=bounds,
                      method="highs-ds")
        if res.status != 0:
            return None
        x = res.x.reshape(s_n, n)
        x[x < 1e-9] = 0.0
        return x

    @staticmethod
    def _round(x: np.ndarray, reqs: Sequence[_Req], cluster: ClusterSpec) -> tuple[list[dict[int, int] | None], int]:
        """Whole GPUs per server from LP2's fractions (see the class docstring). Returns counts per job (None
        for a job whose allowed servers ran out of GPUs) and the number of jobs whose counts needed
        rounding."""
        s_n = cluster.n_servers
        t = x * np.array([r.g for r in reqs], dtype=float)[None, :]
        base = np.floor(t + 1e-6).astype(int)
        cap = np.array([s.gpus for s in cluster.servers]) - base.sum(axis=1)
        # Flooring can only free GPUs, but a server already full on floors is left alone.
        counts: list[dict[int, int] | None] = []
        rounded = 0
        for j, r in enumerate(reqs):
            left = r.g - int(base[:, j].sum())
            if left > 0:
                rounded += 1
            servers = [i for i in range(s_n) if r.ok is None or r.ok[i]]
            order = sorted(servers, key=lambda i: (-(t[i, j] - base[i, j]), -int(base[i, j] > 0), -cap[i], i))
            while left > 0:
                for i in order:
                    if cap[i] > 0:
                        base[i, j] += 1
                        cap[i] -= 1
                        left -= 1
                        break
                else:  # only with device-memory restrictions: the runnable set fits the GPUs
                    break
            if left > 0:
                cap += base[:, j]
                base[:, j] = 0
                counts.append(None)
            else:
                counts.append({i: int(base[i, j]) for i in range(s_n) if base[i, j] > 0})
        return counts, rounded

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        t_start = time.perf_counter()
        reqs = _select(self._requests.build(ordered, cluster), cluster.total_gpus)
        if not reqs:
            self.last_stats = {"opt_bound": 0.0, "fragmented_jobs": 0.0, "solve_s": 0.0, "jobs": 0.0,
                               "realised_rate": 0.0}
            return {}
        share = proportional_share(cluster)
        per_gpu, stats = self._solve_lp1(reqs, cluster, share)
        stats["shrunk"] = 0.0

        t0 = time.perf_counter()
        x = self._solve_lp2(reqs, per_gpu, cluster, running)
        if x is None:
            per_gpu = [(r.fb_c, r.fb_m) for r in reqs]
            x = self._solve_lp2(reqs, per_gpu, cluster, running)
        stats["lp2_s"] = time.perf_counter() - t0
        stats["solve_s"] = stats["lp1_s"] + stats["ilp_s"] + stats["lp2_s"]

        packer = _Packer(cluster)
        picker = _DevicePicker(running)
        if x is not None:
            split = (x > 1e-9).sum(axis=0) > 1
            stats["fragmented_jobs"] = float(split.sum())
            counts, rounded = self._round(x, reqs, cluster)
            stats["rounded_jobs"] = float(rounded)
            order = sorted(range(len(reqs)), key=lambda j: (bool(split[j]), reqs[j].id not in running, reqs[j].idx))
            for j in order:
                c, m = per_gpu[j]
                if counts[j] is None:
                    continue
                if not _fits(packer.ledger, counts[j], c, m):
                    # rounding overfilled a server: shrink to the fastest point that fits there, if any
                    shrunk = _best_point_that_fits(packer, reqs[j], counts[j])
                    if shrunk is not None:
                        c, m = shrunk
                        stats["shrunk"] += 1
                _place_with_repair(packer, reqs[j], counts[j], picker, c, m)
        else:  # LP2 infeasible (heterogeneous servers, device-memory limits): place like Tune at the LP1 vectors
            stats["fragmented_jobs"] = math.nan
            stats["rounded_jobs"] = math.nan
            for j in sorted(range(len(reqs)), key=lambda j: (-reqs[j].g, reqs[j].idx)):
                r = reqs[j]
                counts_j = _gpu_best_fit(packer.ledger, r.g, r.ok)
                if counts_j is not None:
                    _place_with_repair(packer, r, counts_j, picker, *per_gpu[j])
        if self.redistribute:
            packer.hand_out_leftovers([r.id for r in reqs])
        out = packer.result()
        by_id = {r.id: r for r in reqs}
        stats["realised_rate"] = float(sum(by_id[j].js.rate_on(a) for j, a in out.items()))
        stats["jobs"] = float(len(reqs))
        stats["reverted"] = float(packer.reverted)
        stats["wall_s"] = time.perf_counter() - t_start
        self.last_stats = stats
        return out


# ---------------------------------------------------------------------------------------------------------
# DRF and Tetris with best-case demands (§5.7)
# ---------------------------------------------------------------------------------------------------------
class DRF(Mechanism):
    """Dominant Resource Fairness with Synergy's best-case demand vectors, static (no tuning), gang
    all-or-nothing (§5.7).

    Progressive filling over every active job: at each step the job whose *user* (``Job.user``, the job
    itself when empty) would have the smallest dominant share after getting the job's full demand vector
    (``max`` over GPU, CPU, memory of the user's allocated fraction of the cluster) goes next — for one job
    per user, ascending dominant share of the demand vector, as Synergy's DRF baseline sorts; ties follow
    the policy order. It is placed first-fit (as Greedy); a job that does not fit is skipped for the round.
    Filling stops when no GPU is free.
    """

    name = "drf"
    rigid = True

    def __init__(self, threshold: float = 0.1) -> None:
        super().__init__()
        self._requests = _RequestBuilder(threshold, floor_fix=False)

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        ledger = Ledger(cluster)
        picker = _DevicePicker(running)
        total = np.array([cluster.total_gpus, cluster.total_cpus, cluster.total_mem_gb], dtype=float)
        total[total <= 0] = 1.0
        reqs = self._requests.build(ordered, cluster)
        names: dict[str, int] = {}
        user = np.array([names.setdefault(r.js.job.user or r.id, len(names)) for r in reqs], dtype=int)
        held = np.zeros((len(names), 3))
        vec = np.array([[r.g, r.g * r.c, r.g * r.m] for r in reqs], dtype=float).reshape(-1, 3) / total
        pending = np.ones(len(reqs), dtype=bool)
        out: dict[str, Allocation] = {}
        skipped = 0
        while pending.any() and ledger.total_free_gpus > 0:
            share = np.where(pending, np.max(held[user] + vec, axis=1), np.inf)
            j = int(np.argmin(share))  # ties: the first, i.e. policy order
            pending[j] = False
            r = reqs[j]
            devices = picker.previous(ledger, r.id, r.g)
            if devices is None or not _fits(ledger, {s: len(d) for s, d in devices.items()}, r.c, r.m):
                counts = _first_fit(ledger, r.g, r.c, r.m, r.ok)
                if counts is None:
                    skipped += 1
                    continue
                devices = picker.devices(ledger, r.id, counts)
            alloc = _alloc(devices, r.g, r.c, r.m, r.perf)
            ledger.take(alloc)
            out[r.id] = alloc
            held[user[j]] += vec[j]
        self.last_stats = {"placed": float(len(out)), "skipped": float(skipped),
                           "idle_gpus": float(ledger.total_free_gpus)}
        return out


class Tetris(Mechanism):
    """Tetris with Synergy's best-case demand vectors, static, gang all-or-nothing (§5.7).

    Repeatedly picks the (job, server) pair with the highest score among pairs where the job's whole demand
    vector fits the server: the alignment ``Σ_d (demand_d / cap_d) · (free_d / cap_d)`` over GPU, CPU and
    memory (Tetris' dot product, normalised by the server's capacity, divided by 3 to lie in [0, 1]), plus
    ``policy_weight · (1 − rank / n)`` so that the policy's favourites win close calls (Tetris combines
    packing with a job-order term the same way; ``policy_weight=0`` is pure packing). Jobs larger than any
    server are scored on the servers of a first-fit spread (GPU-weighted mean alignment); a job that a
    single server could hold must fit one (Tetris matches tasks to machines), so fragmented free GPUs stay
    idle. A previously running job keeps its devices when they are free and fit. Stops when nothing fits.
    """

    name = "tetris"
    rigid = True

    def __init__(self, threshold: float = 0.1, policy_weight: float = 1.0) -> None:
        super().__init__()
        self.policy_weight = policy_weight
        self._requests = _RequestBuilder(threshold, floor_fix=False)

    def allocate(self, ordered: Sequence[JobState], cluster: ClusterSpec, running: Mapping[str, Allocation],
                 now: float) -> dict[str, Allocation]:
        ledger = Ledger(cluster)
        picker = _DevicePicker(running)
        reqs = self._requests.build(ordered, cluster)
        n = len(reqs)
        if n == 0:
            self.last_stats = {"placed": 0.0, "idle_gpus": float(cluster.total_gpus)}
            return {}
        caps = np.array([[s.gpus, s.cpus, s.mem_gb] for s in cluster.servers], dtype=float)
        caps[caps <= 0] = np.inf
        dem = np.array([[r.g, r.g * r.c, r.g * r.m] for r in reqs], dtype=float)  # n x 3
        bonus = self.policy_weight * (1.0 - np.arange(n) / n)
        max_gpus = max(s.gpus for s in cluster.servers)
        big = np.array([r.g > max_gpus for r in reqs])
        allowed = np.array([r.ok if r.ok is not None else (True,) * cluster.n_servers for r in reqs], dtype=bool)
        pending = np.ones(n, dtype=bool)
        out: dict[str, Allocation] = {}
        while pending.any() and ledger.total_free_gpus > 0:
            free = np.array([[ledger.free_gpus(s), ledger.free_cpus[s], ledger.free_mem[s]]
                             for s in range(cluster.n_servers)], dtype=float)
            fits = np.all(dem[:, None, :] <= free[None, :, :] + _RTOL, axis=2)  # n x S
            fits &= (pending & ~big)[:, None] & allowed
            align = np.einsum("jd,sd->js", dem, free / caps**2) / 3.0
            score = np.where(fits, align + bonus[:, None], -np.inf)
            best_j, best_s, best = -1, -1, -np.inf
            if np.isfinite(score).any():
                flat = int(np.argmax(score))
                best_j, best_s = divmod(flat, cluster.n_servers)
                best = float(score[best_j, best_s])
            spread = None
            for j in np.flatnonzero(pending & big):
                r = reqs[j]
                counts = _first_fit(ledger, r.g, r.c, r.m, r.ok)
                if counts is None:
                    continue
                sc = sum(k / r.g * float(dem[j] @ (free[s] / caps[s] ** 2)) / 3.0 for s, k in counts.items()) + bonus[j]
                if sc > best:
                    best, best_j, spread = sc, int(j), counts
            if best_j < 0:
                break
            r = reqs[best_j]
            pending[best_j] = False
            counts = spread if spread is not None else {best_s: r.g}
            devices = picker.previous(ledger, r.id, r.g)
            if devices is None or not _fits(ledger, {s: len(d) for s, d in devices.items()}, r.c, r.m):
                devices = picker.devices(ledger, r.id, counts)
            alloc = _alloc(devices, r.g, r.c, r.m, r.perf)
            ledger.take(alloc)
            out[r.id] = alloc
        self.last_stats = {"placed": float(len(out)), "idle_gpus": float(ledger.total_free_gpus)}
        return out
