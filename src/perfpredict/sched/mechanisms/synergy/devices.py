"""Device choice: which servers and devices a placement takes (first fit, best fit, stickiness)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from perfpredict.sched.cluster import EPS, Allocation, Ledger
from perfpredict.sched.mechanisms.synergy.share import _RTOL, DevicesByServer
from perfpredict.sched.perf import PerfModel


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
