"""What the parent asks a *group* of concurrently running measuring processes to do.

Two kinds of group share one harness:

* **data-parallel** (``dist`` set on every member): k ranks of one job train together under
  ``torch.distributed`` DDP (gloo on CPU, NCCL on CUDA). Every rank must run the same number of iterations,
  so rank 0 picks the count from its warm-up and broadcasts it.
* **co-located** (``dist`` unset): n independent jobs (copies of one job, or different jobs) share a device.
  They warm up, meet at a barrier, and then each times iterations for the same wall-clock window, so every
  copy is measured while all the others are running.

Kept free of heavy imports: the parent needs these classes too.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfpredict.workload.spec import WorkloadRef


@dataclass(frozen=True)
class DistSpec:
    rank: int
    world_size: int
    backend: str  # "gloo" | "nccl"
    master_addr: str
    master_port: int
    #: Network interface gloo should use (set when ranks live in different network namespaces).
    ifname: str | None = None
    #: Overrides the tcp:// rendezvous, e.g. ``env://`` under torchrun (which already runs a store).
    init_method: str | None = None


@dataclass(frozen=True)
class GroupMember:
    ref: WorkloadRef
    batch_size: int  # per-process (local) batch
    mode: str = "train"
    device: str = "cpu"
    threads: int | None = None
    #: CPU cores this process is pinned to (``os.sched_setaffinity``); None leaves the affinity alone.
    cpus: tuple[int, ...] | None = None
    #: Name of a Linux network namespace (``ip netns``) to enter before any networking.
    netns: str | None = None
    dist: DistSpec | None = None
    seed: int = 0
    label: str = ""


@dataclass(frozen=True)
class GroupTiming:
    warmup_iters: int = 3
    warmup_s: float = 0.5
    #: Co-location: timed wall-clock window every member measures inside.
    window_s: float = 3.0
    #: Data-parallel: timed iterations = clamp(window_s / warm-up median, min_iters, max_iters).
    min_iters: int = 5
    max_iters: int = 300
    #: How long members wait for each other at the start barrier.
    barrier_timeout_s: float = 300.0
