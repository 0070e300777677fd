"""The ``perfpredict`` command end to end: real profiles, MLflow runs, and every bad input's message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from perfpredict.card import PerformanceCard
from tests.conftest import EXAMPLES, TINY_MODEL

FAST = ("--min-time", "0.2", "--max-time", "1")


def _one_error_line(proc) -> str:
    """Assert the failure is reported as exactly one 'error:' line with no traceback; return it."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_profile_writes_card_onnx_plots_and_an_mlflow_run(run_cli, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("the user's own file")  # not the profile's: not logged
    proc = run_cli("profile", EXAMPLES / "minimal_mlp.py", "--batch-sizes", "8,16,32,64", "--out", "out", *FAST)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    for name in ("card.json", "model.onnx", "throughput.png", "memory.png"):
        assert (out / name).stat().st_size > 0, name

    raw = json.loads((out / "card.json").read_text())
    assert raw["schema_version"] and raw["device"]["kind"] == "cpu"
    # The exact parameter count of examples/minimal_mlp.py, by formula.
    assert raw["model"]["parameters"] == (128 * 256 + 256) + (256 * 256 + 256) + (256 * 10 + 10)
    assert [p["batch_size"] for p in raw["throughput"]] == [8, 16, 32, 64]
    assert all(p["samples_per_s"] > 0 and p["iter_time_s"] > 0 for p in raw["throughput"])
    assert raw["rate_model"]["kind"] in ("linear_time", "quadratic_rate")
    assert {c["kind"] for c in raw["rate_model"]["candidates"]} == {"linear_time", "quadratic_rate"}
    assert all(m["peak_bytes"] > 0 for m in raw["memory"])
    f = raw["features"]
    assert f["forward_macs_per_sample"] == 128 * 256 + 256 * 256 + 256 * 10
    assert f["fvcore_macs_per_sample"] == f["forward_macs_per_sample"]
    assert f["op_counts"]["Gemm"] == 3 and f["param_bytes"] > 0 and f["activation_bytes_per_sample"] > 0
    # a ReLU holds its input and its output: 256 + 256 floats per sample, the most alive at once
    assert f["peak_live_bytes_per_sample"] == 512 * 4 and f["peak_live_bytes_fixed"] == 0

    import mlflow
    from mlflow.tracking import MlflowClient

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns.db")
    client = MlflowClient()
    exp = client.get_experiment_by_name("perfpredict-profiles")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.data.params["model"] == "minimal_mlp" and run.data.params["device"] == "cpu"
    assert run.data.params["version.torch"] == torch.__version__
    hist = client.get_metric_history(run.info.run_id, "samples_per_s")
    assert sorted(m.step for m in hist) == [8, 16, 32, 64]
    assert run.data.metrics["forward_macs_per_sample"] == f["forward_macs_per_sample"]
    arts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"card.json", "model.onnx", "throughput.png", "memory.png"} <= arts and "notes.txt" not in arts
    assert json.loads(Path(client.download_artifacts(run.info.run_id, "card.json", str(tmp_path))).read_text()) == raw
    assert "mlflow ui --backend-store-uri" in proc.stdout

    # The saved card answers questions from the command line too.
    show = run_cli("show", out / "card.json")
    assert show.returncode == 0 and "rate model" in show.stdout
    assert "(2.0 KiB/sample alive at the peak)" in " ".join(show.stdout.split())  # rich wraps long lines
    lat = run_cli("latency", out / "card.json", "-n", "1000", "-b", "32")
    assert lat.returncode == 0, lat.stderr
    card = PerformanceCard.load(out / "card.json")
    assert f"= {card.latency_s(1000, 32):.2f} s" in lat.stdout


def test_profile_zoo_with_params_and_no_mlflow(run_cli, tmp_path):
    proc = run_cli("profile", "zoo:mlp", "--param", "depth=1", "-p", "width=64", "-b", "16,32", "--no-mlflow",
                   "--no-fvcore", "--mode", "infer", *FAST)
    assert proc.returncode == 0, proc.stderr
    cards = list((tmp_path / "perfpredict-out").glob("mlp-*/card.json"))
    assert len(cards) == 1
    card = PerformanceCard.load(cards[0])
    assert card.model.config["depth"] == 1 and card.model.config["width"] == 64
    assert card.run.mode == "infer" and card.features.fvcore_macs_per_sample is None
    assert not (tmp_path / "mlruns.db").exists()
    if sys.platform.startswith("linux"):  # the library code each point paged in, in the card and the summary
        assert all(m.file_backed_bytes and m.file_backed_bytes <= m.peak_bytes for m in card.memory)
        assert "library code" in " ".join(proc.stdout.split())


def test_zoo_lists_every_family(run_cli):
    proc = run_cli("zoo")
    assert proc.returncode == 0
    for fam in ("resnet", "vgg", "mobilenetv2", "transformer", "lstm", "mlp"):
        assert fam in proc.stdout
    grid = run_cli("zoo", "resnet", "--grid")
    assert grid.returncode == 0 and "resnet-depth50" in grid.stdout


# -- bad input: one readable message naming the file and the step; non-zero exit; no traceback --------------
BROKEN = {
    "syntax": ("def build_model(:\n    pass\n", "import", "syntax error at line 1"),
    "no_build_model": ("import torch\ndef example_inputs(b):\n    return torch.randn(b, 3)\n", "validate",
                       "does not define build_model()"),
    "import_raises": ("raise RuntimeError('cannot find dataset')\n", "import", "cannot find dataset"),
    "build_raises": (TINY_MODEL + "\ndef build_model():\n    raise ValueError('bad width')\n", "build_model",
                     "bad width"),
    "forward_raises": (TINY_MODEL + textwrap.dedent("""
        class Bad(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.randn(3, 3))
            def forward(self, x):
                return x @ self.w  # wrong shape: x has 32 features
        def build_model():
            return Bad()
        """), "forward", "RuntimeError"),
    "nan_loss": (TINY_MODEL + "\ndef loss_fn(out):\n    return out.mean() * float('nan')\n", "loss", "not finite"),
    "inputs_raise": (TINY_MODEL + "\ndef example_inputs(b):\n    raise KeyError('images')\n", "example_inputs",
                     "KeyError"),
    # a stub hook (`def make_optimizer(params): ...`) used to fail inside the timed step at zero_grad
    "optimizer_stub": (TINY_MODEL + "\ndef make_optimizer(params): ...\n", "make_optimizer",
                       "make_optimizer() returned NoneType, expected a torch.optim.Optimizer"),
    # stubs that return None were taken (targets) or blamed on the step that tripped over them (forward)
    "targets_stub": (TINY_MODEL + "\ndef example_targets(b):\n    pass\n", "example_targets",
                     "example_targets() returned None"),
    "inputs_stub": (TINY_MODEL + "\ndef example_inputs(b):\n    pass\n", "example_inputs",
                    "example_inputs() returned None"),
    "targets_signature": (TINY_MODEL + "\ndef example_targets():\n    return None\n", "example_targets",
                          "TypeError"),
    # every batch size timed the same 16 rows: the throughputs would have been 4x off at batch 64
    "ignores_batch_size": (TINY_MODEL + "\ndef example_inputs(b):\n    return torch.randn(16, 32)\n",
                           "example_inputs", "returned the same inputs at batch size 4 and 8"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_model_files_end_in_one_readable_message(case, run_cli, write_model, tmp_path):
    src, step, text = BROKEN[case]
    path = write_model(src, name=f"{case}.py")
    proc = run_cli("profile", path, "-b", "4,8,16", "--no-mlflow", *FAST)
    line = _one_error_line(proc)
    assert f"{case}.py" in line and f": {step}:" in line and text in line, line


def test_show_says_what_failed_on_a_partial_card(run_cli, write_model, tmp_path):
    src = TINY_MODEL + textwrap.dedent("""
        class Boom(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.l = torch.nn.Linear(32, 8)
            def forward(self, x):
                if x.shape[0] > 4:
                    raise RuntimeError("boom at big batch")
                return self.l(x)
        def build_model():
            return Boom()
        """)
    path = write_model(src, name="boom.py")
    assert run_cli("profile", path, "-b", "4,8", "--no-mlflow", "--out", "o", *FAST).returncode != 0
    shown = run_cli("show", tmp_path / "o" / "card.json")
    assert shown.returncode == 0, shown.stderr
    assert "partial card: 1 batch size(s) measured" in shown.stdout
    assert "batch 8: forward: RuntimeError: boom at big batch" in shown.stdout
    # no batch size measured: a failed card (schema 1.17; it was called partial), and its MLflow run ends FAILED
    assert run_cli("profile", path, "-b", "8,16", "--out", "o2", *FAST).returncode != 0
    assert json.loads((tmp_path / "o2" / "card.json").read_text())["status"] == "failed"
    shown = run_cli("show", tmp_path / "o2" / "card.json")
    assert "failed card: 0 batch size(s) measured" in shown.stdout, shown.stdout
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    (run,) = client.search_runs([client.get_experiment_by_name("perfpredict-profiles").experiment_id])
    assert run.info.status == "FAILED" and run.data.tags["perfpredict.status"] == "failed"
    errors = json.loads((tmp_path / "o2" / "card.json").read_text())["errors"]
    assert run.data.tags["perfpredict.errors"] == str(len(errors)) != "0"


def test_a_syntax_error_in_a_file_the_model_imports_names_that_file(write_model):
    """The line number of a sibling helper's syntax error is the helper's, so the message names the helper
    (it read as line 1 of model.py)."""
    from perfpredict.errors import ModelLoadError
    from perfpredict.workload.loader import load_model_file

    helper = write_model("def f(:\n    pass\n", name="pp_broken_helper.py")
    path = write_model("import pp_broken_helper\n" + TINY_MODEL)
    try:
        with pytest.raises(ModelLoadError) as err:
            load_model_file(path)
    finally:
        sys.modules.pop("pp_broken_helper", None)
    assert str(err.value) == f"{path}: import: syntax error at {helper} line 1: invalid syntax"


def test_missing_file(run_cli):
    line = _one_error_line(run_cli("profile", "no/such/model.py"))
    assert "no/such/model.py: load: file not found" in line


def test_oom_at_every_batch_size_is_an_error_with_the_card_kept(run_cli, write_model, tmp_path):
    path = write_model(TINY_MODEL + "\ndef example_inputs(b):\n    return torch.randn(b, 32, 1000, 100)\n")
    proc = run_cli("profile", path, "-b", "64,128", "--memory-limit", "100MB", "--no-mlflow", "--out", "out", *FAST)
    line = _one_error_line(proc)
    assert "out of memory at every batch size" in line and "model.py" in line
    card = PerformanceCard.load(tmp_path / "out" / "card.json")
    assert [p.status for p in card.throughput] == ["oom", "oom"]


def test_failure_after_some_points_keeps_them_and_debug_shows_the_traceback(run_cli, write_model, tmp_path):
    path = write_model(TINY_MODEL + textwrap.dedent("""
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(32, 8)
            def forward(self, x):
                assert x.shape[0] <= 8, "batch too large for this toy"
                return self.lin(x)
        def build_model():
            return Net()
        """))
    proc = run_cli("profile", path, "-b", "4,8,16", "--no-mlflow", "--out", "out", *FAST)
    line = _one_error_line(proc)
    assert "batch too large" in line and "2 batch size(s)" in line
    card = PerformanceCard.load(tmp_path / "out" / "card.json")
    assert [p.status for p in card.measured_points()] == ["ok", "ok"] and card.status == "partial"
    dbg = run_cli("profile", path, "-b", "16", "--no-mlflow", "--no-features", "--debug", *FAST)
    assert dbg.returncode != 0 and "Traceback" in dbg.stderr


@pytest.mark.parametrize("args,step", [
    (("profile", "zoo:nosuch"), "zoo"),
    (("profile", "zoo:mlp", "--param", "depth=deep"), "zoo parameters"),
    (("profile", "zoo:mlp", "--param", "colour=red"), "zoo parameters"),
    (("profile", "zoo:mlp", "-b", "8,x"), "arguments"),
    (("profile", "zoo:mlp", "-b", "0"), "arguments"),
    (("profile", "zoo:mlp", "--memory-limit", "lots"), "arguments"),
])
def test_bad_arguments(run_cli, args, step):
    line = _one_error_line(run_cli(*args, "--no-mlflow"))
    assert step in line


def _fork_servers_started_in(folder) -> list[int]:
    """PIDs of live multiprocessing fork servers whose sys.path starts in ``folder`` (``python -m`` puts the
    working directory first), read from /proc."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "multiprocessing.forkserver" in cmd and f"'{folder}'" in cmd:
            pids.append(int(proc.name))
    return pids


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_a_command_that_fails_early_leaves_no_fork_server_holding_its_output(tmp_path):
    """The fork server is warmed up before the model is loaded; when loading fails, the command used to exit while
    the server was still importing torch, and the server kept the command's stdout/stderr open for seconds (a
    pipe reader such as ``| tee`` or ``capture_output`` waited for it). It is now ended with the command."""
    with open(tmp_path / "out.txt", "w") as out:
        proc = subprocess.run([sys.executable, "-m", "perfpredict", "profile", "zoo:nosuch", "--no-mlflow"],
                              stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, timeout=300)
    assert proc.returncode != 0 and "unknown zoo family" in (tmp_path / "out.txt").read_text()
    assert _fork_servers_started_in(tmp_path) == []


def test_param_on_a_model_file_is_rejected(run_cli, write_model):
    line = _one_error_line(run_cli("profile", write_model(TINY_MODEL), "--param", "depth=3"))
    assert "arguments" in line and "--param only applies to zoo models" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_requested_without_a_gpu(run_cli, write_model):
    line = _one_error_line(run_cli("profile", write_model(TINY_MODEL), "--device", "cuda", "--no-mlflow"))
    assert "device" in line and "no CUDA device" in line


def test_show_rejects_a_file_that_is_not_a_card(run_cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    line = _one_error_line(run_cli("show", bad))
    assert "bad.json" in line and "not a perfpredict card" in line


def test_typing_mistakes_are_found_without_importing_torch(tmp_path):
    """The CLI checks what was typed before importing torch or starting a measuring process (seconds)."""
    code = textwrap.dedent(f"""
        import sys
        from perfpredict.errors import PerfPredictError
        from perfpredict.workload_args import check_target, parse_batch_sizes, parse_params
        import perfpredict.cli
        for call in (lambda: parse_batch_sizes("8,x"), lambda: parse_params(["depth"]),
                     lambda: check_target({str(tmp_path / "nope.py")!r}),
                     lambda: check_target({str(tmp_path)!r}),
                     lambda: check_target("model.py", {{"depth": "3"}})):
            try:
                call()
                raise SystemExit("no error")
            except PerfPredictError:
                pass
        check_target("zoo:anything", {{"depth": "3"}})  # zoo names and values are the family's to check
        assert parse_batch_sizes("16,8,8") == (8, 16)
        assert "torch" not in sys.modules, "torch was imported"
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("args", [
    ("profile", "zoo:mlp", "-b", "0"),
    ("profile", "zoo:mlp", "--memory-limit", "lots"),
    ("profile", "no_such_model.py"),
    ("max-batch", "zoo:mlp", "--memory-limit", "lots"),
    ("ab", "zoo:mlp", "--rounds", "1"),
    ("profile", "typo.py"),
    ("max-batch", "typo.py"),
    ("ab", "zoo:mlp", "typo.py"),
])
def test_an_argument_error_is_found_before_torch_is_imported(args, tmp_path):
    """A mistyped flag is refused before the ~1.5 s it takes to import torch (the command's own checks need only
    the torch-free half of a workload: ``perfpredict.workload.ref``), and so is a model file that does not parse
    (``typo.py``: it is compiled, not run, before a measuring process starts)."""
    (tmp_path / "typo.py").write_text("import torch\n\ndef build_model(:\n    pass\n")
    code = ("import sys\nfrom perfpredict.cli import main\nsys.argv = ['perfpredict', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
            "print('torch imported' if 'torch' in sys.modules else 'torch not imported', code)")
    proc = subprocess.run([sys.executable, "-c", code, *args, "--no-mlflow"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.stdout.split() == ["torch", "not", "imported", "2"], (proc.stdout, proc.stderr)
    assert "error" in proc.stderr and "Traceback" not in proc.stderr
    if "typo.py" in args:
        assert "typo.py: import: syntax error at line 3" in proc.stderr, proc.stderr



_CTRL_C_THROUGH_EXEC = """
import sys
import perfpredict.cli as cli
@cli.app.command("interrupted")
def interrupted():
    exec("raise KeyboardInterrupt")  # as a Ctrl-C landing in a dataclass's creation during a lazy import
sys.argv = ["perfpredict", "interrupted"]
cli.main()
"""


def test_a_ctrl_c_that_passed_through_exec_still_exits_130_not_by_signal(tmp_path):
    """Run as ``python -m``, CPython kills the process with SIGINT at exit when a KeyboardInterrupt left an
    exec() of a string, even one caught: the CLI clears that, so a caller's returncode is the 130 it chose."""
    (tmp_path / "ctrl_c_main.py").write_text(_CTRL_C_THROUGH_EXEC)
    proc = subprocess.run([sys.executable, "-m", "ctrl_c_main"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    assert "interrupted" in proc.stderr and "Traceback" not in proc.stderr


def test_help_lists_every_command_once_in_its_panel_with_unbroken_summaries(tmp_path):
    """``perfpredict --help`` groups the commands (measure / predict / schedule / about) and every registered
    command is in a panel; a summary wrapped in its docstring is one paragraph in the list, not broken where
    the source line ended."""
    from perfpredict import cli

    code = ("import sys\nfrom perfpredict.cli import main\nsys.argv = ['perfpredict', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "from perfpredict.cli import app, command_name\nprint('REGISTERED', *map(command_name, app.registered_commands))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "COLUMNS": "200", "TERM": "dumb"})
    assert proc.returncode == 0, proc.stderr
    out, registered = proc.stdout.rsplit("REGISTERED", 1)
    registered = registered.split()
    panels = list(cli.COMMAND_PANELS)
    assert sorted(registered) == sorted(n for names in cli.COMMAND_PANELS.values() for n in names)
    assert registered == [n for names in cli.COMMAND_PANELS.values() for n in names]  # listed in panel order
    assert "─ Commands ─" not in out
    assert [out.index(f"─ {p} ─") for p in panels] == sorted(out.index(f"─ {p} ─") for p in panels)
    # at 200 columns each summary fits on its row: the `ab` summary's second clause is on the line of its first
    ab_row = next(line for line in out.splitlines() if line.lstrip("│ ").startswith("ab "))
    assert "--new-param) in paired" in ab_row, ab_row
    # and a command's own help: compare's second paragraph was broken where its source line ended
    compare = subprocess.run([sys.executable, "-m", "perfpredict", "compare", "--help"], capture_output=True,
                             text=True, timeout=120, cwd=tmp_path, env={**os.environ, "COLUMNS": "200", "TERM": "dumb"})
    assert "then averaged (± its standard error): differences" in compare.stdout, compare.stdout
    from perfpredict import __version__

    flag = subprocess.run([sys.executable, "-m", "perfpredict", "--version"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert (flag.returncode, flag.stdout.strip()) == (0, f"perfpredict {__version__}"), flag.stderr


def test_no_help_text_is_cut_off_or_eaten_as_markup(tmp_path):
    """Every command's help at 80 columns. Rich cuts a word longer than the help column with '…' instead of
    wrapping it (the option syntax of ``simulate --cluster/--trace/--mechanism/--cards`` was hidden that way),
    and typer reads help as rich markup, where ``[all cores]`` or the ``[ray]`` of ``perfpredict[ray]`` is a style
    tag that vanished (17 options lost their defaults or notes)."""
    code = textwrap.dedent("""
        import typer
        from rich.text import Text
        from perfpredict import cli
        group = cli.build_command()
        raw = typer.main.get_command(cli.app)  # the same commands, help as written in the source
        for name, command in raw.commands.items():
            built = group.commands[name]
            for a, b in zip([command, *command.params], [built, *built.params], strict=True):
                if getattr(a, "help", None) and Text.from_markup(b.help).plain != a.help:
                    print("EATEN", name, getattr(a, "name", ""), repr(Text.from_markup(b.help).plain))
        for name, panels in cli.OPTION_PANELS.items():  # an option renamed in the signature must not drop out
            params = {p.name for p in group.commands[name].params}
            print("UNKNOWN", name, [o for names in panels.values() for o in names if o not in params])
        for name in [None, *map(cli.command_name, cli.app.registered_commands)]:
            print("@@HELP@@", name)
            try:
                group.main(args=[name, "--help"] if name else ["--help"], prog_name="perfpredict", standalone_mode=False)
            except SystemExit:
                pass
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "COLUMNS": "80", "TERM": "dumb"})
    assert proc.returncode == 0, proc.stderr
    assert "EATEN" not in proc.stdout, [line for line in proc.stdout.splitlines() if "EATEN" in line]
    assert all(line.endswith("[]") for line in proc.stdout.splitlines() if line.startswith("UNKNOWN")), proc.stdout
    helps = proc.stdout.split("@@HELP@@ ")[1:]
    assert len(helps) == 17 and all("Usage: perfpredict" in h for h in helps), proc.stdout[-2000:]
    cut = [line for h in helps for line in h.splitlines() if "…" in line]
    assert not cut, "\n".join(cut)
    flat = " ".join(" ".join(line.strip("│ ") for line in h.splitlines()) for h in helps)
    assert "(needs perfpredict[ray])" in flat and "[all cores]" in flat
    assert "─ Extended profiles (--all) ─" in next(h for h in helps if "Usage: perfpredict profile" in h)


def test_show_names_a_max_batch_or_ab_result_it_cannot_print(run_cli, tmp_path):
    (tmp_path / "max_batch.json").write_text(json.dumps({"largest_ok": 8, "probes": []}))
    proc = run_cli("show", tmp_path / "max_batch.json")
    assert proc.returncode != 0 and "it is a max-batch result" in proc.stderr and "Traceback" not in proc.stderr


def test_latency_between_a_predicted_cards_points_carries_their_spread(run_cli, tmp_path):
    """Between or past a predicted card's batch sizes the ± was the rate model's fit to the predicted points
    (±1% at batch 256), narrower than the prediction's own q10-q90 and missing a direct prediction."""
    import re

    card = tmp_path / "tr.json"
    assert run_cli("predict", "zoo:transformer", "-b", "8,32,128,512", "--device-type", "cuda_h100",
                   "-o", card).returncode == 0
    direct = json.loads(run_cli("predict", "zoo:transformer", "-b", "256", "--device-type", "cuda_h100",
                                "-o", tmp_path / "d.json").stdout and (tmp_path / "d.json").read_text())
    t_direct = direct["prediction"]["points"][0]["iter_time_s"] * 1e3
    out = run_cli("latency", card, "-n", "1000", "-b", "256")
    assert out.returncode == 0, out.stderr
    lo, hi = map(float, re.search(r"about ([\d.]+)-([\d.]+) ms", " ".join(out.stdout.split())).groups())
    assert lo < t_direct < hi, (lo, t_direct, hi)
    past = run_cli("latency", card, "-n", "1000", "-b", "2048")
    assert "predicts this batch size directly" in " ".join(past.stdout.split())
