"""The scheduler core on what the public-trace readers produce: heterogeneous clusters (servers of 1-8 GPUs of
several types, device memories and CPU/memory per GPU, as ``philly:``/``pai:``/``helios:`` clusters give),
fractional GPU demands (PAI's ``fractional=keep``) and gangs wider than any one server, under every mechanism
``simulate`` offers (GENIE's on the symmetric clusters it accepts)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfpredict.sched import Allocation, ClusterSpec, Job, Ledger, Mechanism, make_policy
from perfpredict.sched.cluster import ServerSpec
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sim.horus_workload import prepare_sharing
from perfpredict.sim.metrics import metrics_from_result
from perfpredict.sim.run import load_perf_models
from perfpredict.sim.simulator import SimConfig, SimulationError, simulate
from tests.conftest import RecordingMechanism

MODELS = load_perf_models("paper")
#: device memory (mcnn, opennmt), per-type speeds (convnet: T4/V100 only), CPU sensitivity (resnet18), linear
MODEL_NAMES = ["linear", "resnet18", "lstm", "mcnn", "opennmt", "convnet"]
GENIE_MODELS = ["genie/alexnet/train/b128", "genie/googlenet/train/b32", "genie/inception_v3/train/b16"]
SHARING = ["horus", "horus-f", "obp", "pab"]
MECHANISMS = ["proportional", "greedy", "tune", "opt", "drf", "tetris", "moldable-equipartition",
              "malleable-equipartition", "moldable-proportional", "malleable-proportional", "rigid", "andreas",
              "andreas-baseline", "fifo-exclusive", *SHARING, "swaf", "genie-fifo", "genie-tetris-perf"]

servers_st = st.lists(st.tuples(st.sampled_from([0, 1, 2, 4, 8]), st.sampled_from(["T4", "V100", "P100"]),
                                st.sampled_from([8.0, 12.0, 16.0, 32.0]), st.sampled_from([0.5, 3.0, 12.0, 48.0]),
                                st.sampled_from([10.0, 62.5, 256.0])),
                      min_size=1, max_size=4).filter(lambda s: any(g for g, *_ in s))
jobs_st = st.lists(st.tuples(st.floats(0, 3000), st.sampled_from([0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 6, 12, 16]),
                             st.floats(60, 5000), st.integers(0, 2 ** 16)),
                   min_size=1, max_size=10)


def _cluster(servers, genie: bool) -> ClusterSpec:
    if genie:  # GENIE assumes every node has the same number of GPUs
        size = next(g for g, *_ in servers)
        servers = [(size, *rest) for _, *rest in servers]
    return ClusterSpec(tuple(ServerSpec(gpus=g, cpus=c * max(g, 1), mem_gb=m * max(g, 1), gpu_type=t, gpu_mem_gb=dm)
                             for g, t, dm, c, m in servers), name="hetero")


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(servers=servers_st, spec=jobs_st, mechanism=st.sampled_from(MECHANISMS),
       policy=st.sampled_from(["fifo", "srtf", "las", "ftf", "shortest", "priority"]),
       mode=st.sampled_from(["auto", "round", "event"]), with_sharing=st.booleans())
def test_invariants_on_heterogeneous_clusters_and_fractional_demands(servers, spec, mechanism, policy, mode,
                                                                     with_sharing):
    genie = mechanism == "swaf" or mechanism.startswith("genie")
    cluster = _cluster(servers, genie)
    names = GENIE_MODELS if genie else MODEL_NAMES
    jobs = [Job(f"j{i}", a, g, w, model=names[k % len(names)]) for i, (a, g, w, k) in enumerate(spec)]
    mech = RecordingMechanism(make_mechanism(mechanism))
    cfg = SimConfig(mode=mode, oversized="drop")
    models = MODELS
    if with_sharing:  # as run_simulation does; without it, shared devices run without interference
        models, cfg = prepare_sharing(jobs, MODELS, mech.inner, cfg)
    try:
        r = simulate(jobs, cluster, make_policy(policy), mech, models, cfg)
    except SimulationError as e:
        assert "can run none of the" in str(e)  # every job dropped: refused in one message
        return
    # every job the cluster can hold finishes (none hangs), the others are dropped and counted
    assert r.stall is None and not r.unfinished
    assert len(r.finished) + len(r.dropped) == len(jobs)
    by_id = {j.id: j for j in jobs}
    for _, allocs in mech.log:
        Ledger(cluster).take_all(allocs.values())  # no server over its GPUs, CPUs, memory; no device over 1 GPU
        for jid, alloc in allocs.items():
            if mech.rigid:  # gangs all or none
                job = by_id[jid]
                owed = job.gpus if job.gpus < 1 and not mech.whole_gpus else math.ceil(job.gpus - 1e-9)
                assert alloc.gpus == pytest.approx(owed)
    for _, g, c, m in r.usage:
        assert g <= cluster.total_gpus + 1e-9 and c <= cluster.total_cpus + 1e-6 and m <= cluster.total_mem_gb + 1e-6
    for s in r.finished:
        assert s.first_start >= s.job.arrival and s.finish >= s.first_start and s.remaining <= 1e-9 * s.job.work
    met = metrics_from_result(r)
    for key in ("gpu_util", "cpu_util", "mem_util", "busy_gpu_util"):
        v = getattr(met, key)
        assert math.isnan(v) or 0 <= v <= 1 + 1e-9, (key, v)
    for key in ("avg_jct_s", "avg_queue_delay_s", "avg_wait_s", "makespan_s", "lost_work_s"):
        assert getattr(met, key) >= 0, key


class OnDevice0(Mechanism):
    """Every job on server 0, device 0, shared: what a sharing mechanism of one's own does."""

    name = "on-0"
    preemptive = False
    round_based = False

    def allocate(self, ordered, cluster, running, now):
        return {js.id: running.get(js.id) or Allocation.shared_devices({0: [0]}, 1.0, 1.0, 0.0) for js in ordered}


@pytest.mark.parametrize("mechanism", ["horus", "obp", OnDevice0()])
def test_a_shared_device_counts_once_in_gpu_utilisation_without_a_sharing_config(mechanism):
    """Without ``SimConfig.sharing`` (the Python API; a mechanism of one's own under ``run_simulation``) jobs
    sharing a device ran at full speed, as designed, but the usage series added each sharer's GPU: two half-GPU
    jobs on the one GPU gave gpu_util 2.0. A device held is one GPU in use, however many jobs share it."""
    cluster = ClusterSpec.homogeneous(1, gpus=1)
    jobs = [Job("a", 0.0, 0.5, 1000.0, model="linear"), Job("b", 0.0, 0.5, 1000.0, model="linear")]
    r = simulate(jobs, cluster, "fifo", mechanism, MODELS)
    finish = r.finished[0].finish
    assert [s.finish for s in r.finished] == [finish, finish]  # together, without interference
    assert max(g for _, g, _, _ in r.usage) == 1.0
    assert metrics_from_result(r).gpu_util == pytest.approx(1.0)


PAI_TASKS = ("a1,worker,1.0,Terminated,1000.0,2000.0,600.0,10.0,50.0,T4\n"
             "a2,worker,1.0,Terminated,1000.0,2000.0,600.0,10.0,100.0,V100\n")
PAI_JOBS = "a1,x,u1,Terminated,1000.0,2000.0\na2,x,u2,Terminated,1000.0,2000.0\n"


@pytest.mark.parametrize(("mechanism", "a1_jct"), [("horus", 500.0), ("proportional", 500.0), ("rigid", 1000.0)])
def test_a_kept_gpu_share_under_a_whole_gpu_mechanism_is_said(tmp_path, mechanism, a1_jct):
    """PAI's ``fractional=keep`` was documented as for horus, obp and pab, but they place whole GPUs only: a
    50% job's 1000 s recorded on half a GPU ran in 500 s on the whole device, the speed-up ``ceil`` exists to
    avoid. The docs now name the mechanisms that keep the share, and a run that rounds shares up says so."""
    from perfpredict.sim.run import run_simulation

    (tmp_path / "t.csv").write_text(PAI_TASKS)
    (tmp_path / "j.csv").write_text(PAI_JOBS)
    run = run_simulation(f"pai:{tmp_path / 't.csv'},jobs={tmp_path / 'j.csv'},fractional=keep", "1x2", "fifo",
                         mechanism)
    assert {s.id: s.finish - s.job.arrival for s in run.result.finished}["a1"] == pytest.approx(a1_jct)
    said = [n for n in run.notes if "part of a GPU" in n]
    if a1_jct < 1000.0:
        assert len(said) == 1 and f"{mechanism} places whole GPUs" in said[0] and "fractional=ceil" in said[0]
        assert "1 job(s)" in said[0] and "a1: 0.5" in said[0]
    else:
        assert said == []
