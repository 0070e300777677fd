"""The ``perfpredict`` command.

User mistakes (a broken model file, a bad flag, an OOM at every batch size, a NaN loss) end in one readable
line on stderr and a non-zero exit; the traceback is shown only with ``--debug``. Whatever was measured
before a failure is written first.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import shlex
import sys
import tempfile
import threading
import traceback
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from perfpredict import __version__
from perfpredict.errors import PerfPredictError, UsageError, error_line, forget_handled_interrupt

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Profile, model and predict the performance of deep-learning training jobs.",
                  epilog="Every command takes --debug: an error then shows its traceback.")
# Piped output has no terminal width; 80 columns would wrap the summary table, so use a wider page.
out_console = Console(width=None if sys.stdout.isatty() else 130)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 130)


def progress_bar(*columns) -> Progress:
    """A transient progress display on stderr, or none where stderr is not a terminal: there a transient display
    shows nothing and leaves only a blank line before the command's output or error message."""
    return Progress(*columns, console=err_console, transient=True, disable=not err_console.is_terminal)


class Mode(str, Enum):
    train = "train"
    infer = "infer"


def _bytes(text: str | None) -> int | None:
    """``"4GB"``, ``"512MiB"``, ``"1e9"`` → bytes."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([kKmMgGtT]?)(i?)[bB]?\s*", text)
    if not m:
        raise UsageError(f"cannot read a memory size from {text!r} (try 4GB or 512MiB)", step="arguments")
    try:
        value = float(m.group(1))
    except ValueError:
        raise UsageError(f"cannot read a memory size from {text!r} (try 4GB or 512MiB)", step="arguments") from None
    if not math.isfinite(value * 1024.0 ** 4):
        raise UsageError(f"memory size {text!r} is too large", step="arguments")
    power = " KMGT".index(m.group(2).upper() or " ")
    base = 1024 if m.group(3) else 1000
    return int(value * base**power)


def _per_second(text: str | None) -> str | None:
    """A rate as people write it, ``200MB/s``, as the size per second that :func:`_bytes` reads."""
    return None if text is None else re.sub(r"\s*/\s*s(ec(ond)?)?\s*$", "", text, flags=re.IGNORECASE)


def check_out_dir(out: Path | None) -> None:
    """An output directory that can be used: absent (created later) or a directory, with no file in the way
    above it. Checked before any work starts, so results are never computed only to be lost."""
    from perfpredict.output_paths import output_dir_problem

    problem = output_dir_problem(out) if out is not None else None
    if problem:
        raise UsageError(f"--out: {problem}", step="arguments")


def output_file(out: Path | None, name: str, filename: str, *, create: bool = True) -> Path:
    """Where a command writes ``filename``: in ``--out``, else in ``perfpredict-out/<name>/``. Checked (and the
    folder created) before any work, so a finished result is never lost to a path problem."""
    from perfpredict.output_paths import output_dir_problem, special_file_problem

    # the name is the user's string (MODEL_NAME): as a folder name it must not climb out of perfpredict-out/
    folder = out or Path("perfpredict-out") / (re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:120] or "model")
    problem = output_dir_problem(folder)
    if problem:
        raise UsageError(f"--out: {problem}" if out is not None else f"the default output folder: {problem} (pass "
                         "--out)", step="arguments")
    target = folder / filename
    if target.is_dir():
        raise UsageError(f"{target} is a directory; the result cannot be written there", step="arguments")
    special = special_file_problem(target)
    if special:
        raise UsageError(special, step="arguments")
    if target.is_symlink() and not target.exists():
        raise UsageError(f"{target} is a link to {os.readlink(target)}, which does not exist", step="arguments")
    if create:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot create the output folder {folder}: {e.strerror or e}", step="arguments") from None
    # A folder that exists but takes no files (read-only, /proc, /sys) is found by writing one, now.
    probe_in = next((d for d in (folder, *folder.parents) if d.exists()), Path("."))
    try:
        fd, name = tempfile.mkstemp(prefix=".perfpredict-write-test-", dir=probe_in)
        os.close(fd)
        os.unlink(name)
    except OSError as e:
        raise UsageError(f"cannot write in {probe_in}: {e.strerror or e}", step="arguments") from None
    return target


def save_result(result, path: Path, show, log, *, no_mlflow: bool, experiment: str, kept: str) -> None:
    """The end of a command that measures into a pydantic ``result`` (``max-batch``, ``ab``): write it to ``path``
    as JSON, ``show`` it, ``log(result, path, experiment=...)`` it to MLflow (a tracking failure only warns: the
    file is on disk), and after a Ctrl-C say where the ``kept`` part is and exit 130."""
    show(result)  # first: a result that cannot be written (a full disk) is still seen
    try:
        path.write_text(json.dumps(result.model_dump(mode="json"), indent=2))
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e} (the result is shown above)", step="write") from None
    out_console.print(f"written: {path}", highlight=False, markup=False)
    if not no_mlflow:
        from perfpredict.tracking import tracking_uri

        try:
            run_id = log(result, path, experiment=experiment)
            out_console.print(f"mlflow: run {run_id} in {tracking_uri()} (experiment {experiment!r})", highlight=False,
                              markup=False)
        except Exception as e:  # noqa: BLE001 - tracking failure must not lose the result (already on disk)
            err_console.print(f"[yellow]warning[/]: MLflow logging failed ({type(e).__name__}: {escape(str(e))}); the "
                              f"result is at {escape(str(path))}")
    if result.interrupted:
        err_console.print(f"[yellow]interrupted[/]: {kept} finished so far are in {escape(str(path))}", highlight=False)
        raise typer.Exit(130)


def check_experiment(no_mlflow: bool, experiment: str) -> None:
    if not no_mlflow and not experiment.strip():
        raise UsageError("--experiment is empty: name the MLflow experiment, or pass --no-mlflow", step="arguments")


def prepare_mlflow(experiment: str) -> None:
    """Open the MLflow store and experiment before any work, so an unusable store is one usage error now,
    not a lost run later."""
    from perfpredict.tracking import prepare, tracking_uri

    try:
        prepare(experiment, quick=True)
    except Exception as e:  # noqa: BLE001 - an unusable store is a usage problem, found before the work
        raise UsageError(f"cannot use the MLflow store {tracking_uri()} ({error_line(e, None)}); "
                         "fix MLFLOW_TRACKING_URI or pass --no-mlflow", step="mlflow") from None


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _fmt_count(n: float | None) -> str:
    if n is None:
        return "–"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.3g}"


class _RichListener:
    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task = progress.add_task("starting", total=None)

    def stage(self, name: str) -> None:
        self.progress.update(self.task, description=name)

    def point_started(self, batch_size: int, index: int, total: int) -> None:
        self.progress.update(self.task, total=total, completed=index,
                             description=f"measuring batch size {batch_size}")

    def point_finished(self, point, index: int, total: int) -> None:
        self.progress.update(self.task, completed=index + 1)
        if point.ok:
            msg = (f"  batch {point.batch_size:>5}: {point.samples_per_s:10.1f} samples/s  "
                   f"median {point.iter_time_s * 1e3:8.2f} ms  cv {point.cv:.1%}  ({point.iterations} iters)")
        else:
            msg = f"  batch {point.batch_size:>5}: [yellow]{point.status}[/]: {escape(point.error or '')}"
        self.progress.console.print(msg, markup=True, highlight=False)


def print_prediction(card, console: Console = out_console) -> None:
    """A predicted card (``perfpredict predict``, or ``show`` on its file): one row per batch size with the
    intervals, the nearest profiled architecture, the time baseline's split and the estimators' notes."""
    info = card.prediction
    precision = "" if card.run.precision == "fp32" else f" ({card.run.precision})"
    t = Table(title=escape(f"{card.model.name}: predicted {card.run.mode}{precision} on {card.device.name} ({info.method})"))
    # what the memory column is depends on the device the estimators were trained on (card.memory[].kind)
    peak = "peak allocated" if card.device.kind == "cuda" else "peak RSS increase"
    # a CPU set predicts neither GPU column: left out rather than a column of dashes
    gpu = any(p.device_memory_safe_bytes is not None or p.gpu_utilization is not None for p in info.points)
    for c in ("batch", "iter time (q10-q90)", "samples/s", f"{peak} (q10-q90)",
              *(("GPU memory to reserve (q90)", "GPU util") if gpu else ())):
        t.add_column(c)
    for p in info.points:
        row = [str(p.batch_size),
               f"{p.iter_time_s * 1e3:.2f} ms ({p.iter_time_interval_s[0] * 1e3:.2f}-{p.iter_time_interval_s[1] * 1e3:.2f})",
               f"{p.samples_per_s:.0f}",
               f"{p.peak_memory_bytes / 2**20:.0f} MiB ({p.peak_memory_interval_bytes[0] / 2**20:.0f}-"
               f"{p.peak_memory_interval_bytes[1] / 2**20:.0f})"]
        if gpu:
            row += ["-" if p.device_memory_safe_bytes is None else f"{p.device_memory_safe_bytes / 2**20:.0f} MiB",
                    "-" if p.gpu_utilization is None else f"{p.gpu_utilization:.0%}"]
        t.add_row(*row)
    console.print(t)
    if info.nearest is not None:
        console.print(f"nearest profiled architecture: {info.nearest.name} (distance {info.nearest.distance:.2f}, "
                      f"in-distribution up to {info.nearest.threshold:.2f})", highlight=False)
    for p in info.points[:1] + info.points[1:][-1:]:  # the first and the last batch size asked for
        if p.iter_time_baseline_shares:
            parts = sorted(p.iter_time_baseline_shares.items(), key=lambda kv: -kv[1])
            console.print(f"time baseline at batch {p.batch_size}: "
                          + ", ".join(f"{k} {v:.0%}" for k, v in parts if v >= 0.005), highlight=False)
    for n in info.notes:
        console.print(f"[dim]note: {n}[/]", highlight=False)


def print_summary(card, console: Console = out_console) -> None:
    """A human-readable summary of a card: the per-batch table, then the fitted models and features."""
    if card.prediction is not None:
        print_prediction(card, console)
        return
    mem = {m.batch_size: m for m in card.memory}
    how = ("" if card.run.precision == "fp32" else f" · {card.run.precision}") \
        + (" · compiled" if card.run.compiled else "")
    t = Table(title=escape(f"{card.model.name} · {card.run.mode}{how} · {card.device.kind}: {card.device.name}"),
              title_style="bold")
    for col, just in (("batch", "right"), ("status", "left"), ("samples/s", "right"), ("iter median", "right"),
                      ("p10–p90", "right"), ("cv", "right"), ("iters", "right"), ("peak mem", "right"),
                      ("Horus eq.2", "right")):
        t.add_column(col, justify=just)
    def ms(v: float | None, fmt: str = ".2f") -> str:  # a hand-edited card may leave a number out
        return "–" if v is None else f"{v * 1e3:{fmt}}"

    for p in card.throughput:
        m = mem.get(p.batch_size)
        if p.ok:
            t.add_row(str(p.batch_size), "ok", "–" if p.samples_per_s is None else f"{p.samples_per_s:.1f}",
                      f"{ms(p.iter_time_s)} ms",
                      f"{ms(p.p10_s, '.1f')}–{ms(p.p90_s, '.1f')} ms", "–" if p.cv is None else f"{p.cv:.1%}",
                      "–" if p.iterations is None else str(p.iterations),
                      _fmt_bytes(m.peak_bytes if m else None),
                      _fmt_bytes(m.analytic.total if m and m.analytic else None))
        else:
            t.add_row(str(p.batch_size), f"[yellow]{p.status}[/]", "–", "–", "–", "–", "–", "–", "–")
    console.print(t)
    loads = [m.load_bytes for m in card.memory if m.load_bytes and m.load_bytes >= 2**20]
    if loads:
        console.print(f"of the peak RSS increase, {_fmt_bytes(max(loads))} is importing the model file's own "
                      "libraries, before the model was built (graph-based predictions do not include it)",
                      highlight=False)
    code = [m.file_backed_bytes for m in card.memory if m.file_backed_bytes]
    if code:
        lo, hi = _fmt_bytes(min(code)), _fmt_bytes(max(code))
        console.print(f"of the peak RSS increase, {lo if lo == hi else f'{lo}–{hi}'} is torch's library "
                      "code the kernels paged in (file-backed, shared with other processes running the same "
                      "kernels)", highlight=False)
    console.print(f"model: {card.model.parameters:,} parameters ({_fmt_bytes(card.model.param_bytes)}), "
                  f"source {escape(str(card.model.source))}", highlight=False)
    rm = card.rate_model
    if rm is not None:
        coef = ", ".join(f"{k}={v:.4g}" for k, v in rm.coefficients.items())
        console.print(f"rate model: [bold]{rm.kind}[/] ({coef}); R²={_fmt_opt(rm.r2)}, "
                      f"LOO rel. error={_fmt_opt(rm.loo_rel_error, pct=True)}; selected by {rm.selection}",
                      highlight=False)
    if card.latency is not None:
        console.print(f"latency: Lat(n, b) = n·T(b) + ν, ν = {card.latency.nu_s:.3f} s (measured start-up)",
                      highlight=False)
    f = card.features
    if f is not None:
        if f.available:
            console.print(f"graph ({f.exporter} exporter, opset {f.opset}): {_fmt_count(f.forward_macs_per_sample)} "
                          f"MACs/sample (fvcore {_fmt_count(f.fvcore_macs_per_sample)}), activations "
                          f"{_fmt_bytes(f.activation_bytes_per_sample)}/sample"
                          + ("" if f.peak_live_bytes_per_sample is None
                             else f" ({_fmt_bytes(f.peak_live_bytes_per_sample)}/sample alive at the peak)")
                          + f", {f.num_nodes} nodes"
                          + "".join(f", {n:,} {op} time steps" for op, n in f.recurrent_steps_by_op.items()),
                          highlight=False)
            for n in f.notes:
                console.print(f"  [yellow]note[/]: {escape(n)}", highlight=False)
        else:
            console.print(f"graph features: [yellow]unavailable[/]: {f.error}", highlight=False)
    if card.energy is not None:
        if card.energy.available and card.energy.points:
            e = card.energy.points[-1]
            util = f"GPU util {e.gpu_utilization:.0%}, " if e.gpu_utilization is not None else ""
            console.print(f"energy ({card.energy.scope}): {util}{_fmt_opt(e.energy_per_iter_j)} J/iter at batch "
                          f"{e.batch_size}", highlight=False)
        else:
            why = card.energy.reason or "no batch size was measured"
            console.print(f"energy/utilisation: unavailable ({why})", highlight=False)
    _print_extended(card, console)
    if card.run.wall_s and card.run.timed_s:
        console.print(f"profile wall time {card.run.wall_s:.1f} s, of which timed iterations "
                      f"{card.run.timed_s:.1f} s", highlight=False)


def _print_extended(card, console: Console) -> None:
    """Scaling, co-location, comm model and sensitivity lines, for the sections the card has."""
    co = card.colocation
    if co is not None:
        for p in co.points:
            if p.status == "ok":
                if p.per_copy_relative is None or p.aggregate_relative is None:  # the solo run failed
                    console.print(f"co-location ×{p.copies}: {p.aggregate_samples_per_s:.1f} samples/s in all "
                                  "(no solo run to compare with)", highlight=False)
                else:
                    console.print(f"co-location ×{p.copies}: per copy {p.per_copy_relative:.2f}× solo, aggregate "
                                  f"{p.aggregate_relative:.2f}× ({p.aggregate_samples_per_s:.1f} samples/s)",
                                  highlight=False)
            else:
                console.print(f"co-location ×{p.copies}: [yellow]{p.status}[/]: {p.error}", highlight=False)
        for q in co.pairs:
            if q.status == "ok":
                # T_deg is |solo/colocated - 1| (Horus): say which way the job moved
                faster = (q.job_colocated_samples_per_s or 0) > (q.job_solo_samples_per_s or float("inf"))
                console.print(f"next to {q.partner}: slowdown T_deg {q.job_slowdown:.1%}"
                              + (" (it ran faster than alone)" if faster else "")
                              + f" (partner {q.partner_slowdown:.1%})", highlight=False)
            else:
                console.print(f"next to {q.partner}: [yellow]{q.status}[/]: {q.error}", highlight=False)
    sc = card.scaling
    if sc is not None:
        for p in sc.points:
            if p.status == "ok":
                s_k = f"S={p.speedup:.2f}" if p.speedup is not None else "S not known (k=1 was not measured)"
                console.print(f"DDP k={p.workers} ({sc.backend}, global batch {p.global_batch}): "
                              f"{p.samples_per_s:.1f} samples/s, {s_k}", highlight=False)
            else:
                console.print(f"DDP k={p.workers}: [yellow]{p.status}[/]: {p.error}", highlight=False)
    cm = card.comm_model
    if cm is not None:
        held = f", held-out placement error {cm.holdout_rel_error:.1%}" if cm.holdout_rel_error is not None else ""
        console.print(f"GENIE comm model: γ={_fmt_opt(cm.gamma)}, λ={_fmt_opt(cm.lambda_)} from "
                      f"{len(cm.placements)} placements{held}", highlight=False)
    curve = card.speedup_curve
    if curve is not None and curve.fit:
        from perfpredict.fit.speedup import SpeedupCurve

        fitted = SpeedupCurve.from_dict(curve.fit)
        at = [x for x in (0.5, 1.0, 2.0, 4.0) if any(abs(q.p - x) < 1e-9 for q in curve.points) or x == 1.0]
        console.print("speedup curve: " + ", ".join(f"S({x:g}) = {fitted.speedup(x):.2f}" for x in at)
                      + f" from {len(curve.points)} point(s)", highlight=False)
        if fitted.notes:
            console.print(f"  [yellow]note[/]: {escape(fitted.notes)}", highlight=False)
    se = card.sensitivity
    if se is not None:
        console.print(f"sensitivity: probed CPUs {se.profiled_cpu_values} of {len(se.cpu_values)}; demand "
                      f"{se.demand.cpus} CPUs, {se.demand.mem_gb:.2f} GB", highlight=False)
        data = (f"dataset {_fmt_bytes(se.dataset_bytes)}" if se.dataset_bytes else "") + (
            f", storage {_fmt_bytes(int(se.storage_bytes_per_s))}/s" if se.storage_bytes_per_s else "")
        if data:
            console.print(f"  {data.lstrip(', ')}", highlight=False)
        mem_cols = ", ".join(_fmt_bytes(int(m * 1e9)) for m in se.mem_values_gb)
        console.print(f"  samples/s by CPUs (rows) × memory ({mem_cols}):", highlight=False)
        for c, row in zip(se.cpu_values, se.matrix):
            console.print(f"  {c:>3} CPU(s): " + "  ".join(f"{v:9.1f}" for v in row), highlight=False)
        if se.note:
            console.print(f"  [yellow]note[/]: {escape(se.note)}", highlight=False)
    for e in card.errors:
        # Per-batch failures are in the table and a failed export in the graph line; the rest are whole sections.
        if e.batch_size is None and e.step != "export_onnx":
            console.print(f"[yellow]{e.step}[/]: {e.message}", highlight=False)
    for n in card.notes:
        console.print(f"[dim]note: {n}[/]", highlight=False)


def _fmt_opt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "n/a"
    return f"{v:.1%}" if pct else f"{v:.4g}"


@app.command()
def profile(
    target: Annotated[str, typer.Argument(help="path to a model.py, or zoo:<family> (see `perfpredict zoo`)")],
    param: Annotated[list[str] | None, typer.Option("--param", "-p", help="zoo parameter name=value (repeatable)")] = None,
    batch_sizes: Annotated[str | None, typer.Option("--batch-sizes", "-b", help="comma-separated, e.g. 8,16,32")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:<i>")] = "auto",
    mode: Annotated[Mode, typer.Option(help="train (fwd+bwd+step) or infer (forward only)")] = Mode.train,
    precision: Annotated[str | None, typer.Option(help="fp32 | bf16 | fp16 (autocast mixed precision) [the file's PRECISION, else fp32]")] = None,
    compile_: Annotated[bool, typer.Option("--compile", help="measure torch.compile(model) (compiled at each process's first step)")] = False,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="output dir [./perfpredict-out/<model>/]")] = None,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not log to MLflow")] = False,
    experiment: Annotated[str, typer.Option(help="MLflow experiment name")] = "perfpredict-profiles",
    threads: Annotated[int | None, typer.Option(help="torch intra-op threads per measurement of the batch sweep [all cores]; --scaling, --colocation and --sensitivity split the cores themselves")] = None,
    min_time: Annotated[float, typer.Option(help="minimum timed seconds per batch size (unless 500 iterations come first)")] = 2.0,
    max_time: Annotated[float, typer.Option(help="cap on timed seconds per batch size")] = 15.0,
    memory_limit: Annotated[str | None, typer.Option(help="memory a measurement may use, e.g. 4GB (CPU: beyond its start; CUDA: the allocator's cap)")] = None,
    no_features: Annotated[bool, typer.Option("--no-features", help="skip ONNX export and graph features")] = False,
    no_fvcore: Annotated[bool, typer.Option("--no-fvcore", help="skip the fvcore MAC cross-check")] = False,
    scaling: Annotated[bool, typer.Option("--scaling", help="data-parallel S(k) with DDP (+ GENIE comm model)")] = False,
    colocation: Annotated[bool, typer.Option("--colocation", help="1-4 co-located copies and a pair with --partner")] = False,
    sensitivity: Annotated[bool, typer.Option("--sensitivity", help="Synergy CPU/memory sensitivity (needs make_dataset)")] = False,
    all_: Annotated[bool, typer.Option("--all", help="--scaling --colocation --sensitivity")] = False,
    extended_batch: Annotated[int | None, typer.Option("--extended-batch", help="batch for the extended profiles [from the sweep]")] = None,
    workers: Annotated[str | None, typer.Option(help="data-parallel worker counts, e.g. 1,2,4 [powers of two that fit]")] = None,
    copies: Annotated[str, typer.Option(help="co-located copy counts")] = "1,2,3,4",
    partner: Annotated[str, typer.Option(help="reference job co-located with this one ('none' to skip)")] = "zoo:mlp",
    window: Annotated[float, typer.Option(help="seconds each co-location/scaling/pipeline run is timed")] = 3.0,
    link_mbit: Annotated[float, typer.Option(help="bandwidth cap of the virtual inter-node link, Mbit/s")] = 1000.0,
    storage_bandwidth: Annotated[str | None, typer.Option(help="storage read bandwidth for the cache model, e.g. 200MB (per second)")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False,
) -> None:
    """Profile a model on this machine and write its performance card (+ ONNX, plots, MLflow run)."""
    from perfpredict.workload_args import check_target, parse_batch_sizes, parse_params

    # Everything typed is checked before anything slow starts (torch, the measuring processes).
    if not 0 < min_time <= max_time < math.inf:  # nan fails too
        raise UsageError(f"need 0 < --min-time <= --max-time, both finite; got {min_time:g} and {max_time:g}",
                         step="arguments")
    if not (0 < window < math.inf and 0 < link_mbit < math.inf):  # nan fails both comparisons
        raise UsageError(f"--window and --link-mbit must be positive finite numbers, got {window:g} and "
                         f"{link_mbit:g}", step="arguments")
    check_experiment(no_mlflow, experiment)
    from perfpredict.profile.request import check_threads

    check_threads(threads, "--threads")
    if extended_batch is not None and extended_batch < 1:
        raise UsageError(f"--extended-batch must be a positive integer, got {extended_batch}", step="arguments")
    params = parse_params(param)
    if precision is not None:
        from perfpredict.workload.ref import check_precision

        precision = check_precision(precision, "--precision")
    sizes = parse_batch_sizes(batch_sizes, "--batch-sizes") if batch_sizes else None
    worker_counts = parse_batch_sizes(workers, "--workers") if workers else None
    copy_counts = parse_batch_sizes(copies, "--copies")
    memory_limit_bytes, storage_bytes_per_s = _bytes(memory_limit), _bytes(_per_second(storage_bandwidth))
    if memory_limit_bytes is not None and memory_limit_bytes <= 0:
        raise UsageError(f"--memory-limit must be positive, got {memory_limit!r}", step="arguments")
    if storage_bytes_per_s is not None and storage_bytes_per_s <= 0:
        raise UsageError(f"--storage-bandwidth must be positive, got {storage_bandwidth!r}", step="arguments")
    check_target(target, params)
    check_out_dir(out)
    partner_target = None if partner.strip().lower() == "none" else partner.strip()
    if (colocation or all_) and partner_target:
        check_target(partner_target)
    # a section's flag without its section changes nothing: say so rather than let it pass for a setting
    from perfpredict.profile.extended import ExtendedSettings

    on = {"--scaling": scaling or all_, "--colocation": colocation or all_, "--sensitivity": sensitivity or all_}
    d = ExtendedSettings()  # the sections' defaults, which the options above repeat
    given = [("--workers", workers is not None, ("--scaling",)),
             ("--link-mbit", link_mbit != d.link_mbit, ("--scaling",)),
             ("--copies", tuple(copy_counts) != tuple(d.copies), ("--colocation",)),
             ("--partner", partner != d.partner, ("--colocation",)),
             ("--storage-bandwidth", storage_bandwidth is not None, ("--sensitivity",)),
             ("--window", window != d.window_s, ("--scaling", "--colocation", "--sensitivity"))]
    for flag, set_, needs in given:
        if set_ and not any(on[n] for n in needs):
            err_console.print(f"[yellow]note[/]: {flag} applies to {' / '.join(needs)} (or --all), which this "
                              "profile does not run", highlight=False)

    from perfpredict.profile import runner

    # Start the measuring processes' fork server first: it imports torch on the other core while this
    # process imports, loads the model, exports it and opens the MLflow store.
    runner.warm_up()
    from perfpredict.plots import plot_card
    from perfpredict.profile import ProfileSettings, TimingConfig, profile_workload
    from perfpredict.profile.extended import ExtendedSettings
    from perfpredict.workload import resolve_workload

    workload = resolve_workload(target, params, precision, compile_ or None)
    if (colocation or all_) and partner_target:
        resolve_workload(partner_target, {})  # a wrong --partner is found now, not after the sweep
    settings = ProfileSettings(
        batch_sizes=sizes, mode=mode.value, device=device,
        timing=TimingConfig(min_time_s=min_time, max_time_s=max_time), threads=threads,
        memory_limit_bytes=memory_limit_bytes, features=not no_features, fvcore=not no_fvcore)
    extended = ExtendedSettings(
        scaling=scaling or all_, colocation=colocation or all_, sensitivity=sensitivity or all_,
        batch_size=extended_batch, workers=worker_counts, copies=copy_counts,
        partner=partner_target, window_s=window,
        link_mbit=link_mbit, storage_bytes_per_s=storage_bytes_per_s)
    out_dir = output_file(out, workload.name, "card.json", create=False).parent
    command = "perfpredict " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if not no_mlflow:
        prepare_mlflow(experiment)

    card_file = out_dir / "card.json"
    before = card_file.stat().st_mtime_ns if card_file.exists() else None  # an earlier run's card
    try:
        with progress_bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn()) as progress:
            outcome = profile_workload(workload, settings, out_dir=out_dir, listener=_RichListener(progress),
                                       command=command, extended=extended)
    except KeyboardInterrupt:
        # Typer turns Ctrl-C into a silent exit 130; say where the kept measurements are first.
        written = card_file.exists() and card_file.stat().st_mtime_ns != before and _has_points(card_file)
        where = (f"are in {card_file}" if written else
                 "were none (interrupted before the first batch size; any card.json there is an earlier run's)")
        err_console.print(f"[yellow]interrupted[/]: the measurements finished so far {where}", highlight=False)
        if written and not no_mlflow:
            onnx = out_dir / "model.onnx"  # this profile's export, when it got that far
            fresh = [onnx] if onnx.is_file() and (before is None or onnx.stat().st_mtime_ns > before) else []
            _log_interrupted_profile(card_file, experiment, fresh)
        raise typer.Exit(130) from None
    card = outcome.card
    try:
        plots = plot_card(card, out_dir)
    except Exception as e:  # noqa: BLE001 - a plotting problem must not hide the measurements
        plots = []
        err_console.print(f"[yellow]warning[/]: plots not written: {type(e).__name__}: {e}")
    print_summary(card)
    out_console.print(f"card: {outcome.card_path}", highlight=False, markup=False)
    if outcome.onnx_path:
        out_console.print(f"onnx: {outcome.onnx_path}", highlight=False, markup=False)
    for p in plots:
        out_console.print(f"plot: {p}", highlight=False, markup=False)
    if not no_mlflow:
        from perfpredict.tracking import log_profile, tracking_uri, ui_command

        try:
            run_id = log_profile(card, experiment=experiment, failed=outcome.error is not None,
                                 files=[f for f in (outcome.onnx_path, *plots) if f])
            out_console.print(f"mlflow: run {run_id} in {tracking_uri()} (experiment {experiment!r}); "
                              f"view with: {ui_command()}", highlight=False)
        except Exception as e:  # noqa: BLE001 - tracking failure must not lose the card (already on disk)
            err_console.print(f"[yellow]warning[/]: MLflow logging failed ({type(e).__name__}: {e}); "
                              f"the card is at {outcome.card_path}")
    if outcome.error is not None:
        raise outcome.error


def _has_points(card_file: Path) -> bool:
    """Whether a card written by an interrupted profile holds any batch size's outcome (it is written at the start
    too, with none: "the measurements finished so far are in card.json" then promised nothing)."""
    from perfpredict.card import PerformanceCard

    try:
        return bool(PerformanceCard.load(card_file).throughput)
    except PerfPredictError:
        return True  # a card that cannot be read is still named: the user looks at it


def _log_interrupted_profile(card_file: Path, experiment: str, files: list[Path] | None = None) -> None:
    """The card a Ctrl-C kept, as an MLflow run ended KILLED (as ``ab`` and ``max-batch`` log theirs), with the
    ``files`` this profile wrote before it; a second Ctrl-C or a tracking failure only skips it: the card is on
    disk."""
    from perfpredict.card import PerformanceCard
    from perfpredict.tracking import log_profile

    try:
        run_id = log_profile(PerformanceCard.load(card_file), experiment=experiment, interrupted=True,
                             files=files or ())
        err_console.print(f"mlflow: run {run_id} (KILLED) has the measurements finished so far", highlight=False)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001
        err_console.print(f"[yellow]warning[/]: the interrupted profile was not logged to MLflow "
                          f"({type(e).__name__})", highlight=False)


#: the simulator flags ``simulate`` and ``compare`` share (checked by :func:`sim_settings`)
SimMode = Annotated[str, typer.Option(help="auto | round | event")]
SimRound = Annotated[float, typer.Option("--round", help="round length in seconds (round mode)")]
SimRestartOverhead = Annotated[float, typer.Option(help="seconds without progress when a job resumes or moves")]
SimStartOverhead = Annotated[float | None, typer.Option(help="seconds without progress when a job first starts "
                                                       "(default: GENIE's ν of eq. 4 when a mechanism is swaf or "
                                                       "genie-*, as experiments/genie_qos.py charges it; 0 "
                                                       "otherwise)")]
SimSteady = Annotated[str | None, typer.Option(help="steady-state window of job indices for JCT, e.g. 1000:6000")]
SimDropOversized = Annotated[bool, typer.Option("--drop-oversized", help="leave out (and count) the jobs the "
                                                "cluster can never run (too many GPUs, too little device memory, "
                                                "a GPU type it has no speed for) instead of refusing the trace")]


def sim_settings(mode: str, round_s: float, restart_overhead: float, max_time: float | None,
                 steady: str | None, drop_oversized: bool = False, start_overhead: float | None = None,
                 mechanisms: Sequence[str] = ()):
    """The simulator flags shared by ``simulate`` and ``compare``, checked: a SimConfig and the steady window.
    ``start_overhead`` None: :func:`default_start_overhead` of the ``mechanisms`` run."""
    from perfpredict.sim.simulator import MIN_PERIOD_S, SimConfig

    if mode not in ("auto", "round", "event"):
        raise UsageError(f"--mode must be auto, round or event, not {mode!r}", step="arguments")
    if not (math.isfinite(round_s) and round_s >= MIN_PERIOD_S) \
            or not (math.isfinite(restart_overhead) and restart_overhead >= 0):
        raise UsageError(f"need --round >= {MIN_PERIOD_S:g} and --restart-overhead >= 0 (finite seconds)",
                         step="arguments")
    if start_overhead is not None and not (math.isfinite(start_overhead) and start_overhead >= 0):
        raise UsageError(f"need --start-overhead >= 0 (finite seconds), got {start_overhead}", step="arguments")
    if max_time is not None and not (math.isfinite(max_time) and max_time > 0):
        raise UsageError(f"--max-time must be a positive number of seconds, got {max_time}", step="arguments")
    window = None
    if steady:
        try:
            a, b = (int(x) for x in steady.split(":"))
        except ValueError:
            raise UsageError(f"--steady {steady!r}: expected FIRST:LAST job indices, e.g. 1000:6000",
                             step="arguments") from None
        if not 0 <= a < b:
            raise UsageError(f"--steady {steady!r}: need 0 <= FIRST < LAST", step="arguments")
        window = (a, b)
    return SimConfig(mode=mode, round_s=round_s, restart_overhead_s=restart_overhead, max_time_s=max_time,
                     start_overhead_s=default_start_overhead(mechanisms) if start_overhead is None else start_overhead,
                     oversized="drop" if drop_oversized else "error"), window


def default_start_overhead(mechanisms: Sequence[str]) -> float:
    """The start overhead ``simulate`` and ``compare`` charge without ``--start-overhead``: GENIE's platform ν
    (eq. 4, the median of the GENIE cards' ν, :func:`~perfpredict.sched.genie_cards.genie_nu_s`) when one of the
    ``mechanisms`` is a GENIE mechanism, which runs GENIE tasks only, as ``experiments/genie_qos.py`` charges it
    (every scheduler compared on that trace pays the same ν); 0 otherwise."""
    from perfpredict.sched.mechanisms import mechanism_module

    if not any(mechanism_module(m) == "genie" for m in mechanisms):
        return 0.0
    from perfpredict.sched.genie_cards import genie_nu_s

    return genie_nu_s()


@app.command()
def simulate(
    cluster: Annotated[str, typer.Option(help="cluster JSON file, or SERVERSxGPUS[:OPTIONS] (e.g. 4x8:gpu_mem=32,type=T4; options cpus=, mem=, gpu_mem=, type=, energy=), or synergy (16x8, the default), or andreas:nodes=N,case=1|2, or armida, or genie[:nodes=4,gpus=4], or horus-testbed | horus-scale | horus:nodes=3,gpus=4,gpu_mem=80, or the servers a public trace ran on: philly:MACHINE_LIST (cpus_per_gpu=3, mem_per_gpu=62.5) | pai:MACHINE_SPEC (gpu_type=V100/T4) | helios:GPU_NUMBER (date=, vc=)")] = "16x8",
    trace: Annotated[str, typer.Option(help="trace .csv, or .swf (options after a colon: FILE.swf:model=mcnn; also gpus_per_proc=, min_gpus=, max_gpus=, max_jobs=), or a public DL-cluster trace: philly:FILE, helios:FILE, pai:TASKS,jobs=JOBS (options after the file: status=, vc=, gpu_type=, start=, end=, max_jobs=, model=, attempts=sum|last|span, tz= (Philly; America/Los_Angeles), fractional=ceil|keep, split=20/70/10 for Synergy models; docs/simulator.md), or synergy:n=1000,load=9 (also split=20/70/10, multi=0; without load= every job arrives at 0), or dlbags:n=2000 (seed 002), or andreas:nodes=N[,case=,load=] or andreas-table5, or genie[:rate=10,hours=24] (also mix=5/35/60, seed=), or horus-small | horus-large | horus-scale (load=1.3; the experiment runs horus:workload=scale,load=2.5) | horus:workload=large,n=100 (also interarrival=36, load=, gpus=1024, seed=)")] = "synergy:n=1000,load=9",
    policy: Annotated[str, typer.Option(help="fifo | srtf | las | ftf | shortest | edf | priority")] = "fifo",
    mechanism: Annotated[str, typer.Option(help="proportional | greedy | tune | opt | drf | tetris | moldable-equipartition | malleable-equipartition | moldable-proportional | malleable-proportional | rigid | andreas | andreas-baseline | swaf | genie-fifo | genie-capacity | genie-min-min | genie-weighted-fair | genie-tetris-perf | genie-tetris-cer | horus | horus-f | obp | pab | fifo-exclusive; options after a colon, e.g. horus:k=3,max_colocated=3 or horus:interference=paper")] = "proportional",
    cards: Annotated[str, typer.Option(help="'paper' or a directory of card.json files (override paper models), or for Horus jobs horus:predictions=P,memory=M with P one of trained | family-cv | paper-mix and M safe | median")] = "paper",
    seed: Annotated[int, typer.Option(help="seed for generated traces")] = 0,
    mode: SimMode = "auto",
    round_s: SimRound = 300.0,
    restart_overhead: SimRestartOverhead = 0.0,
    start_overhead: SimStartOverhead = None,
    steady: SimSteady = None,
    drop_oversized: SimDropOversized = False,
    max_time: Annotated[float | None, typer.Option(help="stop at this simulated time (s)")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="output directory")] = Path("perfpredict-sim"),
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not log to MLflow")] = False,
    experiment: Annotated[str, typer.Option(help="MLflow experiment name")] = "perfpredict-simulations",
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False,
) -> None:
    """Replay a trace on a simulated cluster under a policy and a mechanism; write jobs.csv/.parquet, metrics.json, plots."""
    from perfpredict.sim.run import run_simulation

    check_experiment(no_mlflow, experiment)
    cfg, window = sim_settings(mode, round_s, restart_overhead, max_time, steady, drop_oversized, start_overhead,
                               [mechanism])
    check_out_dir(out)
    if not no_mlflow:
        prepare_mlflow(experiment)  # an unusable store is found now, not after a long simulation
    with progress_bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn()) as progress:
        task = progress.add_task(f"simulating {policy} + {mechanism}", total=None)

        def tick(t: float, finished: int, active: int) -> None:
            progress.update(task, completed=finished, total=finished + active,
                            description=f"simulating {policy} + {mechanism}: t = {t / 3600:.1f} h")

        run = run_simulation(trace, cluster, policy, mechanism, cards=cards, config=cfg, seed=seed, steady=window,
                             out_dir=out, on_decision=tick)
    m = run.metrics.to_dict()
    r = run.result
    table = Table(title=f"{run.params['policy']} + {run.params['mechanism']} on {run.params['cluster']} "
                        f"({run.params['jobs']} jobs, {r.mode} mode)", title_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in m.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            text = "–"  # no value (e.g. GPU busy time without GPU sharing, or no job finished in the window)
        elif key.endswith("_s"):
            text = f"{value / 3600:,.2f} h"
        elif key.endswith("util"):
            text = f"{value:.1%}"
        else:
            text = f"{value:,.4g}" if isinstance(value, float) else str(value)
        table.add_row(key, text)
    out_console.print(table)
    g = run.extra.get("genie")
    if g:
        def num(v, fmt: str, scale: float = 1.0) -> str:  # a class without tasks has no share: "–", as the table
            return "–" if v is None or not math.isfinite(v) else f"{v * scale:{fmt}}"

        by = ", ".join(f"{c} {num(v, '.1%')}" for c, v in g["qos_by_class"].items())
        out_console.print(f"GENIE §7.1: QoS guarantee {num(g['qos_guarantee'], '.1%')} ({by}), makespan "
                          f"{num(g['makespan_s'], ',.2f', 1 / 3600)} h, average normalised latency "
                          f"{num(g['avg_norm_latency'], '.3g')}", highlight=False)
    if cfg.start_overhead_s > 0:
        out_console.print(f"start overhead charged: {cfg.start_overhead_s:g} s at each job's first start"
                          + (" (GENIE's ν, eq. 4; --start-overhead to change it)" if start_overhead is None else ""),
                          highlight=False)
    out_console.print(f"simulated in {r.wall_s:.2f} s ({len(r.finished) / max(r.wall_s, 1e-9):,.0f} jobs/s), "
                      f"{r.decisions} decisions, {r.decision_time_s:.2f} s deciding; "
                      f"{len(r.unfinished)} unfinished, {len(r.dropped)} dropped", highlight=False)
    out_console.print(f"records: {out / 'jobs.csv'} (and jobs.parquet)  metrics: {out / 'metrics.json'}", highlight=False)
    for note in run.notes:
        err_console.print(f"[yellow]note[/]: {note}", highlight=False)
    if not no_mlflow:
        from perfpredict.tracking import log_simulation, tracking_uri

        try:
            run_id = log_simulation(run, experiment=experiment)
            out_console.print(f"mlflow: run {run_id} in {tracking_uri()} (experiment {experiment!r})", highlight=False)
        except Exception as e:  # noqa: BLE001 - tracking failure must not lose the results (already on disk)
            err_console.print(f"[yellow]warning[/]: MLflow logging failed ({type(e).__name__}: {e}); "
                              f"results are in {out}")
    if r.stall:
        # The run is kept (records, metrics, MLflow) but a script must not read it as a complete one.
        err_console.print(f"[red]error[/]: simulate: {len(r.unfinished)} job(s) can never finish on this cluster: "
                          f"{r.stall}. The records of all jobs are in {out}", highlight=False)
        raise typer.Exit(1)


@app.command()
def zoo(
    family: Annotated[str | None, typer.Argument(help="show one family's parameters")] = None,
    grid: Annotated[bool, typer.Option("--grid", help="list the family's dataset-sweep configurations")] = False,
) -> None:
    """List the built-in model zoo (pure-torch families with depth/width knobs)."""
    from perfpredict.workload.zoo import families, get_family

    if family is None:
        t = Table(title="perfpredict zoo — profile with: perfpredict profile zoo:<family> --param k=v")
        for col in ("family", "task", "parameters (defaults)", "grid", "description"):
            t.add_column(col)
        for name, fam in families().items():
            params = ", ".join(f"{p.name}={p.default}" for p in fam.params)
            t.add_row(name, fam.task, params, str(len(fam.grid())), fam.description)
        out_console.print(t)
        return
    fam = get_family(family)
    if not grid:
        t = Table(title=f"zoo:{fam.name} — {fam.description}")
        for col in ("parameter", "default", "choices / min", "meaning"):
            t.add_column(col)
        for p in fam.params:
            lim = ", ".join(map(str, p.choices)) if p.choices else (f">= {p.minimum}" if p.minimum is not None else "")
            t.add_row(p.name, str(p.default), lim, p.help)
        out_console.print(t)
        cfg = fam.resolve({})
        out_console.print(f"default: {fam.config_name(cfg)}: {_fmt_count(fam.closed_form_macs(cfg))} MACs/sample, "
                          f"batch sizes {list(fam.default_batch_sizes)}", highlight=False)
        return
    t = Table(title=f"zoo:{fam.name} grid")
    for col in ("name", "MACs/sample", "parameters"):
        t.add_column(col)
    for overrides in fam.grid():
        cfg = fam.resolve(overrides)
        t.add_row(fam.config_name(cfg), _fmt_count(fam.closed_form_macs(cfg)), _fmt_count(fam.closed_form_params(cfg)))
    out_console.print(t)


@app.command()
def show(card_path: Annotated[Path, typer.Argument(help="a card.json written by perfpredict profile")]) -> None:
    """Print the summary of a saved performance card."""
    from perfpredict.card import PerformanceCard

    card = PerformanceCard.load(card_path)
    print_summary(card)
    # profile ends with its error line; a card read back later says here what failed at which batch size
    failed = [e for e in card.errors if e.batch_size is not None]
    if card.status != "complete" or failed:
        out_console.print(f"[yellow]{card.status} card[/]: {len(card.measured_points())} batch size(s) measured",
                          highlight=False)
    for e in failed:
        out_console.print(f"[yellow]batch {e.batch_size}[/]: {e.step}: {e.message}", highlight=False)


@app.command()
def latency(
    card_path: Annotated[Path, typer.Argument(help="a card.json")],
    iterations: Annotated[int, typer.Option("--iterations", "-n", help="training iterations")],
    batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="batch size")],
) -> None:
    """Predict a job's run time from its card: Lat(n, b) = n·T(b) + ν (GENIE eq. 4, one device)."""
    from perfpredict.card import PerformanceCard

    card = PerformanceCard.load(card_path)
    if iterations < 0 or batch_size <= 0:
        raise UsageError("need --iterations >= 0 and --batch-size > 0", step="arguments")
    point = card.predicted_point(batch_size)
    if point is not None:  # a predicted card's own point: the rate model only smooths between its points
        t_s, total = point.iter_time_s, card.latency_s(iterations, batch_size)
        lo, hi = point.iter_time_interval_s
        how = f"q10-q90 {lo * 1e3:.3f}-{hi * 1e3:.3f} ms, the card's predicted point"
    else:
        pred = card.rate().predict(batch_size)
        t_s, total = pred.iter_time_s, card.latency_s(iterations, batch_size)
        span = "predicted batch sizes" if card.prediction else "measured range"
        how = f"±{pred.rel_uncertainty:.0%}, " + (f"extrapolated past the {span}" if pred.extrapolated
                                                  else f"within the {span}")
        if card.prediction and card.prediction.points:
            # the fit's ± is its error against the predicted points, not the prediction's: carry the nearest
            # point's q10-q90 spread here as well
            near = min(card.prediction.points, key=lambda p: abs(math.log(p.batch_size / batch_size)))
            lo_r, hi_r = (x / near.iter_time_s for x in near.iter_time_interval_s)
            e = pred.rel_uncertainty
            how = (f"about {t_s * lo_r * (1 - e) * 1e3:.3f}-{t_s * hi_r * (1 + e) * 1e3:.3f} ms: batch "
                   f"{near.batch_size}'s predicted q10-q90 spread, widened by the rate model's ±{e:.0%} fit to the "
                   f"predicted points; {'extrapolated past' if pred.extrapolated else 'within'} the {span}")
            if pred.extrapolated:
                how += f" (`perfpredict predict <model> -b {batch_size}` predicts this batch size directly)"
    out_console.print(f"T({batch_size}) = {t_s * 1e3:.3f} ms/iter ({batch_size / t_s:.1f} samples/s, {how}); "
                      f"Lat({iterations}, {batch_size}) = {total:.2f} s on {card.device.kind} ({card.device.name})",
                      highlight=False)


@app.command()
def version() -> None:
    """Print the perfpredict version."""
    out_console.print(f"perfpredict {__version__}")


def _print_version(value: bool) -> None:
    if value:
        version()
        raise typer.Exit()


@app.callback()
def _options(
    version_: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                           help="Print the perfpredict version and exit.")] = False,
) -> None:
    """Profile, model and predict the performance of deep-learning training jobs."""


def _ctrl_c_typer_swallowed(exit_: SystemExit) -> bool:
    """Whether this exit is Typer's translation of a Ctrl-C no command caught (``raise Exit(130) from
    KeyboardInterrupt`` inside Typer, then ``sys.exit``): a command that catches it itself says what it kept
    and raises its own ``Exit(130)`` from None, which has no KeyboardInterrupt as its cause."""
    translated = exit_.__context__
    return isinstance(getattr(translated, "__cause__", None), KeyboardInterrupt)


#: ``perfpredict --help`` lists the commands in these panels, in this order (a command missing here would be
#: listed under a bare "Commands" panel; tests/test_cli.py checks that none is).
COMMAND_PANELS: dict[str, tuple[str, ...]] = {
    "Measure on this machine": ("profile", "ab", "max-batch", "calibrate", "zoo"),
    "Predict without running the job": ("predict", "colocate", "latency", "show", "models", "train", "serve"),
    "Schedule a cluster": ("simulate", "compare", "trace"),
    "About": ("version",),
}


#: Options shown in their own panel of a command's ``--help`` (the others stay under "Options"): profile has 26.
OPTION_PANELS: dict[str, dict[str, tuple[str, ...]]] = {
    "profile": {
        "Extended profiles (--all)": ("scaling", "colocation", "sensitivity", "all_", "extended_batch", "workers",
                                      "copies", "partner", "window", "link_mbit", "storage_bandwidth"),
        "Output": ("out", "no_mlflow", "experiment"),
    },
}


def command_name(info: typer.models.CommandInfo) -> str:
    """The name a user types for a registered command (typer derives it from the function when none is given)."""
    return info.name or info.callback.__name__.replace("_", "-")


def group_commands(typer_app: typer.Typer) -> None:
    """Order ``typer_app``'s commands into :data:`COMMAND_PANELS` and give each its docstring as help with every
    paragraph on one line (the first is the ``short_help`` of the command list).

    Typer's rich help keeps a docstring's line breaks in the command list and in a command's later paragraphs,
    so prose wrapped at 120 columns in the source broke mid-sentence on the screen."""
    rank = {name: (i, j) for i, names in enumerate(COMMAND_PANELS.values()) for j, name in enumerate(names)}
    panel_of = {name: panel for panel, names in COMMAND_PANELS.items() for name in names}
    typer_app.registered_commands.sort(key=lambda info: rank.get(command_name(info), (len(rank), 0)))
    for info in typer_app.registered_commands:
        name = command_name(info)
        if name in panel_of:
            info.rich_help_panel = panel_of[name]
        if info.help is None and info.callback.__doc__:
            paragraphs = inspect.cleandoc(info.callback.__doc__).split("\n\n")
            info.help = "\n\n".join(" ".join(p.split()) for p in paragraphs)
            info.short_help = info.short_help or info.help.split("\n\n")[0]


def main() -> None:
    code: Any = 0
    try:
        _main()
    except SystemExit as e:
        code = e.code
        raise
    except BaseException:
        # an error _main lets through (--debug, an interrupt): with a stray thread the process ends in the
        # finally below, before Python would print the traceback, so it is printed here
        code = 1
        if _stray_model_threads():
            traceback.print_exc()
        raise
    finally:
        forget_handled_interrupt()
        _exit_past_stray_threads(code)


def _stray_model_threads() -> list[threading.Thread]:
    """The threads the model file started that are still running."""
    loader = sys.modules.get("perfpredict.workload.loader")  # not imported: no model code ran
    return [t for t in (loader.MODEL_THREADS if loader else ()) if t.is_alive()]


def _exit_past_stray_threads(code: Any) -> None:
    """End the process now when a thread the model file started is still running: Python waits for every
    non-daemon thread before it exits, so one started at import (a watchdog, a prefetcher) kept the command
    running forever after it had finished. The exit handlers (MLflow's, multiprocessing's) still run."""
    import atexit
    import contextlib

    stray = _stray_model_threads()
    if not stray:
        return
    if isinstance(code, str):  # sys.exit("message"): Python prints it when it exits, os._exit does not
        err_console.print(code, markup=False, highlight=False, soft_wrap=True)
    from perfpredict.workload.loader import library_thread

    own = [t for t in stray if not library_thread(t)]
    if own:
        err_console.print(f"[yellow]note[/]: exiting past {len(own)} thread(s) still running that the model file "
                          f"started ({', '.join(escape(t.name) for t in own[:3])}); perfpredict does not wait for "
                          "them", highlight=False)
    status = code if isinstance(code, int) else (0 if code is None else 1)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def build_command():
    """The ``perfpredict`` click group with every command registered, grouped (:func:`group_commands`), and its
    help texts escaped for rich markup: typer renders them as markup, where a ``[the file's PRECISION]`` or the
    ``[ray]`` of ``perfpredict[ray]`` is a style tag and vanished from ``--help``."""
    import perfpredict.cli_ab  # noqa: F401 - registers ab on `app`
    import perfpredict.cli_batch  # noqa: F401 - registers max-batch on `app`
    import perfpredict.cli_calibrate  # noqa: F401 - registers calibrate on `app`
    import perfpredict.cli_compare  # noqa: F401 - registers compare on `app`
    import perfpredict.cli_models  # noqa: F401 - registers train / predict / serve on `app`
    import perfpredict.cli_trace  # noqa: F401 - registers trace on `app`

    group_commands(app)
    group = typer.main.get_command(app)
    for name, panels in OPTION_PANELS.items():
        panel_of = {param: panel for panel, params in panels.items() for param in params}
        for param in group.commands[name].params:
            if param.name in panel_of:
                param.rich_help_panel = panel_of[param.name]
    for command in [group, *group.commands.values()]:
        for holder in [command, *command.params]:
            for attr in ("help", "short_help"):
                if getattr(holder, attr, None):
                    setattr(holder, attr, escape(getattr(holder, attr)))
    return group


#: what the interrupt a command reports was: a Ctrl-C, or a SIGTERM handled as one
_INTERRUPTED_BY = "Ctrl-C"


def interrupted_by() -> str:
    """``Ctrl-C``, or ``SIGTERM`` when that is what stopped the command (a scheduler's or `timeout`'s kill)."""
    return _INTERRUPTED_BY


def _terminate_as_interrupt() -> None:
    """SIGTERM (what a scheduler, `timeout` or `kill` sends) is handled as Ctrl-C is: every command keeps what it
    has measured and says so, where the default action lost it (a profile's card partial, no MLflow run). A
    process forked from this one keeps SIGTERM's default action."""
    import signal

    main_pid = os.getpid()

    def handler(signum, frame) -> None:  # noqa: ARG001
        if os.getpid() != main_pid:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        global _INTERRUPTED_BY
        _INTERRUPTED_BY = "SIGTERM"
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (an embedding caller): leave the default
        pass


def _main() -> None:
    _terminate_as_interrupt()
    group = build_command()
    # --debug works with any command: taken out here, so commands without the option do not reject it.
    debug = "--debug" in sys.argv
    sys.argv = [a for a in sys.argv if a != "--debug"]
    try:
        group()  # what app() runs (typer's __call__ adds only its exception hook, which is turned off here)
    except PerfPredictError as e:
        err_console.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False, soft_wrap=True)
        if debug and e.detail:
            err_console.print(e.detail, highlight=False, markup=False)
        elif debug:
            err_console.print(traceback.format_exc(), highlight=False, markup=False)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        # Before a command started (its imports) or after it ended: a command that measures says itself what
        # it kept, so nothing is claimed here.
        err_console.print(f"[yellow]interrupted[/] ({interrupted_by()})")
        sys.exit(130)
    except SystemExit as e:
        if e.code == 130 and _ctrl_c_typer_swallowed(e):
            err_console.print(f"[yellow]interrupted[/] ({interrupted_by()})")
        raise
    except MemoryError:  # an input too large for this machine (a trace of millions of jobs), not a bug
        if debug:
            raise
        err_console.print("[bold red]error[/]: out of memory (MemoryError): the input is too large for this "
                          "machine's memory; give a smaller one (for a trace, fewer jobs)", highlight=False)
        sys.exit(1)
    except Exception as e:  # a bug in perfpredict itself: still one line unless --debug
        if debug:
            raise
        err_console.print(f"[bold red]internal error[/]: {type(e).__name__}: {escape(str(e))} (re-run with --debug for the "
                          "traceback, and please report it)", highlight=False, soft_wrap=True)
        sys.exit(70)


if __name__ == "__main__":
    main()
