"""``perfpredict trace`` / :func:`summarize_trace`: what a trace asks of a cluster, computed by hand here."""

from __future__ import annotations

import json

import pytest

from perfpredict.sched.cluster import ClusterSpec
from perfpredict.sched.job import Job
from perfpredict.sim.trace_summary import summarize_trace

JOBS = [Job(id="a", arrival=100.0, gpus=1.0, work=3600.0, model="resnet50", user="u1"),
        Job(id="b", arrival=1900.0, gpus=4.0, work=900.0, model="gnmt", user="u2"),
        Job(id="c", arrival=3700.0, gpus=16.0, work=7200.0, model="gnmt", user="u1"),
        Job(id="d", arrival=3700.0, gpus=0.5, work=100.0, model="resnet50")]


def test_the_figures_of_a_trace_and_its_load_on_a_cluster():
    s = summarize_trace(JOBS, trace="t", cluster=ClusterSpec.homogeneous(1, gpus=8))
    assert (s.jobs, s.users, s.first_arrival_s, s.last_arrival_s, s.arrival_window_s) == (4, 2, 100.0, 3700.0,
                                                                                          3600.0)
    assert s.gpu_demand == {"0.5": 1, "1": 1, "4": 1, "16": 1}
    asked = 3600 + 4 * 900 + 16 * 7200 + 0.5 * 100  # GPU-seconds
    assert s.gpu_hours == pytest.approx(asked / 3600)
    assert s.offered_load == pytest.approx(asked / (8 * 3600))
    assert s.work_s["min"] == 100.0 and s.work_s["max"] == 7200.0 and s.work_s["mean"] == pytest.approx(2950.0)
    assert s.work_s["p50"] == pytest.approx(2250.0)  # between 900 and 3600
    assert s.models == {"resnet50": 2, "gnmt": 2}
    assert (s.jobs_wider_than_a_server, s.jobs_larger_than_the_cluster) == (1, 1)
    two = summarize_trace(JOBS, cluster=ClusterSpec.homogeneous(2, gpus=8))
    assert (two.jobs_wider_than_a_server, two.jobs_larger_than_the_cluster) == (1, 0)
    assert two.offered_load == pytest.approx(s.offered_load / 2)


def test_a_static_trace_has_no_offered_load_and_an_empty_one_no_figures():
    static = [Job(id=str(i), arrival=0.0, gpus=1.0, work=60.0) for i in range(3)]
    assert summarize_trace(static, cluster=ClusterSpec.homogeneous(1)).offered_load is None
    empty = summarize_trace([], cluster=ClusterSpec.homogeneous(1))
    assert empty.jobs == 0 and empty.offered_load is None and empty.gpu_demand == {}


def test_a_poisson_traces_offered_load_is_its_rate_times_its_mean_work():
    """λ jobs/h of mean work W on G single-GPU slots offer about λ·W/(3600·G); the summary's figure is that within
    the sampling error of 4000 arrivals (the window is the realised one)."""
    from perfpredict.sim.traces import synergy_trace

    jobs = synergy_trace(4000, load_jobs_per_hour=9.0, seed=3)
    s = summarize_trace(jobs, cluster=ClusterSpec.homogeneous(16))
    mean_work = sum(j.work for j in jobs) / len(jobs)
    assert s.offered_load == pytest.approx(9.0 * mean_work / (3600 * 128), rel=0.05)


def test_the_command_prints_and_writes_the_summary(run_cli, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_s,gpus,work_s,model\n" + "".join(
        f"{j.id},{j.arrival},{j.gpus},{j.work},{j.model}\n" for j in JOBS))
    res = run_cli("trace", trace, "--cluster", "1x8", "--json", tmp_path / "s.json")
    assert res.returncode == 0, res.stderr
    assert "offered load" in res.stdout and "jobs larger than the cluster" in res.stdout
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["jobs"] == 4 and doc["cluster_gpus"] == 8 and doc["jobs_larger_than_the_cluster"] == 1
    bad = run_cli("trace", trace, "--cluster", "8by8")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "cluster '8by8'" in bad.stderr
