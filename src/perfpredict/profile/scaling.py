"""Data-parallel scaling: train the job with k DDP ranks at a fixed global batch and record S(k).

CPU: the process's cores are split into k equal groups; each rank is pinned to its group (affinity) and uses
that many intra-op threads, and ranks all-reduce gradients over gloo. A "device" is therefore a core group,
and k can go up to the number of cores. CUDA: rank i uses ``cuda:i`` over NCCL, k up to the GPU count.

Ranks can also be spread over network-separated "nodes" (``nodes=`` a :class:`~perfpredict.profile.netns.
VirtualNodes`): then gloo traffic between nodes crosses a real veth link with a bandwidth cap, which is what
GENIE's placement ⟨d_node, d_g/n⟩ needs on a single machine.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfpredict.card import ScalingInfo, ScalingPoint
from perfpredict.errors import UsageError
from perfpredict.profile.group import free_port, run_group
from perfpredict.profile.group_request import DistSpec, GroupMember, GroupTiming
from perfpredict.workload.spec import WorkloadRef


@dataclass(frozen=True)
class Placement:
    """GENIE's ⟨d_node, d_g/n⟩: ``d_node`` nodes with ``d_gn`` ranks each."""

    d_node: int
    d_gn: int

    @property
    def workers(self) -> int:
        return self.d_node * self.d_gn


def available_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def default_workers(limit: int) -> list[int]:
    """The rank counts :func:`measure_scaling` measures when none are given: powers of two up to ``limit``."""
    return [k for k in (1, 2, 4, 8, 16, 32) if k <= limit]


def max_workers(device: str) -> int:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.device_count()
    return len(available_cpus())


def plan_members(ref: WorkloadRef, placement: Placement, global_batch: int, device: str, mode: str = "train",
                 nodes=None, seed: int = 0, cores_per_worker: int | None = None) -> list[GroupMember]:
    """One :class:`GroupMember` per rank: cores/GPU, rendezvous address and namespace for each.

    CPU: by default the available cores are split evenly over the ranks (S(k) at a fixed machine);
    ``cores_per_worker`` instead gives every rank the same fixed core count, which makes a CPU "device" a
    fixed unit, as GENIE's per-device rate sPR assumes.
    """
    k = placement.workers
    if global_batch % k:
        raise UsageError(f"global batch {global_batch} does not split evenly over {k} workers", step="scaling")
    if placement.d_node > 1 and nodes is None:
        raise UsageError("a multi-node placement needs virtual nodes (perfpredict.profile.netns)", step="scaling")
    if nodes is not None and placement.d_node > len(nodes.names):
        raise UsageError(f"placement needs {placement.d_node} nodes, only {len(nodes.names)} exist", step="scaling")
    cuda = device.startswith("cuda")
    if cuda:
        if k > max_workers(device):
            raise UsageError(f"{k} data-parallel ranks need {k} GPUs; {max_workers(device)} visible", step="scaling")
        cpu_groups: list[tuple[int, ...] | None] = [None] * k
        threads = None
    else:
        cpus = available_cpus()
        if k > len(cpus):
            raise UsageError(f"{k} CPU ranks need at least {k} cores; this process may use {len(cpus)}",
                             step="scaling")
        per = cores_per_worker or len(cpus) // k
        if per * k > len(cpus):
            raise UsageError(f"{k} ranks × {per} cores need {per * k} cores; this process may use {len(cpus)}",
                             step="scaling")
        cpu_groups = [tuple(cpus[i * per:(i + 1) * per]) for i in range(k)]
        threads = per
    # Namespaces have their own port spaces; a port free on the host is as good a guess as any there.
    addr, port = (nodes.addresses[0] if nodes is not None else "127.0.0.1"), free_port()
    members = []
    for rank in range(k):
        node = rank // placement.d_gn
        members.append(GroupMember(
            ref=ref, batch_size=global_batch // k, mode=mode, device=f"cuda:{rank}" if cuda else "cpu",
            threads=threads, cpus=cpu_groups[rank], netns=nodes.names[node] if nodes is not None else None,
            dist=DistSpec(rank=rank, world_size=k, backend="nccl" if cuda else "gloo", master_addr=addr,
                          master_port=port, ifname=nodes.ifnames[node] if nodes is not None else None),
            seed=seed + rank, label=f"rank{rank}"))  # each rank its own data, as with a sharded sampler
    return members


def _peer_fallout(error: str) -> bool:
    """True for the errors a rank raises because *another* rank died (its connection dropped)."""
    return any(m in error for m in ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
                                    "remote process exited", "NCCL communicator was aborted"))


def measure_placement(ref: WorkloadRef, placement: Placement, global_batch: int, device: str = "cpu",
                      mode: str = "train", timing: GroupTiming | None = None, nodes=None,
                      timeout_s: float = 600.0, cores_per_worker: int | None = None) -> ScalingPoint:
    timing = timing or GroupTiming()
    members = plan_members(ref, placement, global_batch, device, mode, nodes, cores_per_worker=cores_per_worker)
    results = run_group(members, timing, timeout_s)
    return _scaling_point(results, placement, global_batch, device, nodes)


def _scaling_point(results: list[dict], placement: Placement, global_batch: int, device: str,
                   nodes) -> ScalingPoint:
    k = placement.workers
    common = dict(workers=k, nodes=placement.d_node, workers_per_node=placement.d_gn, global_batch=global_batch,
                  local_batch=global_batch // k, backend="nccl" if device.startswith("cuda") else "gloo",
                  link=nodes.describe() if nodes is not None and placement.d_node > 1 else
                  ("loopback" if k > 1 else None),
                  device=device)
    bad = [r for r in results if r.get("status") != "ok"]
    if bad:
        # The first failure that is not a consequence of another rank failing is the informative one.
        first = next((r for r in bad if r.get("status") not in ("timeout", "aborted")
                      and not _peer_fallout(r.get("error") or "")),
                     next((r for r in bad if r.get("status") not in ("timeout", "aborted")), bad[0]))
        status = first.get("status", "error")
        return ScalingPoint(status=status if status != "aborted" else "error", error=f"{first.get('label')}: {first.get('error')}",
                            **common)
    medians = [r["timing"]["median_s"] for r in results]
    slowest = max(medians)
    r0 = results[int(np.argmax(medians))]
    return ScalingPoint(status="ok", samples_per_s=global_batch / slowest, iter_time_s=slowest,
                        cv=r0["timing"]["cv"], iterations=r0["iterations"], threads_per_worker=results[0].get("threads"),
                        **common)


def measure_scaling(ref: WorkloadRef, global_batch: int, workers: Sequence[int] | None = None,
                    device: str = "cpu", mode: str = "train", timing: GroupTiming | None = None,
                    timeout_s: float = 600.0, on_point=None) -> ScalingInfo:
    """S(k) for k in ``workers`` (default 1, 2, 4, ... up to the devices available) on one node."""
    limit = max_workers(device)
    if workers is None:
        workers = default_workers(limit)
    workers = sorted(set(int(k) for k in workers))
    if 1 not in workers:
        workers = [1, *workers]
    # What this machine cannot run is left out with a note, not an error: an error would lose the k it can run.
    too_many = [k for k in workers if k > limit]
    uneven = [k for k in workers if k <= limit and global_batch % k]
    workers = [k for k in workers if k <= limit and not global_batch % k]
    notes = [] if device.startswith("cuda") else \
        ["CPU: each worker is a group of cores (affinity) with that many threads; gloo all-reduce"]
    if too_many:
        unit = "GPUs are visible" if device.startswith("cuda") else "cores are available to this process"
        notes.append(f"k = {', '.join(map(str, too_many))} not measured: one rank per device, and {limit} {unit}")
    if uneven:
        notes.append(f"k = {', '.join(map(str, uneven))} not measured: the global batch {global_batch} does not "
                     "split evenly over that many ranks")
    info = ScalingInfo(global_batch=global_batch, backend="nccl" if device.startswith("cuda") else "gloo",
                       device=device, note="; ".join(notes) or None)
    base = None
    for k in workers:
        pt = measure_placement(ref, Placement(1, k), global_batch, device, mode, timing, None, timeout_s)
        if pt.status == "ok":
            if k == 1:
                base = pt.samples_per_s
            if base:
                pt = pt.model_copy(update={"speedup": pt.samples_per_s / base})
        info.points.append(pt)
        if on_point is not None:
            on_point(pt)
    return info
