"""Defects a second audit of every command found (session 36): an output path that is a device or a pipe, a
measuring process that exits 0 without a result, a full disk at the end of a run, non-finite limits, an exception
whose message cannot be printed, impossible card values and an ONNX graph whose shapes contradict each other.
Each ends in one readable line and a non-zero exit, and what was measured is not lost."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perfpredict.card import SCHEMA_VERSION, PerformanceCard
from perfpredict.errors import PerfPredictError, exception_text
from perfpredict.output_paths import output_file_problem, special_file_problem

TINY = ("import torch\n\ndef build_model():\n    return torch.nn.Linear(4, 2)\n\n"
        "def example_inputs(batch_size):\n    return (torch.randn(batch_size, 4),)\n")


def _one_error_line(proc, *needles: str) -> None:
    err = proc.stderr
    assert proc.returncode not in (0, 70), (proc.returncode, err[-2000:])
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    for n in needles:
        assert n in " ".join(err.split()), (n, err[-2000:])


def test_a_device_or_a_pipe_is_not_an_output_file(tmp_path):
    """Results are written beside the target and renamed over it: `-o /dev/null` deleted /dev/null."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for p in (Path("/dev/null"), fifo):
        assert "is not a plain file" in output_file_problem(p)
        assert "is not a plain file" in special_file_problem(p)
    plain = tmp_path / "card.json"
    assert output_file_problem(plain) is None
    plain.write_text("{}")
    assert output_file_problem(plain) is None and special_file_problem(tmp_path) is None


def test_predict_refuses_a_device_as_its_output_and_leaves_it_alone(run_cli, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    proc = run_cli("predict", "zoo:mlp", "-o", str(fifo))
    _one_error_line(proc, "is not a plain file")
    assert fifo.is_fifo()


def test_a_measuring_process_that_exits_0_is_a_crash_not_an_oom(run_cli, tmp_path):
    """Under max-batch's memory limit every silent exit was read as the limit: a model that calls os._exit(0) at
    batch 4 got "largest batch size: 3"."""
    (tmp_path / "exits.py").write_text(
        "import os\n" + TINY + "\ndef train_step(model, inputs, targets, optimizer):\n"
        "    if inputs[0].shape[0] >= 4:\n        os._exit(0)\n"
        "    loss = model(*inputs).sum()\n    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n"
        "    return loss\n")
    proc = run_cli("max-batch", "exits.py", "--max-batch", "8", "--no-mlflow", "-o", "o")
    _one_error_line(proc, "failed for a reason other than memory", "exit code 0", "os._exit")
    probes = json.loads((tmp_path / "o" / "max_batch.json").read_text())["probes"]
    assert {p["batch_size"]: p["status"] for p in probes}[4] == "error"


def test_compare_on_a_full_disk_shows_every_run_and_exits_2(run_cli, tmp_path):
    """runs.csv on a full disk (a link to /dev/full) was an internal error after the runs, and the table lost."""
    out = tmp_path / "o"
    out.mkdir()
    (out / "runs.csv").symlink_to("/dev/full")
    proc = run_cli("compare", "--trace", "synergy:n=10", "--cluster", "1x8", "-m", "greedy", "-m", "tune",
                   "--no-mlflow", "-o", "o")
    assert proc.returncode == 2, proc.stderr[-2000:]
    _one_error_line(proc, "cannot write o/runs.csv", "No space left on device")
    assert "fifo+greedy" in proc.stdout and "fifo+tune" in proc.stdout  # the table is the result


@pytest.mark.parametrize("args, needle", [
    (["profile", "tiny.py", "--max-time", "nan"], "both finite"),
    (["profile", "tiny.py", "--min-time", "nan"], "both finite"),
    (["profile", "tiny.py", "--max-time", "inf"], "both finite"),
    (["ab", "tiny.py", "tiny.py", "--max-time", "inf"], "both finite"),
    (["predict", "seq.onnx", "--dim", "seq=100000000000000000000000"], "from 1 to 1e9"),
    (["serve", "--max-upload-mb", "1e308"], "--max-upload-mb"),
    (["serve", "--max-upload-mb", "1e-9"], "--max-upload-mb"),
])
def test_limits_out_of_range_are_usage_errors(run_cli, tmp_path, args, needle):
    (tmp_path / "tiny.py").write_text(TINY)
    (tmp_path / "seq.onnx").write_bytes(b"")  # the --dim check comes first
    _one_error_line(run_cli(*args, *(["--no-mlflow"] if args[0] in ("profile", "ab") else [])), needle)


def test_an_exception_whose_message_fails_is_still_reported(run_cli, tmp_path):
    (tmp_path / "weird.py").write_text(
        "class Weird(Exception):\n    def __str__(self):\n        raise RuntimeError('no message')\n\nraise Weird()\n")
    proc = run_cli("profile", "weird.py", "--no-mlflow", "-b", "2")
    _one_error_line(proc, "raised Weird while importing", "its __str__ failed")

    class Broken(Exception):
        def __str__(self):
            raise ValueError("no")

    assert "Broken" in exception_text(Broken()) and exception_text(ValueError("plain")) == "plain"


def _predicted_card(**point_changes) -> dict:
    point = {"batch_size": 8, "iter_time_s": 0.01, "iter_time_interval_s": [0.008, 0.012], "samples_per_s": 800.0,
             "peak_memory_bytes": 1e6, "peak_memory_interval_bytes": [9e5, 1.1e6], "peak_memory_safe_bytes": 1.1e6,
             "gpu_utilization": 0.5, **point_changes}
    return {"schema_version": SCHEMA_VERSION,
            "model": {"name": "m", "source": "zoo:mlp", "parameters": 10, "trainable_parameters": 10,
                      "param_bytes": 40},
            "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"},
            "run": {"mode": "train", "batch_sizes": [8], "started_at": "2026-11-28T00:00:00",
                    "perfpredict_version": "0"},
            "prediction": {"method": "estimator", "model_set": "cuda_h100", "dataset_sha256": "x",
                           "device_type": "cuda", "out_of_distribution": False, "points": [point]}}


def test_a_valid_predicted_card_reads():
    card = PerformanceCard.from_json(json.dumps(_predicted_card()))
    assert card.prediction.points[0].gpu_utilization == 0.5


@pytest.mark.parametrize("changes, needle", [
    ({"gpu_utilization": 5.0}, "gpu_utilization"),
    ({"iter_time_s": 0}, "iter_time_s"),
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": True}, "batch_size"),
    ({"batch_size": 8.5}, "batch_size"),
    ({"batch_size": "8"}, "batch_size"),
    ({"batch_size": "1_000"}, "batch_size"),
])
def test_impossible_predicted_values_are_refused(changes, needle):
    with pytest.raises(PerfPredictError, match=needle):
        PerformanceCard.from_json(json.dumps(_predicted_card(**changes)))


def test_a_whole_batch_size_written_as_a_float_or_a_numpy_integer_still_reads():
    """Refusing ``true`` as a batch size (strict ints) also refused ``8.0`` in a card another tool wrote, and a
    numpy integer from Python code that builds a card."""
    import numpy as np

    from perfpredict.card import PredictedPoint

    card = PerformanceCard.from_json(json.dumps(_predicted_card(batch_size=8.0)))
    assert card.prediction.points[0].batch_size == 8 and type(card.prediction.points[0].batch_size) is int
    point = PredictedPoint(**{**_predicted_card()["prediction"]["points"][0], "batch_size": np.int64(8)})
    assert point.batch_size == 8
    with pytest.raises(ValueError, match="batch_size"):
        PredictedPoint(**{**_predicted_card()["prediction"]["points"][0], "batch_size": np.True_})


def test_a_batch_size_predicted_twice_is_refused():
    doc = _predicted_card()
    doc["prediction"]["points"].append(dict(doc["prediction"]["points"][0]))
    with pytest.raises(PerfPredictError, match="predicted twice"):
        PerformanceCard.from_json(json.dumps(doc))


def test_simulate_refuses_a_failed_profile_as_a_card(run_cli, tmp_path):
    """A card with no batch size measured made a job with every default, without a word."""
    (tmp_path / "broken.py").write_text(TINY.replace("randn(batch_size, 4)", "randn(batch_size, 5)"))
    prof = run_cli("profile", "broken.py", "-b", "2", "--no-mlflow", "--no-features", "-o", "cards")
    assert prof.returncode != 0 and json.loads((tmp_path / "cards" / "card.json").read_text())["status"] == "failed"
    proc = run_cli("simulate", "--trace", "synergy:n=5", "--cluster", "1x8", "--cards", "cards", "--no-mlflow")
    _one_error_line(proc, "a failed profile, no batch size measured")


def test_an_onnx_graph_with_contradicting_shapes_is_refused(run_cli, tmp_path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    w = numpy_helper.from_array(np.zeros((3, 8), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w])
    onnx.save(helper.make_model(graph), tmp_path / "bad.onnx")
    _one_error_line(run_cli("predict", "bad.onnx"), "invalid ONNX model", "Incompatible dimensions")


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)  # no blocks written: the size alone must be refused
    return path


@pytest.mark.parametrize("args, needle", [
    (["show", "big.json"], "larger than a card can be"),
    (["show", "zero.json"], "a device or a pipe that does not end"),
    (["predict", "big.onnx"], "larger than an ONNX model"),
    (["simulate", "--trace", "synergy:n=3", "--cluster", "big.json", "--no-mlflow"], "larger than a cluster"),
    (["simulate", "--trace", "synergy:n=3", "--cluster", "zero.json", "--no-mlflow"], "a device or a pipe"),
    (["simulate", "--trace", "zero.csv", "--cluster", "1x8", "--no-mlflow"], "a line longer than"),
    (["simulate", "--trace", "synergy:n=3", "--cluster", "1x8", "--cards", "cards", "--no-mlflow"],
     "larger than a card can be"),
])
def test_endless_or_huge_input_files_are_refused_before_they_are_read(run_cli, tmp_path, args, needle):
    """`show /dev/zero` grew until the kernel killed it; a sparse file of gigabytes was a MemoryError."""
    _sparse(tmp_path / "big.json", 3 * 2**30)
    _sparse(tmp_path / "big.onnx", 3 * 2**30)
    (tmp_path / "cards").mkdir()
    _sparse(tmp_path / "cards" / "card.json", 3 * 2**30)
    for name in ("zero.json", "zero.csv"):
        (tmp_path / name).symlink_to("/dev/zero")
    _one_error_line(run_cli(*args, timeout=120), needle)


@pytest.mark.parametrize("where", ["import", "build_model"])
def test_a_model_file_that_calls_os_exit_is_an_error_not_a_silent_success(run_cli, tmp_path, where):
    """The model file runs in the command's own process too (its import, build_model for predict): os._exit(0)
    there ended perfpredict with exit code 0 and no output."""
    body = ("import os\nos._exit(0)\n" + TINY if where == "import"
            else TINY.replace("return torch.nn.Linear(4, 2)", "os._exit(0)").replace("import torch", "import os\nimport torch"))
    (tmp_path / "m.py").write_text(body)
    for command in (["predict", "m.py"], ["profile", "m.py", "-b", "2", "--no-mlflow", "--no-features"]):
        _one_error_line(run_cli(*command), "called os._exit(0)")


def test_a_thread_the_model_file_leaves_running_does_not_hold_the_command(run_cli, tmp_path):
    """A non-daemon thread started at import kept `perfpredict predict` from ever exiting (and each measuring
    process alive until the parent killed it, 30 s per batch size)."""
    (tmp_path / "m.py").write_text("import threading\nimport time\n\nthreading.Thread(target=time.sleep, "
                                   "args=(3600,), name='watchdog').start()\n" + TINY)
    for command in (["predict", "m.py"],
                    ["profile", "m.py", "-b", "2,4", "--min-time", "0.1", "--max-time", "0.2", "--no-mlflow",
                     "--no-features", "-o", "o"]):
        proc = run_cli(*command, timeout=50)  # raises TimeoutExpired if it waits for the thread
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "exiting past 1 thread(s)" in " ".join(proc.stderr.split()) and "watchdog" in proc.stderr
    assert json.loads((tmp_path / "o" / "card.json").read_text())["status"] == "complete"


@pytest.mark.parametrize("params, needle", [
    ({"depth": "99999999"}, r"parameters, more than the 1e\+10"),
    ({"width": "10000000"}, r"parameters, more than the 1e\+10"),
])
def test_a_zoo_model_too_large_for_any_gpu_is_refused_before_it_is_built(params, needle):
    """depth=99999999 built layer after layer until memory ran out."""
    from perfpredict.errors import UsageError
    from perfpredict.workload.zoo import get_family

    with pytest.raises(UsageError, match=needle):
        get_family("mlp").resolve(params)
    assert get_family("mlp").resolve({"depth": "4"})["depth"] == 4


def test_a_zoo_parameter_given_twice_with_two_values_is_refused():
    from perfpredict.errors import UsageError
    from perfpredict.workload_args import parse_params

    with pytest.raises(UsageError, match="depth is given twice"):
        parse_params(["depth=3", "depth=5"])
    assert parse_params(["depth=3,width=8", "depth=3"]) == {"depth": "3", "width": "8"}


def test_a_sigterm_is_named_as_such_not_as_a_ctrl_c(tmp_path):
    """SIGTERM is handled as a Ctrl-C is (what was done is kept), but the message said "(Ctrl-C)"."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "perfpredict", "simulate", "--trace", "synergy:n=100000",
                             "--cluster", "16x8", "--no-mlflow", "-o", "o"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "o").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)  # the output folder is made once the arguments are checked: the handler is in place
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted (SIGTERM)" in err and "Ctrl-C" not in err and "Traceback" not in err, err[-2000:]


@pytest.mark.parametrize("args, needle, absent", [
    (["simulate", "--trace", "open_quote.csv", "--cluster", "1x8", "--no-mlflow"], "a field spans lines 2-3: a quote left open on line 2", None),
    (["show", "cut.json"], "Unterminated string starting at (line 1, column 7)", "at at"),
    (["serve", "--host", "999.1.1.1"], "cannot listen on 999.1.1.1:8000", "another server"),
])
def test_messages_say_what_is_wrong(run_cli, tmp_path, args, needle, absent):
    """A quote left open in a CSV trace took the rest of the file as one value (the trace ran); a cut JSON file
    said "starting at at line 1"; an address that does not resolve was "Unknown error -2 (another server
    there?)"."""
    (tmp_path / "open_quote.csv").write_text('id,arrival_s,gpus,work_s,model\n0,0,1,100,"resnet18\n1,0,1,100,x\n')
    (tmp_path / "cut.json").write_text('{"a": "x')
    proc = run_cli(*args, timeout=60)
    _one_error_line(proc, needle)
    assert absent is None or absent not in proc.stderr


def test_a_measured_card_without_a_rate_model_does_not_claim_nothing_was_measured():
    doc = _predicted_card()
    del doc["prediction"]
    doc["throughput"] = [{"batch_size": 8, "status": "ok", "samples_per_s": 800.0, "iter_time_s": 0.01}]
    card = PerformanceCard.from_json(json.dumps(doc))
    with pytest.raises(PerfPredictError, match=r"its 1 measured batch size\(s\) were not fitted"):
        card.rate()


def test_a_model_error_of_megabytes_is_reported_in_a_few_kilobytes(run_cli, tmp_path):
    (tmp_path / "loud.py").write_text('raise ValueError("x" * 5_000_000)\n')
    proc = run_cli("profile", "loud.py", "--no-mlflow")
    _one_error_line(proc, "raised ValueError while importing", "more characters")
    assert len(proc.stderr) < 10_000


def test_a_hung_step_stops_the_sweep_at_the_first_timeout(tmp_path):
    """Each batch size after a hung one waited out its own timeout (4 x --max-time + 300 s by default) before the
    repeated-failure rule stopped the sweep; a larger batch is not tried once one timed out."""
    from perfpredict import profile_model
    from perfpredict.profile.timing import TimingConfig

    model = tmp_path / "hangs.py"
    model.write_text("import time\nimport torch\n\nclass M(torch.nn.Module):\n    def __init__(self):\n"
                     "        super().__init__()\n        self.l = torch.nn.Linear(4, 2)\n\n    def forward(self, x):\n"
                     "        if x.shape[0] >= 4:\n            time.sleep(3600)\n        return self.l(x)\n\n"
                     "def build_model():\n    return M()\n\ndef example_inputs(b):\n    return torch.randn(b, 4)\n")
    outcome = profile_model(str(model), batch_sizes=[2, 4, 8, 16], device="cpu", features=False,
                            timing=TimingConfig(min_time_s=0.1, max_time_s=0.2), point_timeout_s=20)
    card = outcome.card
    assert [(p.batch_size, p.status) for p in card.throughput] == [(2, "ok"), (4, "timeout")]
    stopped = [e for e in card.errors if e.step == "not measured"]
    assert [e.batch_size for e in stopped] == [8, 16] and "gave no result in time" in stopped[0].message


def test_reading_a_small_file_does_not_reserve_the_whole_limit(tmp_path):
    """read(limit + 1) allocated the limit first: reading a 10 kB ONNX file asked for 2 GiB, a MemoryError on a
    machine with a memory ulimit."""
    import subprocess
    import sys

    small = tmp_path / "small.onnx"
    small.write_bytes(b"x" * 10_000)
    script = ("import resource, sys\nfrom perfpredict.input_files import ONNX_LIMIT_BYTES, read_bounded\n"
              "resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))\n"
              "print(len(read_bounded(sys.argv[1], ONNX_LIMIT_BYTES, 'an ONNX model')))\n")
    proc = subprocess.run([sys.executable, "-c", script, str(small)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "10000", proc.stderr[-2000:]


def test_read_bounded_takes_a_file_or_a_pipe_up_to_its_limit(tmp_path):
    import threading

    from perfpredict.input_files import InputTooLarge, read_bounded

    exact = tmp_path / "exact"
    exact.write_bytes(b"a" * 3000)
    assert read_bounded(exact, 3000, "x") == b"a" * 3000
    with pytest.raises(InputTooLarge, match="the file holds 3,000 bytes"):
        read_bounded(exact, 2999, "x")
    for size, limit, fits in ((3 * 2**20 + 5, 4 * 2**20, True), (3 * 2**20 + 5, 3 * 2**20, False)):
        fifo = tmp_path / f"pipe{limit}"
        os.mkfifo(fifo)

        def feed(fifo=fifo, size=size):
            with open(fifo, "wb") as f:
                f.write(b"b" * size)

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        if fits:
            assert len(read_bounded(fifo, limit, "x")) == size
        else:
            with pytest.raises(InputTooLarge, match="a device or a pipe"):
                read_bounded(fifo, limit, "x")
        writer.join(10)


def test_a_cut_message_keeps_its_end_and_errors_are_classified_on_the_whole_text():
    """Cutting a message at 4000 characters lost what sits at its end or in its middle: a DataLoader worker's own
    error (the last line) and the words that mark an out-of-memory error."""
    from perfpredict.profile.failure import unwrapped_line
    from perfpredict.profile.memory import is_oom_error

    long = ValueError("head\n" + "x" * 10_000 + "\nthe real error")
    shown = exception_text(long)
    assert len(shown) < 4200 and shown.startswith("head") and shown.endswith("the real error")
    assert "more characters left out" in shown
    wrapped = RuntimeError("Caught TypeError in DataLoader worker process 0.\nOriginal Traceback (most recent "
                           "call last):\n" + "  frame line\n" * 2000 + "TypeError: an item is not a tensor")
    assert unwrapped_line(wrapped) == "TypeError: an item is not a tensor (in a DataLoader worker)"
    assert is_oom_error(RuntimeError("y" * 5000 + " DefaultCPUAllocator: can't allocate memory " + "z" * 5000))


_MAIN_WITH_A_STRAY_THREAD = """
import sys, threading, time
from perfpredict import cli
from perfpredict.workload import loader

thread = threading.Thread(target=time.sleep, args=(3600,), name="watchdog")
thread.start()
loader.MODEL_THREADS.append(thread)

def failing_main():
    {body}

cli._main = failing_main
cli.main()
"""


@pytest.mark.parametrize("body, rc, needles", [
    ("raise RuntimeError('a bug shown with --debug')", 1, ["Traceback", "RuntimeError: a bug shown with --debug"]),
    ("sys.exit('a message for sys.exit')", 1, ["a message for sys.exit"]),
    ("sys.exit(3)", 3, []),
])
def test_exiting_past_a_stray_thread_keeps_the_traceback_and_the_message(body, rc, needles):
    """With a thread the model file left running, the CLI ends with os._exit: an error let through under --debug
    ended it with exit code 0 and no traceback, and sys.exit("message") lost its message."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _MAIN_WITH_A_STRAY_THREAD.format(body=body)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == rc, (proc.returncode, proc.stderr[-2000:])
    for needle in needles:
        assert needle in proc.stderr, proc.stderr[-2000:]
    assert "exiting past 1 thread(s)" in " ".join(proc.stderr.split())


def test_os_exit_is_refused_only_inside_model_code_whatever_the_threads_do():
    """Each block swapped os._exit in and back: blocks entered from two threads could leave the refusing one in
    place for good, so perfpredict's own os._exit (a measuring process's) raised SystemExit afterwards."""
    import subprocess
    import sys

    script = ("import os, threading, time\nfrom perfpredict.workload.loader import os_exit_refused\n"
              "def block(i):\n    time.sleep(0.01 * (i % 3))\n    with os_exit_refused():\n"
              "        time.sleep(0.02 * ((7 - i) % 4))\n"
              "threads = [threading.Thread(target=block, args=(i,)) for i in range(8)]\n"
              "[t.start() for t in threads]\n[t.join() for t in threads]\n"
              "with os_exit_refused():\n    try:\n        os._exit(5)\n    except SystemExit as e:\n"
              "        print(e, flush=True)\n"
              "os._exit(3)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "called os._exit(5)" in proc.stdout


def test_a_thread_pool_a_library_starts_is_not_named_as_the_model_files():
    """torch.compile in build_model starts inductor's ThreadPoolExecutor workers: naming them as threads the model
    file left running was misleading. They are still exited past (a pool task that never ends held the exit)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from perfpredict.workload import loader

    with loader.os_exit_refused():
        pool = ThreadPoolExecutor(2)
        pool.submit(time.sleep, 0.01).result()
        own = threading.Thread(target=time.sleep, args=(0.3,), name="the model's own")
        own.start()
    try:
        workers = [t for t in loader.MODEL_THREADS if t.name.startswith("ThreadPoolExecutor")]
        assert own in loader.MODEL_THREADS and workers
        assert all(loader.library_thread(t) for t in workers) and not loader.library_thread(own)
    finally:
        pool.shutdown()
        own.join()
        for t in [own, *workers]:
            loader.MODEL_THREADS.remove(t)


def test_a_pool_task_that_never_ends_does_not_hold_the_command(run_cli, tmp_path):
    (tmp_path / "m.py").write_text(
        "import time\nfrom concurrent.futures import ThreadPoolExecutor\n\ndef forever():\n    while True:\n"
        "        time.sleep(0.5)\n\nThreadPoolExecutor(1, thread_name_prefix='prefetch').submit(forever)\n" + TINY)
    proc = run_cli("predict", "m.py", timeout=60)  # raises TimeoutExpired if it waits for the pool
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_child_forked_while_another_thread_holds_the_refusal_lock_is_not_deadlocked():
    import subprocess
    import sys

    script = ("import os, threading, time, signal\nfrom perfpredict.workload.loader import os_exit_refused\n"
              "stop = False\ndef spin():\n    while not stop:\n        with os_exit_refused():\n            pass\n"
              "threading.Thread(target=spin, daemon=True).start()\nhung = 0\nfor i in range(100):\n"
              "    pid = os.fork()\n    if pid == 0:\n        with os_exit_refused():\n            pass\n"
              "        os._exit(0)\n    for _ in range(200):\n        if os.waitpid(pid, os.WNOHANG)[0]:\n"
              "            break\n        time.sleep(0.01)\n    else:\n        hung += 1\n"
              "        os.kill(pid, signal.SIGKILL)\n        os.waitpid(pid, 0)\nstop = True\nprint(hung)\n")
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "0", (proc.stdout, proc.stderr[-2000:])


def test_a_space_after_a_closing_quote_still_reads(tmp_path):
    """Refusing a quote left open with csv's strict mode also refused `"resnet18" ,`, which read before."""
    from perfpredict.sim.traces import read_csv_trace

    trace = tmp_path / "t.csv"
    trace.write_text('id,arrival_s,gpus,work_s,model,user\n0,0,1,100,"resnet18" ,alice\n')
    [job] = read_csv_trace(trace)
    assert (job.model, job.user) == ("resnet18", "alice")


def test_a_job_whose_name_holds_a_line_break_is_refused_when_written_not_unreadable_later(tmp_path):
    from perfpredict.sched.job import Job
    from perfpredict.sim.traces import read_csv_trace, write_csv_trace

    with pytest.raises(ValueError, match=r"its task 'fine-tune\\nstage 2' holds a line break"):
        write_csv_trace([Job(id="a", arrival=0, gpus=1, work=10, task="fine-tune\nstage 2")], tmp_path / "t.csv")
    assert not (tmp_path / "t.csv").exists()
    write_csv_trace([Job(id="a", arrival=0, gpus=1, work=10, task="fine-tune, stage 2")], tmp_path / "t.csv")
    assert read_csv_trace(tmp_path / "t.csv")[0].task == "fine-tune, stage 2"


def test_a_message_just_over_the_limit_is_not_made_longer_and_a_first_line_is_cut_on_its_own():
    from perfpredict.errors import MAX_MESSAGE_CHARS, cut_middle, first_line

    text = "y" * (MAX_MESSAGE_CHARS + 1)
    assert cut_middle(text, MAX_MESSAGE_CHARS) == text
    line = first_line(ValueError("z" * 9000 + "\n" + "\n".join(f"frame {i}" for i in range(1000))))
    assert line.startswith("zzz") and line.endswith("zzz") and "frame" not in line and len(line) < 4100
