"""Bad or odd input to the simulator that a scan of ``perfpredict simulate`` and ``compare`` found ending in an
internal error, a hang or a silent wrong answer (session 39): each is now one readable error or read right."""

from __future__ import annotations

import gzip
import json

import pytest

from perfpredict.card import PerformanceCard
from perfpredict.errors import PerfPredictError, UsageError
from perfpredict.fit.speedup import SpeedupCurve
from perfpredict.sched.mechanisms import make_mechanism
from perfpredict.sched.paper_cards import paper_card
from perfpredict.sim.run import load_perf_models, run_simulation
from perfpredict.sim.simulator import SimConfig

HEADER = "id,arrival_s,gpus,work_s,model"


def _csv(tmp_path, *rows: str, header: str = HEADER, name: str = "t.csv"):
    p = tmp_path / name
    p.write_text("\n".join([header, *rows]) + "\n")
    return p


def test_a_priority_beyond_64_bits_is_refused_with_its_line(tmp_path):
    """It ran, then the job records' int64 column overflowed: an internal error, no metrics, and an output folder
    of new and old files mixed."""
    trace = _csv(tmp_path, "a,0,1,3600,resnet18,1e30", "b,0,1,3600,resnet18,1", header=HEADER + ",priority")
    with pytest.raises(UsageError, match=r"line 2: job a: priority must be a whole number within 64 bits"):
        run_simulation(trace, "2x4", "fifo", "proportional")


def test_arrivals_in_nanoseconds_since_1970_are_refused(tmp_path):
    """At 1.7e18 s every job's 100 s of work was lost to rounding: each ran in 0 s, and nothing said so."""
    trace = _csv(tmp_path, "0,1700000000000000000,1,100,resnet18", "1,1700000000000000001,1,100,resnet18")
    with pytest.raises(UsageError, match=r"arrival 1.7e\+18 s is past 1e\+11 s .*shift the clock"):
        run_simulation(trace, "2x4", "fifo", "proportional")
    # a Unix time in seconds is still a clock the simulator keeps exactly enough
    late = _csv(tmp_path, "0,1700000000,1,100,resnet18", "1,1700000010,1,100,resnet18", name="late.csv")
    early = _csv(tmp_path, "0,0,1,100,resnet18", "1,10,1,100,resnet18", name="early.csv")
    event = SimConfig(mode="event")  # rounds would start at other offsets from the arrivals
    jct = [[js.finish - js.job.arrival for js in run_simulation(t, "2x4", "fifo", "proportional", config=event)
            .result.finished] for t in (late, early)]
    assert jct[0] == pytest.approx(jct[1], rel=1e-6)


@pytest.mark.parametrize("round_s", [1e-300, 1e-9, 0.0])
def test_a_round_too_short_to_move_the_clock_is_refused(round_s):
    """``--round 1e-300`` with LAS never moved the clock on (t + R == t); 1e-9 s took 2e13 rounds."""
    with pytest.raises(ValueError, match=r"SimConfig.round_s must be a finite number >= 0.001"):
        SimConfig(round_s=round_s)
    with pytest.raises(ValueError, match=r"SimConfig.period_s must be a finite number >= 0.001"):
        SimConfig(period_s=round_s)
    from perfpredict.cli import sim_settings

    with pytest.raises(UsageError, match=r"need --round >= 0.001"):
        sim_settings("round", round_s, 0.0, None, None)
    assert SimConfig(round_s=0.001).round_s == 0.001


def test_options_given_twice_are_refused():
    """The trace's last one won, the mechanism's first one, without a word (a cluster's was already refused)."""
    with pytest.raises(UsageError, match=r"option n is given twice in 'n=10,n=20'"):
        run_simulation("synergy:n=10,n=20", "2x4", "fifo", "proportional")
    with pytest.raises(ValueError, match=r"mechanism option k is given twice in 'k=1,k=3'"):
        make_mechanism("horus:k=1,k=3")
    assert make_mechanism("horus:k=3").k == 3


def test_gzip_traces_are_read_whatever_the_suffix_case(tmp_path):
    """``UP.CSV.GZ`` was taken for a trace but read as plain text: "not a UTF-8 text file"."""
    p = tmp_path / "UP.CSV.GZ"
    p.write_bytes(gzip.compress(f"{HEADER}\na,0,1,3600,resnet18\n".encode()))
    assert [js.id for js in run_simulation(p, "2x4", "fifo", "proportional").result.finished] == ["a"]


def test_swf_byte_order_mark_and_a_trace_whose_records_were_all_skipped(tmp_path):
    record = "1 0 10 3600 4 -1 -1 4 7200 -1 1 3 1 -1 1 -1 -1 -1"
    bom = tmp_path / "bom.swf"
    bom.write_text("\ufeff; Version: 2\n" + record + "\n", encoding="utf-8")
    assert len(run_simulation(f"{bom}:model=resnet18", "2x4", "fifo", "proportional").result.finished) == 1
    bom.write_text("\ufeff" + record + "\n", encoding="utf-8")  # the mark before a job line
    assert len(run_simulation(f"{bom}:model=resnet18", "2x4", "fifo", "proportional").result.finished) == 1
    skipped = tmp_path / "skipped.swf"
    skipped.write_text("1 0 10 0 4 -1 -1 4 7200 -1 1 3 1 -1 1 -1 -1 -1\n")  # run time 0
    with pytest.raises(UsageError, match=r"has no jobs \(.*skipped 1 of 1 job records \(non-positive run time: 1\)"):
        run_simulation(f"{skipped}:model=resnet18", "2x4", "fifo", "proportional")


def test_a_cards_folder_with_a_deeply_nested_json_file_and_an_empty_cards_path(tmp_path):
    folder = tmp_path / "cards"
    paper_card("resnet18").save(folder / "resnet18" / "card.json")
    (folder / "notes.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(PerfPredictError, match=r"notes.json.*not a readable card \(RecursionError"):
        load_perf_models(folder)
    with pytest.raises(UsageError, match=r"cards '' names no folder"):
        load_perf_models("")


@pytest.mark.parametrize(("edit", "message"), [
    ({"kind": "banana"}, r"tail kind must be one of amdahl, power_law, flat, got 'banana'"),
    ({"anchor_speedup": 0}, r"the tail's anchor must be a point with p > 0 and speedup > 0, got \(\d+, 0\)"),
    ({"used": 2}, r"the tail's parameter .* must be in \[0, 1\], got 2"),
    ({"used": -2}, r"the tail's parameter .* must be in \[0, 1\], got -2"),
])
def test_a_hand_edited_speedup_tail_is_refused_when_the_card_is_read(tmp_path, edit, message):
    """An unknown tail kind or a zero anchor failed in the middle of a simulation (internal error); Amdahl's f
    of 2 ran an 8-GPU job faster on 4 GPUs than on 8, with exit 0."""
    doc = json.loads(paper_card("mcnn").to_json())
    doc["speedup_curve"]["fit"]["tail"].update(edit)
    path = tmp_path / "mcnn" / "card.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    with pytest.raises(PerfPredictError, match=r"invalid card: speedup_curve.fit: " + message):
        PerformanceCard.load(path)
    with pytest.raises(ValueError, match=r"not a speedup curve: " + message):
        SpeedupCurve.from_dict(doc["speedup_curve"]["fit"])


def test_a_steady_window_beside_dropped_jobs_says_what_it_counts(tmp_path):
    """With an oversized job dropped, ``--steady 1:2`` measured trace job c, not b, and nothing said so."""
    trace = _csv(tmp_path, "a,0,1000,3600,resnet18", "b,10,1,3600,resnet18", "c,20,1,60,resnet18")
    run = run_simulation(trace, "2x4", "fifo", "proportional", steady=(1, 2), config=SimConfig(oversized="drop"))
    assert [j.id for j in run.result.dropped] == ["a"]
    assert any(n.startswith("the steady window 1:2 counts the 2 jobs simulated") for n in run.notes)
    assert not any("steady window" in n for n in run_simulation(trace, "2x4", "fifo", "proportional",
                                                                config=SimConfig(oversized="drop")).notes)


def test_a_run_whose_writing_fails_leaves_the_earlier_runs_files_whole(tmp_path, monkeypatch):
    """The files were written one by one in place: a failure part-way left the new jobs.csv beside the earlier
    run's metrics.json and plots, and nothing said so."""
    import perfpredict.sim.run as run_module

    out = tmp_path / "out"
    first = _csv(tmp_path, "a,0,1,3600,resnet18", "b,0,1,600,resnet18", name="first.csv")
    run_simulation(first, "2x4", "fifo", "proportional", out_dir=out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(before) == {"jobs.csv", "jobs.parquet", "metrics.json", "jct_cdf.png", "utilisation.png"}

    def disk_full(rows, path):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(run_module, "write_jobs_parquet", disk_full)
    second = _csv(tmp_path, "c,0,1,60,resnet18", name="second.csv")
    with pytest.raises(UsageError, match=r"cannot write the results to .*jobs.parquet\): No space left on device"):
        run_simulation(second, "2x4", "fifo", "proportional", out_dir=out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no staging folder left either
    monkeypatch.undo()
    (out / "metrics.json").unlink()
    (out / "metrics.json").mkdir()
    with pytest.raises(UsageError, match=r"metrics.json\): a folder is in the way"):
        run_simulation(second, "2x4", "fifo", "proportional", out_dir=out)
    assert (out / "jobs.csv").read_bytes() == before["jobs.csv"]
