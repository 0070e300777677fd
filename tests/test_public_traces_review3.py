"""Review of the public-trace readers: PAI's repeated job_name and late submissions are skipped and counted (as
Philly's and Helios' repeated ids are), Philly's clock times are US Pacific (its utilisation logs say PDT/PST),
and ``--cluster philly:/pai:/helios:`` converts its options as the trace specs do."""

from __future__ import annotations

import json

import pytest

from perfpredict.errors import UsageError
from perfpredict.sim.public_traces import read_pai, read_philly
from perfpredict.sim.run import parse_cluster, parse_trace, run_simulation
from perfpredict.sim.traces import TraceError

#: a PS without a GPU and two half-GPU workers (1000..2100 s), a job of 8 GPUs (3000..3500 s)
PAI_TASKS = ("aaa,ps,1.0,Terminated,1000.0,2000.0,600.0,10.0,0.0,\n"
             "aaa,worker,2.0,Terminated,1010.0,2100.0,400.0,10.0,50.0,V100\n"
             "ddd,worker,8.0,Failed,3000.0,3500.0,800.0,60.0,100.0,V100\n")
PAI_JOBS = "aaa,x1,u1,Terminated,900.0,2100.0\nddd,x4,u4,Failed,2500.0,3500.0\n"
REPEATED = "a job_name repeated in the job table (the first row kept)"
LATE = "submitted after its first task started (the job and task tables disagree)"


@pytest.fixture
def tasks(tmp_path):
    t = tmp_path / "pai_task_table.csv"
    t.write_text(PAI_TASKS)
    return t


def _table(tmp_path, text):
    j = tmp_path / "pai_job_table.csv"
    j.write_text(text)
    return j


def test_a_job_name_repeated_in_pais_job_table_is_skipped_and_counted(tasks, tmp_path):
    """It refused the whole file ("job_name 'aaa' already used on line 1"); Philly and Helios skip a repeated id
    and count it. The first row is the job's: aaa arrives at its 900 s, as user u1, not at the repeat's 1 s."""
    rep = read_pai(tasks, job_table=_table(tmp_path, PAI_JOBS + "aaa,x9,u9,Terminated,1.0,2.0\n"))
    assert [(j.id, j.arrival, j.user) for j in rep.jobs] == [("aaa", 0.0, "u1"), ("ddd", 1600.0, "u4")]
    assert rep.skip_reasons == {REPEATED: 1}
    assert rep.records == 3 and rep.skipped + len(rep.jobs) == rep.records


def test_a_pai_job_submitted_after_its_first_task_started_is_skipped_and_counted(tasks, tmp_path):
    """The README reads the gap from the job's start_time to its first task's as the wait: a negative one means
    the tables disagree about that job; it refused the whole file."""
    rep = read_pai(tasks, job_table=_table(tmp_path, PAI_JOBS.replace("aaa,x1,u1,Terminated,900.0",
                                                                       "aaa,x1,u1,Terminated,1005.0")))
    assert [(j.id, j.arrival) for j in rep.jobs] == [("ddd", 0.0)]
    assert rep.skip_reasons == {LATE: 1} and rep.records == 2


def test_a_pai_trace_whose_every_job_is_skipped_is_still_a_clear_error(tasks, tmp_path):
    """Every job late (job and task tables of different traces): no job is left, and the run says why."""
    late = _table(tmp_path, "aaa,x1,u1,Terminated,5000.0,6000.0\nddd,x4,u4,Failed,5000.0,6000.0\n")
    assert read_pai(tasks, job_table=late).skip_reasons == {LATE: 2}
    with pytest.raises(UsageError) as e:
        run_simulation(f"pai:{tasks},jobs={late}", "2x8")
    assert f"has no jobs ({tasks}: skipped 2 of 2 job records ({LATE}: 2))" in str(e.value)


def _philly_log(tmp_path, *jobs):
    """A cluster_job_log of (jobid, submitted, [(start, end), ...]) on one GPU each."""
    log = tmp_path / "cluster_job_log"
    log.write_text(json.dumps([
        {"status": "Pass", "vc": "v", "jobid": jid, "submitted_time": sub, "user": "u",
         "attempts": [{"start_time": s, "end_time": e, "detail": [{"ip": "m1", "gpus": ["gpu0"]}]} for s, e in tries]}
        for jid, sub, tries in jobs]))
    return log


def test_a_philly_job_across_the_end_of_daylight_saving_runs_an_hour_longer(tmp_path):
    """00:30 to 03:30 on 5 Nov 2017 in Redmond is 00:30 PDT to 03:30 PST: four hours, not the three the naive
    reading (tz=UTC, what was done) gives. A time in the repeated 01:00-02:00 hour is its first pass (PDT)."""
    log = _philly_log(tmp_path, ("dst", "2017-11-05 00:30:00", [("2017-11-05 00:30:00", "2017-11-05 03:30:00")]),
                      ("first-pass", "2017-11-05 01:30:00", [("2017-11-05 01:30:00", "2017-11-05 02:00:00")]))
    pacific, naive = read_philly(log), read_philly(log, tz="UTC")
    assert {j.id: j.work for j in pacific.jobs} == {"dst": 4 * 3600.0, "first-pass": 90 * 60.0}
    assert {j.id: j.work for j in naive.jobs} == {"dst": 3 * 3600.0, "first-pass": 30 * 60.0}
    # 01:30 PDT is 08:30 UTC, an hour after 00:30 PDT; the clock origin is the first submission's instant
    assert {j.id: j.arrival for j in pacific.jobs} == {"dst": 0.0, "first-pass": 3600.0}
    assert pacific.time_origin == 1509867000.0  # 2017-11-05 07:30:00 UTC


def test_philly_jobs_away_from_a_daylight_saving_change_keep_their_numbers(tmp_path):
    """The README's example job (October, daylight time throughout) and a December one: the same arrivals and
    run times in either reading."""
    log = _philly_log(tmp_path, ("oct", "2017-10-07 01:11:39", [("2017-10-07 01:12:09", "2017-10-07 01:13:23"),
                                                                ("2017-10-07 01:13:30", "2017-10-09 06:53:12")]),
                      ("oct2", "2017-10-08 09:00:00", [("2017-10-08 09:00:00", "2017-10-08 10:00:00")]))
    assert read_philly(log).jobs == read_philly(log, tz="UTC").jobs
    dec = _philly_log(tmp_path, ("dec", "2017-12-01 12:00:00", [("2017-12-01 12:00:00", "2017-12-02 12:00:00")]))
    assert [j.work for j in read_philly(dec).jobs] == [86400.0]


def test_philly_window_is_on_the_logs_clock(tmp_path):
    """start=/end= are clock times in tz, as the log's: 00:30 PDT is before start=01:00 (read in UTC it would be
    07:30 and kept)."""
    log = _philly_log(tmp_path, ("a", "2017-11-05 00:30:00", [("2017-11-05 00:30:00", "2017-11-05 03:30:00")]),
                      ("b", "2017-11-05 02:30:00", [("2017-11-05 02:30:00", "2017-11-05 03:30:00")]))
    rep = read_philly(log, start="2017-11-05 01:00:00")
    assert [j.id for j in rep.jobs] == ["b"] and rep.skip_reasons == {"submitted outside the window": 1}
    assert [j.id for j in read_philly(log, start="2017-11-05 01:00:00", tz="Asia/Tokyo").jobs] == ["b"]


# "America" is a folder of the zone database (IsADirectoryError), the long name too long a file name (OSError):
# both were "internal error" tracebacks
@pytest.mark.parametrize("tz", ["Mars/Olympus_Mons", "../etc", "", "PDT", "America", "Pacific" * 50])
def test_an_unknown_philly_time_zone_is_one_clear_error(tmp_path, tz):
    log = _philly_log(tmp_path, ("a", "2017-10-07 01:11:39", [("2017-10-07 01:12:09", "2017-10-07 01:13:23")]))
    with pytest.raises(TraceError, match=r"tz=.* is not a time zone name \(an IANA name such as "
                                         r"America/Los_Angeles or UTC\)"):
        read_philly(log, tz=tz)
    if tz:
        with pytest.raises(UsageError, match=f"tz='{tz}' is not a time zone name") as e:
            parse_trace(f"philly:{log},tz={tz}")
        assert e.value.step == "trace"
    with pytest.raises(UsageError, match="tz= is blank"):
        parse_trace(f"philly:{log},tz=")
    assert [j.work for j in parse_trace(f"philly:{log},tz=UTC")] == [74.0]


def test_a_public_clusters_options_are_converted_as_a_trace_specs_are(tmp_path):
    """``cpus_per_gpu=abc`` said Python's "could not convert string to float: 'abc'" and ``gpus_per_server=2.5``
    "invalid literal for int() with base 10"; the trace specs name the option and what it must be."""
    ml, spec, gn = (tmp_path / n for n in ("cluster_machine_list", "pai_machine_spec.csv", "cluster_gpu_number.csv"))
    ml.write_text("m31,8, 24GB\n")
    spec.write_text("m1,T4,96,512,2\n")
    gn.write_text("date,vcA,total\n2020-06-01,16,16\n")
    for text, said in [(f"philly:{ml},cpus_per_gpu=abc", "cpus_per_gpu='abc' is not a number"),
                       (f"helios:{gn},gpus_per_server=2.5", "gpus_per_server='2.5' is not a whole number"),
                       (f"pai:{spec},gpu_type=", "gpu_type='' is not a valid value (no name in '')")]:
        with pytest.raises(UsageError) as e:
            parse_cluster(text)
        assert str(e.value) == f"cluster {text!r}: {said}" and e.value.step == "cluster"
    assert parse_cluster(f"helios:{gn},gpus_per_server=4").total_gpus == 16
