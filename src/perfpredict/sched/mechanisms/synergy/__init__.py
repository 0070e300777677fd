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

Modules: ``share`` (the GPU-proportional share and floor), ``requests`` (demand and fallback vectors),
``devices`` (which servers and devices), ``packer`` (the placement state Tune and Opt share), ``greedy``,
``tune``, ``opt`` and ``baselines`` (DRF, Tetris).
"""

from perfpredict.sched.mechanisms.synergy.baselines import DRF, Tetris
from perfpredict.sched.mechanisms.synergy.greedy import SynergyGreedy
from perfpredict.sched.mechanisms.synergy.opt import SynergyOpt, consolidation_caps
from perfpredict.sched.mechanisms.synergy.share import (
    proportional_floor_violations,
    proportional_rate,
    proportional_rate_floor_ok,
    proportional_share,
)
from perfpredict.sched.mechanisms.synergy.tune import SynergyTune

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
