"""The discrete-event simulator: exact timing on small cases, rule enforcement, and invariants on random traces."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfpredict.sched import (
    Allocation,
    ClusterSpec,
    Job,
    Ledger,
    Mechanism,
    PerfModel,
    Share,
    make_policy,
)
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sim.simulator import SimConfig, SimulationError, simulate
from tests.conftest import RecordingMechanism

FLAT = PerfModel("flat")  # insensitive, linear in GPUs
#: twice as fast with 6 CPUs/GPU as with the proportional 3; 1 CPU/GPU gives 1/3 (linear below the grid start)
SENSITIVE = PerfModel("sens", cpus_per_gpu=(3.0, 6.0), mem_per_gpu=(62.5,), matrix=((1.0,), (2.0,)))


class Fixed(Mechanism):
    """Runs every job on server 0, device 0.., with a fixed number of CPUs per GPU."""

    name = "fixed"

    def __init__(self, cpus_per_gpu: float, preemptive: bool = True) -> None:
        super().__init__()
        self.cpus_per_gpu, self.preemptive = cpus_per_gpu, preemptive

    def allocate(self, ordered, cluster, running, now):
        out, dev = {}, 0
        for js in ordered:
            g = int(js.job.gpus)
            if dev + g > cluster.servers[0].gpus:
                break
            out[js.id] = running.get(js.id) or Allocation((Share(0, g, g * self.cpus_per_gpu, g * 62.5,
                                                                 tuple(range(dev, dev + g))),))
            dev += g
        return out


def test_one_job_runs_its_work_and_waits_for_the_round_boundary():
    cluster = ClusterSpec.homogeneous(1)
    jobs = [Job("a", 10.0, 2, 1000.0, model="flat")]
    r = simulate(jobs, cluster, make_policy("fifo"), make_mechanism("proportional"), {"flat": FLAT})
    (js,) = r.finished
    assert r.mode == "round" and js.first_start == 300.0 and js.finish == pytest.approx(1300.0)
    assert js.run_time == pytest.approx(1000.0) and js.attained == pytest.approx(2000.0)
    ev = simulate(jobs, cluster, make_policy("fifo"), make_mechanism("proportional"), {"flat": FLAT},
                  SimConfig(mode="event"))
    assert ev.finished[0].first_start == 10.0 and ev.finished[0].finish == pytest.approx(1010.0)


def test_more_cpus_make_a_sensitive_job_finish_proportionally_sooner():
    cluster = ClusterSpec.homogeneous(1)
    jobs = [Job("a", 0.0, 1, 3600.0, model="sens")]
    fast = simulate(jobs, cluster, make_policy("fifo"), Fixed(6.0), {"sens": SENSITIVE})
    slow = simulate(jobs, cluster, make_policy("fifo"), Fixed(1.0), {"sens": SENSITIVE})
    assert fast.finished[0].finish == pytest.approx(1800.0)
    assert slow.finished[0].finish == pytest.approx(3600.0 * 3)


def test_preemption_and_restart_overhead_are_charged():
    # One GPU, LAS: the two jobs alternate every round; each resume costs 60 s without progress.
    cluster = ClusterSpec(servers=(ClusterSpec.homogeneous(1, gpus=1, cpus=3, mem_gb=62.5).servers[0],))
    jobs = [Job("a", 0.0, 1, 900.0, model="flat"), Job("b", 0.0, 1, 900.0, model="flat")]
    free = simulate(jobs, cluster, make_policy("las"), make_mechanism("proportional"), {"flat": FLAT})
    costly = simulate(jobs, cluster, make_policy("las"), make_mechanism("proportional"), {"flat": FLAT},
                      SimConfig(restart_overhead_s=60.0))
    assert max(s.finish for s in free.finished) == pytest.approx(1800.0)
    assert sum(s.preemptions for s in free.finished) >= 2
    restarts = sum(s.restarts for s in costly.finished)
    assert restarts >= 2
    # Time held on the GPU = the work plus 60 s per restart; nothing else is lost or gained.
    assert sum(s.run_time for s in costly.finished) == pytest.approx(1800.0 + 60.0 * restarts)
    assert max(s.finish for s in costly.finished) >= 1800.0 + 60.0 * restarts


def test_a_mechanism_that_breaks_the_rules_is_stopped_with_its_name():
    cluster = ClusterSpec.homogeneous(1, gpus=2)

    class Greedy(Mechanism):
        name = "overcommit"

        def allocate(self, ordered, cluster, running, now):
            return {js.id: Allocation((Share(0, 2, 6, 125, (0, 1)),)) for js in ordered}

    jobs = [Job("a", 0, 2, 100, model="flat"), Job("b", 0, 2, 100, model="flat")]
    with pytest.raises(SimulationError, match="overcommit over-committed"):
        simulate(jobs, cluster, make_policy("fifo"), Greedy(), {"flat": FLAT})
    with pytest.raises(SimulationError, match="non-preemptive"):
        # on one GPU, the shorter newcomer displaces the running job: forbidden for a non-preemptive mechanism
        simulate([Job("a", 0, 1, 1000, model="flat"), Job("b", 500, 1, 100, model="flat")],
                 ClusterSpec.homogeneous(1, gpus=1),
                 make_policy("shortest"), Fixed(3.0, preemptive=False), {"flat": FLAT}, SimConfig(mode="event"))
    with pytest.raises(SimulationError, match="no performance model for 'nope'"):
        simulate([Job("a", 0, 1, 10, model="nope")], cluster, make_policy("fifo"), Fixed(3.0), {"flat": FLAT})
    with pytest.raises(SimulationError, match="no performance model for 'flta' \\(did you mean 'flat'\\?"):
        simulate([Job("a", 0, 1, 10, model="flta")], cluster, make_policy("fifo"), Fixed(3.0), {"flat": FLAT})


def test_oversized_jobs_are_an_error_or_dropped():
    cluster = ClusterSpec.homogeneous(1, gpus=4)
    jobs = [Job("big", 0, 8, 10, model="flat"), Job("ok", 0, 4, 10, model="flat")]
    with pytest.raises(SimulationError, match="asks for 8 GPUs"):
        simulate(jobs, cluster, make_policy("fifo"), make_mechanism("proportional"), {"flat": FLAT})
    r = simulate(jobs, cluster, make_policy("fifo"), make_mechanism("proportional"), {"flat": FLAT},
                 SimConfig(oversized="drop"))
    assert [j.id for j in r.dropped] == ["big"] and [s.id for s in r.finished] == ["ok"]


def test_max_time_leaves_the_rest_unfinished_with_progress_kept():
    cluster = ClusterSpec.homogeneous(1, gpus=1)
    jobs = [Job("a", 0, 1, 1000, model="flat"), Job("b", 0, 1, 1000, model="flat")]
    r = simulate(jobs, cluster, make_policy("fifo"), make_mechanism("proportional"), {"flat": FLAT},
                 SimConfig(max_time_s=1500))
    assert [s.id for s in r.finished] == ["a"] and [s.id for s in r.unfinished] == ["b"]
    # a ends at 1000; b starts on the next round boundary (1200) and has run 300 s when time runs out
    assert r.unfinished[0].first_start == 1200.0 and r.unfinished[0].remaining == pytest.approx(700.0)


def test_stop_after_ends_when_the_measured_jobs_are_done():
    cluster = ClusterSpec.homogeneous(1, gpus=1)
    # a: 0-1000; b arrives at 500 and waits for the next boundary after a (1200); c arrives at 5000
    jobs = [Job("a", 0, 1, 1000, model="flat"), Job("b", 500, 1, 1000, model="flat"),
            Job("c", 5000, 1, 100, model="flat")]
    r = simulate(jobs, cluster, make_policy("fifo"), make_mechanism("proportional"), {"flat": FLAT},
                 SimConfig(stop_after=frozenset({"a"})))
    assert [s.id for s in r.finished] == ["a"] and [s.id for s in r.unfinished] == ["b"]
    assert r.end_time == 1000.0  # c has not arrived yet: left out
    r = simulate(jobs, cluster, make_policy("fifo"), make_mechanism("proportional"), {"flat": FLAT},
                 SimConfig(stop_after=frozenset({"a", "b"})))
    assert [s.id for s in r.finished] == ["a", "b"] and not r.unfinished and r.end_time == 2200.0
    with pytest.raises(SimulationError, match="not in the trace"):
        simulate(jobs, cluster, make_policy("fifo"), make_mechanism("proportional"), {"flat": FLAT},
                 SimConfig(stop_after=frozenset({"zz"})))

# -- invariants on random traces -------------------------------------------------------------------------

jobs_strategy = st.lists(
    st.tuples(st.floats(0, 5000), st.sampled_from([1, 1, 2, 4, 8]), st.floats(60, 20000),
              st.sampled_from(["flat", "sens"])),
    min_size=1, max_size=25)


def _work_done(log: list[tuple[float, dict[str, Allocation]]], finish: dict[str, float], jobs: list[Job],
               perf: dict[str, PerfModel]) -> dict[str, float]:
    """Integrate each job's rate over the allocations the mechanism gave it, from the decision log alone."""
    done = {j.id: 0.0 for j in jobs}
    by_id = {j.id: j for j in jobs}
    for k, (t, allocs) in enumerate(log):
        t_end = log[k + 1][0] if k + 1 < len(log) else math.inf
        for jid, alloc in allocs.items():
            stop = min(t_end, finish.get(jid, math.inf))
            if stop > t:
                done[jid] += perf[by_id[jid].model].rate(alloc, by_id[jid].gpus) * (stop - t)
    return done


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=jobs_strategy, servers=st.integers(1, 3), policy=st.sampled_from(["fifo", "srtf", "las", "ftf"]),
       mode=st.sampled_from(["round", "event"]), mechanism=st.sampled_from(["proportional", "tune", "greedy"]))
def test_invariants_on_random_traces(spec, servers, policy, mode, mechanism):
    cluster = ClusterSpec.homogeneous(servers)
    jobs = [Job(f"j{i}", a, g, w, model=m) for i, (a, g, w, m) in enumerate(spec)]
    perf = {"flat": FLAT, "sens": SENSITIVE}
    mech = RecordingMechanism(make_mechanism(mechanism))
    r = simulate(jobs, cluster, make_policy(policy), mech, perf, SimConfig(mode=mode))
    # every job finishes, never before it arrived, and got exactly its work
    assert len(r.finished) == len(jobs) and not r.unfinished
    finish = {s.id: s.finish for s in r.finished}
    done = _work_done(mech.log, finish, jobs, perf)
    for j in jobs:
        s = next(s for s in r.finished if s.id == j.id)
        assert s.first_start >= j.arrival and s.finish > s.first_start
        assert done[j.id] == pytest.approx(j.work, rel=1e-6)
    # every decision fits the cluster, and gangs get all their GPUs (CPU/memory split in proportion to them)
    for _, allocs in mech.log:
        Ledger(cluster).take_all(allocs.values())
        for jid, alloc in allocs.items():
            job = next(j for j in jobs if j.id == jid)
            assert alloc.gpus == job.gpus and alloc.is_gpu_proportional_split()
            if mechanism == "tune":  # never below the GPU-proportional share's speed (rate 1 on this cluster)
                assert perf[job.model].rate(alloc, job.gpus) >= 1 - 1e-9
    for _, g, c, m in r.usage:
        assert g <= cluster.total_gpus + 1e-9 and c <= cluster.total_cpus + 1e-9 and m <= cluster.total_mem_gb + 1e-6
    # deterministic
    again = simulate(jobs, cluster, make_policy(policy), make_mechanism(mechanism), perf, SimConfig(mode=mode))
    assert {s.id: s.finish for s in again.finished} == finish


def test_rigid_mechanisms_must_give_exact_demands_and_jobs_must_fit_device_memory():
    cluster = ClusterSpec.homogeneous(1, gpus=4, gpu_mem_gb=16)

    class Stingy(Fixed):
        name, rigid = "stingy", True

        def allocate(self, ordered, cluster, running, now):
            return {js.id: Allocation((Share(0, 1, 3, 62.5, (0,)),)) for js in ordered[:1]}

    with pytest.raises(SimulationError, match="stingy is rigid but gave job a 1 GPUs for a demand of 2"):
        simulate([Job("a", 0, 2, 100, model="flat")], cluster, make_policy("fifo"), Stingy(3.0), {"flat": FLAT})
    huge = PerfModel("huge", device_mem_gb=40.0)
    jobs = [Job("a", 0, 1, 100, model="huge"), Job("b", 0, 1, 100, model="flat")]
    with pytest.raises(SimulationError, match="needs 40 GB of device memory"):
        simulate(jobs, cluster, make_policy("fifo"), make_mechanism("proportional"), {"flat": FLAT, "huge": huge})
    r = simulate(jobs, cluster, make_policy("fifo"), make_mechanism("proportional"), {"flat": FLAT, "huge": huge},
                 SimConfig(oversized="drop"))
    assert [j.id for j in r.dropped] == ["a"] and [s.id for s in r.finished] == ["b"]
