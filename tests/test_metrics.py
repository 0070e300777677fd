"""Simulation metrics on hand-built job states whose answers are known."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfpredict.sched.cluster import ClusterSpec
from perfpredict.sched.job import Job, JobState
from perfpredict.sched.paper_cards import moldable_model, moldable_speedup
from perfpredict.sched.perf import PerfModel
from perfpredict.sim.metrics import (
    compute_metrics,
    jct_cdf,
    metrics_from_result,
    select_steady,
    task_volume,
    user_jobs,
    utilization,
    utilization_series,
)

LINEAR = PerfModel("linear")
CLUSTER = ClusterSpec.homogeneous(1)  # 8 GPUs, 24 CPUs, 500 GB


def state(id: str, arrival: float, work: float, *, start: float | None = None, finish: float | None = None,
          run: float | None = None, gpus: float = 1.0, user: str = "", preemptions: int = 0,
          perf: PerfModel = LINEAR) -> JobState:
    js = JobState(Job(id=id, arrival=arrival, gpus=gpus, work=work, user=user), perf)
    js.first_start, js.finish, js.preemptions = start, finish, preemptions
    if finish is not None:
        js.run_time = run if run is not None else finish - (start if start is not None else arrival)
    return js


# Four jobs: JCTs 100, 300, 250, 400; queueing 0, 100, 50, 200.
JOBS = [
    state("0", 0, 100, start=0, finish=100),
    state("1", 0, 200, start=100, finish=300, preemptions=1),
    state("2", 50, 200, start=100, finish=300),
    state("3", 100, 200, start=300, finish=500, preemptions=2),
]
USAGE = [(0.0, 0.0, 0.0, 0.0), (0.0, 1.0, 3.0, 62.5), (100.0, 2.0, 6.0, 125.0), (300.0, 1.0, 3.0, 62.5),
         (500.0, 0.0, 0.0, 0.0)]


def test_jct_makespan_queueing_preemptions():
    m = compute_metrics(JOBS, USAGE, CLUSTER)
    jcts = [100, 300, 250, 400]
    assert (m.n_jobs, m.n_finished, m.n_unfinished, m.n_measured) == (4, 4, 0, 4)
    assert m.avg_jct_s == pytest.approx(np.mean(jcts))
    assert m.p50_jct_s == pytest.approx(275)
    assert m.p99_jct_s == pytest.approx(np.percentile(jcts, 99))
    assert m.max_jct_s == 400
    assert m.makespan_s == 500
    assert m.avg_queue_delay_s == pytest.approx(np.mean([0, 100, 50, 200]))
    assert m.p99_queue_delay_s == pytest.approx(np.percentile([0, 100, 50, 200], 99))
    assert m.total_preemptions == 3
    assert m.avg_flow_time_s == m.avg_jct_s and m.max_flow_time_s == 400


def test_utilisation_is_time_weighted():
    m = compute_metrics(JOBS, USAGE, CLUSTER)
    # GPUs: 1 for 100 s, 2 for 200 s, 1 for 200 s over 500 s on 8 GPUs
    assert m.gpu_util == pytest.approx((100 + 400 + 200) / 500 / 8)
    assert m.cpu_util == pytest.approx((300 + 1200 + 600) / 500 / 24)
    assert m.mem_util == pytest.approx((62.5 * 100 + 125 * 200 + 62.5 * 200) / 500 / 500)
    # seed 002: Σ volume / (|G| · makespan)
    assert m.volume_util == pytest.approx(700 / (8 * 500))


def test_utilisation_window_clips_and_holds_the_last_sample():
    usage = [(0.0, 8.0, 24.0, 500.0), (10.0, 4.0, 0.0, 0.0)]
    assert utilization(usage, CLUSTER, 5, 15) == pytest.approx((0.75, 0.5, 0.5))
    assert utilization(usage, CLUSTER, 20, 30) == pytest.approx((0.5, 0.0, 0.0))
    # before the first sample nothing is allocated
    assert utilization([(10.0, 8.0, 24.0, 500.0)], CLUSTER, 0, 20) == pytest.approx((0.5, 0.5, 0.5))
    assert all(math.isnan(v) for v in utilization(usage, CLUSTER, 5, 5))


def test_utilisation_series_keeps_the_last_sample_per_time():
    t, g, c, m = utilization_series(USAGE, CLUSTER)
    assert t.tolist() == [0, 100, 300, 500]
    assert g.tolist() == [1 / 8, 2 / 8, 1 / 8, 0]
    assert c[0] == pytest.approx(3 / 24) and m[1] == pytest.approx(0.25)


def test_steady_state_windows_by_index_and_time():
    m = compute_metrics(JOBS, USAGE, CLUSTER, steady=(1, 3))
    assert m.n_measured == 2 and m.avg_jct_s == pytest.approx((300 + 250) / 2)
    assert m.window == "arrival index [1, 3)"
    m = compute_metrics(JOBS, USAGE, CLUSTER, arrival_window=(40, 200))
    assert m.n_measured == 2 and m.avg_jct_s == pytest.approx((250 + 400) / 2)
    # cluster-level numbers do not depend on the window
    assert m.makespan_s == 500 and m.total_preemptions == 3


def test_arrival_order_breaks_ties_numerically():
    jobs = [state(str(i), 0, 10, start=0, finish=10 + i) for i in (10, 2, 1)]
    assert [js.id for js in select_steady(jobs, steady=(0, 2))] == ["1", "2"]


def test_unfinished_jobs_are_counted_not_measured():
    jobs = [*JOBS, state("4", 600, 100)]
    m = compute_metrics(jobs, USAGE, CLUSTER)
    assert (m.n_jobs, m.n_finished, m.n_unfinished, m.n_measured) == (5, 4, 1, 4)
    assert m.avg_jct_s == pytest.approx(262.5)
    empty = compute_metrics([state("x", 0, 10)], [], CLUSTER)
    assert math.isnan(empty.avg_jct_s) and math.isnan(empty.makespan_s) and math.isnan(empty.gpu_util)


def test_stretch_uses_single_gpu_volume():
    two_gpu = state("a", 0, 100, start=0, finish=400, gpus=2)
    assert task_volume(two_gpu) == 200  # linear speedup: runtime x processors
    mcnn = state("b", 0, 100, start=0, finish=300, gpus=2, perf=moldable_model("mcnn"))
    assert task_volume(mcnn) == pytest.approx(100 * moldable_speedup("mcnn")(2))
    m = compute_metrics([two_gpu, mcnn], [], CLUSTER)
    assert m.max_stretch == pytest.approx(2.0)
    assert m.avg_stretch == pytest.approx((2.0 + 300 / task_volume(mcnn)) / 2)


def test_user_jobs_follow_seed_002_grouping():
    tasks = [
        state("a1", 0, 100, start=0, finish=150, user="alice"),
        state("a2", 150, 100, start=150, finish=260, user="alice"),  # starts within 60 s of a1's trace end
        state("a3", 260, 50, start=260, finish=400, user="alice"),  # during a2's trace execution [150, 250]+60
        state("a4", 400, 10, start=400, finish=420, user="alice"),  # 90 s after the bag's last trace end
        state("b1", 100, 10, start=100, finish=130, user="bob"),
        state("x", 0, 10, start=0, finish=20),
        state("y", 0, 10, start=0, finish=30),
    ]
    groups = {tuple(js.id for js in g) for g in user_jobs(tasks)}
    assert groups == {("a1", "a2", "a3"), ("a4",), ("b1",), ("x",), ("y",)}
    m = compute_metrics(tasks, [], CLUSTER)
    assert m.n_user_jobs == 5
    flows = [400, 20, 30, 20, 30]
    assert m.avg_job_flow_time_s == pytest.approx(np.mean(flows)) and m.max_job_flow_time_s == 400
    stretches = [400 / 250, 20 / 10, 30 / 10, 20 / 10, 30 / 10]
    assert m.avg_job_stretch == pytest.approx(np.mean(stretches)) and m.max_job_stretch == 3.0
    assert len(user_jobs(tasks, gap_s=200)) == 4  # a wider gap merges a4 into alice's bag


def test_jct_cdf():
    x, f = jct_cdf(JOBS)
    assert x.tolist() == [100, 250, 300, 400] and f.tolist() == [0.25, 0.5, 0.75, 1.0]
    x, f = jct_cdf(JOBS, steady=(0, 1))
    assert x.tolist() == [100] and f.tolist() == [1.0]
    assert jct_cdf([])[0].size == 0


def test_to_dict_is_json_ready_and_result_adapter():
    m = compute_metrics(JOBS, USAGE, CLUSTER)
    d = json.loads(json.dumps(m.to_dict()))
    assert d["avg_jct_s"] == m.avg_jct_s and d["window"] == "all jobs"
    res = SimpleNamespace(finished=JOBS[:3], unfinished=JOBS[3:], usage=USAGE, cluster=CLUSTER)
    assert metrics_from_result(res, steady=(0, 2)) == compute_metrics(JOBS, USAGE, CLUSTER, steady=(0, 2))


def test_bad_windows():
    with pytest.raises(ValueError):
        select_steady(JOBS, steady=(3, 1))
    with pytest.raises(ValueError):
        select_steady(JOBS, arrival_window=(10, 0))


@settings(max_examples=80, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0.01, 100), st.floats(0, 8), st.floats(0, 24), st.floats(0, 500)),
                      min_size=1, max_size=12))
def test_utilisation_matches_direct_integration(steps):
    usage, t = [], 0.0
    for dt, g, c, m in steps:
        usage.append((t, g, c, m))
        t += dt
    end = t
    direct = [sum(dt * row[k] for (dt, *_), row in zip(steps, usage, strict=True)) / end for k in (1, 2, 3)]
    got = utilization(usage, CLUSTER, 0.0, end)
    assert got == pytest.approx((direct[0] / 8, direct[1] / 24, direct[2] / 500), rel=1e-9, abs=1e-12)
    assert all(0 <= v <= 1 + 1e-12 for v in got)
