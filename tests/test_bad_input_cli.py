"""User mistakes found by an audit of every command: each ends in one readable line and a non-zero exit (never
a traceback, an "internal error" or a silent exit 0), and nothing already measured is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfpredict.errors import PerfPredictError
from perfpredict.fit.rate import RateModel, fit_rate_model
from tests.conftest import EXAMPLES, TINY_MODEL

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "minimal_mlp.py"
QUICK = ("--min-time", "0.1", "--max-time", "0.2", "--no-mlflow", "--no-features")


def _one_error_line(proc, *needles: str) -> None:
    err = proc.stderr
    assert proc.returncode not in (0, 70), (proc.returncode, err[-2000:])
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    for n in needles:
        assert n in err, (n, err[-2000:])


@pytest.mark.parametrize("args, needle", [
    (["--trace", "empty.csv"], "has no jobs"),
    (["--trace", "nomodel.csv"], "names no model"),
    (["--trace", "synergy:n=0"], "has no jobs"),
    (["--trace", "synergy:n=3", "--max-time", "-5"], "--max-time"),
    (["--trace", "synergy:n=3", "--steady", "100:200"], "holds no jobs"),
    (["--trace", "synergy:n=3", "--steady", "5:1"], "FIRST < LAST"),
    (["--trace", "synergy:n=3", "--round", "nan"], "--round"),
    (["--trace", "synergy:n=3", "--out", "afile"], "is a file"),
    (["--trace", "synergy:n=3", "--cluster", "2x0"], "has no GPUs"),
    (["--trace", "synergy:n=3", "--cluster", "99999999x8"], "servers"),
    (["--trace", "synergy:n=3", "--cluster", "badtype.json"], "gpus must be a finite number"),
    (["--trace", "synergy:n=3,multi=7"], "multi"),
    (["--trace", "dlbags:n=5,median=-1"], "median run time"),
    (["--cluster", "horus-testbed", "--trace", "horus-small", "--mechanism", "horus:k=abc"], "k=abc"),
    (["--trace", "."], "is a directory"),
    (["--trace", "synergy:n=3", "--cluster", "nodict.json"], "expected an object"),
    (["--trace", "synergy:n=3", "--cluster", "hugecount.json"], "count must be a whole number"),
    (["--trace", "synergy:n=3", "--cluster", "1000x10000000"], "more than the 1024"),
])
def test_simulate_refuses_bad_input_in_one_line(run_cli, tmp_path, args, needle):
    (tmp_path / "empty.csv").write_text("id,arrival_s,gpus,work_s\n")
    (tmp_path / "nomodel.csv").write_text("id,arrival_s,gpus,work_s\n0,0,1,100\n")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "badtype.json").write_text('{"servers": [{"gpus": "x", "count": 2}]}')
    (tmp_path / "nodict.json").write_text('{"servers": [8]}')
    (tmp_path / "hugecount.json").write_text('{"servers": [{"gpus": 8, "count": 1e12}]}')
    proc = run_cli("simulate", *args, "--no-mlflow", *([] if "--out" in args else ["--out", "o"]))
    _one_error_line(proc, needle)
    assert proc.stderr.startswith("error: "), proc.stderr  # no blank line left by a progress display first


def test_simulate_writes_strict_json_when_a_metric_has_no_value(run_cli, tmp_path):
    # Two jobs, a window of the second only, cut before it finishes: its JCT metrics have no value.
    (tmp_path / "t.csv").write_text("id,arrival_s,gpus,work_s,model\n0,0,1,100,resnet18\n1,10,1,1e6,resnet18\n")
    proc = run_cli("simulate", "--trace", "t.csv", "--cluster", "1x8", "--steady", "1:2", "--max-time", "1000",
                   "--no-mlflow", "--out", "o")
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (tmp_path / "o" / "metrics.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    doc = json.loads(text)
    assert any(v is None for v in doc["metrics"].values())


@pytest.mark.parametrize("args, needle", [
    (["--threads", "0"], "--threads"),
    (["--threads", "4096"], "crash torch's OpenMP runtime"),  # the measuring process died inside libgomp
    (["--memory-limit", "1.2.3GB"], "memory size"),
    (["--memory-limit", "1e400GB"], "too large"),
    (["--memory-limit", "0"], "--memory-limit must be positive"),
    (["--copies", "abc"], "--copies"),
    (["--workers", "0"], "--workers"),
    (["--colocation", "--extended-batch", "-5"], "--extended-batch"),
    (["--colocation", "--partner", "zoo:nosuch"], "unknown zoo family"),
    (["--colocation", "--partner", "nonexistent.py"], "file not found"),
    (["--out", "afile"], "is a file"),
    (["--experiment", ""], "--experiment is empty"),
])
def test_profile_refuses_bad_flags_before_measuring(run_cli, tmp_path, args, needle):
    (tmp_path / "afile").write_text("x")
    extra = [] if "--experiment" in args else ["--no-mlflow"]
    proc = run_cli("profile", EXAMPLE, "-b", "2", *args, *extra)
    _one_error_line(proc, needle)
    assert not (tmp_path / "perfpredict-out").exists()


@pytest.mark.parametrize("target, needle", [("m.onnx", "perfpredict predict"), ("card.json", "not a .json")])
def test_profile_refuses_a_file_that_is_not_python(run_cli, tmp_path, target, needle):
    (tmp_path / target).write_bytes(b"\x08\x07garbage")
    _one_error_line(run_cli("profile", target, "--no-mlflow"), "expected a Python model file", needle)


@pytest.mark.parametrize("where", ["build_model", "example_inputs", "forward"])
def test_sys_exit_in_the_model_is_an_error_not_a_silent_exit(run_cli, write_model, where):
    body = {
        "build_model": "def build_model():\n    sys.exit(0)\n\ndef example_inputs(b):\n    return torch.randn(b, 4)\n",
        "example_inputs": "def build_model():\n    return torch.nn.Linear(4, 2)\n\ndef example_inputs(b):\n"
                          "    sys.exit(0)\n",
        "forward": "class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                   "        self.l = torch.nn.Linear(4, 2)\n\n    def forward(self, x):\n        sys.exit(0)\n\n"
                   "def build_model():\n    return M()\n\ndef example_inputs(b):\n    return torch.randn(b, 4)\n",
    }[where]
    model = write_model("import sys\nimport torch\n\n" + body)
    proc = run_cli("profile", model, "-b", "2", "--min-time", "0.1", "--max-time", "0.2", "--no-mlflow")
    _one_error_line(proc, "SystemExit")
    pred = run_cli("predict", model, "-b", "8")
    _one_error_line(pred)
    assert "SystemExit" in pred.stderr or "forward pass fails" in pred.stderr


def test_predict_checks_its_arguments_and_names_the_flag(run_cli, write_model, tmp_path):
    _one_error_line(run_cli("predict", "zoo:mlp", "--param", "depth"), "name=value")
    _one_error_line(run_cli("predict", "zoo:mlp", "-b", ","), "--batch-sizes")
    _one_error_line(run_cli("predict", "zoo:mlp", "--device-type", ""), "--device-type is empty")
    _one_error_line(run_cli("predict", "MODEL.ONNX"), "no ONNX file")
    (tmp_path / "d").mkdir()
    _one_error_line(run_cli("predict", "zoo:mlp", "--out", "d"), "is a folder")
    model = write_model("import torch\n\ndef build_model():\n    raise ValueError('my build failed')\n\n"
                        "def example_inputs(b):\n    return torch.randn(b, 4)\n")
    _one_error_line(run_cli("predict", model), "my build failed")
    # a device type no model set answers for is found before the model file runs (it exported the model first)
    ran = tmp_path / "ran"
    marker = write_model(f"import pathlib\npathlib.Path({str(ran)!r}).write_text('x')\n" + TINY_MODEL, "marker.py")
    _one_error_line(run_cli("predict", marker, "--device-type", "tpu"), "no trained models for device type 'tpu'")
    assert not ran.exists()


def test_show_and_latency_on_a_predicted_card(run_cli, tmp_path):
    assert run_cli("predict", "zoo:mlp", "-b", "16,32", "--out", "pred.json").returncode == 0
    shown = run_cli("show", "pred.json")
    assert shown.returncode == 0, shown.stderr
    assert "predicted" in shown.stdout and "nearest profiled architecture" in shown.stdout
    lat = run_cli("latency", "pred.json", "-n", "100", "-b", "24")  # two batch sizes: a fitted rate model
    assert lat.returncode == 0 and "Lat(100, 24)" in lat.stdout, lat.stderr
    assert "within the predicted batch sizes" in lat.stdout  # not "the measured range": nothing was measured
    # at a batch size the card predicted, its own point (the rate model only smooths between points)
    point = json.loads((tmp_path / "pred.json").read_text())["prediction"]["points"][1]
    lat = run_cli("latency", "pred.json", "-n", "100", "-b", "32")
    assert lat.returncode == 0 and f"T(32) = {point['iter_time_s'] * 1e3:.3f} ms/iter" in lat.stdout, lat.stdout
    # -p and -o as for profile: a zoo knob reaches the predicted model
    assert run_cli("predict", "zoo:mlp", "-p", "width=128", "-b", "32", "-o", "one.json").returncode == 0
    assert json.loads((tmp_path / "one.json").read_text())["model"]["name"].endswith("-width128-num_classes10")
    assert run_cli("latency", "one.json", "-n", "100", "-b", "32").returncode == 0  # its one point
    _one_error_line(run_cli("latency", "one.json", "-n", "100", "-b", "48"), "predicted card", "(32)")


def test_debug_is_accepted_by_every_command(run_cli, tmp_path):
    assert run_cli("zoo", "--debug").returncode == 0
    assert run_cli("version", "--debug").returncode == 0
    (tmp_path / "bad.json").write_text("{not json")
    plain, debug = run_cli("show", "bad.json"), run_cli("show", "bad.json", "--debug")
    assert plain.returncode == debug.returncode != 0
    assert "Traceback" not in plain.stderr and "Traceback" in debug.stderr


def test_a_cluster_json_with_whole_float_gpus_runs(run_cli, tmp_path):
    (tmp_path / "c.json").write_text('{"servers": [{"gpus": 8.0, "count": 2}]}')
    proc = run_cli("simulate", "--cluster", "c.json", "--trace", "synergy:n=5", "--no-mlflow", "--out", "o")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_malformed_rate_model_is_named_not_crashed_on():
    good = fit_rate_model([2, 4, 8, 16], [100.0, 190.0, 350.0, 600.0]).to_card()
    assert RateModel.from_card(good).iter_time(8) > 0
    no_cands = good.model_copy(update={"candidates": []})
    with pytest.raises(PerfPredictError, match="no candidate of the selected kind"):
        RateModel.from_card(no_cands)
    sel = next(c for c in good.candidates if c.kind == good.kind)
    nan = sel.model_copy(update={"coefficients": {k: float("nan") for k in sel.coefficients}})
    with pytest.raises(PerfPredictError, match="non-finite"):
        RateModel.from_card(good.model_copy(update={"candidates": [nan]}))
    with pytest.raises(PerfPredictError, match="lacks coefficient"):
        RateModel.from_card(good.model_copy(update={"coefficients": {}}))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_keeps_the_points_with_a_rate_model_and_says_where(tmp_path, sig):
    """SIGINT after the second batch size: exit 130, a message naming the card, and the kept points fitted.
    Six more points (over 1 s each) follow, so a test process starved of CPU still signals a running sweep.
    SIGTERM (a scheduler's stop, `timeout`) is handled alike: it used to exit 143 with a partial card and no
    MLflow run."""
    model = tmp_path / "slow.py"
    model.write_text("import time\nimport torch\n\nclass M(torch.nn.Module):\n    def __init__(self):\n"
                     "        super().__init__()\n        self.l = torch.nn.Linear(4, 2)\n\n    def forward(self, x):\n"
                     "        time.sleep(0.02)\n        return self.l(x)\n\ndef build_model():\n    return M()\n\n"
                     "def example_inputs(b):\n    return torch.randn(b, 4)\n")
    proc = subprocess.Popen([sys.executable, "-m", "perfpredict", "profile", str(model), "-b", "2,4,8,16,32,64,128,256",
                             "--min-time", "1", "--max-time", "1", "--no-features", "--out", "o"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlruns.db"},
                            # a test run started in the background by a shell inherits SIGINT ignored, and
                            # Python then installs no KeyboardInterrupt handler: give the child the default
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = ""
    deadline = time.monotonic() + 240
    while "batch     4:" not in seen and time.monotonic() < deadline and proc.poll() is None:
        seen += proc.stderr.readline()
    assert "batch     4:" in seen, seen
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "card.json" in err and "Traceback" not in err
    card = json.loads((tmp_path / "o" / "card.json").read_text())
    assert [p["status"] for p in card["throughput"]][:2] == ["ok", "ok"]
    assert card["rate_model"] is not None
    assert any(e["step"] == "interrupted" for e in card["errors"])
    # and the kept card is an MLflow run ended KILLED, as ab's and max-batch's interrupted runs are logged
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    (run,) = client.search_runs([client.get_experiment_by_name("perfpredict-profiles").experiment_id])
    assert run.info.status == "KILLED" and "mlflow: run" in err, err
    assert len(client.get_metric_history(run.info.run_id, "samples_per_s")) >= 2


@pytest.mark.parametrize("kw,needle", [({"mode": "eval"}, "mode must be"), ({"threads": 0}, "threads must be"),
                                       ({"threads": 10**6}, "8 per CPU"),
                                       ({"memory_limit_bytes": 0}, "memory_limit_bytes"),
                                       ({"batch_sizes": [0]}, "positive")])
def test_python_profile_checks_its_settings_before_building_anything(tmp_path, kw, needle):
    from perfpredict import profile

    with pytest.raises(PerfPredictError, match=needle):
        profile(str(EXAMPLE), out_dir=tmp_path / "o", **({"batch_sizes": [2]} | kw))
    assert not (tmp_path / "o").exists()


def test_profile_stays_callable_after_its_package_is_imported():
    """`perfpredict.profile` is the function and the measurement package: importing the package (as the first
    call does) must not leave a module nobody can call."""
    code = ("import perfpredict, perfpredict.profile.profiler\n"
            "from perfpredict import profile\n"
            "from perfpredict.errors import PerfPredictError\n"
            "for f in (profile, perfpredict.profile, perfpredict.profile_model):\n"
            "    try:\n"
            "        f('x.py', mode='eval')\n"
            "    except PerfPredictError as e:\n"
            "        assert 'mode' in str(e) or 'not found' in str(e), e\n"
            "    else:\n"
            "        raise SystemExit('no error')\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_a_ctrl_c_no_command_catches_is_one_line_not_a_silent_exit():
    """Typer turns a Ctrl-C that reaches it into a bare exit 130 with nothing printed: a user who pressed it
    early (while torch loads, before any measuring) saw the prompt come back without a word. main() names it.
    A real KeyboardInterrupt raised inside a command registered for the test, through Typer's own handling."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import perfpredict.cli as cli\n"
        "@cli.app.command(name='stop-here')\n"
        "def stop_here() -> None:\n"
        "    raise KeyboardInterrupt\n"
        "sys.argv = ['perfpredict', 'stop-here']\n"
        "cli.main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "interrupted (Ctrl-C)" and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("error", "first", "line"), [
    (ValueError("bad value\n  at line 3\n"), "bad value", "ValueError: bad value"),
    (RuntimeError("\n\x1b[36m(task pid=1)\x1b[0m failed: OOM\nmore"), "(task pid=1) failed: OOM",
     "RuntimeError: (task pid=1) failed: OOM"),
    (SystemExit(), "", "SystemExit: "),
    (KeyError("k"), "'k'", "KeyError: 'k'"),
])
def test_an_exception_is_reported_by_its_first_line_without_terminal_colours(error, first, line):
    from perfpredict.errors import error_line, first_line

    assert first_line(error) == first
    assert error_line(error) == line and error_line(error, 5) == line[:5] and error_line(error, None) == line


def test_serve_on_a_port_in_use_says_so_before_any_banner(run_cli):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        proc = run_cli("serve", "--port", str(port), timeout=120)
    assert proc.returncode == 2 and "serving on" not in proc.stdout
    _one_error_line(proc, f"cannot listen on 127.0.0.1:{port}: Address already in use")


def test_device_kinds_are_case_insensitive(run_cli):
    from perfpredict import Predictor

    pred = Predictor.load()
    assert pred.model_set("CUDA").name == pred.model_set("cuda").name
    assert pred.model_set("CUDA_H200").name == "cuda_h200"
    proc = run_cli("predict", "zoo:mlp", "-b", "8", "--device-type", "Cuda")
    assert proc.returncode == 0, proc.stderr


def test_predicting_a_model_too_large_to_build_here_is_refused_before_it_is_built(run_cli, write_model):
    """A terabyte of weights: counted on the meta device and refused in seconds, where building and exporting it
    would take the machine's memory (a 20 GB MLP used to take 150 s and most of the RAM)."""
    model = write_model("import torch, torch.nn as nn\n"
                        "def build_model():\n    return nn.Linear(500_000, 500_000)\n"
                        "def example_inputs(b):\n    return torch.randn(b, 500_000)\n", "huge.py")
    _one_error_line(run_cli("predict", model, "-b", "8"), "build_model: its 1000.0 GB of weights",
                    "export it to ONNX where there is room")


@pytest.mark.parametrize("args", [["--colocation", "--window", "nan"], ["--colocation", "--window", "inf"],
                                  ["--all", "--link-mbit", "nan"]])
def test_a_non_finite_window_or_link_is_refused_before_anything_runs(run_cli, args):
    """--window nan hung the co-location run; --link-mbit nan ran the sweep, then ended in an internal error."""
    proc = run_cli("profile", str(EXAMPLES / "minimal_mlp.py"), *args, "--no-mlflow", "--out", "o")
    _one_error_line(proc, "must be positive finite numbers")


def test_a_section_flag_without_its_section_is_named(run_cli):
    """`--workers 1,2 --copies 2 --storage-bandwidth 1MB` without --scaling/--colocation/--sensitivity exited 0
    without a word, as if they had been used."""
    proc = run_cli("profile", str(EXAMPLES / "minimal_mlp.py"), "-b", "4", "--no-features", "--no-mlflow",
                   "--min-time", "0.1", "--max-time", "0.2", "--workers", "1,2", "--copies", "2",
                   "--storage-bandwidth", "1MB", "--out", "o")
    assert proc.returncode == 0, proc.stderr
    err = " ".join(proc.stderr.split())
    assert "--workers applies to --scaling" in err and "--storage-bandwidth applies to --sensitivity" in err
    assert "--copies applies to --colocation" in err and "--window" not in err  # left at its default


def test_a_storage_bandwidth_written_as_a_rate_is_read():
    """`--storage-bandwidth 200MB/s`, the natural spelling, was 'cannot read a memory size'."""
    from perfpredict.cli import _bytes, _per_second

    assert [_bytes(_per_second(t)) for t in ("200MB/s", "200MB", "1GiB / sec")] == [200 * 10**6, 200 * 10**6, 2**30]


def test_a_ctrl_c_before_the_first_batch_size_promises_nothing_and_logs_nothing(tmp_path):
    """The card is written when the sweep starts, with no point in it: an interrupt then said "the measurements
    finished so far are in o/card.json" and logged a KILLED run without a measurement."""
    model = tmp_path / "slow.py"
    model.write_text("import time\nimport torch\n\nclass M(torch.nn.Module):\n    def __init__(self):\n"
                     "        super().__init__()\n        self.l = torch.nn.Linear(4, 2)\n\n    def forward(self, x):\n"
                     "        time.sleep(0.05)\n        return self.l(x)\n\ndef build_model():\n    return M()\n\n"
                     "def example_inputs(b):\n    return torch.randn(b, 4)\n")
    proc = subprocess.Popen([sys.executable, "-m", "perfpredict", "profile", str(model), "-b", "2,4", "--min-time",
                             "30", "--max-time", "30", "--no-features", "--out", "o"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlruns.db"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    card = tmp_path / "o" / "card.json"
    deadline = time.monotonic() + 180
    while not card.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert card.exists(), proc.communicate()[1][-2000:]
    time.sleep(1.0)  # inside the first batch size's 30 s
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "were none (interrupted before the first batch size" in " ".join(err.split()), err
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    assert client.search_runs([client.get_experiment_by_name("perfpredict-profiles").experiment_id]) == []


def test_a_model_file_named_in_another_encoding_is_refused_in_one_line(run_cli, tmp_path):
    """A file name that is not UTF-8 (Latin-1 ``mélp.py``; Python holds its byte as a surrogate) ended in
    "internal error: UnicodeEncodeError" when the file was imported; a card could not record it either."""
    name = os.fsdecode(b"m\xe9lp.py")
    (tmp_path / name).write_text(EXAMPLE.read_text())
    proc = run_cli("profile", tmp_path / name, "-b", "4", *QUICK)
    _one_error_line(proc, "not UTF-8")
