"""The benchmark scripts are commands users type: a bad value ends in argparse's one-line error and exit 2
before any work starts, never a traceback (each case here returns in about a second); Ctrl-C keeps what was
measured."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], capture_output=True,
                          text=True, cwd=REPO, timeout=60)


@pytest.mark.parametrize(("script", "args", "says"), [
    ("sim_speed.py", ["--policy", "fifoo"], "unknown policy 'fifoo'"),
    ("sim_speed.py", ["--mechanism", "tunee"], "unknown mechanism 'tunee'"),
    ("sim_speed.py", ["--jobs=-1"], "argument --jobs"),
    ("sim_speed.py", ["--servers", "0"], "argument --servers"),
    ("synergy_decision_time.py", ["--rounds", "0"], "argument --rounds"),
    ("synergy_decision_time.py", ["--time-limit=-1"], "argument --time-limit"),
    ("glibc_heap.py", ["--batches", "16,x"], "argument --batches"),
    ("glibc_heap.py", ["--family", "nosuch"], "unknown zoo family 'nosuch'"),
    ("unseen_recurrent_models.py", ["--models", "/nonexistent_dir"], "is not a folder"),
    ("unseen_architectures.py", ["--threads", "0"], "argument --threads"),
    ("unseen_architectures.py", ["--min-time", "3", "--max-time", "2"], "must be at least --min-time"),
    ("sensitivity_search.py", ["--replay", "missing.json"], "cannot read missing.json"),
    ("rate_model_accuracy.py", ["--families", "nosuch"], "unknown zoo family 'nosuch'"),
    ("rate_model_accuracy.py", ["--json", "/nonexistent_dir/out.json"], "does not exist"),
    ("cache_model_accuracy.py", ["--fractions", "2"], "argument --fractions"),
    ("onnx_path_memory.py", ["--only", "nosuch"], "no dataset 'nosuch'; choose from"),
    ("noise_floor.py", ["--bogus"], "unrecognized arguments"),
    ("cross_gpu.py", ["--bogus"], "unrecognized arguments"),
    ("compare_backends.py", ["--mechanism", "tunee"], "unknown mechanism 'tunee'"),
    ("collect_on_ray.py", ["--families", "nosuch"], "unknown zoo family 'nosuch'"),
    ("collect_on_ray.py", ["--batch-sizes", "8,x"], "'x' is not an integer"),
    ("collect_on_ray.py", ["--rounds", "0"], "argument --rounds"),
    ("compare_backends.py", ["--seeds", "0"], "argument --seeds"),
    ("kernel_time_accuracy.py", ["--bogus"], "unrecognized arguments"),
    ("kernel_time_accuracy.py", ["--table", "/nonexistent.json"], "no file at /nonexistent.json"),
    ("kernel_time_accuracy.py", ["--table", str(REPO / "README.md")], "is not a kernel-cost table"),
    ("kernel_time_accuracy.py", ["--only", "cuda_h100"], "the kernel table prices CPU sets only"),
    ("ab_same_job.py", ["--rounds", "2"], "--rounds must be at least 3"),
    ("ab_same_job.py", ["--target", "zoo:nosuch"], "unknown zoo family 'nosuch'"),
    ("ab_same_job.py", ["--param", "depth"], "argument --param"),
])
def test_a_bad_value_is_one_line_and_exit_2(script, args, says):
    r = _run(script, *args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert says in r.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(("script", "args", "says"), [
    ("rate_model_accuracy.py", ["--min-time", "x"], "argument --min-time"),
    ("rate_model_accuracy.py", ["--json", "/nonexistent_dir/out.json"], "does not exist"),
    ("cache_model_accuracy.py", ["--fractions", "2"], "argument --fractions"),
    ("cache_model_accuracy.py", ["--items", "12", "--batch-size", "8"], "multiple of --batch-size"),
    ("sensitivity_search.py", ["--window", "0"], "argument --window"),
    ("glibc_heap.py", ["--batches", "16,x"], "argument --batches"),
    ("code_footprint.py", ["--batch", "0"], "argument --batch"),
    ("comm_model_holdout.py", ["--window", "0"], "argument --window"),
])
def test_a_wrong_flag_is_answered_before_torch_is_imported(script, args, says):
    """The measuring benchmarks check their flags before importing torch (a second or two), so a typo is
    answered at once."""
    path = REPO / "benchmarks" / script
    code = (f"import runpy, sys\nsys.argv = {[str(path), *args]!r}\ntry:\n"
            f"    runpy.run_path({str(path)!r}, run_name='__main__')\n"
            "except SystemExit as e:\n    print('exit', e.code, 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.stdout.strip() == "exit 2 False", r.stdout + r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr


def test_a_malformed_replay_file_is_refused(tmp_path):
    bad = tmp_path / "sweeps.json"
    bad.write_text('{"cpu_values": [1, 2], "models": [{"model": "x", "exhaustive": [1]}]}')
    r = _run("sensitivity_search.py", "--replay", str(bad))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "does not hold curves saved by --json" in r.stderr


def test_help_describes_the_script_in_whole_sentences():
    r = _run("sim_speed.py", "--help")
    assert r.returncode == 0
    assert "100 000 jobs on 512 GPUs in < 60 s)." in " ".join(r.stdout.split())


def _interrupt_after_first_row(script: str, args: list[str], row_starts: str, cwd) -> tuple[int, str, str]:
    """Start ``script``, wait for its first measured row on stdout (a line starting with ``row_starts``), send it
    SIGINT as Ctrl-C would, and return (exit code, stdout, stderr)."""
    proc = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a test run started in the background by a shell inherits SIGINT ignored, and
                            # Python then installs no KeyboardInterrupt handler: give the child the default
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        seen = ""
        deadline = time.monotonic() + 120
        while not any(line.startswith(row_starts) for line in seen.splitlines()) \
                and time.monotonic() < deadline and proc.poll() is None:
            seen += proc.stdout.readline()
        assert any(line.startswith(row_starts) for line in seen.splitlines()), (seen, proc.stderr.read())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, seen + out, err


def _check_kept(rc: int, err: str, path, total: int) -> dict:
    """Exit 130 with the helper's line, no traceback, and a --json file holding the rows measured before Ctrl-C
    (at least one, fewer than asked for) marked as interrupted."""
    assert rc == 130, err
    assert "interrupted: results so far" in err and "Traceback" not in err
    doc = json.loads(path.read_text())
    assert doc["interrupted"] is True
    assert 1 <= len(doc["rows"]) < total, doc["rows"]
    return doc


def test_ctrl_c_in_profiling_overhead_keeps_the_targets_profiled(tmp_path):
    """Four profiles of the smallest zoo model (about 5 s each): Ctrl-C after the first keeps its row."""
    out = tmp_path / "overhead.json"
    rc, stdout, err = _interrupt_after_first_row(
        "profiling_overhead.py", ["--targets", "zoo:mlp,zoo:mlp,zoo:mlp,zoo:mlp", "--json", str(out), "--",
                                  "-b", "2", "--min-time", "0.2", "--max-time", "0.5", "--no-mlflow",
                                  "--no-features", "--no-fvcore"], "zoo:mlp", tmp_path)
    doc = _check_kept(rc, err, out, 4)
    assert all(r["target"] == "zoo:mlp" and r["timed_s"] > 0 and r["command_ratio"] > 1 for r in doc["rows"])
    assert doc["median_command_ratio"] > 1
    assert f"median over {len(doc['rows'])} targets" in stdout  # the partial results are printed too


def test_ctrl_c_in_cache_model_accuracy_keeps_the_cache_sizes_measured(tmp_path):
    """Nine cache sizes of a tiny dataset behind a slow storage cap (a second or two each): Ctrl-C after the
    first keeps its measured and predicted throughput."""
    out = tmp_path / "cache.json"
    fractions = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    rc, stdout, err = _interrupt_after_first_row(
        "cache_model_accuracy.py", ["--items", "16", "--item-kb", "16", "--batch-size", "4", "--workers", "1",
                                    "--epochs", "1", "--bandwidth-mb", "0.25",
                                    "--fractions", ",".join(map(str, fractions)), "--json", str(out)],
        "cache ", tmp_path)
    doc = _check_kept(rc, err, out, len(fractions))
    assert [r["fraction"] for r in doc["rows"]] == fractions[:len(doc["rows"])]
    assert all(r["measured"] > 0 and r["predicted"] > 0 for r in doc["rows"])
    assert "max error" in stdout


def test_a_ctrl_c_that_python_swallows_in_a_finalizer_still_stops_the_benchmark(capsys):
    """A Ctrl-C landing in a DataLoader's clean-up (a finalizer) was printed as "Exception ignored" and the
    benchmark went on measuring, then exited 1 (seen once in CI); it is now remembered and stops the loop."""
    import os
    import signal
    import time

    from perfpredict.script_args import measure_keeping_partial, stop_requested

    rows: list[int] = []

    class CleanUp:
        def __del__(self) -> None:  # Python cannot raise from here: it reports the exception as unraisable
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)

    def loop() -> None:
        for i in range(3):
            if stop_requested():
                raise KeyboardInterrupt
            rows.append(i)
            CleanUp()  # dropped at once: __del__ runs here

    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell may have started us ignoring it
    try:
        assert measure_keeping_partial(loop, rows) is True
    finally:
        signal.signal(signal.SIGINT, old)
    assert rows == [0]
    err = capsys.readouterr().err
    assert "interrupted: results so far" in err and "Traceback" not in err and "Exception ignored" not in err


def test_a_finalizer_that_a_ctrl_c_cut_in_half_is_not_printed_after_the_interrupt(capsys):
    """A Ctrl-C between ``multiprocessing.util.Finalize.__init__``'s weakref and its registry key leaves a callback
    that fails with AttributeError when its object dies (seen once as a DataLoader unwound): after a Ctrl-C that
    fallout is not printed as a traceback; the same failure without a Ctrl-C still is."""
    import os
    import weakref
    from multiprocessing.util import Finalize

    from perfpredict.script_args import measure_keeping_partial

    class Thing:
        pass

    def half_built_finalizer_dies(interrupt: bool) -> None:
        finalizer = Finalize.__new__(Finalize)  # what a KeyboardInterrupt inside __init__ leaves behind
        thing = Thing()
        finalizer._weakref = weakref.ref(thing, finalizer)
        if interrupt:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        del thing  # the weakref calls the finalizer, which has no _key

    rows: list[int] = []

    def loop() -> None:
        rows.append(1)
        half_built_finalizer_dies(interrupt=True)

    shown: list[BaseException] = []  # what reaches the hook that prints "Exception ignored in ..."
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    old_hook, sys.unraisablehook = sys.unraisablehook, lambda info: shown.append(info.exc_value)
    try:
        assert measure_keeping_partial(loop, rows) is True
        assert shown == []
        assert "interrupted: results so far" in capsys.readouterr().err

        def loop_without_ctrl_c() -> None:
            rows.append(2)
            half_built_finalizer_dies(interrupt=False)

        assert measure_keeping_partial(loop_without_ctrl_c, rows) is False
        assert len(shown) == 1 and "_key" in str(shown[0])  # without a Ctrl-C it is a real failure: shown
    finally:
        signal.signal(signal.SIGINT, old)
        sys.unraisablehook = old_hook


def test_ab_same_job_measures_a_job_against_itself_and_scores_both_analyses(tmp_path):
    """A real A/A comparison of a small MLP, three rounds: every round is kept with its order, the order
    alternates, and the summary holds both analyses' false-alarm rates with their intervals."""
    out = tmp_path / "aa.json"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "ab_same_job.py"), "--param", "width=64",
                        "--batch-size", "4", "--comparisons", "1", "--rounds", "3", "--min-time", "0.05",
                        "--max-time", "0.1", "--json", str(out)], capture_output=True, text=True, cwd=tmp_path,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "order effect over 3 rounds" in r.stdout and "crossover" in r.stdout
    doc = json.loads(out.read_text())
    assert len(doc["comparisons"]) == 1
    for c in doc["comparisons"]:
        assert [x["base_first"] for x in c["rounds"]] == [True, False, True]
        assert all(x["base_s"] > 0 and x["new_s"] > 0 for x in c["rounds"])
    assert set(doc["summary"]) == {"paired t, 3 rounds", "paired t, 2 rounds", "crossover, 3 rounds",
                                   "crossover, 2 rounds"}
    for v in doc["summary"].values():
        low, high = v["false_alarms_ci95"]
        assert 0 <= low <= v["false_alarms"] <= high <= 1 and v["faster"] + v["slower"] == v["false_alarms"]
    lo, hi = doc["order_effect"]["ci95"]
    assert 0 < lo <= doc["order_effect"]["first_over_second"] <= hi


def test_the_crossover_analysis_takes_out_an_order_effect():
    """With the first process in every round 20 % slower and no real difference, the plain mean over an odd count
    of rounds is biased and its interval is wide; the crossover fit recovers a speed-up of 1 with a tight
    interval. With one order only it falls back to the plain analysis."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from ab_same_job import binomial_interval, summarize_crossover
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    import math

    from perfpredict.profile.ab import summarize

    noise = [0.01, -0.012, 0.008, -0.005, 0.004]
    first = [True, False, True, False, True]
    lr = [(math.log(1.2) if f else -math.log(1.2)) + e for f, e in zip(first, noise)]
    plain, cross = summarize(lr), summarize_crossover(lr, first)
    assert plain[0] > 1.03 and plain[2] - plain[1] > 0.3
    assert cross[0] == pytest.approx(1.0, abs=0.01) and cross[2] - cross[1] < 0.06 and cross[1] < 1 < cross[2]
    assert summarize_crossover(lr[:1] * 3, [True] * 3) == summarize(lr[:1] * 3)
    assert binomial_interval(0, 30) == (0.0, pytest.approx(0.1157, abs=1e-4))
    assert binomial_interval(30, 30)[1] == 1.0


def test_only_the_clean_up_of_an_object_a_ctrl_c_cut_short_is_kept_quiet():
    """A Ctrl-C inside a DataLoader's worker iterator's __init__ leaves an object without ``_workers``, whose
    __del__ then fails (seen in a CI run); that, and a half-registered multiprocessing finalizer, are the
    Ctrl-C's doing. Any other exception in a __del__ is still printed."""
    from types import SimpleNamespace

    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    from perfpredict.script_args import _half_built_finalizer

    it = object.__new__(_MultiProcessingDataLoaderIter)  # as a Ctrl-C early in __init__ leaves it
    with pytest.raises(AttributeError, match="has no attribute"):  # what its __del__ meets, then printed
        it._shutdown_workers()
    cut = SimpleNamespace(object=_MultiProcessingDataLoaderIter.__del__,
                          exc_value=AttributeError("'_MultiProcessingDataLoaderIter' object has no attribute '_workers'"))
    assert _half_built_finalizer(cut)
    assert not _half_built_finalizer(SimpleNamespace(object=_MultiProcessingDataLoaderIter.__del__,
                                                     exc_value=RuntimeError("a worker died")))
    assert not _half_built_finalizer(SimpleNamespace(object=_check_kept, exc_value=AttributeError("x")))


@pytest.mark.parametrize("when", ["while printing", "at the final flush"])
def test_a_reader_that_goes_away_ends_the_script_quietly(tmp_path, when):
    """``script.py | head`` closes the pipe early: run_script exits 1 without a BrokenPipeError traceback or
    Python's 'Exception ignored' line, whether the write or only the flush at exit meets the closed pipe."""
    lines = 200_000 if when == "while printing" else 50  # 50 short lines stay in the pipe's buffer until exit
    script = tmp_path / "chatty.py"
    script.write_text(
        "import sys, time\n"
        "from perfpredict.script_args import run_script\n\n"
        "def main():\n"
        "    print('first', flush=True)\n"
        "    sys.stdin.readline()  # until the test has closed its end of the pipe\n"
        f"    for i in range({lines}):\n"
        "        print('line', i)\n\n"
        "run_script(main)\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    assert proc.stdout.readline() == "first\n"
    proc.stdout.close()
    proc.stdin.write("go\n")
    proc.stdin.close()
    assert proc.wait(timeout=60) == 1
    err = proc.stderr.read()
    assert "Traceback" not in err and "Exception ignored" not in err, err
