"""Trace generation (Synergy §5.1), the SWF reader, and the CSV format."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import textwrap
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfpredict.sched.job import Job
from perfpredict.sched.paper_cards import SYNERGY_TASK_MODELS, synergy_models
from perfpredict.sim.traces import (
    DL_MAX_CONCURRENCY,
    PHILLY_LIKE_GPU_DEMAND,
    TraceError,
    dl_bag_trace,
    load_trace,
    read_csv_trace,
    read_swf,
    read_swf_report,
    synergy_trace,
    write_csv_trace,
)

N = 5000
DYNAMIC = synergy_trace(N, load_jobs_per_hour=6.0, seed=1)
MULTI = synergy_trace(N, load_jobs_per_hour=6.0, multi_gpu=True, seed=1)


def within(observed: float, expected: float, sigma: float, k: float = 4.0) -> bool:
    return abs(observed - expected) <= k * sigma


# -- seed 002's bag-of-tasks generator ------------------------------------------------------------------------
BAGS = dl_bag_trace(20000, seed=3)


def test_dl_bags_arrive_in_waves_of_at_most_the_concurrency_not_all_at_once():
    # §V-A records tasks by their start on the production cluster (concurrency <= 16 per GPU) and §III-C chains
    # a job's tasks ("start during or within one minute after finishing ... another task of the same user"):
    # a bag starts a wave of c tasks, then one task per completion.
    per_instant = Counter((j.user, j.arrival) for j in BAGS)
    assert max(per_instant.values()) <= DL_MAX_CONCURRENCY
    assert np.mean(list(per_instant.values())) < 1.5  # most tasks start alone (after a completion)
    assert max(per_instant.values()) > 4  # but bags do start with waves
    assert [j.arrival for j in BAGS] == sorted(j.arrival for j in BAGS)
    assert [j.id for j in BAGS] == [str(i) for i in range(len(BAGS))]


def test_dl_bag_volumes_are_run_time_over_concurrency():
    # v = (t_cmp - t_bgn) / c with observed run times of at least 300 s: OpenNMT cannot share (c = 1), MCNN may.
    onmt = np.array([j.work for j in BAGS if j.model == "opennmt"])
    mcnn = np.array([j.work for j in BAGS if j.model == "mcnn"])
    assert onmt.min() >= 300.0 and mcnn.min() >= 300.0 / DL_MAX_CONCURRENCY - 1e-9
    assert (mcnn < 300.0).mean() > 0.2  # shared tasks: volumes below the daemon's 300 s
    # OpenNMT carries the stated share of the volume (an assumption: 0.2 by default)
    share = onmt.sum() / (onmt.sum() + mcnn.sum())
    assert 0.12 < share < 0.3
    assert {j.model for j in BAGS} == {"mcnn", "opennmt"} and {j.gpus for j in BAGS} == {1.0}
    assert len({j.user for j in BAGS}) == 14


def test_dl_bags_are_deterministic_and_check_arguments():
    assert dl_bag_trace(300, seed=5) == dl_bag_trace(300, seed=5)
    assert dl_bag_trace(300, seed=5) != dl_bag_trace(300, seed=6)
    assert dl_bag_trace(0) == []
    for bad in ({"concurrency": 0.5}, {"concurrency": 20.0}, {"opennmt_share": 1.0}, {"start_gap_s": -1.0}):
        with pytest.raises(ValueError):
            dl_bag_trace(10, **bad)


# -- Synergy's generator ---------------------------------------------------------------------------------------
def test_duration_recipe():
    minutes = np.array([j.work for j in DYNAMIC]) / 60.0
    x = np.log10(minutes)
    assert x.min() >= 1.5 and x.max() <= 4.0
    long = np.mean(x > 3.0)
    assert within(long, 0.2, math.sqrt(0.2 * 0.8 / N))
    # mixture of U[1.5, 3] (0.8) and U[3, 4] (0.2): mean 2.5, variance 0.8/12·1.5² + 0.2/12 + 0.16·1.25²
    var = 0.8 * 1.5**2 / 12 + 0.2 / 12 + 0.8 * 0.2 * 1.25**2
    assert within(x.mean(), 2.5, math.sqrt(var / N))
    short = x[x <= 3.0]
    assert within(short.mean(), 2.25, math.sqrt(1.5**2 / 12 / short.size))


def test_poisson_arrivals():
    arrivals = np.array([j.arrival for j in DYNAMIC])
    gaps = np.diff(np.concatenate([[0.0], arrivals]))
    assert np.all(gaps >= 0)
    mean = 3600.0 / 6.0
    assert within(gaps.mean(), mean, mean / math.sqrt(N))
    assert within(gaps.std() / gaps.mean(), 1.0, 0.02, k=3)  # exponential: coefficient of variation 1
    assert [j.id for j in DYNAMIC] == [str(i) for i in range(N)]


def test_static_trace_arrives_at_zero():
    jobs = synergy_trace(50, seed=3)
    assert {j.arrival for j in jobs} == {0.0}


def test_split_models_and_single_gpu():
    tasks = Counter(j.task for j in DYNAMIC)
    assert tasks == {"image": 1000, "language": 3500, "speech": 500}
    models = synergy_models()
    for j in DYNAMIC:
        assert j.model in SYNERGY_TASK_MODELS[j.task] and j.model in models
        assert j.gpus == 1.0
    per_model = Counter(j.model for j in DYNAMIC if j.task == "language")
    for name in SYNERGY_TASK_MODELS["language"]:  # uniform within a task
        assert within(per_model[name], 3500 / 3, math.sqrt(3500 * (1 / 3) * (2 / 3)))


def test_multi_gpu_demand_distribution():
    gpus = Counter(int(j.gpus) for j in MULTI)
    assert set(gpus) <= set(PHILLY_LIKE_GPU_DEMAND) and max(gpus) == 16
    for g, p in PHILLY_LIKE_GPU_DEMAND.items():
        assert within(gpus[g] / N, p, math.sqrt(p * (1 - p) / N))


def test_common_random_numbers_and_determinism():
    again = synergy_trace(N, load_jobs_per_hour=6.0, seed=1)
    assert again == DYNAMIC
    # single vs multi GPU and another load: everything else is the same draw
    assert [(j.work, j.model, j.arrival) for j in MULTI] == [(j.work, j.model, j.arrival) for j in DYNAMIC]
    faster = synergy_trace(N, load_jobs_per_hour=12.0, seed=1)
    assert [j.work for j in faster] == [j.work for j in DYNAMIC]
    assert faster[-1].arrival == pytest.approx(DYNAMIC[-1].arrival / 2)
    assert synergy_trace(20, seed=2) != synergy_trace(20, seed=3)


@settings(max_examples=50, deadline=None)
@given(n=st.integers(0, 300), split=st.tuples(*[st.integers(0, 100)] * 3).filter(lambda s: sum(s) > 0))
def test_split_counts_are_exact(n, split):
    counts = Counter(j.task for j in synergy_trace(n, split=split, seed=0))
    assert sum(counts.values()) == n
    for task, w in zip(("image", "language", "speech"), split, strict=True):
        assert abs(counts.get(task, 0) - n * w / sum(split)) < 1.0


@pytest.mark.parametrize("kwargs", [{"n_jobs": -1}, {"n_jobs": 5, "load_jobs_per_hour": 0},
                                    {"n_jobs": 5, "split": (10, 10)}, {"n_jobs": 5, "split": (0, 0, 0)},
                                    {"n_jobs": 5, "multi_gpu": True, "gpu_demand": {0: 1.0}}])
def test_generator_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        synergy_trace(**kwargs)


# -- SWF ------------------------------------------------------------------------------------------------------
SWF = textwrap.dedent("""\
    ; Version: 2.2
    ; Computer: test cluster
    ; MaxProcs: 240
    ;
        1   1000   5   3600   4  -1 -1   4  7200 -1 1  7 1 -1 1 -1 -1 -1
        2   1010   0      0   2  -1 -1   2  7200 -1 5  7 1 -1 1 -1 -1 -1
        3   1020   3    600  -1  -1 -1  16   900 -1 1  9 1 -1 1 -1 -1 -1
        4     -1   0    100   1  -1 -1   1   100 -1 1  9 1 -1 1 -1 -1 -1

        5   1100   0     60   0  -1 -1  -1    60 -1 0  -1 1 -1 1 -1 -1 -1
        6   1200   0   30.5   9  -1 -1   9    60 -1 1  3 1 -1 1 -1 -1 -1
    """)


@pytest.fixture
def swf_file(tmp_path):
    p = tmp_path / "small.swf"
    p.write_text(SWF)
    return p


def test_swf_mapping_and_skips(swf_file):
    rep = read_swf_report(swf_file, model="linear")
    assert [j.id for j in rep.jobs] == ["1", "3", "6"]
    j1, j3, j6 = rep.jobs
    assert (j1.arrival, j1.gpus, j1.work, j1.user, j1.model) == (0.0, 4.0, 3600.0, "7", "linear")
    assert (j3.arrival, j3.gpus, j3.work) == (20.0, 16.0, 600.0)  # allocated unknown: requested processors
    assert (j6.arrival, j6.work) == (200.0, 30.5)
    assert rep.skipped == 3
    assert rep.skip_reasons == {"non-positive run time": 1, "unknown submit time": 1, "non-positive processors": 1}
    assert rep.header["MaxProcs"] == "240" and rep.header["Computer"] == "test cluster"
    assert rep.time_origin == 1000.0


def test_swf_gpus_per_proc_and_moldable_bounds(swf_file):
    jobs = read_swf(swf_file, gpus_per_proc=1 / 8, min_gpus=1, max_gpus=240)
    assert [j.gpus for j in jobs] == [1.0, 2.0, 2.0]  # ceil(4/8), ceil(16/8), ceil(9/8)
    assert all((j.min_gpus, j.max_gpus) == (1, 240) for j in jobs)
    assert [j.id for j in read_swf(swf_file, max_jobs=2)] == ["1", "3"]


def test_swf_gzip_and_load_trace(tmp_path, swf_file):
    gz = tmp_path / "small.swf.gz"
    gz.write_bytes(gzip.compress(SWF.encode()))
    assert load_trace(gz) == read_swf(swf_file) == load_trace(swf_file)


@pytest.mark.parametrize("bad_line, message", [
    ("7 1300 0 60 1 -1 -1 1 60 -1 1 3 1 -1 1 -1 -1", "18 whitespace-separated fields, got 17"),
    ("7 1300 0 sixty 1 -1 -1 1 60 -1 1 3 1 -1 1 -1 -1 -1", "run time is not a number"),
    ("7 -5 0 60 1 -1 -1 1 60 -1 1 3 1 -1 1 -1 -1 -1", "submit time is negative"),
    ("1 1300 0 60 1 -1 -1 1 60 -1 1 3 1 -1 1 -1 -1 -1", "job number 1 already used on line 5"),
    ("7 1300 0 inf 1 -1 -1 1 60 -1 1 3 1 -1 1 -1 -1 -1", "not finite"),
])
def test_swf_malformed_line_names_file_and_line(tmp_path, bad_line, message):
    p = tmp_path / "bad.swf"
    p.write_text(SWF + bad_line + "\n")
    with pytest.raises(TraceError, match=message) as e:
        read_swf(p)
    assert e.value.line == 12 and e.value.path == str(p)
    assert str(e.value).startswith(f"{p}: line 12: ")
    assert isinstance(e.value, ValueError)


def test_unreadable_files(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        read_swf(tmp_path / "missing.swf")
    binary = tmp_path / "binary.swf"
    binary.write_bytes(b"\xff\xfe\x00garbage\n")
    with pytest.raises(TraceError, match="UTF-8"):
        read_swf(binary)
    with pytest.raises(TraceError, match="unknown trace format"):
        load_trace(tmp_path / "trace.json")


# -- CSV ------------------------------------------------------------------------------------------------------
def test_csv_round_trip_of_a_generated_trace(tmp_path):
    jobs = MULTI[:300]
    p = write_csv_trace(jobs, tmp_path / "t.csv")
    assert read_csv_trace(p) == jobs == load_trace(p)


_text = st.from_regex(r"[A-Za-z0-9_#]([A-Za-z0-9_.:#\" ,-]{0,8}[A-Za-z0-9_])?", fullmatch=True)
_pos = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)
_job = st.builds(
    Job, id=_text, arrival=st.floats(0, 1e9, allow_nan=False), gpus=_pos, work=_pos,
    model=st.one_of(st.just(""), _text), task=st.sampled_from(["", "image", "language"]),
    user=st.one_of(st.just(""), _text), min_gpus=st.none(), max_gpus=st.one_of(st.none(), st.floats(1e9, 1e10)),
    priority=st.integers(-5, 5), qos=st.one_of(st.none(), _text))
# a due date is on the trace clock, at or after the arrival
_jobs = st.lists(st.tuples(_job, st.one_of(st.none(), _pos)).map(
    lambda jd: jd[0] if jd[1] is None else dataclasses.replace(jd[0], deadline=jd[0].arrival + jd[1])),
    max_size=8, unique_by=lambda j: j.id)


@settings(max_examples=60, deadline=None)
@given(jobs=_jobs)
def test_csv_round_trip_property(tmp_path_factory, jobs):
    p = write_csv_trace(jobs, tmp_path_factory.mktemp("csv") / "t.csv")
    assert read_csv_trace(p) == jobs


def test_a_deadline_before_the_arrival_is_refused_with_its_line(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("id,arrival_s,gpus,work_s,deadline_s\na,100,1,60,200\nb,100,1,60,50\n")
    with pytest.raises(TraceError, match=r"line 3.*deadline 50 s is before its arrival at 100 s"):
        read_csv_trace(p)


def test_csv_optional_columns_comments_and_blanks(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("# generated by hand\n#   second comment\nid,work_s,gpus,arrival_s,user,min_gpus\n"
                 "a,100,2,0,alice,\n\nb,50.5,0.5,10,,0.25\n#c,1,1,1,,\n")
    a, b, c = read_csv_trace(p)
    assert a == Job(id="a", arrival=0, gpus=2, work=100, user="alice")
    assert b == Job(id="b", arrival=10, gpus=0.5, work=50.5, min_gpus=0.25)
    assert c.id == "#c"  # after the header, '#' is data


@pytest.mark.parametrize("body, line, message", [
    ("id,arrival_s,gpus,work_s\na,0,1,10\nb,0,1\n", 3, "expected 4 fields"),
    ("id,arrival_s,gpus,work_s\na,0,one,10\n", 2, "gpus is not a number"),
    ("id,arrival_s,gpus,work_s\na,-3,1,10\n", 2, "arrival must be >= 0"),
    ("id,arrival_s,gpus,work_s\na,0,1,10\na,5,1,10\n", 3, "already used on line 2"),
    ("id,arrival_s,gpus,work_s\na,0,0,10\n", 2, "GPU demand must be > 0"),
    ("id,arrival_s,gpus,work_s\na,,1,10\n", 2, "arrival_s is blank"),
    ("id,arrival_s,gpus,work_s,priority\na,0,1,10,1.5\n", 2, "priority must be an integer"),
    ("# c\nid,arrival_s,gpus\na,0,1\n", 2, "missing required column"),
    ("id,arrival_s,gpus,work_s,prio\n", 1, "unknown column"),
    # a quote left open on a last line without its newline (csv's non-strict mode ended the field silently)
    ('id,arrival_s,gpus,work_s,user\na,0,1,10,alice\nb,0,1,10,"bob', 3,
     "a field spans line 3 and the end of the file: a quote left open"),
])
def test_csv_malformed(tmp_path, body, line, message):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(TraceError, match=message) as e:
        read_csv_trace(p)
    assert e.value.line == line and str(e.value).startswith(f"{p}: line {line}: ")


def test_csv_empty_file(tmp_path):
    p = tmp_path / "empty.csv"
    p.write_text("# nothing\n")
    with pytest.raises(TraceError, match="no header"):
        read_csv_trace(p)


def test_a_comment_line_after_a_csv_header_says_comments_go_before_it(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("# provenance\nid,arrival_s,gpus,work_s,model\n# a note\na,0,1,60,resnet50\n")
    with pytest.raises(TraceError, match="read only before the header") as e:
        read_csv_trace(p)
    assert e.value.line == 3


def test_a_simulations_metrics_keep_how_many_swf_records_were_skipped(swf_file, tmp_path):
    """The skipped records were only logged: metrics.json did not say that 3 of the file's 6 jobs were left out."""
    from perfpredict.sim.run import run_simulation

    for trace in (swf_file, f"{swf_file}:max_gpus=64"):
        run = run_simulation(str(trace), "4x8", "fifo", "rigid", cards="paper", out_dir=tmp_path / "out")
        said = "skipped 3 of 6 job records (non-positive processors: 1, non-positive run time: 1, unknown submit time: 1)"
        assert [n for n in run.notes if "skipped" in n] == [f"{swf_file}: {said}"]
        assert f"{swf_file}: {said}" in json.loads((tmp_path / "out" / "metrics.json").read_text())["notes"]
    assert read_swf_report(swf_file).records == 6
