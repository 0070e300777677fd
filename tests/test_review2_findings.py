"""Findings of a second review of the property-scan fixes (andreas-baseline's further blocks)."""

from __future__ import annotations

from perfpredict.sched.cluster import Allocation, ClusterSpec, ServerSpec
from perfpredict.sched.job import Job, JobState
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sched.perf import PerfModel


def test_andreas_baseline_does_not_build_a_problem_per_waiting_job_that_fits_no_free_gpu(monkeypatch):
    """The V100 runs a; 2000 jobs that need 24 GB wait, and only the 16 GB T4 is free. Looking past them a block
    of (free GPUs =) one job at a time built 2000 one-row problems per scheduling event, so a run was quadratic
    in the queue (1500 such jobs: 0.5 s before the further blocks, 106 s after). The job at the back that fits
    the T4 must still start, and rows of jobs that fit no free GPU need not be built."""
    from perfpredict.sched import andreas as core
    from perfpredict.sched.mechanisms import andreas as mech

    rows = []
    real = core.AndreasProblem.from_states.__func__

    def counting(cls, states, *a, **k):
        rows.append(len(states))
        return real(cls, states, *a, **k)

    monkeypatch.setattr(mech.AndreasProblem, "from_states", classmethod(counting))
    cl = ClusterSpec(servers=(ServerSpec(gpus=1, cpus=8, mem_gb=64, gpu_type="V100", gpu_mem_gb=32, energy_cost=0.36),
                              ServerSpec(gpus=1, cpus=8, mem_gb=64, gpu_type="T4", gpu_mem_gb=16, energy_cost=0.1)))
    big, small = PerfModel("big", device_mem_gb=24), PerfModel("small", device_mem_gb=8)
    running = JobState(Job("a", 0.0, 1, 1000.0, model="big"), big)
    waiting = [JobState(Job(f"b{i}", 1.0 + i, 1, 100.0, model="big"), big) for i in range(2000)]
    last = JobState(Job("c", 3000.0, 1, 100.0, model="small"), small)
    on_v100 = Allocation.proportional({0: [0]}, cpus=8.0, mem_gb=64.0)
    out = make_mechanism("andreas-baseline").allocate([running, *waiting, last], cl, {"a": on_v100}, 3000.0)
    assert set(out) == {"a", "c"} and out["c"].shares[0].server == 1
    assert sum(rows) <= 2, rows[:5]

