"""Horus (seed 004): shared devices in the ledger, interference and OOM in the simulator (by hand and as
hypothesis properties), eq. 7-10, k-means queues and weighted-fair quotas, the mechanisms' rules, the
measured-point workloads and the CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from perfpredict.sched import (
    Allocation,
    CapacityError,
    ClusterSpec,
    Job,
    Ledger,
    Mechanism,
    PerfModel,
    Share,
    make_policy,
)
from perfpredict.sched.horus import job_features, kmeans_l1, placement_cost, weighted_fair_quota
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sched.mechanisms.horus import (
    FifoExclusive,
    Horus,
    HorusF,
    OpportunisticBinPacking,
    PerformanceAwareBinPacking,
)
from perfpredict.sim.metrics import metrics_from_result
from perfpredict.sim.sharing import PAPER_QUADRATICS, PaperSlowdown, Sharing, slowdown_model
from perfpredict.sim.simulator import SimConfig, SimulationError, simulate

MEASURED = slowdown_model("measured")


def linear(u: float) -> float:
    """A slowdown easy to compute by hand: T_deg(U) = U / 2."""
    return u / 2


def cluster(servers: int = 1, gpus: int = 1, gpu_mem: float = 80.0) -> ClusterSpec:
    return ClusterSpec.homogeneous(servers, gpus=gpus, cpus=8.0 * gpus, mem_gb=64.0 * gpus, gpu_type="H100",
                                   gpu_mem_gb=gpu_mem)


def model(name: str, util: float, mem: float) -> PerfModel:
    return PerfModel(name, device_mem_gb=mem, gpu_util=util)


class AllOnDevice0(Mechanism):
    """Puts every waiting job on server 0, device 0, shared (the simulator must sort out the rest)."""

    name = "all-on-0"
    preemptive = False
    round_based = False

    def allocate(self, ordered, cluster, running, now):
        out = dict(running)
        for js in ordered:
            if js.id not in out:
                out[js.id] = Allocation.shared_devices({0: [0]}, 1.0, 1.0, js.device_mem_request_gb)
        return out


# -- the ledger ------------------------------------------------------------------------------------------------
def test_shared_shares_stack_on_a_device_and_exclude_exclusive_ones():
    spec = cluster(1, 2, gpu_mem=10.0)
    led = Ledger(spec)
    a = Allocation.shared_devices({0: [0]}, 1.0, 1.0, 4.0)
    b = Allocation.shared_devices({0: [0]}, 1.0, 1.0, 5.0)
    led.take(a)
    led.take(b)
    assert led.device_sharers[0] == [2, 0] and led.device_mem_used[0][0] == pytest.approx(9.0)
    assert led.used()[0] == pytest.approx(1.0) and led.free_gpus(0) == 1  # one device, however many jobs
    with pytest.raises(CapacityError, match="device memory"):
        led.take(Allocation.shared_devices({0: [0]}, 1.0, 1.0, 2.0))
    with pytest.raises(CapacityError):  # an exclusive job cannot join a shared device
        led.take(Allocation.proportional({0: [0]}, 1.0, 1.0))
    copy = led.copy()
    led.take(Allocation.proportional({0: [1]}, 1.0, 1.0))
    with pytest.raises(CapacityError, match="does not share"):  # nor a shared job an exclusive one
        led.take(Allocation.shared_devices({0: [1]}, 1.0, 1.0, 1.0))
    assert copy.free_gpus(0) == 1 and copy.device_sharers[0] == [2, 0]  # the copy is independent
    led.release(a)
    assert led.device_sharers[0][0] == 1 and led.device_free[0][0] == 0.0
    led.release(b)
    assert led.device_sharers[0][0] == 0 and led.device_free[0][0] == 1.0 and led.device_mem_used[0][0] == 0.0
    with pytest.raises(ValueError):
        Share(0, 0.5, 1.0, 1.0, devices=(0,), shared=True)  # shared shares hold whole devices


# -- slowdown models -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["paper", "paper-1080"])
def test_paper_slowdown_is_the_quadratic_minus_one_above_the_knee_and_a_line_below(source):
    c0, c1, c2 = PAPER_QUADRATICS[source]
    f = slowdown_model(source)
    assert isinstance(f, PaperSlowdown)
    for u in (1.2, 1.5, 2.0):
        assert f(u) == pytest.approx(c2 * u * u + c1 * u + c0 - 1)
    at_knee = c2 + c1 + c0 - 1
    assert f(1.0) == pytest.approx(at_knee) and f(0.5) == pytest.approx(at_knee / 2) and f(0.0) == 0.0
    assert f(1.0 + 1e-9) == pytest.approx(f(1.0), abs=1e-6)  # continuous at 100 %
    u = np.linspace(0, 2.5, 11)
    assert np.allclose(f.many(u), [f(x) for x in u])
    # §3.2: over-committed pairs take 1.5x-3x as long; the reading puts 3x near 150-160 %
    assert 1.4 < (1 + f(1.5)) / 1 < 3.1


def test_measured_slowdown_is_the_refitted_h100_model():
    import json

    from perfpredict.fit.interference import InterferenceModel
    from perfpredict.predictor import default_models_dir

    m = InterferenceModel.from_dict(json.loads((default_models_dir() / "cuda_h100" / "interference.json").read_text()))
    for u in (0.3, 0.9, 1.0, 1.4, 1.8):
        assert MEASURED(u) == pytest.approx(float(m.predict(u)))
    with pytest.raises(ValueError, match="unknown interference source"):
        slowdown_model("nope")


# -- eq. 7-10, clustering, quotas ---------------------------------------------------------------------------
def test_placement_cost_is_eq_7_to_10_by_hand():
    cost = placement_cost(np.array([0.0, 20.0]), np.array([80.0, 80.0]), np.array([0.0, 0.7]), 4.0, 0.5, linear)
    # device 0: (0 + 4)/80 + f(0.5) ; device 1: (20 + 4)/80 + f(1.2)
    assert cost == pytest.approx([4 / 80 + 0.25, 24 / 80 + 0.6])
    weighted = placement_cost(np.array([20.0]), np.array([80.0]), np.array([0.7]), 4.0, 0.5, linear, 2.0, 0.5)
    assert weighted == pytest.approx([2 * 24 / 80 + 0.5 * 0.6])


def test_job_features_are_tasks_util_gpus_per_task_and_memory():
    assert job_features(1, 0.4, 3.0, 8) == (1.0, 0.4, 1.0, 3.0)
    assert job_features(16, 0.9, 5.0, 8) == (2.0, 0.9, 8.0, 5.0)  # σ = ⌈16/8⌉ tasks of 8 GPUs
    assert job_features(4, 0.9, 5.0, 8) == (1.0, 0.9, 4.0, 5.0)


def test_kmeans_l1_separates_obvious_groups_and_is_order_free():
    rng = np.random.default_rng(0)
    a = np.column_stack([np.ones(10), rng.uniform(0.05, 0.15, 10), np.ones(10), rng.uniform(0.5, 1.0, 10)])
    b = np.column_stack([np.ones(10), rng.uniform(0.85, 0.95, 10), np.ones(10), rng.uniform(20, 22, 10)])
    c = np.column_stack([np.full(10, 2.0), rng.uniform(0.4, 0.5, 10), np.full(10, 8.0), rng.uniform(8, 9, 10)])
    X = np.vstack([a, b, c])
    labels = kmeans_l1(X, 3)
    assert len(set(labels[:10])) == len(set(labels[10:20])) == len(set(labels[20:])) == 1
    assert len(set(labels)) == 3
    perm = rng.permutation(30)
    assert np.array_equal(kmeans_l1(X[perm], 3), labels[perm])  # the same partition, the same names
    assert np.array_equal(kmeans_l1(X, 1), np.zeros(30))
    assert set(kmeans_l1(np.repeat(X[:1], 5, axis=0), 3)) == {0}  # fewer distinct jobs than queues
    assert kmeans_l1(np.zeros((0, 4)), 3).size == 0


def test_weighted_fair_quota_by_hand():
    assert weighted_fair_quota([10, 5, 0], [0.0, 0.0, 0.0], 15) == [10, 5, 0]  # w = len when all just arrived
    assert weighted_fair_quota([10, 5], [0.0, 0.0], 6) == [4, 2]
    # w = max(len, median wait × len): a short queue that waited long gets more than its length share
    assert weighted_fair_quota([2, 20], [1000.0, 10.0], 6) == [2, 4]
    assert weighted_fair_quota([1, 20], [100.0, 1.0], 15) == [1, 14]  # capped at its length, the rest moves


@given(st.lists(st.integers(0, 30), min_size=1, max_size=5), st.data(), st.integers(1, 40))
@settings(max_examples=60, deadline=None)
def test_weighted_fair_quota_properties(lengths, data, beta):
    waits = data.draw(st.lists(st.floats(0, 1e4), min_size=len(lengths), max_size=len(lengths)))
    q = weighted_fair_quota(lengths, waits, beta)
    assert sum(q) == min(beta, sum(lengths))
    assert all(0 <= a <= n for a, n in zip(q, lengths, strict=True))


# -- the simulator with sharing, by hand ----------------------------------------------------------------
def test_co_located_jobs_slow_each_other_by_the_cumulative_utilisation_and_speed_up_when_one_leaves():
    models = {"a": model("a", 0.5, 1.0), "b": model("b", 0.5, 1.0)}
    jobs = [Job("A", 0.0, 1, 60.0, model="a"), Job("B", 0.0, 1, 120.0, model="b")]
    sh = Sharing(slowdown=linear, truth={"a": (0.5, 1.0), "b": (0.5, 1.0)})
    r = simulate(jobs, cluster(), make_policy("fifo"), AllOnDevice0(), models, SimConfig(sharing=sh))
    fin = {js.id: js for js in r.finished}
    # together: U = 1.0, T_deg = 0.5, each at 2/3 speed; A's 60 s take 90 s, then B does its last 60 s alone
    assert fin["A"].finish == pytest.approx(90.0) and fin["B"].finish == pytest.approx(150.0)
    m = metrics_from_result(r)
    assert m.busy_gpu_util == pytest.approx((90 * 1.0 + 60 * 0.5) / 150)  # min(1, U) while each ran
    assert m.gpu_util == pytest.approx(1.0)  # one device held the whole time
    assert m.avg_wait_s == 0.0 and m.avg_exec_jct_s == pytest.approx(120.0)
    # the truth, not the prediction, sets the slowdown: predicted 0.5 each but measured 0.1 each
    sh2 = Sharing(slowdown=linear, truth={"a": (0.1, 1.0), "b": (0.1, 1.0)})
    r2 = simulate(jobs, cluster(), make_policy("fifo"), AllOnDevice0(), models, SimConfig(sharing=sh2))
    assert {js.id: js.finish for js in r2.finished}["A"] == pytest.approx(60 * 1.1)


def test_without_sharing_config_nothing_slows_down():
    models = {"a": model("a", 0.5, 1.0)}
    jobs = [Job("A", 0.0, 1, 60.0, model="a"), Job("B", 0.0, 1, 60.0, model="a")]
    r = simulate(jobs, cluster(), make_policy("fifo"), AllOnDevice0(), models)
    assert [js.finish for js in r.finished] == [pytest.approx(60.0)] * 2
    assert r.busy == [] and math.isnan(metrics_from_result(r).busy_gpu_util)


def test_out_of_memory_fails_the_job_placed_last_and_resubmits_it_with_a_larger_request():
    # predicted 4 GB each, measured 6 GB each, on a 10 GB device: B (placed after A) runs out of memory
    models = {"m": model("m", 0.3, 4.0)}
    jobs = [Job("A", 0.0, 1, 1000.0, model="m"), Job("B", 1.0, 1, 100.0, model="m")]
    sh = Sharing(slowdown=linear, truth={"m": (0.3, 6.0)}, oom_delay_s=30.0, max_oom_retries=3)
    r = simulate(jobs, cluster(1, 1, gpu_mem=10.0), make_policy("fifo"), OpportunisticBinPacking(), models,
                 SimConfig(sharing=sh))
    fin = {js.id: js for js in r.finished}
    a, b = fin["A"], fin["B"]
    assert a.ooms == 0 and a.finish == pytest.approx(1000.0)
    # B fails at 1 s, 31 s and 61 s (its request stays at the 4 GB that was free), then asks for the whole
    # device and waits for A
    assert b.ooms == 3 and r.oom_events == 3 and b.mem_request_gb == pytest.approx(10.0)
    assert b.first_start == pytest.approx(1000.0) and b.finish == pytest.approx(1100.0)
    assert r.max_mem_frac <= 1.0 + 1e-9 < r.max_mem_frac_attempted  # resolved, but it did happen
    assert metrics_from_result(r).n_ooms == 3


def test_oom_request_grows_to_the_memory_that_was_available():
    # A reserves 2 GB (predicted) but uses 3; B reserves 2 but needs 8, on a 10 GB device
    models = {"small": model("small", 0.2, 2.0), "big": model("big", 0.2, 2.0)}
    jobs = [Job("A", 0.0, 1, 500.0, model="small"), Job("B", 1.0, 1, 50.0, model="big")]
    sh = Sharing(slowdown=linear, truth={"small": (0.2, 3.0), "big": (0.2, 8.0)}, max_oom_retries=4)
    seen: list[float] = []

    class Watch(OpportunisticBinPacking):
        def allocate(self, ordered, cluster, running, now):
            seen.extend(js.device_mem_request_gb for js in ordered if js.id == "B" and js.id not in running)
            return super().allocate(ordered, cluster, running, now)

    r = simulate(jobs, cluster(1, 1, gpu_mem=10.0), make_policy("fifo"), Watch(), models, SimConfig(sharing=sh))
    b = {js.id: js for js in r.finished}["B"]
    # after the first failure B asks for the 7 GB that were free to it (§4.2.3); A's under-predicted
    # reservation still lets it in, so it fails again until, after max_oom_retries, it asks for the device
    assert list(dict.fromkeys(seen)) == [pytest.approx(2.0), pytest.approx(7.0), pytest.approx(10.0)]
    assert b.ooms == 4 and b.first_start == pytest.approx(500.0) and b.finish == pytest.approx(550.0)


def test_a_job_whose_measured_memory_exceeds_every_device_is_rejected():
    models = {"m": model("m", 0.3, 4.0)}
    sh = Sharing(slowdown=linear, truth={"m": (0.3, 12.0)})
    with pytest.raises(SimulationError, match="device memory"):
        simulate([Job("A", 0.0, 1, 10.0, model="m")], cluster(1, 1, 10.0), make_policy("fifo"),
                 OpportunisticBinPacking(), models, SimConfig(sharing=sh))


# -- the mechanisms' rules -----------------------------------------------------------------------------------
def _run(mech, jobs, models, truth, spec, slowdown=MEASURED, record=False):
    sh = Sharing(slowdown=slowdown, truth=truth, record=record)
    return simulate(jobs, spec, make_policy("fifo"), mech, models, SimConfig(sharing=sh))


def _first_device(r, jid):
    for _t, key, jobs, *_ in r.device_log:
        if jid in jobs:
            return key
    raise AssertionError(jid)


@pytest.mark.parametrize("name", ["horus", "horus-f", "obp", "pab", "fifo-exclusive"])
def test_a_demand_below_one_gpu_gets_one_shared_device_from_every_sharing_mechanism(name):
    """A trace of half-GPU jobs stopped every Horus-family run with the simulator's own 'is rigid but gave job f1 1
    GPUs for a demand of 0.5': these mechanisms place whole devices, which co-located jobs share."""
    models = {"m": model("m", 0.3, 4.0)}
    jobs = [Job(f"f{i}", float(i), 0.5, 600.0, model="m") for i in range(4)]
    r = _run(make_mechanism(name), jobs, models, {"m": (0.3, 4.0)}, cluster(1, 2))
    assert len(r.finished) == 4 and not r.unfinished


def test_horus_prefers_idle_devices_then_the_lowest_cost_partner_and_over_commits_by_cost_only():
    models = {"heavy": model("heavy", 0.95, 5.0), "light": model("light", 0.1, 1.0)}
    truth = {"heavy": (0.95, 5.0), "light": (0.1, 1.0)}
    jobs = [Job("H1", 0.0, 1, 1000.0, model="heavy"), Job("L1", 1.0, 1, 1000.0, model="light"),
            Job("H2", 2.0, 1, 1000.0, model="heavy"), Job("H3", 3.0, 1, 100.0, model="heavy")]
    r = _run(Horus(), jobs, models, truth, cluster(1, 2), record=True)
    fin = {js.id: js for js in r.finished}
    assert _first_device(r, "H1") != _first_device(r, "L1")  # the idle device costs least
    assert _first_device(r, "H2") == _first_device(r, "L1")  # next to the light job, not the heavy one
    # Alg. 1's capacity check is CPUs, memory, GPU memory (and §4.3's jobs-per-GPU limit): H3 joins H1 at once
    # although the pair is over-committed (U 1.9, eq. 9's f+ branch): utilisation only ranks devices
    assert fin["H3"].first_start == pytest.approx(3.0) and _first_device(r, "H3") == _first_device(r, "H1")
    # the break-even reading of §4.1.2 (an option): H3 would make a pair the measured model predicts to lose
    # throughput (T_deg > 1), so it waits for a slot that pays, i.e. until one of the 1000 s jobs leaves
    r2 = _run(Horus(overcommit="breakeven"), jobs, models, truth, cluster(1, 2))
    assert {js.id: js for js in r2.finished}["H3"].first_start > 999.0
    r3 = _run(Horus(overcommit=1.0), jobs, models, truth, cluster(1, 2))
    assert {js.id: js for js in r3.finished}["H2"].first_start > 999.0  # a 100 % cap: no heavy+light either


def test_horus_ranks_over_committed_devices_by_eq_9_instead_of_excluding_them():
    # two devices, each with one running job (0.9 and 0.6 predicted); a 0.9 job over-commits either one:
    # eq. 9's f+ at U 1.5 is below f+ at U 1.8, so it goes next to the 0.6 job, and at once
    models = {"a": model("a", 0.9, 2.0), "b": model("b", 0.6, 2.0), "c": model("c", 0.9, 2.0)}
    truth = {"a": (0.9, 2.0), "b": (0.6, 2.0), "c": (0.9, 2.0)}
    jobs = [Job("A", 0.0, 1, 1000.0, model="a"), Job("B", 1.0, 1, 1000.0, model="b"),
            Job("C", 2.0, 1, 100.0, model="c")]
    mech = Horus()
    assert mech.overcommit == "none" and MEASURED(1.5) < MEASURED(1.8)
    r = _run(mech, jobs, models, truth, cluster(1, 2), record=True)
    c = {js.id: js for js in r.finished}["C"]
    assert c.first_start == pytest.approx(2.0) and _first_device(r, "C") == _first_device(r, "B")
    assert mech.admits(np.array([1, 1]), np.array([0.9, 0.6]), 0.9).all()  # no utilisation filter by default


def test_a_utilisation_cap_leaves_an_idle_gpu_open_to_any_job():
    """``overcommit=0.5`` refused even an idle GPU to a job predicted above 50 % busy, and the run stalled with
    4 of 10 jobs left (found by a randomised scan)."""
    mech = Horus(overcommit=0.5)
    assert mech.admits(np.array([0, 1, 1]), np.array([0.0, 0.3, 0.1]), 0.9).tolist() == [True, False, False]
    assert mech.admits(np.array([1]), np.array([0.1]), 0.4).tolist() == [True]
    from perfpredict.sim import run_simulation

    r = run_simulation("horus:workload=large,n=10", "horus-testbed", "fifo", "horus:overcommit=0.5").result
    assert r.stall is None and len(r.finished) == 10


@pytest.mark.parametrize("mechanism", ["horus", "horus-f", "obp", "pab"])
def test_the_sharing_mechanisms_take_each_servers_own_host_share(mechanism):
    """Every server's host CPUs and memory per device were server 0's: a job fitting only the second server was
    asked for 256 GB of its 64 (found by a randomised scan), and a CPU-only server listed first gave every job
    0 CPUs and 0 GB."""
    from perfpredict.sim import run_simulation

    mixed = {"servers": [{"gpus": 1, "cpus": 8, "mem_gb": 512, "gpu_mem_gb": 16, "gpu_type": "H100"},
                         {"gpus": 1, "cpus": 8, "mem_gb": 64, "gpu_mem_gb": 80, "gpu_type": "H100"}]}
    r = run_simulation("horus:workload=large,n=10", mixed, "fifo", mechanism).result
    assert r.stall is None and len(r.finished) == 10
    cpu_first = {"servers": [{"gpus": 0, "cpus": 64, "mem_gb": 256}, {"gpus": 4, "cpus": 24, "mem_gb": 500}]}
    r = run_simulation("synergy:n=5", cpu_first, "fifo", mechanism).result
    assert r.stall is None and len(r.finished) == 5
    # server 1's 6 CPUs and 125 GB per GPU, halved for the two jobs a GPU may take
    assert all(js.cpu_seconds / (js.run_time * js.job.gpus) == pytest.approx(3.0) for js in r.finished)
    assert all(js.mem_gb_seconds / (js.run_time * js.job.gpus) == pytest.approx(62.5) for js in r.finished)


def test_obp_goes_where_most_memory_is_free_and_fifo_never_shares():
    models = {"big": model("big", 0.3, 30.0), "small": model("small", 0.3, 2.0)}
    truth = {"big": (0.3, 30.0), "small": (0.3, 2.0)}
    jobs = [Job("B1", 0.0, 1, 500.0, model="big"), Job("S1", 1.0, 1, 500.0, model="small"),
            Job("S2", 2.0, 1, 500.0, model="small")]
    r = _run(OpportunisticBinPacking(), jobs, models, truth, cluster(1, 2), record=True)
    assert _first_device(r, "S2") == _first_device(r, "S1")  # 78 GB free there, 50 next to B1
    f = _run(FifoExclusive(), jobs, models, truth, cluster(1, 2))
    assert {js.id: js.first_start for js in f.finished}["S2"] == pytest.approx(500.0)


def test_pab_requeues_a_job_that_halves_its_co_runner_and_never_pairs_them_again():
    models = {"heavy": model("heavy", 1.0, 5.0)}
    truth = {"heavy": (1.0, 5.0)}  # U = 2.0: measured T_deg 1.6, the co-runner drops to 38 % speed
    jobs = [Job("A", 0.0, 1, 2000.0, model="heavy", epochs=20), Job("B", 10.0, 1, 300.0, model="heavy", epochs=3)]
    r = _run(PerformanceAwareBinPacking(), jobs, models, truth, cluster(1, 1))
    fin = {js.id: js for js in r.finished}
    b = fin["B"]
    assert b.preemptions == 1 and b.first_start == pytest.approx(10.0)
    assert b.lost_work > 0  # its progress since the last checkpoint (none in 60 s at 38 % speed) is lost
    # B ran 60 s at 1/2.6 speed, restarts from scratch, and only runs again once A is done
    assert fin["A"].finish == pytest.approx(2000.0 + 60.0 * (1 - 1 / (1 + MEASURED(2.0))))
    assert b.finish == pytest.approx(fin["A"].finish + 300.0)
    light = {"light": model("light", 0.2, 1.0)}
    r2 = _run(PerformanceAwareBinPacking(), [Job("A", 0.0, 1, 2000.0, model="light"),
                                             Job("B", 10.0, 1, 300.0, model="light")],
              light, {"light": (0.2, 1.0)}, cluster(1, 1))
    assert sum(js.preemptions for js in r2.finished) == 0


def test_horus_f_rounds_follow_weighted_fair_queuing_by_hand():
    from perfpredict.sched import JobState

    perf = {"a": model("a", 0.1, 1.0), "b": model("b", 0.9, 20.0), "c": model("c", 0.5, 10.0)}
    spec = cluster(2, 8)
    arrivals = {"C1": (0.0, "c", 16), "A1": (10.0, "a", 1), "A2": (11.0, "a", 1), "A3": (12.0, "a", 1),
                "B1": (50.0, "b", 1), "B2": (60.0, "b", 1)}
    pending = [JobState(Job(j, t, g, 100.0, model=m), perf[m]) for j, (t, m, g) in arrivals.items()]
    ids = lambda rounds: [[js.id for js in r] for r in rounds]  # noqa: E731
    # one queue: rounds of β = 4 in arrival order
    assert ids(Horus(beta=4).rounds(pending, spec, 100.0)) == [["C1", "A1", "A2", "A3"], ["B1", "B2"]]
    # three queues (one per kind of job): w = max(len, median wait × len) = 267 (A), 90 (B), 100 (C); quotas of
    # β = 4: 2.34, 0.79, 0.88 -> A 2, then the largest remainders C and B; served by virtual finish tag p / w
    assert ids(HorusF(beta=4).rounds(pending, spec, 100.0)) == [["A1", "A2", "C1", "B1"], ["A3", "B2"]]


# -- invariants under sharing (hypothesis) ---------------------------------------------------------------
MECHS = ["horus", "horus-f", "obp", "pab", "fifo-exclusive"]


@st.composite
def sharing_cases(draw):
    servers, gpus = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    gpu_mem = draw(st.sampled_from([8.0, 16.0, 80.0]))
    n = draw(st.integers(1, 10))
    jobs, models, truth = [], {}, {}
    for i in range(n):
        u = draw(st.floats(0.05, 1.0))
        mem = draw(st.floats(0.5, 7.5))
        models[f"m{i}"] = model(f"m{i}", min(1.0, u * draw(st.floats(0.6, 1.4))), mem * draw(st.floats(0.6, 1.4)))
        truth[f"m{i}"] = (u, mem)
        g = draw(st.sampled_from([1, 1, 1, 2])) if servers * gpus >= 2 else 1
        jobs.append(Job(f"j{i}", draw(st.floats(0, 500)), g, draw(st.floats(10, 2000)), model=f"m{i}",
                        epochs=draw(st.sampled_from([None, 1, 5]))))
    mech = draw(st.sampled_from(MECHS))
    cap = draw(st.integers(1, 3))
    source = draw(st.sampled_from(["measured", "paper"]))
    return ClusterSpec.homogeneous(servers, gpus=gpus, cpus=8.0 * gpus, mem_gb=64.0 * gpus, gpu_type="H100",
                                   gpu_mem_gb=gpu_mem), jobs, models, truth, mech, cap, source


@given(sharing_cases())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_sharing_invariants(case):
    spec, jobs, models, truth, name, cap, source = case
    opts = {} if name == "fifo-exclusive" else {"max_colocated": cap}
    if name in ("horus", "horus-f"):
        opts["interference"] = source
    mech = make_mechanism(name, **opts)
    sh = Sharing(slowdown=slowdown_model(source), truth=truth, record=True, oom_delay_s=20.0)
    config = SimConfig(sharing=sh, oversized="drop")
    if all(max(models[j.model].device_mem_gb, truth[j.model][1]) > spec.servers[0].gpu_mem_gb for j in jobs):
        # nothing to drop down to: a run of no job is refused, naming one
        with pytest.raises(SimulationError, match="the cluster can run none of the"):
            simulate(jobs, spec, make_policy("fifo"), mech, models, config)
        return
    r = simulate(jobs, spec, make_policy("fifo"), mech, models, config)
    # every job that fits a device finishes (OOM resubmission and PAB re-queues never livelock)
    assert not r.unfinished and len(r.finished) + len(r.dropped) == len(jobs)
    assert all(max(models[j.model].device_mem_gb, truth[j.model][1]) > spec.servers[0].gpu_mem_gb for j in r.dropped)
    limit = 1 if name == "fifo-exclusive" else cap
    by_id = {j.id: j for j in jobs}
    for t, (srv, dev), on, true_mem, reserved, capacity, util, rates in r.device_log:
        # measured memory on a device never exceeds it once a decision's OOM failures are resolved; the
        # schedulers' reservations (predicted, raised after OOMs) never do
        assert true_mem <= capacity + 1e-9 and reserved <= capacity + 1e-9
        assert len(on) <= limit
        assert util == pytest.approx(sum(truth[by_id[j].model][0] for j in on), abs=1e-9)
        if len(on) >= 2:
            f = 1 / (1 + sh.slowdown(util))
            for jid, rate in rates:  # a multi-device job runs at its slowest device's pace
                assert rate <= f + 1e-9
                if by_id[jid].gpus == 1:
                    assert rate == pytest.approx(f)
        else:
            for _jid, rate in rates:
                assert rate <= 1 + 1e-12
    assert r.max_mem_frac <= 1 + 1e-9
    assert sum(js.ooms for js in r.finished) == r.oom_events
    event("out of memory" if r.oom_events else "no OOM")
    event("co-located" if any(len(on) >= 2 for _, _, on, *_ in r.device_log) else "never co-located")
    event("re-queued" if any(js.preemptions for js in r.finished) else "no re-queue")
    if r.finished:
        m = metrics_from_result(r)
        assert 0 <= m.busy_gpu_util <= m.gpu_util + 1e-9 and m.gpu_util <= 1 + 1e-9
    for js in r.finished:
        # interference only slows down: a job needs at least its work (plus what it redid) to finish
        assert js.finish - js.first_start >= js.job.work + js.lost_work - 1e-6
        assert js.first_start >= js.job.arrival
    if name == "fifo-exclusive":
        assert r.oom_events == 0
        assert all(js.finish - js.first_start == pytest.approx(js.job.work) for js in r.finished)


# -- workloads and CLI (these load the Predictor: a few seconds) -------------------------------------------
@pytest.fixture(scope="module")
def table():
    from perfpredict.sim.horus_workload import horus_jobs_table

    return horus_jobs_table()


def test_jobs_table_is_the_measured_h100_points_with_predictions(table):
    import csv

    from perfpredict.sim.horus_workload import REPO

    with open(REPO / "datasets" / "cuda_h100.csv", newline="") as f:
        rows = {f"{r['config']}@b{r['batch_size']}": r for r in csv.DictReader(f) if r["status"] == "ok"}
    assert len(table) == len(rows) >= 765  # every measured point (11 families at the time of writing)
    for p in table[::37]:
        r = rows[p.model]
        assert p.util == pytest.approx(float(r["gpu_utilization"]))
        assert p.mem_gb == pytest.approx(float(r["nvml_process_bytes"]) / 1e9)
        assert 0 < p.pred_util <= 1 and p.pred_mem_gb >= p.pred_mem_median_gb > 0.5  # + the CUDA context
    util = np.array([p.util for p in table])
    pred = np.array([p.pred_util for p in table])
    assert np.mean(np.abs(util - pred)) < 0.1  # the predictions are about these very points


def _perturbed_h100_dataset(tmp_path, pick):
    """A copy of the H100 dataset where the rows ``pick`` selects measure 2x the utilisation (capped at 1)
    and 3x the NVML memory: predictions that never saw those rows must not move."""
    import csv

    from perfpredict.sim.horus_workload import REPO

    with open(REPO / "datasets" / "cuda_h100.csv", newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    for r in rows:
        if pick(r) and r["status"] == "ok" and r["gpu_utilization"]:
            r["gpu_utilization"] = str(min(1.0, 2 * float(r["gpu_utilization"])))
            r["nvml_process_bytes"] = str(3 * float(r["nvml_process_bytes"]))
    perturbed = tmp_path / "cuda_h100.csv"
    with open(perturbed, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return perturbed


def test_family_cv_predictions_never_see_the_jobs_own_family(table, tmp_path):
    from perfpredict.sim.horus_workload import REPO, family_cv_predictions, horus_jobs_table

    cv = horus_jobs_table(predictions="family-cv")
    assert horus_jobs_table(predictions="family-cv") is cv  # cached
    assert [(p.model, p.util, p.mem_gb) for p in cv] == [(p.model, p.util, p.mem_gb) for p in table]
    err = {name: np.mean([abs(p.pred_util - p.util) for p in t]) for name, t in (("trained", table), ("cv", cv))}
    assert err["cv"] > 5 * err["trained"]  # unseen families are much harder than the training points
    assert any(abs(a.pred_mem_gb - b.pred_mem_gb) > 1e-3 for a, b in zip(cv, table))
    # Perturb one family's measurements: its predictions stay, the other families' (trained on it) move.
    feats = str(REPO / "datasets" / "zoo_features.csv")
    perturbed = _perturbed_h100_dataset(tmp_path, lambda r: r["family"] == "mlp")
    base = family_cv_predictions(str(REPO / "datasets" / "cuda_h100.csv"), feats)
    # The table's refit is reused however the same files are named (a refit is ~17 s on 2 cores).
    assert family_cv_predictions(str(REPO / "datasets" / ".." / "datasets" / "cuda_h100.csv"), feats, None) is base
    moved = family_cv_predictions(str(perturbed), feats)
    assert base.keys() == moved.keys()
    fam = {(p.config, p.batch): p.family for p in table}
    for key, v in base.items():
        if fam[key] == "mlp":
            for target, (med, q90) in v.items():
                assert moved[key][target] == pytest.approx((med, q90), rel=1e-9)
    assert any(moved[k]["device_memory"][0] != pytest.approx(v["device_memory"][0], rel=1e-6)
               for k, v in base.items() if fam[k] != "mlp")
    pert = horus_jobs_table(dataset=str(perturbed), features=feats, predictions="family-cv")
    mlp = [(a, b) for a, b in zip(cv, pert) if a.family == "mlp"]
    assert mlp and all(b.mem_gb == pytest.approx(3 * a.mem_gb) and b.pred_mem_gb == pytest.approx(a.pred_mem_gb)
                       and b.pred_util == pytest.approx(a.pred_util) for a, b in mlp)


def test_horus_traces_follow_the_recipe(table):
    from perfpredict.sim.horus_workload import HEAVY_UTIL, SHORT_S, horus_trace, horus_truth

    truth = horus_truth()
    small, large = horus_trace("small", seed=3), horus_trace("large", seed=3)
    for jobs in (small, large):
        assert len(jobs) == 100 and all(j.gpus == 1 for j in jobs)
        assert all(180 <= j.work <= 7200 and j.epochs >= 1 and j.model in truth for j in jobs)
        assert max(j.arrival for j in jobs) < 3 * 3600
    short = [np.mean([j.work <= SHORT_S for j in jobs]) for jobs in (small, large)]
    heavy = [np.mean([truth[j.model][0] >= HEAVY_UTIL for j in jobs]) for jobs in (small, large)]
    assert short[0] > short[1] and heavy[0] < heavy[1]
    assert [j.model for j in horus_trace("small", seed=3)] == [j.model for j in small]  # deterministic
    scale = horus_trace("scale", n=300, seed=1)
    assert {j.gpus for j in scale} > {1.0} and max(j.gpus for j in scale) <= 16


def test_cli_runs_horus_and_its_baselines(tmp_path, table):
    import json

    from typer.testing import CliRunner

    from perfpredict.cli import app

    for mech in ("fifo-exclusive", "horus-f", "horus:k=2,interference=paper,max_colocated=3"):
        out = tmp_path / mech.replace(":", "_").replace(",", "_")
        res = CliRunner().invoke(app, ["simulate", "--cluster", "horus:nodes=1,gpus=4", "--trace",
                                       "horus:workload=small,n=12,seed=2", "--mechanism", mech, "--no-mlflow",
                                       "--out", str(out)])
        assert res.exit_code == 0, res.output
        m = json.loads((out / "metrics.json").read_text())["metrics"]
        assert m["n_finished"] == 12 and 0 < m["busy_gpu_util"] <= 1
    out = tmp_path / "family-cv"
    res = CliRunner().invoke(app, ["simulate", "--cluster", "horus:nodes=1,gpus=4", "--trace",
                                   "horus:workload=small,n=12,seed=2", "--mechanism", "horus",
                                   "--cards", "horus:predictions=family-cv", "--no-mlflow", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "metrics.json").read_text())["metrics"]["n_finished"] == 12
    res = CliRunner().invoke(app, ["simulate", "--cluster", "horus-testbed", "--trace", "horus-small",
                                   "--mechanism", "horus", "--cards", "horus:predictions=oracle", "--no-mlflow",
                                   "--out", str(tmp_path / "y")])
    assert res.exit_code != 0 and "oracle" in res.output + str(res.exception)
    res = CliRunner().invoke(app, ["simulate", "--cluster", "horus-testbed", "--trace", "horus-small",
                                   "--mechanism", "horus:nope=1", "--no-mlflow", "--out", str(tmp_path / "x")])
    assert res.exit_code != 0 and "nope" in res.output + str(res.exception)


@pytest.mark.slow
def test_experiment_fast(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import load_script

    repo = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(repo / "experiments" / "horus_makespan.py"), "--fast", "--workers", "2",
                        "--out", str(tmp_path)], capture_output=True, text=True, cwd=repo, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert "16 simulation units (72 runs), in 2 worker processes" in r.stdout
    # Rows from the worker processes are those of a serial run, in its order: two units run here in-process
    exp = load_script(repo / "experiments" / "horus_makespan.py")
    here = [row for unit in ({"part": "memory", "memory": "median", "seed": 1, "interarrival": 36.0,
                              "gpu_mem_gb": 16.0},
                             {"part": "testbed", "variant": "batch", "interarrival": 0.0, "caps": [2],
                              "mechs": ["fifo-exclusive", "obp", "pab", "horus", "horus-f", exp.BREAKEVEN],
                              "workload": "large", "seed": 0})
            for row in exp.simulate_unit({**unit, "predictions": "trained", "refits": {}})]
    timing = ("wall_s", "_waits_min")
    by_key = {(row["part"], row.get("variant"), row.get("memory"), row["workload"], row["seed"], row["mechanism"]):
              {k: v for k, v in row.items() if k not in timing} for row in res["rows"] if row["part"] != "scale"}
    for row in here:
        key = (row["part"], row.get("variant"), row.get("memory"), row["workload"], row["seed"], row["mechanism"])
        assert by_key[key] == json.loads(json.dumps({k: v for k, v in row.items() if k not in timing}, default=float))
    assert len(here) == 10
    assert set(res["checks"]) == {"makespan_small", "makespan_large", "utilisation", "jct_reported",
                                  "fair_wait_scale", "invariants"}
    for c in res["checks"].values():
        assert f"{'PASS' if c['ok'] else 'FAIL'}: {c['text']}" in r.stdout
    assert res["checks"]["invariants"]["ok"]
    rows = res["rows"]
    assert all(row["finished"] + row["dropped"] == row["jobs"] for row in rows)
    testbed = [row for row in rows if row["part"] == "testbed"]
    fifo = [row for row in testbed if row["mechanism"] == "fifo-exclusive"]
    assert all(row["ooms"] == 0 and row["requeues"] == 0 for row in fifo)
    # FIFO never shares: its busy utilisation is the jobs' own; co-location raises it
    for w in ("small", "large"):
        s = res["summary"]
        assert s[f"poisson/{w}/horus"]["busy_util"] > s[f"poisson/{w}/fifo-exclusive"]["busy_util"]
        assert s[f"poisson/{w}/horus"]["makespan_min"] < s[f"poisson/{w}/fifo-exclusive"]["makespan_min"]
    # Memory pressure: whether the shipped predictions cause an OOM here depends on their noise (the median
    # reservation caused one before a retrain, none after), so the test checks how OOMs are accounted for, not
    # that one happens (that is tested above with set truths, in test_oom_*).
    memory = [row for row in rows if row["part"] == "memory"]
    assert {(row["mechanism"], row["memory"]) for row in memory} == {
        (m, r) for m in ("fifo-exclusive", "obp", "horus", "horus-f") for r in ("safe", "median")}
    for row in memory:
        assert row["max_mem_frac"] <= 1 + 1e-9
        if row["ooms"]:
            assert row["max_mem_frac_attempted"] > 1  # an OOM is a placement whose measured memory overflowed
        else:
            assert row["max_mem_frac_attempted"] == pytest.approx(row["max_mem_frac"])
    # the median reservation is below the q90 one, so it leaves out no more jobs as too big for a device
    assert (sum(row["dropped"] for row in memory if row["memory"] == "median")
            <= sum(row["dropped"] for row in memory if row["memory"] == "safe"))
    assert "| scheduler | makespan (min) | vs FIFO | GPU util (busy) |" in r.stdout
    assert (tmp_path / "horus_makespan.png").stat().st_size > 0


def test_paper_mix_keeps_half_the_architectures_out_of_training(table, tmp_path):
    from perfpredict.sim.horus_workload import REPO, horus_jobs_table, unseen_architectures

    mix = horus_jobs_table(predictions="paper-mix")
    assert [(p.model, p.util) for p in mix] == [(p.model, p.util) for p in table]
    new = unseen_architectures([p.config for p in table])
    configs = {p.config for p in table}
    assert abs(len(new) - len(configs) / 2) <= 1 and new < configs
    err = lambda ps: np.mean([abs(p.pred_util - p.util) for p in ps])  # noqa: E731
    assert err([p for p in mix if p.config in new]) > 2 * err([p for p in mix if p.config not in new])
    # The unseen architectures' measurements do not reach the estimators: perturbing them leaves every
    # prediction unchanged.
    perturbed = _perturbed_h100_dataset(tmp_path, lambda r: r["config"] in new)
    pert = horus_jobs_table(dataset=str(perturbed), features=str(REPO / "datasets" / "zoo_features.csv"),
                            predictions="paper-mix")
    assert all(a.pred_util == pytest.approx(b.pred_util) and a.pred_mem_gb == pytest.approx(b.pred_mem_gb)
               for a, b in zip(mix, pert))
    assert any(b.mem_gb != pytest.approx(a.mem_gb) for a, b in zip(mix, pert))


def test_sharing_jobs_whose_cards_say_nothing_of_the_gpu_is_noted(tmp_path):
    """Paper cards carry no GPU utilisation or device memory: OBP paired such jobs as 100% busy in 0 GB, and the
    run said nothing (a 6-job trace made 18463 s under obp against 7200 s under tune)."""
    from perfpredict.sim import run_simulation

    trace = tmp_path / "paper.csv"
    trace.write_text("id,arrival_s,gpus,work_s,model\na,0,1,3600,resnet18\nb,0,1,3600,gnmt\nc,0,1,3600,resnet18\n")
    (note,) = run_simulation(trace, "1x2", "fifo", "obp").notes
    assert note.startswith("2 model(s) of the trace (gnmt, resnet18) carry no GPU utilisation or device memory")
    assert run_simulation(trace, "1x2", "fifo", "tune").notes == []  # no sharing: nothing to say
    assert not any("carry no GPU" in n for n in run_simulation("horus-small", "horus-testbed", "fifo", "horus").notes)


@pytest.mark.parametrize("mechanism", ["proportional", "greedy", "tune", "drf", "tetris", "moldable-equipartition",
                                       "horus"])
def test_a_job_that_ran_out_of_memory_alone_on_a_gpu_is_placed_on_a_larger_one(mechanism):
    """A failed job's raised request becomes its card's device memory, which every mechanism places by: on GPUs
    of 40/16/24/80 GB, these seven put a job measured at 41.8 GB (predicted 37.4 GB) back on the 40 GB GPU after
    every OOM (the request stayed "equal" to the 40 GB that failed, and only Horus read it)."""
    from perfpredict.sim import run_simulation

    cluster = {"servers": [{"gpus": 1, "cpus": 8, "mem_gb": 128, "gpu_mem_gb": m} for m in (40, 16, 24, 80)]}
    run = run_simulation("horus-large", cluster, "fifo", mechanism)
    r = run.result
    assert r.stall is None and not r.unfinished and r.max_mem_frac <= 1.0 + 1e-9
    big = next(js for js in r.finished if js.id == "h42")
    assert 1 <= big.ooms <= 2 and big.mem_request_gb == big.perf.device_mem_gb > 37.5  # predicted 37.4 GB


@pytest.mark.parametrize("mechanism", ["obp", "horus", "pab", "horus-f"])
def test_a_job_failing_beside_one_of_almost_no_memory_still_asks_for_no_more_than_the_gpu(mechanism):
    """The 1 MB over the memory available is for a job that failed with the GPU to itself; beside a job of
    0.8 MB, 1 MB more would have asked for more than the only GPU (10.0002 GB), and the run stalled (review)."""
    models = {"big": model("big", 0.3, 4.0), "tiny": model("tiny", 0.1, 0.0008)}
    jobs = [Job("T", 0.0, 1, 1000.0, model="tiny"), Job("B", 1.0, 1, 100.0, model="big")]
    sh = Sharing(slowdown=linear, truth={"big": (0.3, 9.9995), "tiny": (0.1, 0.0008)}, oom_delay_s=30.0)
    r = simulate(jobs, cluster(1, 1, gpu_mem=10.0), make_policy("fifo"), make_mechanism(mechanism), models,
                 SimConfig(sharing=sh))
    b = {js.id: js for js in r.finished}["B"]
    assert r.stall is None and not r.unfinished and b.ooms >= 1 and b.perf.device_mem_gb <= 10.0


def test_a_card_class_with_a_constructor_of_its_own_can_run_out_of_memory():
    """The raised request is set on a copy of the job's card: ``dataclasses.replace`` called the subclass's own
    ``__init__`` with ``device_mem_gb`` and failed (review)."""

    class Card(PerfModel):
        def __init__(self, name, mem, util):
            super().__init__(name, device_mem_gb=mem, gpu_util=util)

    models = {"a": Card("a", 4.0, 0.3), "b": Card("b", 2.0, 0.3)}
    jobs = [Job("A", 0.0, 1, 1000.0, model="a"), Job("B", 1.0, 1, 100.0, model="b")]
    sh = Sharing(slowdown=linear, truth={"a": (0.3, 6.0), "b": (0.3, 5.0)}, oom_delay_s=30.0)
    r = simulate(jobs, cluster(1, 1, gpu_mem=10.0), make_policy("fifo"), OpportunisticBinPacking(), models,
                 SimConfig(sharing=sh))
    b = {js.id: js for js in r.finished}["B"]
    assert not r.unfinished and b.ooms >= 1 and type(b.perf) is Card and b.perf.device_mem_gb > 2.0
    assert models["b"].device_mem_gb == 2.0  # the model's card is not changed: later jobs start from it


def test_a_mechanism_reserving_less_than_the_raised_card_is_told_why():
    """A mechanism of one's own that reserves a model's memory from its own table, not the job's card, is
    refused after an OOM raised the card, with a message saying so."""
    models = {"a": model("a", 0.3, 4.0), "b": model("b", 0.3, 2.0)}

    class PackByTable(AllOnDevice0):
        name = "pack-by-table"

        def allocate(self, ordered, cluster, running, now):
            out = dict(running)
            for js in ordered:
                if js.id not in out:
                    out[js.id] = Allocation.shared_devices({0: [0]}, 1.0, 1.0, models[js.job.model].device_mem_gb)
            return out

    jobs = [Job("A", 0.0, 1, 1000.0, model="a"), Job("B", 1.0, 1, 100.0, model="b")]
    sh = Sharing(slowdown=linear, truth={"a": (0.3, 6.0), "b": (0.3, 5.0)}, oom_delay_s=30.0)
    with pytest.raises(SimulationError, match=r"reserves 2 GB .* it needs 4 GB \(js.perf.device_mem_gb, raised after "
                                              r"its 1 out-of-memory failure"):
        simulate(jobs, cluster(1, 1, gpu_mem=10.0), make_policy("fifo"), PackByTable(), models,
                 SimConfig(sharing=sh))


def test_a_job_placed_again_and_again_where_it_cannot_fit_ends_the_run_with_a_reason():
    """A job failing beside one that uses more than it reserved asks for the memory that was left, again and
    again (here the whole-device step never comes): after 50 OOMs the run ends with a reason naming the
    mechanism instead of retrying for ever."""
    models = {"m": model("m", 0.3, 4.0)}
    jobs = [Job("A", 0.0, 1, 1e6, model="m"), Job("B", 1.0, 1, 100.0, model="m")]
    sh = Sharing(slowdown=linear, truth={"m": (0.3, 6.0)}, oom_delay_s=30.0, max_oom_retries=1000)
    r = simulate(jobs, cluster(1, 1, gpu_mem=10.0), make_policy("fifo"), OpportunisticBinPacking(), models,
                 SimConfig(sharing=sh))
    assert r.stall is not None and "job B ran out of device memory 50 times" in r.stall and "obp placed it" in r.stall
    assert "B" in {js.id for js in r.unfinished} and r.oom_events == 50
