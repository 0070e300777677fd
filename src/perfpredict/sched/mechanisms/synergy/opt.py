"""Synergy-Opt (§4.1 and Appendix A): the two LPs with SciPy's HiGHS."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from perfpredict.sched.base import Mechanism, UnsupportedInput
from perfpredict.sched.cluster import Allocation, ClusterSpec
from perfpredict.sched.job import JobState
from perfpredict.sched.mechanisms.synergy.devices import _DevicePicker, _fits, _gpu_best_fit
from perfpredict.sched.mechanisms.synergy.packer import _best_point_that_fits, _Packer, _place_with_repair
from perfpredict.sched.mechanisms.synergy.requests import _Req, _RequestBuilder, _select
from perfpredict.sched.mechanisms.synergy.share import _RTOL, _WTOL, proportional_share


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
    column (W as at the first memory value; it clamps below the grid); a job without a grid also gets the point
    (0, 0) at W = 1, since the perf model rates it 1 on any CPUs and memory. Bilinear interpolation is a convex
    combination of the four surrounding grid points with the same resource use, so the LP over these points
    contains every allocation the perf model can rate: its optimum bounds the total rate of any allocation of
    the runnable set that keeps every job at or above its GPU-proportional rate (Tune's and Opt's; Greedy, DRF and
    Tetris may run a job below it and then exceed the bound).
    """
    pc, pm = share
    perf = r.perf
    if not perf.has_grid:
        # Insensitive job: rate 1 whatever it gets; the cheapest sensible point is its demand capped by the share.
        if extended:
            # ...but the perf model rates it 1 on any CPUs and memory, so the bound must let it use none
            return _Candidates(np.array([min(r.c, pc), 0.0]), np.array([min(r.m, pm), 0.0]), np.array([1.0, 1.0]))
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
    job's rate factor (relative to its reference allocation; the grid's W times the job's GPU factor, which is 1
    unless a fractional demand is rounded up to whole GPUs), subject to ``Σ g_j·c_p·y ≤ C`` and
    ``Σ g_j·m_p·y ≤ M`` (cluster totals), ``Σ_p y[j,p] = 1`` per job, and ``Σ_p W_j[p]·y[j,p] ≥ W_j[Cg, Mg]``
    per job (the GPU-proportional floor). Solved twice:

    * as an **LP relaxation** over the *extended* candidate set (see :func:`_lp1_candidates`): its optimum is
      ``last_stats["opt_bound"]``, an upper bound on the total rate any allocation of the runnable set that
      respects the floor can reach under this perf model (fractional y = interpolated allocations);
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
    whole_gpus = True

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
        # a job's rate is gpu_factor x w (gpu_factor != 1 when a fractional demand gets whole GPUs): weigh its
        # configurations by it, in the objective and the floor alike
        wvec = np.concatenate([cd.w * r.gf for cd, r in zip(cands, reqs, strict=True)])
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

        floors = np.array([r.gf * r.w_prop for r in reqs])
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
            # HiGHS refuses models whose numbers span too many orders of magnitude (1e300 CPUs on a server)
            raise UnsupportedInput(f"Synergy-Opt's LP1 cannot be solved for this cluster and these jobs "
                                   f"(HiGHS: {res.message}); check the servers' CPUs and memory")
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

        floors = np.array([r.gf * r.w_prop for r in reqs])
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
