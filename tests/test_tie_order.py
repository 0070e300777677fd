"""Jobs arriving at the same time are served, counted and listed in their trace's order, not in the string order
of their ids (where "10" comes before "2")."""

from __future__ import annotations

import csv

from perfpredict.sched.cluster import ClusterSpec
from perfpredict.sim.metrics import select_steady
from perfpredict.sim.run import load_perf_models, run_simulation
from perfpredict.sim.simulator import simulate
from perfpredict.sim.traces import read_csv_trace, synergy_trace


def _trace(tmp_path, ids):
    path = tmp_path / "trace.csv"
    rows = "".join(f"{i},0,1,600,resnet50\n" for i in ids)
    path.write_text("id,arrival_s,gpus,work_s,model\n" + rows, encoding="utf-8")
    return path


def test_fifo_serves_jobs_arriving_together_in_file_order(tmp_path):
    ids = ["2", "10", "b", "a", "1"]
    res = simulate(read_csv_trace(_trace(tmp_path, ids)), ClusterSpec.homogeneous(1, gpus=1), "fifo",
                   "proportional", load_perf_models("paper"))
    started = sorted(res.states, key=lambda js: js.first_start)
    assert [js.id for js in started] == ids
    # the steady window counts the same order: the first two arrivals are the file's first two rows
    assert [js.id for js in select_steady(res.states, steady=(0, 2))] == ["2", "10"]


def test_a_static_synergy_trace_runs_its_jobs_in_index_order():
    jobs = synergy_trace(12, seed=0)  # static: every job arrives at 0, ids "0".."11"
    assert len({j.arrival for j in jobs}) == 1
    res = simulate(jobs, ClusterSpec.homogeneous(1, gpus=1), "fifo", "proportional", load_perf_models("paper"))
    started = sorted(res.states, key=lambda js: js.first_start)
    assert [js.id for js in started] == [str(i) for i in range(12)]


def test_jobs_csv_lists_ties_in_file_order(tmp_path):
    ids = ["job-9", "job-10", "job-1"]
    run_simulation(str(_trace(tmp_path, ids)), "1x2", "fifo", "proportional", out_dir=tmp_path / "out")
    with open(tmp_path / "out" / "jobs.csv", newline="", encoding="utf-8") as f:
        assert [r["id"] for r in csv.DictReader(f)] == ids


def test_the_steady_window_takes_stand_ins_without_a_trace_position():
    """select_steady is public: objects with .job and .id (a trace's jobs picked before a run) still work, ties
    by id (review)."""
    from types import SimpleNamespace

    jobs = synergy_trace(12, seed=0)
    picked = select_steady([SimpleNamespace(job=j, id=j.id) for j in jobs], steady=(0, 3))
    assert [s.id for s in picked] == ["0", "1", "2"]
