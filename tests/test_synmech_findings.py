"""Synergy-Opt's LP1 bound (seed 001 §4.1, App. A.1.2) must bound the total rate of every allocation of the
runnable set that keeps each job at or above its GPU-proportional rate (Theorem A.1)."""

from __future__ import annotations

from perfpredict.sched.cluster import Allocation, ClusterSpec, Ledger
from perfpredict.sched.job import Job, JobState
from perfpredict.sched.mechanisms.synergy import SynergyOpt, SynergyTune, proportional_rate
from perfpredict.sched.perf import PerfModel

CPUS = (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0)
MEMS = (31.25, 62.5, 125.0)
#: rate grows linearly with CPUs up to 8 per GPU
SENSITIVE = PerfModel("sensitive", CPUS, MEMS, tuple(tuple(min(c, 8.0) / 8.0 for _ in MEMS) for c in CPUS))


def _job(jid: str, perf: PerfModel, gpus: float) -> JobState:
    return JobState(Job(id=jid, arrival=0.0, gpus=gpus, work=100.0), perf)


def test_bound_covers_a_job_without_a_grid_that_runs_on_fewer_cpus():
    # one server, 2 GPUs, 6 CPUs (share: 3 CPUs / 62.5 GB per GPU); a job without a sensitivity grid runs at rate
    # 1 whatever CPUs it gets, so the sensitive job may take 5 of the 6 CPUs
    cluster = ClusterSpec.homogeneous(1, gpus=2, cpus=6.0, mem_gb=125.0)
    sens, flat = _job("s", SENSITIVE, 1), _job("f", PerfModel("flat"), 1)
    allocs = {"s": Allocation.proportional({0: [0]}, cpus=5.0, mem_gb=62.5),
              "f": Allocation.proportional({0: [1]}, cpus=1.0, mem_gb=62.5)}
    Ledger(cluster).take_all(allocs.values())  # feasible
    rates = {js.id: js.rate_on(allocs[js.id]) for js in (sens, flat)}
    assert all(rates[js.id] >= proportional_rate(js, cluster) - 1e-12 for js in (sens, flat))
    total = sum(rates.values())
    assert total > 2.6
    opt = SynergyOpt()
    assert opt.bound([sens, flat], cluster) >= total - 1e-9
    opt.allocate([sens, flat], cluster, {}, 0.0)
    assert opt.last_stats["opt_bound"] >= total - 1e-9


def test_bound_counts_the_gpu_factor_of_a_fractional_demand():
    # a 0.5-GPU demand gets one whole GPU: twice the reference rate; the bound must count it
    cluster = ClusterSpec.homogeneous(1)
    jobs = [_job(f"j{i}", SENSITIVE, 0.5) for i in range(3)]
    opt = SynergyOpt()
    out = opt.allocate(jobs, cluster, {}, 0.0)
    realised = sum(js.rate_on(out[js.id]) for js in jobs)
    assert abs(realised - opt.last_stats["realised_rate"]) < 1e-9
    assert opt.last_stats["opt_bound"] >= realised - 1e-9
    assert opt.last_stats["ilp_value"] >= realised - 1e-9
    tune = SynergyTune()
    t_out = tune.allocate(jobs, cluster, {}, 0.0)
    assert opt.bound(jobs, cluster) >= sum(js.rate_on(t_out[js.id]) for js in jobs) - 1e-9
