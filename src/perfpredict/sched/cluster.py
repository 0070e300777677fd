"""The cluster model: servers, the allocation a job gets, and a ledger that never over-commits a server.

An :class:`Allocation` is a set of per-server :class:`Share` s. A share has whole GPUs (``devices`` lists
which ones) or a *fraction* of one device (``gpus = 1/n`` on a single device, the moldable/malleable paper's
co-location: n tasks time-share a GPU), plus CPUs and memory on that server. A multi-server allocation is a
gang: Synergy (seed 001 §4.2) requires its CPU and memory to be split in proportion to the GPUs on each
server, which :meth:`Allocation.proportional` builds and :meth:`Allocation.is_gpu_proportional_split` checks.

A *shared* share (``shared=True``, Horus, seed 004) holds whole devices that other shared shares may hold too:
the jobs on such a device time-slice it (their kernels interleave) instead of each getting a fraction. A device
is then either free, held by whole/fractional shares, or held by one or more shared shares, never a mix; the
device memory of every share on it (``device_mem_gb``, the job's *reserved* footprint) must fit the device. How
much the co-located jobs slow each other down is the simulator's business (:mod:`perfpredict.sim.sharing`).

:class:`Ledger` is the only place free resources are tracked. ``take`` checks every dimension (GPUs per
device, CPUs, memory, device memory for fractional shares) before it changes anything, so a mechanism that
tries to over-commit gets :class:`CapacityError` and the cluster state stays as it was.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

__all__ = ["Allocation", "CapacityError", "ClusterSpec", "Ledger", "ServerSpec", "Share"]

#: Slack for float comparisons of resource amounts (fractions like 1/3 do not add up exactly).
EPS = 1e-9


class CapacityError(ValueError):
    """An allocation does not fit the free resources (or names a server/device that does not exist)."""


#: More devices than any one server has (a DGX has 8-16): a typo is refused before a ledger is allocated.
MAX_GPUS_PER_SERVER = 1024
#: The most servers one cluster spec may list (a typo such as ``count: 1e12`` is refused, not allocated).
MAX_SERVERS = 100_000
#: the most jobs a generated trace may have: 100x the 100 000-job speed benchmark; a mistyped size (n=1e9)
#: is one error instead of a MemoryError minutes later
MAX_TRACE_JOBS = 10_000_000


@dataclass(frozen=True)
class ServerSpec:
    """One machine. ``gpu_mem_gb`` bounds the device memory of tasks sharing a device; ``energy_cost`` is
    the cost of one GPU-hour on this server (ANDREAS), optional."""

    gpus: int = 8
    cpus: float = 24
    mem_gb: float = 500.0
    gpu_type: str = "V100"
    gpu_mem_gb: float = 32.0
    energy_cost: float | None = None

    def __post_init__(self) -> None:
        # A hand-written cluster JSON must fail here with the field's name, not later in a comparison.
        for name in ("gpus", "cpus", "mem_gb", "gpu_mem_gb", "energy_cost"):
            v = getattr(self, name)
            if v is None and name == "energy_cost":
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise ValueError(f"server field {name} must be a finite number, got {v!r}")
        if self.gpus != int(self.gpus):
            raise ValueError(f"server field gpus must be a whole number, got {self.gpus!r}")
        if self.gpus > MAX_GPUS_PER_SERVER:
            raise ValueError(f"server field gpus is {self.gpus}, more than the {MAX_GPUS_PER_SERVER} a server may have")
        object.__setattr__(self, "gpus", int(self.gpus))  # 8.0 from a JSON file is 8 devices
        if not isinstance(self.gpu_type, str):
            raise ValueError(f"server field gpu_type must be a string, got {self.gpu_type!r}")
        for name in ("gpus", "cpus", "mem_gb", "energy_cost"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"server field {name} must be >= 0, got {v:g}")
        if self.gpu_mem_gb <= 0:
            raise ValueError(f"server field gpu_mem_gb must be > 0, got {self.gpu_mem_gb:g}")
        if self.gpus and not self.cpus > 0:
            # every card's rate depends on the CPUs a job gets: such a server would hold jobs that never progress
            raise ValueError(f"a server with {self.gpus} GPUs needs CPUs to feed them, got cpus={self.cpus:g}")
        if self.gpus and not self.mem_gb > 0:
            # a job's share of host memory would be 0 (no rate) and memory utilisation 0/0
            raise ValueError(f"a server with {self.gpus} GPUs needs host memory, got mem_gb={self.mem_gb:g}")

    @property
    def cpus_per_gpu(self) -> float:
        return self.cpus / self.gpus if self.gpus else 0.0

    @property
    def mem_per_gpu(self) -> float:
        return self.mem_gb / self.gpus if self.gpus else 0.0


@dataclass(frozen=True)
class ClusterSpec:
    """An ordered tuple of servers (server ids are their indices)."""

    servers: tuple[ServerSpec, ...]
    name: str = "cluster"

    def __post_init__(self) -> None:
        # Every builder ends here; homogeneous() and from_dict() also check before they allocate the tuple.
        if len(self.servers) > MAX_SERVERS:
            raise ValueError(f"{len(self.servers):,} servers, more than the {MAX_SERVERS:,} a cluster may have")

    @classmethod
    def homogeneous(cls, n_servers: int, gpus: int = 8, cpus: float = 24, mem_gb: float = 500.0,
                    gpu_type: str = "V100", gpu_mem_gb: float = 32.0, energy_cost: float | None = None,
                    name: str | None = None) -> ClusterSpec:
        """``n_servers`` identical servers; defaults are Synergy's (§5.1): 8 GPUs, 24 CPUs, 500 GB."""
        if isinstance(n_servers, bool) or not isinstance(n_servers, numbers.Real) or n_servers != int(n_servers) \
                or not 0 < n_servers <= MAX_SERVERS:
            raise ValueError(f"n_servers must be a whole number from 1 to {MAX_SERVERS:,}, got {n_servers!r}")
        n_servers = int(n_servers)
        s = ServerSpec(gpus=gpus, cpus=cpus, mem_gb=mem_gb, gpu_type=gpu_type, gpu_mem_gb=gpu_mem_gb,
                       energy_cost=energy_cost)
        return cls(servers=(s,) * n_servers, name=name or f"{n_servers}x{gpus}{gpu_type}")

    @property
    def n_servers(self) -> int:
        return len(self.servers)

    @property
    def total_gpus(self) -> int:
        return sum(s.gpus for s in self.servers)

    @property
    def total_cpus(self) -> float:
        return sum(s.cpus for s in self.servers)

    @property
    def total_mem_gb(self) -> float:
        return sum(s.mem_gb for s in self.servers)

    def to_dict(self) -> dict:
        return {"name": self.name, "servers": [asdict(s) for s in self.servers]}

    @classmethod
    def from_dict(cls, d: dict) -> ClusterSpec:
        """``{"servers": [{...}, ...]}`` or the compact ``{"homogeneous": {"n_servers": 16, ...}}``."""
        if not isinstance(d, dict):
            raise ValueError(f"a cluster spec is a JSON object, got {type(d).__name__}")
        unknown = sorted(set(d) - {"name", "servers", "homogeneous"})
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}; a cluster spec has 'servers' or "
                             f"'homogeneous', and optionally 'name'")
        if "homogeneous" in d and "servers" in d:
            raise ValueError("a cluster spec has either a 'servers' list or a 'homogeneous' block, not both")
        if "homogeneous" in d:
            if not isinstance(d["homogeneous"], dict):
                raise ValueError(f"'homogeneous' must be an object such as {{\"n_servers\": 16, \"gpus\": 8}}, got "
                                 f"{d['homogeneous']!r}")
            try:
                return cls.homogeneous(**d["homogeneous"], name=d.get("name"))
            except TypeError as e:
                raise ValueError(f"homogeneous: {_unexpected(e, 'n_servers')}") from None
        if "servers" not in d or not d["servers"]:
            raise ValueError("a cluster spec needs a non-empty 'servers' list or a 'homogeneous' block")
        if not isinstance(d["servers"], list):
            raise ValueError(f"'servers' must be a list of server objects, got {type(d['servers']).__name__}")
        servers: list[ServerSpec] = []
        for i, s in enumerate(d["servers"]):
            if not isinstance(s, dict):
                raise ValueError(f"server {i}: expected an object such as {{\"gpus\": 8, \"count\": 2}}, got {s!r}")
            count = s.get("count", 1)
            if isinstance(count, bool) or not isinstance(count, numbers.Real) or count != int(count) \
                    or not 0 <= count <= MAX_SERVERS:
                raise ValueError(f"server {i}: count must be a whole number from 0 to {MAX_SERVERS:,}, got {count!r}")
            fields = {k: v for k, v in s.items() if k != "count"}
            try:
                servers.extend([ServerSpec(**fields)] * int(count))
            except TypeError as e:
                raise ValueError(f"server {i}: {_unexpected(e, 'count')}") from None
            if len(servers) > MAX_SERVERS:
                raise ValueError(f"more than {MAX_SERVERS:,} servers")
        return cls(servers=tuple(servers), name=d.get("name", "cluster"))

    @classmethod
    def load(cls, path: str | Path) -> ClusterSpec:
        from perfpredict.input_files import CLUSTER_LIMIT_BYTES, read_bounded

        try:  # InputTooLarge is a ValueError: the caller's message for a bad cluster file
            return cls.from_dict(json.loads(read_bounded(path, CLUSTER_LIMIT_BYTES, "a cluster description")))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None


def _unexpected(e: TypeError, also: str) -> str:
    """``ServerSpec.__init__() got an unexpected keyword argument 'bogus'`` as a user reads a JSON file."""
    m = re.search(r"unexpected keyword argument '([^']+)'", str(e))
    if m:
        known = ", ".join(f.name for f in fields(ServerSpec))
        return f"unknown field {m.group(1)!r} (fields: {also}, {known})"
    return str(e)


@dataclass(frozen=True)
class Share:
    """A job's resources on one server. Whole GPUs: ``devices`` names them and ``gpus == len(devices)``.
    Fractional: ``gpus < 1`` on exactly one device. ``device_mem_gb`` is the job's footprint on each of its
    devices, checked against the device memory when a device is shared."""

    server: int
    gpus: float
    cpus: float
    mem_gb: float
    devices: tuple[int, ...] = ()
    device_mem_gb: float = 0.0
    #: the devices are time-shared with other shared shares (whole devices only; see the module docstring)
    shared: bool = False

    def __post_init__(self) -> None:
        # written so that NaN fails too (every comparison with NaN is false); a hot path, hence no isfinite calls
        if not (0 <= self.gpus < math.inf and -EPS <= self.cpus < math.inf and -EPS <= self.mem_gb < math.inf
                and 0 <= self.device_mem_gb < math.inf):
            raise ValueError(f"resources must be finite and non-negative in {self}")
        if self.shared and (not self.devices or abs(self.gpus - len(self.devices)) > EPS):
            raise ValueError(f"a shared share holds whole devices (gpus == number of devices), got {self}")
        if self.devices:
            if self.gpus >= 1 - EPS and abs(self.gpus - len(self.devices)) > EPS:
                raise ValueError(f"a whole-GPU share names {len(self.devices)} devices for {self.gpus} GPUs")
            if self.gpus < 1 - EPS and len(self.devices) != 1:
                raise ValueError("a fractional-GPU share must sit on exactly one device")
            if len(set(self.devices)) != len(self.devices):
                raise ValueError(f"devices repeated in {self.devices}")


@dataclass(frozen=True)
class Allocation:
    shares: tuple[Share, ...]

    def __post_init__(self) -> None:
        servers = [s.server for s in self.shares]
        if len(set(servers)) != len(servers):
            raise ValueError(f"an allocation has at most one share per server, got servers {servers}")

    @property
    def gpus(self) -> float:
        return sum(s.gpus for s in self.shares)

    @property
    def cpus(self) -> float:
        return sum(s.cpus for s in self.shares)

    @property
    def mem_gb(self) -> float:
        return sum(s.mem_gb for s in self.shares)

    @property
    def servers(self) -> tuple[int, ...]:
        return tuple(s.server for s in self.shares)

    @property
    def placement(self) -> tuple[tuple[int, tuple[int, ...], float], ...]:
        """Where the job's GPUs are (servers, devices, amounts), ignoring CPU and memory: two allocations with
        the same placement do not need a restart to switch between (only a CPU/memory resize)."""
        return tuple(sorted((s.server, s.devices, round(s.gpus, 9)) for s in self.shares))

    @property
    def is_fractional(self) -> bool:
        return any(0 < s.gpus < 1 - EPS for s in self.shares)

    def is_gpu_proportional_split(self, rel_tol: float = 1e-6) -> bool:
        """CPU and memory per GPU equal on every server (Synergy's rule for multi-server jobs)."""
        if len(self.shares) <= 1:
            return True
        ref = self.shares[0]
        for s in self.shares[1:]:
            if abs(s.cpus / s.gpus - ref.cpus / ref.gpus) > rel_tol * max(1.0, ref.cpus / ref.gpus):
                return False
            if abs(s.mem_gb / s.gpus - ref.mem_gb / ref.gpus) > rel_tol * max(1.0, ref.mem_gb / ref.gpus):
                return False
        return True

    @classmethod
    def proportional(cls, gpus_by_server: dict[int, Sequence[int]], cpus: float, mem_gb: float,
                     device_mem_gb: float = 0.0) -> Allocation:
        """Whole GPUs on several servers (``{server: devices}``), ``cpus``/``mem_gb`` split in proportion."""
        total = sum(len(d) for d in gpus_by_server.values())
        if total <= 0:
            raise ValueError("an allocation needs at least one GPU")
        return cls(tuple(Share(server=srv, gpus=float(len(devs)), cpus=cpus * len(devs) / total,
                               mem_gb=mem_gb * len(devs) / total, devices=tuple(devs), device_mem_gb=device_mem_gb)
                         for srv, devs in sorted(gpus_by_server.items()) if devs))

    @property
    def is_shared(self) -> bool:
        return any(s.shared for s in self.shares)

    @classmethod
    def shared_devices(cls, gpus_by_server: dict[int, Sequence[int]], cpus_per_gpu: float, mem_gb_per_gpu: float,
                       device_mem_gb: float) -> Allocation:
        """Whole devices time-shared with other jobs (``{server: devices}``), with ``cpus_per_gpu`` CPUs and
        ``mem_gb_per_gpu`` GB of host memory per device and ``device_mem_gb`` reserved on each device."""
        return cls(tuple(Share(server=srv, gpus=float(len(devs)), cpus=cpus_per_gpu * len(devs),
                               mem_gb=mem_gb_per_gpu * len(devs), devices=tuple(sorted(devs)),
                               device_mem_gb=device_mem_gb, shared=True)
                         for srv, devs in sorted(gpus_by_server.items()) if devs))

    @classmethod
    def fraction(cls, server: int, device: int, share: float, cpus: float, mem_gb: float,
                 device_mem_gb: float = 0.0) -> Allocation:
        """``share`` (e.g. 1/3) of one device."""
        if not 0 < share <= 1:
            raise ValueError(f"a GPU fraction is in (0, 1], got {share}")
        return cls((Share(server=server, gpus=share, cpus=cpus, mem_gb=mem_gb, devices=(device,),
                          device_mem_gb=device_mem_gb),))


@dataclass
class Ledger:
    """Free resources of a cluster, per device for GPUs. ``take``/``release`` are all-or-nothing."""

    spec: ClusterSpec
    device_free: list[list[float]] = field(init=False)
    device_mem_used: list[list[float]] = field(init=False)
    free_cpus: list[float] = field(init=False)
    free_mem: list[float] = field(init=False)
    #: whole free devices per server, kept in step with device_free (queried far more often than changed)
    free_whole: list[int] = field(init=False)
    #: shared shares holding each device (a device with sharers has device_free 0 for everyone else)
    device_sharers: list[list[int]] = field(init=False)
    #: sum(free_whole), kept in step with it: mechanisms ask for it once per queued job, and summing over the
    #: servers each time made a decision O(queue x servers) on a large cluster
    _free_total: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.free_whole = [s.gpus for s in self.spec.servers]
        self._free_total = sum(self.free_whole)
        self.device_sharers = [[0] * s.gpus for s in self.spec.servers]
        self.device_free = [[1.0] * s.gpus for s in self.spec.servers]
        self.device_mem_used = [[0.0] * s.gpus for s in self.spec.servers]
        self.free_cpus = [float(s.cpus) for s in self.spec.servers]
        self.free_mem = [float(s.mem_gb) for s in self.spec.servers]

    def copy(self) -> Ledger:
        new = Ledger.__new__(Ledger)
        new.spec = self.spec
        new.device_free = [list(d) for d in self.device_free]
        new.device_mem_used = [list(d) for d in self.device_mem_used]
        new.free_cpus = list(self.free_cpus)
        new.free_mem = list(self.free_mem)
        new.free_whole = list(self.free_whole)
        new._free_total = self._free_total
        new.device_sharers = [list(d) for d in self.device_sharers]
        return new

    # -- queries ---------------------------------------------------------------------------------------
    def free_gpus(self, server: int) -> int:
        """Whole devices nobody uses on ``server``."""
        return self.free_whole[server]

    def _recount(self, server: int) -> None:
        n = sum(1 for f in self.device_free[server] if f >= 1 - EPS)
        self._free_total += n - self.free_whole[server]
        self.free_whole[server] = n

    def free_devices(self, server: int) -> list[int]:
        return [d for d, f in enumerate(self.device_free[server]) if f >= 1 - EPS]

    @property
    def total_free_gpus(self) -> int:
        return self._free_total

    def used(self) -> tuple[float, float, float]:
        """(GPUs, CPUs, memory) allocated now, GPUs counting device fractions."""
        g = sum(len(d) - sum(d) for d in self.device_free)
        c = self.spec.total_cpus - sum(self.free_cpus)
        m = self.spec.total_mem_gb - sum(self.free_mem)
        return g, c, m

    def fits(self, alloc: Allocation) -> str | None:
        """None if ``alloc`` fits the free resources, else why not."""
        for s in alloc.shares:
            if not 0 <= s.server < self.spec.n_servers:
                return f"no server {s.server}"
            srv = self.spec.servers[s.server]
            if s.cpus > self.free_cpus[s.server] + EPS:
                return f"server {s.server}: {s.cpus:g} CPUs asked, {self.free_cpus[s.server]:g} free"
            if s.mem_gb > self.free_mem[s.server] + EPS:
                return f"server {s.server}: {s.mem_gb:g} GB asked, {self.free_mem[s.server]:g} free"
            if s.gpus > 0 and not s.devices:
                return f"server {s.server}: a GPU share must name its devices"
            per_device = min(s.gpus, 1.0)
            for d in s.devices:
                if not 0 <= d < srv.gpus:
                    return f"server {s.server} has no device {d}"
                if s.shared:
                    if self.device_sharers[s.server][d] == 0 and self.device_free[s.server][d] < 1 - EPS:
                        return f"server {s.server} device {d}: held by a job that does not share it"
                elif per_device > self.device_free[s.server][d] + EPS:
                    return (f"server {s.server} device {d}: {per_device:g} of a GPU asked, "
                            f"{self.device_free[s.server][d]:g} free")
                if s.device_mem_gb + self.device_mem_used[s.server][d] > srv.gpu_mem_gb + EPS:
                    return (f"server {s.server} device {d}: {s.device_mem_gb:g} GB device memory asked, "
                            f"{srv.gpu_mem_gb - self.device_mem_used[s.server][d]:g} GB free")
        return None

    # -- changes ---------------------------------------------------------------------------------------
    def take(self, alloc: Allocation) -> None:
        why = self.fits(alloc)
        if why is not None:
            raise CapacityError(why)
        for s in alloc.shares:
            per_device = min(s.gpus, 1.0)
            for d in s.devices:
                if s.shared:
                    self.device_sharers[s.server][d] += 1
                    self.device_free[s.server][d] = 0.0
                else:
                    self.device_free[s.server][d] -= per_device
                self.device_mem_used[s.server][d] += s.device_mem_gb
            self.free_cpus[s.server] -= s.cpus
            self.free_mem[s.server] -= s.mem_gb
            self._recount(s.server)

    def release(self, alloc: Allocation) -> None:
        for s in alloc.shares:
            srv = self.spec.servers[s.server]
            per_device = min(s.gpus, 1.0)
            for d in s.devices:
                if s.shared:
                    self.device_sharers[s.server][d] = max(0, self.device_sharers[s.server][d] - 1)
                    if self.device_sharers[s.server][d] == 0:
                        self.device_free[s.server][d] = 1.0
                else:
                    self.device_free[s.server][d] = min(1.0, self.device_free[s.server][d] + per_device)
                self.device_mem_used[s.server][d] = max(0.0, self.device_mem_used[s.server][d] - s.device_mem_gb)
            self.free_cpus[s.server] = min(float(srv.cpus), self.free_cpus[s.server] + s.cpus)
            self.free_mem[s.server] = min(float(srv.mem_gb), self.free_mem[s.server] + s.mem_gb)
            self._recount(s.server)

    # -- whole-device proportional allocations without building them ----------------------------------
    def take_proportional(self, devices: Mapping[int, Sequence[int]], cpus: float, mem_gb: float,
                          device_mem_gb: float = 0.0) -> None:
        """``take(Allocation.proportional(devices, cpus, mem_gb, device_mem_gb))`` without building the
        allocation: the same per-server amounts (``cpus * k / total`` for ``k`` of ``total`` devices), the same
        checks and the same arithmetic, so the ledger ends in exactly the same state. Anything unusual (a
        share that would not fit, a bad server or device, negative amounts) goes through :meth:`take` with the
        real allocation, which raises the same error. For mechanisms that place and resize many times per
        decision (Synergy-Tune's packer)."""
        total = 0
        for devs in devices.values():
            total += len(devs)
        # the plain case only: non-negative amounts, whole devices that exist, are distinct, free and fit
        plain = total > 0 and cpus >= 0 and mem_gb >= 0 and device_mem_gb >= 0
        if plain:
            servers = self.spec.servers
            n = len(servers)
            for s, devs in devices.items():
                k = len(devs)
                if not k:
                    continue
                if not (isinstance(s, int) and 0 <= s < n) or cpus * k / total > self.free_cpus[s] + EPS \
                        or mem_gb * k / total > self.free_mem[s] + EPS or (k > 1 and len(set(devs)) != k):
                    plain = False
                    break
                free, used = self.device_free[s], self.device_mem_used[s]
                cap = servers[s].gpu_mem_gb + EPS
                g = len(free)
                for d in devs:
                    if not (isinstance(d, int) and 0 <= d < g) or 1.0 > free[d] + EPS or device_mem_gb + used[d] > cap:
                        plain = False
                        break
                if not plain:
                    break
        if not plain:
            self.take(Allocation.proportional(dict(devices), cpus, mem_gb, device_mem_gb))  # raises
            return
        for s, devs in devices.items():
            k = len(devs)
            if not k:
                continue
            free, used = self.device_free[s], self.device_mem_used[s]
            was_free = 0
            for d in devs:
                # a device holds at most 1.0, so none of these is whole-free afterwards (what _recount counts)
                was_free += free[d] >= 1 - EPS
                free[d] -= 1.0
                used[d] += device_mem_gb
            self.free_cpus[s] -= cpus * k / total
            self.free_mem[s] -= mem_gb * k / total
            self.free_whole[s] -= was_free
            self._free_total -= was_free

    def release_proportional(self, devices: Mapping[int, Sequence[int]], cpus: float, mem_gb: float,
                             device_mem_gb: float = 0.0) -> None:
        """``release(Allocation.proportional(devices, cpus, mem_gb, device_mem_gb))`` without building the
        allocation (the counterpart of :meth:`take_proportional`, same arithmetic as :meth:`release`)."""
        total = 0
        for devs in devices.values():
            total += len(devs)
        if total <= 0:
            raise ValueError("an allocation needs at least one GPU")
        servers = self.spec.servers
        for s, devs in devices.items():
            k = len(devs)
            if not k:
                continue
            srv = servers[s]
            free, used = self.device_free[s], self.device_mem_used[s]
            change = 0
            for d in devs:
                before = free[d] >= 1 - EPS
                free[d] = min(1.0, free[d] + 1.0)
                change += (free[d] >= 1 - EPS) - before
                used[d] = max(0.0, used[d] - device_mem_gb)
            self.free_cpus[s] = min(float(srv.cpus), self.free_cpus[s] + cpus * k / total)
            self.free_mem[s] = min(float(srv.mem_gb), self.free_mem[s] + mem_gb * k / total)
            self.free_whole[s] += change  # as _recount(s), on the devices that changed
            self._free_total += change

    def take_all(self, allocs: Iterable[Allocation]) -> None:
        """Take several allocations, all or none."""
        done: list[Allocation] = []
        try:
            for a in allocs:
                self.take(a)
                done.append(a)
        except CapacityError:
            for a in done:
                self.release(a)
            raise
