"""A sweep's finished runs are kept on disk as they end (perfpredict.sim.kept_runs): a sweep stopped by a failure
or a Ctrl-C loses only the runs still going, and ``--resume`` skips the kept ones and gives the same results."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from perfpredict.errors import UsageError
from perfpredict.sim.kept_runs import FILE_NAME, PREVIOUS_NAME, KeptRuns, read_kept
from perfpredict.sim.parallel import map_runs

REPO = Path(__file__).resolve().parents[1]
calls: list[int] = []


def _row(x: int) -> dict:
    calls.append(x)
    if x == _row.fail_at:  # type: ignore[attr-defined]
        raise RuntimeError(f"run {x} failed")
    return {"x": x, "square": x * x, "half": x / 2, "label": f"run {x}", "nan": float("nan")}


_row.fail_at = -1  # type: ignore[attr-defined]


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"fast": True, "seed": 0, "workers": 1, "ray": None, "resume": False, **kw})


@pytest.fixture(autouse=True)
def _reset():
    calls.clear()
    _row.fail_at = -1  # type: ignore[attr-defined]


def test_a_failed_sweep_keeps_its_finished_runs_and_resume_runs_only_the_rest(tmp_path, capsys):
    _row.fail_at = 3  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="run 3 failed"):
        map_runs(_row, range(6), keep=KeptRuns(tmp_path, __file__, _args()))
    assert "kept 3 of 6 finished runs" in capsys.readouterr().err
    header, runs = read_kept(tmp_path / FILE_NAME)
    assert sorted(runs) == [0, 1, 2] and runs[2]["square"] == 4 and header["runs"] == 6
    assert header["arguments"] == {"fast": True, "seed": 0}  # --workers/--ray/--resume change no row

    _row.fail_at = -1  # type: ignore[attr-defined]
    calls.clear()
    seen: list[int] = []
    keep = KeptRuns(tmp_path, __file__, _args(workers=4), resume=True)
    got = map_runs(_row, range(6), keep=keep, on_result=lambda i, r: seen.append(i))
    assert calls == [3, 4, 5]  # the kept runs were not run again
    assert sorted(seen) == list(range(6))  # but each is reported, as a fresh run's would be
    fresh = [_row(x) for x in range(6)]
    assert [{k: v for k, v in r.items() if k != "nan"} for r in got] == \
        [{k: v for k, v in r.items() if k != "nan"} for r in fresh]
    assert all(r["nan"] != r["nan"] for r in got)  # NaN survives the file
    keep.finish()
    assert not (tmp_path / FILE_NAME).exists()


def test_resume_refuses_another_sweeps_runs_and_a_missing_file(tmp_path):
    with pytest.raises(UsageError, match="no runs were kept"):
        map_runs(_row, range(3), keep=KeptRuns(tmp_path, __file__, _args(), resume=True))
    _row.fail_at = 1  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        map_runs(_row, range(3), keep=KeptRuns(tmp_path, __file__, _args()))
    with pytest.raises(UsageError, match=r"another sweep's \(--seed 0 there, 1 now\)"):
        map_runs(_row, range(3), keep=KeptRuns(tmp_path, __file__, _args(seed=1), resume=True))
    with pytest.raises(UsageError, match="runs 3 there, 4 now"):
        map_runs(_row, range(4), keep=KeptRuns(tmp_path, __file__, _args(), resume=True))
    assert sorted(read_kept(tmp_path / FILE_NAME)[1]) == [0]  # a refusal changes nothing


def test_a_torn_last_line_is_dropped_and_a_foreign_file_is_refused(tmp_path):
    _row.fail_at = 2  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        map_runs(_row, range(4), keep=KeptRuns(tmp_path, __file__, _args()))
    path = tmp_path / FILE_NAME
    path.write_text(path.read_text() + '{"run": 2, "resu')  # killed while writing
    _row.fail_at = -1  # type: ignore[attr-defined]
    calls.clear()
    map_runs(_row, range(4), keep=KeptRuns(tmp_path, __file__, _args(), resume=True))
    assert calls == [2, 3]
    path.write_text("x,y\n1,2\n")
    with pytest.raises(UsageError, match="line 1: not a kept run"):
        map_runs(_row, range(4), keep=KeptRuns(tmp_path, __file__, _args(), resume=True))
    path.write_text(json.dumps({"sweep": {"runs": 4}}) + "\n" + json.dumps({"run": 9, "result": 1}) + "\n")
    with pytest.raises(UsageError, match="line 2: not a kept run of this sweep"):
        read_kept(path)


def test_starting_afresh_moves_an_unfinished_sweeps_runs_aside(tmp_path, capsys):
    _row.fail_at = 2  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        map_runs(_row, range(4), keep=KeptRuns(tmp_path, __file__, _args()))
    _row.fail_at = -1  # type: ignore[attr-defined]
    calls.clear()
    map_runs(_row, range(4), keep=KeptRuns(tmp_path, __file__, _args()))
    assert calls == [0, 1, 2, 3]
    assert f"moved to {PREVIOUS_NAME}" in capsys.readouterr().err
    assert sorted(read_kept(tmp_path / PREVIOUS_NAME)[1]) == [0, 1]  # nothing measured was lost


def test_worker_processes_keep_runs_as_they_end(tmp_path):
    _row.fail_at = -1  # type: ignore[attr-defined]
    keep = KeptRuns(tmp_path, __file__, _args(workers=2))
    got = map_runs(_row, range(5), workers=2, keep=keep)
    assert [r["x"] for r in got] == list(range(5))
    assert sorted(read_kept(tmp_path / FILE_NAME)[1]) == list(range(5))  # each written by the parent as it ended


def test_an_experiment_stopped_by_ctrl_c_resumes_to_the_same_results(tmp_path):
    """moldable_flow_time.py --fast (10 simulations, ~5 s): interrupted after its third row, then resumed."""
    script = str(REPO / "experiments" / "moldable_flow_time.py")
    ref, cut = tmp_path / "ref", tmp_path / "cut"
    subprocess.run([sys.executable, script, "--fast", "--out", str(ref)], check=True, capture_output=True)
    p = subprocess.Popen([sys.executable, script, "--fast", "--out", str(cut)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         # a test run started in the background by a shell inherits SIGINT ignored
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.stdout is not None
    rows = 0
    for line in p.stdout:
        rows += "avg flow" in line
        if rows == 3:
            p.send_signal(signal.SIGINT)
            break
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    kept = len(read_kept(cut / FILE_NAME)[1])
    assert 3 <= kept < 10 and f"kept {kept} of 10 finished runs" in err
    assert not (cut / "results.json").exists()

    r = subprocess.run([sys.executable, script, "--fast", "--out", str(cut), "--resume"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert f"reusing {kept} of 10 runs" in r.stdout
    assert not (cut / FILE_NAME).exists()

    def rows_of(folder: Path) -> list[dict]:
        doc = json.loads((folder / "results.json").read_text())
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in doc["rows"]] + doc["summary"]

    assert rows_of(cut) == rows_of(ref)


def test_a_second_fresh_start_does_not_overwrite_the_runs_moved_aside(tmp_path, capsys):
    """The second sweep started afresh replaced finished_runs.prev.jsonl, losing the first one's runs; a file with
    no run in it was moved aside too (and so pushed a real one out)."""
    for fail_at in (2, 3):
        _row.fail_at = fail_at  # type: ignore[attr-defined]
        with pytest.raises(RuntimeError):
            map_runs(_row, range(5), keep=KeptRuns(tmp_path, __file__, _args()))
    assert sorted(read_kept(tmp_path / PREVIOUS_NAME)[1]) == [0, 1]
    _row.fail_at = 0  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        map_runs(_row, range(5), keep=KeptRuns(tmp_path, __file__, _args()))
    assert sorted(read_kept(tmp_path / "finished_runs.prev2.jsonl")[1]) == [0, 1, 2]
    assert "rename it back to finished_runs.jsonl" in " ".join(capsys.readouterr().err.split())
    _row.fail_at = -1  # type: ignore[attr-defined]
    map_runs(_row, range(5), keep=KeptRuns(tmp_path, __file__, _args()))  # the run-less file is replaced
    assert not (tmp_path / "finished_runs.prev3.jsonl").exists()


@pytest.mark.parametrize("text, needle", [
    ('{"sweep": 1}\n', "line 1: not a sweep header"),
    ('{"sweep": {"runs": "x"}}\n', "line 1: not a sweep header"),
    ('{"sweep": {"runs": true}}\n', "line 1: not a sweep header"),
])
def test_a_kept_file_of_the_wrong_shape_is_refused_in_one_line(tmp_path, text, needle):
    (tmp_path / FILE_NAME).write_text(text)
    with pytest.raises(UsageError, match=needle):
        read_kept(tmp_path / FILE_NAME)


def test_a_kept_result_that_is_not_this_sweeps_is_refused_when_replayed(tmp_path):
    _row.fail_at = 2  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        map_runs(_row, range(4), keep=KeptRuns(tmp_path, __file__, _args()))
    path = tmp_path / FILE_NAME
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], json.dumps({"run": 0, "result": "x"}), *lines[2:]]) + "\n")
    _row.fail_at = -1  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="the kept run 0 is not a result of this sweep"):
        map_runs(_row, range(4), keep=KeptRuns(tmp_path, __file__, _args(), resume=True),
                 on_result=lambda i, r: r["square"])


def test_a_full_disk_stops_keeping_runs_but_not_the_sweep(tmp_path, capsys):
    keep = KeptRuns(tmp_path, __file__, _args())
    keep.begin(3)
    keep.add(0, {"x": 0})
    keep.close()
    keep._file = open("/dev/full", "w")  # noqa: SIM115 - every flush fails with ENOSPC
    keep.add(1, {"x": 1})
    keep.add(2, {"x": 2})
    assert keep.kept == 1 and "cannot keep finished runs" in capsys.readouterr().err
    keep.say_kept()
    assert sorted(read_kept(tmp_path / FILE_NAME)[1]) == [0]


def test_another_experiments_folder_is_refused(tmp_path):
    KeptRuns(tmp_path, "synergy_jct.py", _args()).begin(2)
    with pytest.raises(UsageError, match=r"holds the results of synergy_jct.py \(finished_runs.jsonl\), not moldable_flow_time.py"):
        KeptRuns(tmp_path, "moldable_flow_time.py", _args()).begin(2)
    KeptRuns(tmp_path, "synergy_jct.py", _args()).begin(2)  # its own folder, again


def test_a_results_file_that_cannot_be_written_is_one_line_and_the_runs_stay_kept(tmp_path):
    """results.json being a folder ended moldable_flow_time.py in a traceback after the whole sweep, without
    saying where its finished runs were."""
    out = tmp_path / "out"
    (out / "results.json").mkdir(parents=True)
    script = str(REPO / "experiments" / "moldable_flow_time.py")
    r = subprocess.run([sys.executable, script, "--fast", "--out", str(out)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "results.json: Is a directory" in r.stderr
    assert "kept 10 of 10 finished runs" in r.stderr and len(read_kept(out / FILE_NAME)[1]) == 10


@pytest.mark.parametrize("args, needle", [
    (["--loads", "100"], "leaves less than half a GPU"),
    (["--sizes", "4,100001"], "at most 100,000 GPUs"),
    (["--sizes", "4,4"], "4 given twice"),
])
def test_sizes_the_simulator_would_refuse_are_refused_before_any_run(tmp_path, args, needle):
    script = str(REPO / "experiments" / "moldable_flow_time.py")
    r = subprocess.run([sys.executable, script, "--fast", "--out", str(tmp_path), *args], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / FILE_NAME).exists()


def test_a_resume_message_names_its_step_once():
    assert str(UsageError("--resume: no runs were kept", step="resume")) == "--resume: no runs were kept"


def test_a_folder_emptied_of_another_experiments_results_can_be_reused(tmp_path):
    keep = KeptRuns(tmp_path, "synergy_jct.py", _args())
    keep.begin(2)
    keep.finish()  # results written and moved away: only the marker is left
    KeptRuns(tmp_path, "moldable_flow_time.py", _args()).begin(2)
    assert (tmp_path / ".perfpredict-experiment").read_text().strip() == "moldable_flow_time.py"


def test_few_tasks_still_run_on_the_default_loads(tmp_path):
    """The check for --loads that round to 0 GPUs refused the default loads for a small --tasks."""
    script = str(REPO / "experiments" / "moldable_flow_time.py")
    r = subprocess.run([sys.executable, script, "--fast", "--tasks", "10", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
