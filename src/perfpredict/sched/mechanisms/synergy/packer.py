"""The packer Tune and Opt share: placements that can be switched back to their proportional share."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence

import numpy as np

from perfpredict.sched.cluster import EPS, Allocation, ClusterSpec, Ledger
from perfpredict.sched.mechanisms.synergy.devices import _alloc, _DevicePicker, _fits
from perfpredict.sched.mechanisms.synergy.requests import _Req
from perfpredict.sched.mechanisms.synergy.share import _RTOL, _WTOL, DevicesByServer, proportional_share
from perfpredict.sched.perf import PerfModel


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
