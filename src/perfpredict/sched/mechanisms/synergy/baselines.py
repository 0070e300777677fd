"""DRF and Tetris with best-case demands (§5.7), the big-data baselines Synergy is compared with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from perfpredict.sched.base import Mechanism
from perfpredict.sched.cluster import Allocation, ClusterSpec, Ledger
from perfpredict.sched.job import JobState
from perfpredict.sched.mechanisms.synergy.devices import _alloc, _DevicePicker, _first_fit, _fits
from perfpredict.sched.mechanisms.synergy.requests import _RequestBuilder
from perfpredict.sched.mechanisms.synergy.share import _RTOL


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
    whole_gpus = True

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
    whole_gpus = True

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
        max_gpus = max(s.gpus for s in cluster.servers)
        for r in reqs:
            # A job one server could hold must fit one (below), so a demand vector no empty server holds (2 GPUs
            # at Synergy's 62.5 GB each on a 64 GB server) would starve it for ever: ask for the share instead,
            # as the request builder does for a demand the whole empty cluster cannot hold.
            if r.g <= max_gpus and not any(
                    (r.ok is None or r.ok[i]) and srv.gpus >= r.g and srv.cpus + _RTOL >= r.g * r.c
                    and srv.mem_gb + _RTOL >= r.g * r.m for i, srv in enumerate(cluster.servers)):
                r.c, r.m = r.fb_c, r.fb_m
        caps = np.array([[s.gpus, s.cpus, s.mem_gb] for s in cluster.servers], dtype=float)
        caps[caps <= 0] = np.inf
        dem = np.array([[r.g, r.g * r.c, r.g * r.m] for r in reqs], dtype=float)  # n x 3
        bonus = self.policy_weight * (1.0 - np.arange(n) / n)
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
