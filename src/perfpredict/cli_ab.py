"""``perfpredict ab``: is the new version of a job faster? Paired, interleaved rounds with a 95 % interval
(registered on the main app)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from perfpredict.cli import (
    Mode,
    _fmt_bytes,
    app,
    check_experiment,
    check_out_dir,
    err_console,
    out_console,
    output_file,
    prepare_mlflow,
    progress_bar,
    save_result,
)
from perfpredict.errors import PerfPredictError, UsageError


@app.command("ab")
def ab(
    base: Annotated[str, typer.Argument(help="the job as it is: a model.py or zoo:<family>")],
    new: Annotated[str | None, typer.Argument(help="the changed job [the same target, with the --new-* options]")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="batch size both run at")] = 32,
    param: Annotated[list[str] | None, typer.Option("--param", "-p", help="zoo parameter of both, name=value")] = None,
    new_param: Annotated[list[str] | None, typer.Option("--new-param", help="zoo parameter of the new job only")] = None,
    precision: Annotated[str | None, typer.Option(help="fp32 | bf16 | fp16 for both [each file's PRECISION]")] = None,
    new_precision: Annotated[str | None, typer.Option(help="precision of the new job only")] = None,
    compile_: Annotated[bool, typer.Option("--compile", help="both compiled with torch.compile")] = False,
    new_compile: Annotated[bool, typer.Option("--new-compile", help="the new job compiled, the base eager")] = False,
    rounds: Annotated[int, typer.Option(help="paired rounds (each measures both, in ABBA order)")] = 5,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:<i>")] = "auto",
    mode: Annotated[Mode, typer.Option(help="train (fwd+bwd+step) or infer (forward only)")] = Mode.train,
    threads: Annotated[int | None, typer.Option(help="torch intra-op threads per measurement [all cores]")] = None,
    min_time: Annotated[float, typer.Option(help="minimum timed seconds per measurement")] = 1.0,
    max_time: Annotated[float, typer.Option(help="cap on timed seconds per measurement")] = 5.0,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="output dir [./perfpredict-out/ab-<base>-<new>/]")] = None,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not log to MLflow")] = False,
    experiment: Annotated[str, typer.Option(help="MLflow experiment name")] = "perfpredict-profiles",
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False,
) -> None:
    """Compare two jobs' step times (or one job before and after a change: --new-precision, --new-compile,
    --new-param) in paired, interleaved rounds, and say whether the difference is beyond the noise."""
    from perfpredict.workload.ref import check_precision
    from perfpredict.workload_args import check_target, parse_params

    check_experiment(no_mlflow, experiment)
    if batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, got {batch_size}", step="arguments")
    if rounds < 2:
        raise UsageError(f"--rounds must be at least 2 (an interval needs two), got {rounds}", step="arguments")
    if not 0 < min_time <= max_time < math.inf:  # nan fails too
        raise UsageError(f"need 0 < --min-time <= --max-time, both finite; got {min_time:g} and {max_time:g}",
                         step="arguments")
    from perfpredict.profile.request import check_threads

    check_threads(threads, "--threads")
    if compile_ and new_compile:
        raise UsageError("--compile already compiles both; --new-compile is for compiling the new job only",
                         step="arguments")
    params, extra = parse_params(param), parse_params(new_param, "--new-param")
    base_precision = check_precision(precision, "--precision") if precision is not None else None
    newer_precision = check_precision(new_precision, "--new-precision") if new_precision is not None else base_precision
    new_target = new or base
    check_target(base, params)
    check_target(new_target, {**params, **extra})
    check_out_dir(out)
    if not no_mlflow:
        prepare_mlflow(experiment)

    from perfpredict.profile import runner

    runner.warm_up()
    from perfpredict.workload import resolve_workload

    base_wl = resolve_workload(base, params, base_precision, compile_ or None)
    new_wl = resolve_workload(new_target, {**params, **extra}, newer_precision, (compile_ or new_compile) or None)
    tags = [_tag(w) for w in (base_wl, new_wl)]
    if tags[0] == tags[1] and base != new_target:  # v1/model.py against v2/model.py: name them by their folders
        tags = [_tag(w, t) for w, t in ((base_wl, base), (new_wl, new_target))]
    name = "ab-" + "-".join(tags if tags[0] != tags[1] else tags[:1])
    path = output_file(out, name, "ab.json", create=False)
    existed = path.parent.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    from dataclasses import replace

    # the effective settings: a ref records a precision asked for, None when the file's own applies
    same = (replace(base_wl.ref, precision=None, compile=False) == replace(new_wl.ref, precision=None, compile=False)
            and base_wl.precision == new_wl.precision and bool(base_wl.compile) == bool(new_wl.compile))
    if new is None and not (extra or new_compile or new_precision):  # after the errors that would stop it
        err_console.print("[yellow]note[/]: no NEW target and no --new-* option: both sides are the same job, so "
                          "this measures the noise", highlight=False)
    elif same:  # e.g. --new-precision bf16 on a model file that already sets PRECISION = "bf16"
        err_console.print(f"[yellow]note[/]: the --new-* options change nothing: both sides resolve to the same job "
                          f"({escape(new_wl.name)}, {new_wl.precision}{', compiled' if new_wl.compile else ''}), so "
                          "this measures the noise", highlight=False)
    try:
        result = _measure(base_wl, new_wl, batch_size, rounds, device, mode.value, min_time, max_time, threads)
    except BaseException:
        if not existed and path.parent.is_dir() and not any(path.parent.iterdir()):
            path.parent.rmdir()  # nothing was measured: no empty folder left behind
        raise
    from perfpredict.tracking import log_ab

    save_result(result, path, print_ab, log_ab, no_mlflow=no_mlflow, experiment=experiment, kept="the rounds")
    if "failed for" in result.stopped_because:  # a job broke after the first round: the rounds are kept, no success
        raise PerfPredictError(f"{result.stopped_because} (the rounds before are in {path})", step="ab")


def _measure(base_wl, new_wl, batch_size, rounds, device, mode, min_time, max_time, threads):
    from perfpredict.profile.ab import compare_jobs
    from perfpredict.profile.timing import TimingConfig

    with progress_bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn()) as progress:
        task = progress.add_task("starting", total=rounds)
        return compare_jobs(base_wl, new_wl, batch_size, rounds=rounds, device=device, mode=mode,
                            timing=TimingConfig(min_time_s=min_time, max_time_s=max_time), threads=threads,
                            on_start=lambda which, k: progress.update(task, description=f"round {k + 1}: {which}"),
                            on_round=lambda rnd, total: progress.update(task, completed=rnd.round),
                            return_on_interrupt=True)


def _tag(w, target: str | None = None) -> str:
    """A side's part of the default folder name: the model (after its file's folder, given ``target``), and what
    was changed about it."""
    where = Path(target).resolve().parent.name if target and not target.startswith("zoo:") else ""
    return ((f"{where}-" if where else "") + w.name + ("" if w.precision == "fp32" else f"-{w.precision}")
            + ("-compiled" if w.compile else ""))


def _describe(side) -> str:
    opts = [side.precision] + (["compiled"] if side.compiled else [])
    where = f" {side.target}" if side.target != side.model else ""
    return escape(f"{side.model} ({', '.join(opts)}){where}")


def print_ab(result, console=out_console) -> None:
    """The rounds as a table, then the speed-up with its interval and the verdict."""
    console.print(f"base: {_describe(result.base)}\nnew:  {_describe(result.new)}", highlight=False)
    table = Table(title=escape(f"batch {result.batch_size}, {result.mode}, {result.device}"
                               f"{f' ({result.device_name})' if result.device_name else ''}"), title_style="bold")
    for col in ("round", "order", "base", "new", "base / new"):
        table.add_column(col, justify="right" if col != "order" else "left")
    for r in result.rounds:
        table.add_row(str(r.round), r.order, f"{r.base_iter_time_s * 1e3:.3g} ms", f"{r.new_iter_time_s * 1e3:.3g} ms",
                      f"{r.base_iter_time_s / r.new_iter_time_s:.3f}×")
    console.print(table)
    if result.ci_low is None:
        tail = f" ({result.speedup:.3f}× from one round)" if result.speedup else ""
        console.print(f"[yellow]too few rounds for an interval[/]{tail}: {escape(result.stopped_because)}",
                      highlight=False)
    else:
        n = len(result.rounds)
        interval = f"95% interval {result.ci_low:.3f}–{result.ci_high:.3f}×, {n} paired rounds"
        if result.verdict == "faster":
            line = f"[bold green]new is faster[/]: {result.speedup:.3f}× the base's speed ({interval})"
        elif result.verdict == "slower":
            line = f"[bold red]new is slower[/]: {result.speedup:.3f}× the base's speed ({interval})"
        else:
            line = (f"[bold]no detectable difference[/]: {result.speedup:.3f}× ({interval}); a change smaller than "
                    "the interval needs more rounds to show")
        console.print(line, highlight=False)
    if result.peak_ratio is not None:
        b = [r.base_peak_bytes for r in result.rounds if r.base_peak_bytes]
        nw = [r.new_peak_bytes for r in result.rounds if r.new_peak_bytes]
        console.print(f"peak memory: new {result.peak_ratio:.2f}× the base's ({_fmt_bytes(sorted(nw)[len(nw) // 2])} "
                      f"against {_fmt_bytes(sorted(b)[len(b) // 2])})", highlight=False)
    if result.stopped_because != "all rounds ran":
        console.print(f"stopped: {escape(result.stopped_because)}", highlight=False)
    for n in result.notes:
        console.print(f"note: {escape(n)}", highlight=False, style="dim")
