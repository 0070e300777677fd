"""The public DL-cluster trace readers (Philly, Helios, Alibaba PAI 2020) and their specs in ``perfpredict simulate``.

The fixture rows are the example entries of each trace's own README (msr-fiddle/philly-traces,
S-Lab-System-Group/HeliosData, alibaba/clusterdata cluster-trace-gpu-v2020), plus records built to hit each
rule; the expected jobs are worked out by hand from the timestamps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import json
import os
import threading
import time

import pytest

from perfpredict.sim.public_traces import read_helios, read_pai, read_philly, sniff_format
from perfpredict.sim.traces import TraceError

GPUS8 = [f"gpu{i}" for i in range(8)]

#: Philly's README example (two attempts of 8 GPUs on one server), then jobs the README's notes describe
PHILLY = [
    {"status": "Pass", "vc": "ee9e8c", "jobid": "application_1506638472019_14199",
     "attempts": [{"start_time": "2017-10-07 01:12:09", "end_time": "2017-10-07 01:13:23",
                   "detail": [{"ip": "m47", "gpus": GPUS8}]},
                  {"start_time": "2017-10-07 01:13:30", "end_time": "2017-10-09 06:53:12",
                   "detail": [{"ip": "m412", "gpus": GPUS8}]}],
     "submitted_time": "2017-10-07 01:11:39", "user": "ce2f4c"},
    # two servers, one GPU each: a 2-GPU job, submitted first
    {"status": "Killed", "vc": "ee9e8c", "jobid": "j2",
     "attempts": [{"start_time": "2017-10-07 02:00:00", "end_time": "2017-10-07 03:00:00",
                   "detail": [{"ip": "m1", "gpus": ["gpu0"]}, {"ip": "m2", "gpus": ["gpu3"]}]}],
     "submitted_time": "2017-10-07 01:00:00", "user": "u2"},
    {"status": "Pass", "vc": "b436b2", "jobid": "j3", "attempts": [], "submitted_time": "2017-10-07 01:30:00",
     "user": "u3"},
    {"status": "Failed", "vc": "b436b2", "jobid": "j4",
     "attempts": [{"start_time": "2017-10-08 00:00:00", "end_time": None, "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}],
     "submitted_time": "2017-10-08 00:00:00", "user": "u4"},
    {"status": "Pass", "vc": "b436b2", "jobid": "j5",
     "attempts": [{"start_time": None, "end_time": "2017-10-08 01:00:00", "detail": [{"ip": "m1", "gpus": ["gpu0"]}]},
                  {"start_time": "2017-10-08 02:00:00", "end_time": "2017-10-08 02:30:00",
                   "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}],
     "submitted_time": "2017-10-08 00:10:00", "user": "u5"},
]

HELIOS = """job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue
1425511,uXBbc,vcJkd,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0
1425512,uVMrF,vchbv,4,16,1,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,2020-06-09 18:45:36,249,0
1425513,uzqls,vcpDC,1,1,1,CANCELLED,2020-06-09 18:41:28,2020-06-09 18:41:28,2020-06-17 14:15:21,675233,0
1425514,uzqls,vcpDC,0,4,1,COMPLETED,2020-06-09 18:42:00,2020-06-09 18:42:00,2020-06-09 18:50:00,480,0
1425515,uzqls,vcJkd,16,64,2,COMPLETED,2020-06-09 18:40:00,2020-06-09 19:00:00,2020-06-09 20:00:00,3600,1200
"""

#: PAI's README example task (half a GPU), a PS + 2 workers of half a GPU, a task without times, a CPU-only job
PAI_TASKS = """4f057009a5d481acec67b088,tensorflow,1.0,Terminated,1739162.0,1739200.0,600.0,29.296875,50.0,MISC
aaa,ps,1.0,Terminated,1000.0,2000.0,600.0,10.0,0.0,
aaa,worker,2.0,Terminated,1010.0,2100.0,400.0,10.0,50.0,V100
bbb,worker,1.0,Failed,,,400.0,10.0,100.0,T4
ccc,ps,1.0,Terminated,500.0,600.0,600.0,10.0,,
ddd,worker,8.0,Failed,3000.0,3500.0,800.0,60.0,100.0,V100
"""
PAI_JOBS = """4f057009a5d481acec67b088,8cb3bec23d14,58540f191766,Terminated,1739100.0,1739200.0
aaa,x1,u1,Terminated,900.0,2100.0
bbb,x2,u2,Failed,800.0,
ccc,x3,u3,Terminated,400.0,600.0
ddd,x4,u4,Failed,2500.0,3500.0
"""


@pytest.fixture
def philly(tmp_path):
    p = tmp_path / "cluster_job_log"
    p.write_text(json.dumps(PHILLY, indent=1))
    return p


@pytest.fixture
def helios(tmp_path):
    p = tmp_path / "cluster_log.csv"
    p.write_text(HELIOS)
    return p


@pytest.fixture
def pai(tmp_path):
    tasks, jobs = tmp_path / "pai_task_table.csv", tmp_path / "pai_job_table.csv"
    tasks.write_text(PAI_TASKS)
    jobs.write_text(PAI_JOBS)
    return tasks, jobs


# -- Philly ---------------------------------------------------------------------------------------------------
def test_philly_jobs_by_submission_with_every_attempts_gpu_time(philly):
    rep = read_philly(philly)
    assert [(j.id, j.arrival, j.gpus, j.work, j.user, j.model) for j in rep.jobs] == [
        ("j2", 0.0, 2.0, 3600.0, "u2", "linear"),
        # 01:11:39 is 699 s after j2's 01:00:00; 74 s + 2 d 5 h 39 min 42 s of attempts
        ("application_1506638472019_14199", 699.0, 8.0, 74.0 + 193182.0, "ce2f4c", "linear")]
    assert rep.records == 5 and rep.skipped == 3
    assert rep.skip_reasons == {"no attempt recorded": 1, "still running when the log was taken": 1,
                                "an attempt without its start or end time": 1}


def test_philly_last_attempt_status_and_vc_filters(philly):
    rep = read_philly(philly, attempts="last", statuses={"Pass"})
    assert [(j.id, j.work) for j in rep.jobs] == [("application_1506638472019_14199", 193182.0)]
    assert rep.skip_reasons["status Killed"] == 1 and rep.skip_reasons["status Failed"] == 1
    assert rep.skipped + len(rep.jobs) == rep.records == 5
    assert [j.id for j in read_philly(philly, vc="b436b2").jobs] == []
    assert [j.id for j in read_philly(philly, vc=("ee9e8c",)).jobs] == ["j2", "application_1506638472019_14199"]


def test_philly_window_and_max_jobs_keep_the_first_submissions(philly):
    rep = read_philly(philly, start="2017-10-07 01:05:00", end="2017-10-08")
    assert [j.id for j in rep.jobs] == ["application_1506638472019_14199"]
    # j2 (01:00) before it, j4 and j5 (10-08 00:00 and 00:10) at or after its end
    assert rep.jobs[0].arrival == 0.0 and rep.skip_reasons["submitted outside the window"] == 3
    rep = read_philly(philly, max_jobs=1)
    assert [j.id for j in rep.jobs] == ["j2"] and rep.skip_reasons["past max_jobs=1"] == 1
    assert rep.records == 5


def test_philly_gz_reads_as_the_plain_file(philly, tmp_path):
    gz = tmp_path / "cluster_job_log.gz"
    gz.write_bytes(gzip.compress(philly.read_bytes()))
    assert read_philly(gz).jobs == read_philly(philly).jobs


@pytest.mark.parametrize(("content", "match"), [
    ('[{"jobid": "a",', "not JSON"),
    ('{"jobid": "a"}', "top level is a JSON dict"),
    ('[3]', "record 1 is a JSON int"),
    ('[{"status": "Pass"}]', "record 1: no 'jobid'"),
    ('[{"jobid": "a", "submitted_time": "07/10/2017", "attempts": []}]', r"submitted_time: not a time"),
    ('[{"jobid": "a", "submitted_time": "2017-10-07 01:00:00", "attempts": {}}]', "attempts is dict"),
    ('[{"jobid": "a", "submitted_time": "2017-10-07 01:00:00", "attempts": [{"start_time": "2017-10-07 01:00:00", '
     '"end_time": "2017-10-07 02:00:00", "detail": [{"ip": "m1"}]}]}]', "without a list of gpus"),
])
def test_a_malformed_philly_log_is_one_trace_error(tmp_path, content, match):
    p = tmp_path / "cluster_job_log"
    p.write_text(content)
    with pytest.raises(TraceError, match=match) as e:
        read_philly(p)
    assert str(p) in str(e.value)


def test_philly_options_are_checked(philly):
    with pytest.raises(TraceError, match="attempts must be"):
        read_philly(philly, attempts="first")
    with pytest.raises(TraceError, match="window .* is empty"):
        read_philly(philly, start="2017-10-08", end="2017-10-07")
    with pytest.raises(TraceError, match="statuses must be"):
        read_philly(philly, statuses="Pass")
    with pytest.raises(TraceError, match="max_jobs"):
        read_philly(philly, max_jobs=-1)


def test_philly_reads_the_logs_none_strings_as_missing_times(tmp_path):
    """The log writes a missing time as the string "None" (the README's notebook and Synergy's parser test for it):
    the job is skipped and counted, as for null, instead of the whole log being refused."""
    p = tmp_path / "cluster_job_log"
    still = [{**PHILLY[0]["attempts"][0]}, {**PHILLY[0]["attempts"][1], "end_time": "None"}]
    p.write_text(json.dumps([
        PHILLY[1],
        {**PHILLY[0], "jobid": "running", "attempts": still},
        {**PHILLY[0], "jobid": "unlogged", "attempts": [{**PHILLY[0]["attempts"][0], "start_time": "None"}]},
        {**PHILLY[0], "jobid": "unsubmitted", "submitted_time": "None"}]))
    rep = read_philly(p)
    assert [j.id for j in rep.jobs] == ["j2"]
    assert rep.skip_reasons == {"still running when the log was taken": 1,
                                "an attempt without its start or end time": 1, "unknown submit time": 1}
    assert rep.skipped + len(rep.jobs) == rep.records == 4


def test_philly_log_with_a_bom_reads_as_without(philly, tmp_path):
    bom = tmp_path / "bom_log"
    bom.write_bytes(b"\xef\xbb\xbf" + philly.read_bytes())
    assert sniff_format(bom) == "philly" and read_philly(bom).jobs == read_philly(philly).jobs


def test_philly_corrupt_gz_and_a_huge_number_are_one_trace_error(philly, tmp_path):
    raw = gzip.compress(philly.read_bytes())
    bad = tmp_path / "cluster_job_log.gz"  # the header and the trailer kept, the deflate stream garbled
    bad.write_bytes(raw[:20] + bytes(b ^ 0x55 for b in raw[20:-8]) + raw[-8:])
    with pytest.raises(TraceError, match="cannot read"):
        read_philly(bad)
    huge = tmp_path / "huge"
    huge.write_text('[{"jobid": ' + "9" * 5000 + "}]")  # past Python's 4,300-digit int limit
    with pytest.raises(TraceError, match="not a cluster_job_log"):
        read_philly(huge)


# -- Helios ---------------------------------------------------------------------------------------------------
def test_helios_gpu_jobs_with_their_duration(helios):
    rep = read_helios(helios)
    # 1425515 was submitted first (18:40:00), the README's three 61, 87 and 88 s after it
    assert [(j.id, j.arrival, j.gpus, j.work, j.user) for j in rep.jobs] == [
        ("1425515", 0.0, 16.0, 3600.0, "uzqls"), ("1425511", 61.0, 1.0, 36848.0, "uXBbc"),
        ("1425512", 87.0, 4.0, 249.0, "uVMrF"), ("1425513", 88.0, 1.0, 675233.0, "uzqls")]
    assert rep.skip_reasons == {"CPU-only job (gpu_num 0)": 1} and rep.records == 5


def test_helios_filters(helios):
    assert [j.id for j in read_helios(helios, statuses={"COMPLETED"}).jobs] == ["1425515", "1425511"]
    assert [j.id for j in read_helios(helios, vc="vcJkd").jobs] == ["1425515", "1425511"]
    rep = read_helios(helios, start="2020-06-09 18:41:00", max_jobs=2)
    assert [j.id for j in rep.jobs] == ["1425511", "1425512"]
    assert rep.skip_reasons == {"CPU-only job (gpu_num 0)": 1, "submitted outside the window": 1,
                                "past max_jobs=2": 1}


@pytest.mark.parametrize(("content", "match", "line"), [
    ("job_id,user,gpus\n1,u,1\n", "no column.*gpu_num, submit_time, duration", 1),
    (HELIOS.replace("2020-06-09 18:41:27,2020", "9 June,2020"), "submit_time: not a time", 3),
    (HELIOS.replace(",249,0", ",249"), "expected 12 fields", 3),
    (HELIOS.replace(",249,0", ",-249,0").replace("COMPLETED,2020-06-09 18:42", "X,2020-06-09 18:42"), None, None),
    (HELIOS.replace(",36848,", ",inf,"), "duration is not finite", 2),
])
def test_a_malformed_helios_log_is_one_trace_error(tmp_path, content, match, line):
    p = tmp_path / "cluster_log.csv"
    p.write_text(content)
    if match is None:  # a negative duration is a record to skip, not a malformed file
        rep = read_helios(p)
        assert rep.skip_reasons["non-positive run time"] == 1
        return
    with pytest.raises(TraceError, match=match) as e:
        read_helios(p)
    assert e.value.line == line


# -- PAI ------------------------------------------------------------------------------------------------------
def test_pai_jobs_sum_their_tasks_gpus_and_span(pai):
    tasks, jobs = pai
    rep = read_pai(tasks, job_table=jobs)
    assert [(j.id, j.arrival, j.gpus, j.work, j.user) for j in rep.jobs] == [
        # submitted at 900: the PS holds no GPU, the two workers half a GPU each; tasks span 1000..2100
        ("aaa", 0.0, 1.0, 1100.0, "u1"),
        ("ddd", 1600.0, 8.0, 500.0, "u4"),
        # the README's task: half a GPU (rounded up to one) for 38 s, submitted 62 s before it started
        ("4f057009a5d481acec67b088", 1739100.0 - 900.0, 1.0, 38.0, "58540f191766")]
    assert rep.skip_reasons == {"a task without its start or end time": 1, "no GPU task": 1}
    assert rep.records == 5


def test_pai_keeps_a_fractional_share_when_asked(pai, tmp_path):
    tasks, jobs = pai
    kept = {j.id: j.gpus for j in read_pai(tasks, job_table=jobs, fractional="keep").jobs}
    assert kept == {"aaa": 1.0, "ddd": 8.0, "4f057009a5d481acec67b088": 0.5}
    thirds = tmp_path / "thirds.csv"  # three instances of 33.3%: one GPU, not two
    thirds.write_text("t,worker,3.0,Terminated,1.0,10.0,100.0,1.0,33.3,T4\n")  # (a time of 0 is a missing one)
    assert read_pai(thirds).jobs[0].gpus == 1.0
    with pytest.raises(TraceError, match="fractional must be"):
        read_pai(tasks, fractional="floor")


def test_pai_without_the_job_table_arrives_at_the_first_task(pai):
    rep = read_pai(pai[0])
    assert [(j.id, j.arrival, j.user) for j in rep.jobs] == [("aaa", 0.0, ""), ("ddd", 2000.0, ""),
                                                              ("4f057009a5d481acec67b088", 1738162.0, "")]


def test_pai_filters(pai):
    tasks, jobs = pai
    assert [j.id for j in read_pai(tasks, job_table=jobs, statuses={"Terminated"}).jobs] == \
        ["aaa", "4f057009a5d481acec67b088"]
    assert [j.id for j in read_pai(tasks, job_table=jobs, gpu_type="V100").jobs] == ["aaa", "ddd"]
    assert [j.id for j in read_pai(tasks, job_table=jobs, start=2000, end=3000).jobs] == ["ddd"]


def test_pai_accepts_the_header_rows_of_its_header_files(pai, tmp_path):
    tasks, jobs = pai
    t2, j2 = tmp_path / "t2.csv", tmp_path / "j2.csv"
    t2.write_text("job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type\n"
                  + tasks.read_text())
    j2.write_text("job_name,inst_id,user,status,start_time,end_time\n" + jobs.read_text())
    assert read_pai(t2, job_table=j2).jobs == read_pai(tasks, job_table=jobs).jobs


def test_malformed_pai_tables_are_one_trace_error(pai, tmp_path):
    tasks, jobs = pai
    bad = tmp_path / "bad.csv"
    bad.write_text(PAI_TASKS.replace(",600.0,29.296875", ",600.0"))
    with pytest.raises(TraceError, match="expected the 10 columns") as e:
        read_pai(bad)
    assert e.value.line == 1
    # a job submitted after its first task started, a job_name repeated in the job table: skipped and counted
    # (tests/test_public_traces_review3.py)
    neg = tmp_path / "neg.csv"
    neg.write_text(PAI_TASKS.replace("2.0,Terminated", "-2.0,Terminated"))
    with pytest.raises(TraceError, match="must be >= 0"):
        read_pai(neg)


def test_pai_time_zero_is_a_missing_time(pai, tmp_path):
    """0 is what the task table holds for a task that never started (the trace's analysis/utils.py reads it as
    NaN): the job is skipped as one with a task missing its times, not read as started at 0 s."""
    tasks, jobs = pai
    t = tmp_path / "t.csv"
    t.write_text(PAI_TASKS + "aaa,evaluator,1.0,Failed,0.0,0.0,100.0,1.0,,\n")
    rep = read_pai(t, job_table=jobs)  # it was an error: aaa "submitted at 900 s, after its first task started"
    assert [j.id for j in rep.jobs] == ["ddd", "4f057009a5d481acec67b088"]
    assert rep.skip_reasons["a task without its start or end time"] == 2
    alone = read_pai(t)  # without the job table aaa arrived first with 2100 s of work (0 .. 2100)
    assert "aaa" not in [j.id for j in alone.jobs] and alone.skipped + len(alone.jobs) == alone.records == 5
    j = tmp_path / "j.csv"
    j.write_text(PAI_JOBS.replace("ddd,x4,u4,Failed,2500.0", "ddd,x4,u4,Failed,0.0"))
    assert read_pai(tasks, job_table=j).skip_reasons["unknown submit time"] == 1


def test_pai_demand_that_overflows_is_one_trace_error(tmp_path):
    t = tmp_path / "t.csv"
    t.write_text("a,worker,1e200,Terminated,1.0,10.0,100.0,1.0,1e200,T4\n")
    for fractional in ("ceil", "keep"):  # ceil was an OverflowError from math.ceil
        with pytest.raises(TraceError, match="gpus must be a finite number") as e:
            read_pai(t, fractional=fractional)
        assert e.value.line == 1


def test_sniff_format(philly, helios, pai, tmp_path):
    assert sniff_format(philly) == "philly" and sniff_format(helios) == "helios" and sniff_format(pai[0]) == "pai"
    ours = tmp_path / "t.csv"
    ours.write_text("id,arrival_s,gpus,work_s\na,0,1,60\n")
    assert sniff_format(ours) is None and sniff_format(pai[1]) is None
    assert sniff_format(tmp_path / "missing") is None


# -- through perfpredict simulate -----------------------------------------------------------------------------
def test_a_csv_trace_from_a_named_pipe_is_read_once(tmp_path):
    """Looking for a public trace read a pipe's bytes before the CSV reader opened it again, which then waited for
    a writer that had gone: ``simulate --trace`` hung on a named pipe (``mkfifo t.csv``) that it read before."""
    from perfpredict.sim.run import parse_trace

    fifo = tmp_path / "t.csv"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "w") as f:
            f.write("id,arrival_s,gpus,work_s,model\na,0,1,60,linear\nb,5,1,60,linear\n")
        time.sleep(5)  # then end a second reader's wait with an empty stream, rather than hang the test
        with contextlib.suppress(OSError):  # ENXIO: no reader waits (read once, as it should be)
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    threading.Thread(target=feed, daemon=True).start()
    assert [j.id for j in parse_trace(str(fifo))] == ["a", "b"]
    assert sniff_format(fifo) is None


def _simulate(tmp_path, trace: str, name: str = "out"):
    from typer.testing import CliRunner

    from perfpredict.cli import app

    out = tmp_path / name
    res = CliRunner().invoke(app, ["simulate", "--cluster", "2x8", "--trace", trace, "--policy", "fifo",
                                   "--mechanism", "proportional", "--no-mlflow", "-o", str(out)])
    return res, out


def test_simulate_replays_each_public_trace_and_keeps_what_it_skipped(philly, helios, pai, tmp_path):
    tasks, jobs = pai
    for trace, n, skipped in [(f"philly:{philly},status=Pass/Killed", 2, "skipped 3 of 5"),
                              (str(philly), 2, "skipped 3 of 5"),
                              (str(helios), 4, "skipped 1 of 5"),
                              (f"helios:{helios},vc=vcJkd/vchbv,max_jobs=2", 2, "skipped 3 of 5"),
                              (f"pai:{tasks},jobs={jobs},gpu_type=V100", 2, "skipped 3 of 5")]:
        res, out = _simulate(tmp_path, trace)
        assert res.exit_code == 0, (trace, res.output)
        doc = json.loads((out / "metrics.json").read_text())
        assert doc["metrics"]["n_finished"] == n, trace
        assert any(skipped in note for note in doc["notes"]), (trace, doc["notes"])


def test_simulate_work_is_the_recorded_run_time(helios, tmp_path):
    """A job alone on its GPUs (FIFO, exclusive, linear model) runs exactly its recorded duration."""
    import csv

    res, out = _simulate(tmp_path, f"helios:{helios},vc=vcJkd")
    assert res.exit_code == 0, res.output
    with open(out / "jobs.csv") as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"1425515", "1425511"}
    for job_id, duration in (("1425515", 3600.0), ("1425511", 36848.0)):
        r = rows[job_id]
        assert float(r["finish_s"]) - float(r["first_start_s"]) == pytest.approx(duration, rel=1e-9)


@pytest.mark.parametrize(("trace", "said"), [
    ("helios:{helios},bogus=1", "unknown helios option(s) ['bogus']"),
    ("pai:jobs={tasks}", "give the file first"),
    ("{tasks}", "looks like Alibaba PAI's pai_task_table.csv"),
    ("philly:{tmp}/nothing", "is not a file"),
    ("philly:{philly},max_jobs=two", "max_jobs='two' is not a whole number"),
    ("philly:{philly},attempts=first", "attempts must be 'sum', 'last' or 'span'"),
])
def test_simulate_refuses_a_bad_public_trace_spec_in_one_line(philly, helios, pai, tmp_path, trace, said):
    from perfpredict.errors import UsageError

    res, _ = _simulate(tmp_path, trace.format(helios=helios, tasks=pai[0], philly=philly, tmp=tmp_path))
    assert res.exit_code != 0 and isinstance(res.exception, UsageError)
    assert said in str(res.exception)


def test_the_command_says_a_malformed_public_trace_in_one_line(run_cli, tmp_path):
    bad = tmp_path / "cluster_job_log"
    bad.write_text('[{"jobid": "a", "submitted_time": "yesterday", "attempts": []}]')
    res = run_cli("simulate", "--cluster", "2x8", "--trace", f"philly:{bad}", "--no-mlflow", "-o", tmp_path / "o")
    assert res.returncode != 0 and "Traceback" not in res.stderr + res.stdout
    assert "record 1 (jobid a): submitted_time: not a time like 2017-10-07 01:11:39: 'yesterday'" in res.stderr


# -- Synergy models on a public trace -------------------------------------------------------------------------
def test_with_synergy_models_keeps_the_jobs_and_follows_the_split(helios, tmp_path):
    from collections import Counter

    from perfpredict.sched.paper_cards import SYNERGY_TASK_MODELS
    from perfpredict.sim.traces import synergy_trace, with_synergy_models

    jobs = read_helios(helios).jobs
    a = with_synergy_models(jobs, (50, 0, 50), seed=4)
    assert a == with_synergy_models(jobs, (50, 0, 50), seed=4)
    assert [(j.id, j.arrival, j.gpus, j.work, j.user) for j in a] == [(j.id, j.arrival, j.gpus, j.work, j.user)
                                                                      for j in jobs]
    assert Counter(j.task for j in a) == {"image": 2, "speech": 2}
    assert all(j.model in SYNERGY_TASK_MODELS[j.task] for j in a)
    # the same draw as the generator's: a 1000-job trace's models, given back to its own jobs
    gen = synergy_trace(1000, load_jobs_per_hour=9, seed=0)
    stripped = [dataclasses.replace(j, model="linear", task="") for j in gen]
    assert Counter(j.task for j in with_synergy_models(stripped, (20, 70, 10), seed=5)) == \
        {"image": 200, "language": 700, "speech": 100}
    with pytest.raises(ValueError, match="split must be three"):
        with_synergy_models(jobs, (1, 2))


def test_a_public_trace_spec_with_a_split_draws_synergy_models_by_its_seed(philly, tmp_path):
    from perfpredict.errors import UsageError
    from perfpredict.sim.run import parse_trace, trace_seed

    spec = f"philly:{philly},split=20/70/10"
    a, b = parse_trace(spec, seed=1), parse_trace(spec, seed=1)
    assert a == b and all(j.model != "linear" and j.task for j in a)
    assert parse_trace(spec + ",seed=1", seed=9) == a
    assert trace_seed(spec, 1) == 1 and trace_seed(spec + ",seed=7", 1) == 7 and trace_seed(f"philly:{philly}", 1) is None
    assert [j.model for j in parse_trace(f"philly:{philly}", seed=1)] == ["linear", "linear"]
    for bad, said in [(",seed=3", "give split= too"), (",split=20/70/10,model=resnet50", "give one"),
                      (",split=1/2", "split must be three")]:
        with pytest.raises(UsageError, match=said):
            parse_trace(f"philly:{philly}{bad}", seed=0)


def test_a_repeated_id_is_skipped_and_counted_the_first_record_kept(philly, helios, tmp_path):
    again = tmp_path / "again_log"
    again.write_text(json.dumps(PHILLY + [{**PHILLY[1], "user": "someone else"}]))
    rep = read_philly(again)
    assert [(j.id, j.user) for j in rep.jobs] == [("j2", "u2"), ("application_1506638472019_14199", "ce2f4c")]
    assert rep.skip_reasons["a jobid repeated (the first record kept)"] == 1 and rep.records == 6
    twice = tmp_path / "twice.csv"
    twice.write_text(HELIOS + "1425511,u,vc,1,1,1,COMPLETED,2020-06-09 18:41:01,,,10,0\n")
    rep = read_helios(twice)
    assert [j.work for j in rep.jobs if j.id == "1425511"] == [36848.0]
    assert rep.skip_reasons["a job_id repeated (the first record kept)"] == 1 and rep.records == 6


def test_philly_span_and_the_first_attempts_gpus(tmp_path):
    """The trace notebook's definitions: num_gpus from the first attempt, run time from the first attempt's start
    to the last one's end (the 7 s between the README example's attempts included)."""
    p = tmp_path / "cluster_job_log"
    grown = {**PHILLY[0], "jobid": "grown", "attempts": [
        PHILLY[0]["attempts"][0], {**PHILLY[0]["attempts"][1], "detail": [{"ip": "m1", "gpus": GPUS8},
                                                                           {"ip": "m2", "gpus": GPUS8}]}]}
    p.write_text(json.dumps([grown]))
    (job,) = read_philly(p, attempts="span").jobs
    assert job.gpus == 8.0 and job.work == 74.0 + 7.0 + 193182.0
    assert read_philly(p, attempts="last").jobs[0].work == 193182.0


# -- the clusters the traces ran on ---------------------------------------------------------------------------
def test_philly_and_pai_machine_lists_as_clusters(tmp_path):
    from perfpredict.sim.public_traces import read_pai_machines, read_philly_machines

    ml = tmp_path / "cluster_machine_list"  # the header as the trace writes it: spaces after the commas
    ml.write_text("machineId, number of GPUs, single GPU mem\nm31,8, 24GB\nm32,2, 12GB\nm33,0, 12GB\n")
    c = read_philly_machines(ml)
    assert [(s.gpus, s.cpus, s.mem_gb, s.gpu_type, s.gpu_mem_gb) for s in c.servers] == [
        (8, 24.0, 500.0, "philly-24GB", 24.0), (2, 6.0, 125.0, "philly-12GB", 12.0)]
    c = read_philly_machines(ml, cpus_per_gpu=4, mem_per_gpu_gb=32)
    assert (c.servers[0].cpus, c.servers[0].mem_gb) == (32.0, 256.0)
    spec = tmp_path / "pai_machine_spec.csv"  # the README's example row, a V100M32 server, a CPU-only one
    spec.write_text("82e5af3cd5c4af3f56c62c54,T4,96,512,2\nm2,V100M32,96,512,8\nm3,CPU,64,256,0\n")
    c = read_pai_machines(spec)
    assert [(s.gpus, s.cpus, s.mem_gb, s.gpu_type, s.gpu_mem_gb) for s in c.servers] == [
        (2, 96.0, 512.0, "T4", 16.0), (8, 96.0, 512.0, "V100M32", 32.0)]
    assert [s.gpu_type for s in read_pai_machines(spec, gpu_type="V100M32").servers] == ["V100M32"]
    assert read_pai_machines(spec, gpu_mem_gb={"T4": 15.0}).servers[0].gpu_mem_gb == 15.0


@pytest.mark.parametrize(("name", "content", "match"), [
    ("cluster_machine_list", "m31,8\n", "expected 3 fields"),
    ("cluster_machine_list", "m31,8, 24GB\nm31,2, 12GB\n", "machine 'm31' already listed on line 1"),
    ("cluster_machine_list", "m31,2.5, 24GB\n", "whole number"),
    ("cluster_machine_list", "m31,8, lots\n", "single GPU mem is not a number"),
    ("cluster_machine_list", "m31,0, 24GB\n", "no server with GPUs"),
    ("cluster_machine_list", "m31,100000, 24GB\n", "more than the 1024"),
    ("pai_machine_spec.csv", "m1,A100,96,512,8\n", "GPU type 'A100' has no device memory"),
    ("pai_machine_spec.csv", "m1,T4,96,512\n", "expected the 5 columns"),
])
def test_a_malformed_machine_list_is_one_trace_error(tmp_path, name, content, match):
    from perfpredict.sim.public_traces import read_pai_machines, read_philly_machines

    p = tmp_path / name
    p.write_text(content)
    reader = read_philly_machines if name == "cluster_machine_list" else read_pai_machines
    with pytest.raises(TraceError, match=match):
        reader(p)


def test_simulate_replays_a_philly_log_on_its_own_machines(philly, tmp_path):
    from typer.testing import CliRunner

    from perfpredict.cli import app
    from perfpredict.errors import UsageError

    ml = tmp_path / "cluster_machine_list"
    ml.write_text("machineId, number of GPUs, single GPU mem\nm31,8, 24GB\nm32,2, 12GB\n")
    out = tmp_path / "o"
    res = CliRunner().invoke(app, ["simulate", "--cluster", f"philly:{ml},cpus_per_gpu=4", "--trace", str(philly),
                                   "--mechanism", "proportional", "--no-mlflow", "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "metrics.json").read_text())
    assert doc["metrics"]["n_finished"] == 2 and doc["params"]["cluster"].startswith("philly:")
    for spec, said in [(f"philly:{ml},cpus=4", "unknown philly option(s) ['cpus']"),
                       (f"pai:{tmp_path}/none.csv", "is not a file"),
                       (f"philly:{ml},cpus_per_gpu=-1", "cpus_per_gpu must be a positive number")]:
        res = CliRunner().invoke(app, ["simulate", "--cluster", spec, "--trace", str(philly), "--no-mlflow",
                                       "-o", str(tmp_path / "bad")])
        assert res.exit_code != 0 and isinstance(res.exception, UsageError), (spec, res.output)
        assert said in str(res.exception), (spec, str(res.exception))


def test_a_helios_day_as_a_cluster_of_8_gpu_servers(tmp_path):
    from perfpredict.sim.public_traces import read_helios_gpus
    from perfpredict.sim.run import parse_cluster

    p = tmp_path / "cluster_gpu_number.csv"  # the file's layout: a date, the GPUs of each virtual cluster, total
    p.write_text("date,vcA,vcB,vcC,total\n2020-04-01,72,64,0,136\n2020-04-02,72,60,8,140\n")
    first = read_helios_gpus(p)
    assert first.total_gpus == 136 and [s.gpus for s in first.servers] == [8] * 17
    assert first.name == "helios:cluster_gpu_number.csv,date=2020-04-01"
    day2 = read_helios_gpus(p, date="2020-04-02", vc=("vcB", "vcC"))
    assert [s.gpus for s in day2.servers] == [8] * 8 + [4] and day2.name.endswith(",date=2020-04-02,vc=vcB/vcC")
    assert (day2.servers[0].cpus, day2.servers[0].mem_gb, day2.servers[0].gpu_mem_gb) == (24.0, 500.0, 32.0)
    spec = parse_cluster(f"helios:{p},date=2020-04-02,gpus_per_server=4,gpu_mem=16")
    assert spec.total_gpus == 140 and {s.gpus for s in spec.servers} == {4} and spec.servers[0].gpu_mem_gb == 16.0
    for kw, said in [({"date": "2021-01-01"}, "no row for the date"), ({"vc": "vcZ"}, "no virtual cluster vcZ"),
                     ({"gpus_per_server": 2.5}, "whole number")]:
        with pytest.raises(TraceError, match=said):
            read_helios_gpus(p, **kw)
    bad = tmp_path / "bad.csv"
    bad.write_text("day,vcA\n2020-04-01,8\n")
    with pytest.raises(TraceError, match="not a Helios cluster_gpu_number.csv"):
        read_helios_gpus(bad)


def test_the_readmes_public_trace_example_runs(philly, tmp_path):
    """README's Python example, with its two paths pointed at this module's Philly fixtures."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "read_philly(" in b]
    ml = tmp_path / "cluster_machine_list"
    ml.write_text("machineId, number of GPUs, single GPU mem\nm31,8, 24GB\nm32,2, 12GB\n")
    code = block.replace("trace-data/cluster_job_log", str(philly)).replace("trace-data/cluster_machine_list",
                                                                           str(ml))
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - the repository's own documentation
    assert [j.id for j in scope["rep"].jobs] == ["application_1506638472019_14199"]
    assert scope["run"].metrics.n_finished == 1
