"""The GPU-proportional share every Synergy mechanism measures itself against, and the floor it sets
(see the package docstring)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from perfpredict.sched.cluster import EPS, Allocation, ClusterSpec
from perfpredict.sched.job import JobState

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
