"""Findings of a property scan of the seed-002 (moldable/malleable/rigid) and seed-004 (Horus family)
mechanisms against their papers."""

from __future__ import annotations

import pytest

from perfpredict.sched import ClusterSpec, Job, PerfModel, ServerSpec, make_policy
from perfpredict.sched.job import JobState
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sched.mechanisms.horus import PerformanceAwareBinPacking
from perfpredict.sched.mechanisms.moldable import MalleableEquipartition, MoldableEquipartition, MoldableProportional
from perfpredict.sim.sharing import Sharing, slowdown_model
from perfpredict.sim.simulator import SimConfig, simulate


def test_pab_tries_a_requeued_job_again_at_once_when_a_gpu_is_idle():
    """PAB re-queued a job at the end of its warm-up but did not try it again until the next arrival or
    completion: C waited from 70 s to 5037 s (A's completion) with GPU 1 idle since 30 s."""
    spec = ClusterSpec.homogeneous(1, gpus=2, cpus=16.0, mem_gb=128.0, gpu_type="H100", gpu_mem_gb=80.0)
    models = {"heavy": PerfModel("heavy", device_mem_gb=5.0, gpu_util=1.0)}
    truth = {"heavy": (1.0, 5.0)}  # a pair of them: the measured T_deg(2.0) more than halves A's speed
    jobs = [Job("A", 0.0, 1, 5000.0, model="heavy"), Job("B", 0.0, 1, 30.0, model="heavy"),
            Job("C", 10.0, 1, 300.0, model="heavy")]
    sh = Sharing(slowdown=slowdown_model("measured"), truth=truth, record=True)
    r = simulate(jobs, spec, make_policy("fifo"), PerformanceAwareBinPacking(), models, SimConfig(sharing=sh))
    fin = {js.id: js for js in r.finished}
    c = fin["C"]
    assert c.first_start == pytest.approx(10.0) and c.preemptions == 1  # placed next to A, then re-queued at 70 s
    restart = next(t for t, key, on, *_ in r.device_log if key == (0, 1) and on == ("C",))
    assert restart == pytest.approx(70.0)  # on the GPU B left at 30 s, not after A's 5000 s
    assert c.finish < fin["A"].finish


@pytest.mark.parametrize("mech", [MoldableEquipartition, MalleableEquipartition, MoldableProportional])
def test_literal_memory_reading_still_sizes_a_job_to_the_gpus_that_hold_it(mech):
    """With ``memory_aware=False`` (I10's literal reading, an option), a 5 GB job on a 12 GB + 4 GB cluster was
    sized 2 GPUs (D'Hondt over both vacant GPUs) and waited for ever: the run stalled. The cap of p_max at the
    GPUs whose memory holds the job is not I10's floor on fractions and applies either way."""
    spec = ClusterSpec(servers=(ServerSpec(gpus=1, cpus=8.0, mem_gb=64.0, gpu_mem_gb=12.0),
                                ServerSpec(gpus=1, cpus=8.0, mem_gb=64.0, gpu_mem_gb=4.0)))
    models = {"m": PerfModel("m", device_mem_gb=5.0)}
    m = mech(memory_aware=False)
    js = JobState(Job("a", 0.0, 1, 100.0, model="m"), models["m"])
    assert m.job_bounds(js, spec).hi == 1.0
    out = m.allocate([js], spec, {}, 0.0)
    assert out["a"].gpus == 1.0 and out["a"].shares[0].server == 0
    r = simulate([Job("a", 0.0, 1, 100.0, model="m")], spec, make_policy("fifo"), m, models)
    assert r.stall is None and len(r.finished) == 1
    # the same through the registry's option string
    r = simulate([Job("a", 0.0, 1, 100.0, model="m")], spec, make_policy("fifo"),
                 make_mechanism("moldable-equipartition:memory_aware=false"), models)
    assert r.stall is None and len(r.finished) == 1
