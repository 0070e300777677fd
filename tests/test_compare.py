"""`perfpredict compare` / perfpredict.sim.compare: several schedulers on the same traces, paired by seed."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from perfpredict.errors import UsageError
from perfpredict.sim.compare import Scheduler, compare, parse_schedulers

TRACE = "synergy:n=80,load=6"


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_each_scheduler_replays_the_same_trace_per_seed_and_changes_are_paired(tmp_path):
    scheds = parse_schedulers(["fifo"], ["proportional", "tune"])
    cmp = compare(TRACE, "2x8", scheds, [0, 1, 2], out_dir=tmp_path)
    assert len(cmp.runs) == 6 and not cmp.failed() and not cmp.interrupted
    # the same seed gives every scheduler the same jobs; another seed gives other jobs
    arrivals = {(s.label, k): {r["id"]: r["arrival_s"] for r in _rows(tmp_path / "runs" / s.label / f"seed{k}" / "jobs.csv")}
                for s in scheds for k in (0, 1, 2)}
    for k in (0, 1, 2):
        assert arrivals[("fifo+proportional", k)] == arrivals[("fifo+tune", k)]
    assert arrivals[("fifo+tune", 0)] != arrivals[("fifo+tune", 1)]
    # the summary is the runs': mean over seeds, and the mean of per-seed ratios against the baseline
    by = {(r["scheduler"], r["seed"]): r for r in cmp.runs}
    summary = {(r["scheduler"], r["metric"]): r for r in cmp.summary()}
    tune = summary[("fifo+tune", "avg_jct_s")]
    ratios = [by[("fifo+tune", k)]["avg_jct_s"] / by[("fifo+proportional", k)]["avg_jct_s"] - 1 for k in (0, 1, 2)]
    assert tune["vs_baseline"] == pytest.approx(sum(ratios) / 3) and tune["paired_seeds"] == 3
    assert tune["mean"] == pytest.approx(sum(by[("fifo+tune", k)]["avg_jct_s"] for k in (0, 1, 2)) / 3)
    assert tune["better"] == (tune["vs_baseline"] < 0)
    assert summary[("fifo+proportional", "avg_jct_s")]["vs_baseline"] is None
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["baseline"] == "fifo+proportional" and doc["failed"] == [] and doc["seeds"] == [0, 1, 2]
    assert len(_rows(tmp_path / "runs.csv")) == 6 and (tmp_path / "compare.png").stat().st_size > 0


def test_a_scheduler_that_cannot_run_the_trace_is_recorded_and_the_others_go_on(tmp_path):
    cmp = compare(TRACE, "2x8", parse_schedulers(["fifo"], ["proportional", "swaf"]), [0, 1], out_dir=tmp_path)
    assert [r["status"] for r in cmp.runs] == ["ok", "failed", "ok", "failed"]
    assert "GENIE task model" in cmp.failed()[0]["error"]
    swaf = next(r for r in cmp.summary() if r["scheduler"] == "fifo+swaf" and r["metric"] == "avg_jct_s")
    assert swaf["n"] == 0 and swaf["mean"] is None and swaf["vs_baseline"] is None
    assert len(json.loads((tmp_path / "summary.json").read_text())["failed"]) == 2


def test_names_and_metrics_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(UsageError, match="unknown mechanism"):
        parse_schedulers(["fifo"], ["tunex"])
    with pytest.raises(UsageError, match="named twice"):
        parse_schedulers(["fifo"], ["tune", "tune"])
    with pytest.raises(UsageError, match="horus:k=3 and fifo.horus:k=3, is named twice"):  # one run folder
        parse_schedulers(["fifo"], ["horus:k=3", "horus:k=3,"])
    with pytest.raises(UsageError, match="did you mean avg_jct_s"):
        compare(TRACE, "2x8", [Scheduler("fifo", "tune")], [0], metrics=["avg_jtc_s"], out_dir=tmp_path / "o")
    with pytest.raises(UsageError, match="does not exist"):
        compare("nowhere.csv", "2x8", [Scheduler("fifo", "tune")], [0], out_dir=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_cli_prints_the_table_writes_files_and_logs_one_mlflow_run(run_cli, tmp_path):
    proc = run_cli("compare", "-m", "proportional", "-m", "tune", "--trace", TRACE, "--cluster", "2x8",
                   "--seeds", "0,1", "--metric", "avg_jct_s", "--metric", "gpu_util", "--out", "c")
    assert proc.returncode == 0, proc.stderr
    assert "fifo+tune" in proc.stdout and "change vs fifo+proportional" in proc.stdout
    # the two ± of a cell say what they are: the mean's spread over seeds, the change's standard error
    assert "mean ± sd over seeds; change paired by seed ± its standard error" in " ".join(proc.stdout.split())
    assert {"runs.csv", "summary.csv", "summary.json", "compare.png", "runs"} <= {p.name for p in (tmp_path / "c").iterdir()}
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns.db")
    runs = mlflow.search_runs(experiment_names=["perfpredict-simulations"], output_format="list")
    assert len(runs) == 1
    m = runs[0].data.metrics
    summary = {(r["scheduler"], r["metric"]): r for r in json.loads((tmp_path / "c" / "summary.json").read_text())["summary"]}
    assert m["fifo_tune/avg_jct_s.vs_baseline"] == pytest.approx(summary[("fifo+tune", "avg_jct_s")]["vs_baseline"])
    assert runs[0].data.tags["perfpredict.kind"] == "comparison"
    assert runs[0].data.params["cluster"] == "2x8V100"  # named as `simulate` names it


@pytest.mark.parametrize("args, needle", [
    (["-m", "tune", "--seeds", "a,b"], "--seeds"),
    (["-m", "tune", "--seeds", "-1"], "--seeds"),
    (["-m", "tune", "--metric", "jct"], "unknown metric"),
    (["-m", "tune", "-p", "fifo", "-p", "fifo"], "named twice"),
    (["-m", "tune", "--trace", "nowhere.csv"], "does not exist"),
    (["-m", "tune", "--cluster", "2y8"], "cluster"),
])
def test_cli_bad_input_is_one_line_and_exit_2(run_cli, tmp_path, args, needle):
    proc = run_cli("compare", *args, "--no-mlflow", "--out", "c")
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "c").exists()


def test_cli_failed_scheduler_exits_1_with_the_others_written(run_cli, tmp_path):
    proc = run_cli("compare", "-m", "proportional", "-m", "swaf", "--trace", TRACE, "--cluster", "2x8",
                   "--seeds", "0", "--out", "c")
    assert proc.returncode == 1
    assert "fifo+swaf seed 0" in proc.stderr and "GENIE task model" in proc.stderr
    assert [r["status"] for r in _rows(tmp_path / "c" / "runs.csv")] == ["ok", "failed"]
    # its MLflow run ends FAILED, as the exit code says (it ended FINISHED with only a failed_runs param)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    (run,) = client.search_runs([client.get_experiment_by_name("perfpredict-simulations").experiment_id])
    assert run.info.status == "FAILED" and run.data.metrics["failed_runs"] == 1
    assert run.data.tags["perfpredict.interrupted"] == "false"


def interrupted_compare(tmp_path, out, *flags: str, after_rows: int = 1) -> tuple[str, str]:
    """`perfpredict compare` of long runs with ``flags``, sent a Ctrl-C once ``runs.csv`` holds ``after_rows``
    rows: (stdout, stderr), after checking that it exits 130, says it was interrupted and prints no traceback."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlruns.db"}
    proc = subprocess.Popen([sys.executable, "-m", "perfpredict", "compare", "-m", "proportional", "-m", "tune",
                             "--trace", "synergy:n=1500,load=9", "--cluster", "8x8", "--seeds", "0,1,2,3,4,5",
                             *flags, "--no-mlflow", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            text=True, env=env,
                            # a test run started in the background by a shell inherits SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "runs.csv").exists() and len(_rows(out / "runs.csv")) >= after_rows:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "finished before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    return stdout, err


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_keeps_the_runs_finished_so_far(tmp_path, jobs):
    out = tmp_path / "c"
    interrupted_compare(tmp_path, out, "--jobs", jobs)
    rows = _rows(out / "runs.csv")
    assert 1 <= len(rows) < 12
    doc = json.loads((out / "summary.json").read_text())
    assert doc["interrupted"] is True
    # the pool's workers are stopped with the parent, not left to finish (and write) the runs they were on
    written = sorted(out.glob("runs/*/*/metrics.json"))
    assert len(written) <= len(rows) + int(jobs)  # at most the runs in flight finished after the Ctrl-C
    time.sleep(4)
    assert sorted(out.glob("runs/*/*/metrics.json")) == written


_CTRL_C_IN_POOL_START = """
import os, signal, sys
from multiprocessing import process
real = process.BaseProcess.start
def start(self):
    real(self)
    if self.name.startswith("ForkServerPoolWorker") and not getattr(start, "sent", False):
        start.sent = True
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while Pool() is still starting its workers
process.BaseProcess.start = start
from perfpredict.cli import main
if __name__ == "__main__":
    main()
"""


def test_ctrl_c_while_the_worker_pool_starts_is_one_message(tmp_path):
    """A Ctrl-C inside Pool() used to leave a worker the parent did not know about; it then failed to unpickle
    the pool's semaphores, unlinked at the parent's exit, and printed a traceback (seen once in CI)."""
    script = tmp_path / "ctrl_c.py"
    script.write_text(_CTRL_C_IN_POOL_START)
    out = tmp_path / "c"
    proc = subprocess.run([sys.executable, str(script), "compare", "-m", "proportional", "-m", "tune", "--trace",
                           "synergy:n=200,load=9", "--cluster", "2x8", "--seeds", "0,1,2", "--jobs", "2",
                           "--no-mlflow", "--out", str(out)], capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stderr
    assert "interrupted: 1 run(s) finished" in proc.stderr and "Traceback" not in proc.stderr
    assert len(_rows(out / "runs.csv")) == 1
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True


def test_worker_processes_start_with_the_parents_refitted_predictions(tmp_path):
    """A pool worker starts from the fork server with empty caches; it used to refit the Horus family-CV
    predictions (~17 s on 2 cores) that the parent had already made. The parent's refits are handed over: a
    worker primed with them answers from them, without reading the (here nonexistent) dataset."""
    from perfpredict.sim import horus_workload
    from perfpredict.sim.compare import worker_caches

    ds, fs = tmp_path / "nosuch.csv", tmp_path / "nosuch_features.csv"
    key = ("family-cv", *horus_workload._cache_key(str(ds), str(fs), None))
    made_here = {("cfg", 8): {"gpu_utilization": (40.0, 55.0)}}
    horus_workload._REFITS[key] = made_here  # as if this process had refitted them
    try:
        caches = worker_caches()
        assert caches["horus_refits"][key] is made_here
        code = ("import pickle, sys\n"
                "from perfpredict.sim.compare import init_worker\n"
                "from perfpredict.sim.horus_workload import family_cv_predictions\n"
                "init_worker(pickle.loads(sys.stdin.buffer.read()))\n"
                f"print(family_cv_predictions({str(ds)!r}, {str(fs)!r}))")
        import pickle

        proc = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(caches), capture_output=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout.decode().strip() == str(made_here)
        # without the hand-over the worker would refit, which here cannot even read its dataset
        bare = subprocess.run([sys.executable, "-c", code], input=pickle.dumps({}), capture_output=True, timeout=120)
        assert bare.returncode != 0 and b"nosuch" in bare.stderr
    finally:
        horus_workload._REFITS.pop(key, None)


def test_worker_processes_give_the_same_comparison(tmp_path):
    """--jobs runs simulations in a process pool; the simulator is deterministic, so the rows must not change."""
    scheds = parse_schedulers(["fifo", "srtf"], ["proportional", "tune"])
    one = compare(TRACE, "2x8", scheds, [0, 1], out_dir=tmp_path / "one")
    two = compare(TRACE, "2x8", scheds, [0, 1], out_dir=tmp_path / "two", jobs=2)
    strip = [{k: v for k, v in r.items() if k not in ("sim_wall_s", "decision_time_s")} for r in one.runs]
    assert [{k: v for k, v in r.items() if k not in ("sim_wall_s", "decision_time_s")} for r in two.runs] == strip
    assert len(_rows(tmp_path / "two" / "runs.csv")) == 8 and (tmp_path / "two" / "summary.json").exists()
    with pytest.raises(UsageError, match="jobs"):
        compare(TRACE, "2x8", scheds, [0], jobs=0)


def test_schedulers_that_dropped_different_jobs_are_called_unpaired(tmp_path):
    """With oversized jobs dropped, a rigid mechanism drops a job larger than the cluster that a resizing one runs
    shrunk: the 'paired' change then compared five jobs with six, and nothing said so."""
    from perfpredict.sim.compare import Scheduler, compare
    from perfpredict.sim.simulator import SimConfig

    trace = tmp_path / "t.csv"
    trace.write_text("id,arrival_s,gpus,work_s,model\na,0,1,3600,resnet50\nb,10,2,7200,gnmt\nc,20,4,1800,resnet18\n"
                     "z,50,64,100,resnet50\n")
    both = [Scheduler("fifo", "proportional"), Scheduler("fifo", "malleable-equipartition")]
    cmp = compare(str(trace), "2x4", both, [0], config=SimConfig(oversized="drop"), out_dir=tmp_path / "o")
    assert [r["dropped"] for r in cmp.runs] == [1, 0] and [r["n_finished"] for r in cmp.runs] == [3, 4]
    assert "did not run the same jobs" in cmp.unpaired() and "fifo+proportional dropped 1" in cmp.unpaired()
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["unpaired"] == cmp.unpaired()
    same = compare(str(trace), "2x4", [both[0], Scheduler("srtf", "proportional")], [0],
                   config=SimConfig(oversized="drop"))
    assert same.unpaired() is None


def test_runs_an_earlier_comparison_left_in_the_folder_are_named(tmp_path):
    """Rerunning into the same --out kept the earlier comparison's runs/<scheduler>/seed<k> folders beside the new
    ones without a word."""
    from perfpredict.sim.compare import Scheduler, compare

    first = compare(TRACE, "2x8", [Scheduler("fifo", "proportional"), Scheduler("fifo", "tune")], [0, 1],
                    out_dir=tmp_path / "o")
    assert first.notes == []
    again = compare(TRACE, "2x8", [Scheduler("fifo", "proportional"), Scheduler("fifo", "rigid")], [0],
                    out_dir=tmp_path / "o")
    assert len(again.notes) == 1 and "fifo+tune)" in again.notes[0] and "fifo+proportional/seed1" in again.notes[0]
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["notes"] == again.notes
