"""``perfpredict max-batch``: the largest batch size that fits a memory budget, measured on a device or predicted
(registered on the main app)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from perfpredict.cli import (
    Mode,
    _bytes,
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
from perfpredict.cli_models import (
    BATCH_AXIS_HELP,
    BATCH_INPUT_HELP,
    DIM_HELP,
    FROZEN_HELP,
    OPTIMIZER_HELP,
    OPTIMIZER_STATES_HELP,
    TRAINED_HELP,
    check_onnx_target,
    dims_option,
    frozen_or_trained_options,
    optimizer_options,
)
from perfpredict.errors import PerfPredictError, UsageError


@app.command("max-batch")
def max_batch(
    target: Annotated[str, typer.Argument(help="path to a model.py, zoo:<family> (see `perfpredict zoo`), or a .onnx "
                                               "file (--predicted only: a graph is parsed, never run)")],
    param: Annotated[list[str] | None, typer.Option("--param", "-p", help="zoo parameter name=value (repeatable)")] = None,
    memory_limit: Annotated[str | None, typer.Option(help="the budget, e.g. 16GB (measured: default the whole GPU, or "
                                                          "90% of the free memory on CPU; --predicted: required)")] = None,
    device: Annotated[str, typer.Option(help="measured: auto | cpu | cuda | cuda:<i>")] = "auto",
    mode: Annotated[Mode, typer.Option(help="train (fwd+bwd+step) or infer (forward only)")] = Mode.train,
    precision: Annotated[str | None, typer.Option(help="fp32 | bf16 | fp16 [the file's PRECISION, else fp32]")] = None,
    compile_: Annotated[bool, typer.Option("--compile", help="measured: probe torch.compile(model)")] = False,
    multiple_of: Annotated[int, typer.Option(help="answer a multiple of this (8 keeps tensor cores busy)")] = 1,
    max_batch_size: Annotated[int | None, typer.Option("--max-batch", help="largest batch size to try [65536 "
                                                                           "measured, 1,000,000 predicted]")] = None,
    threads: Annotated[int | None, typer.Option(help="measured: torch intra-op threads [all cores]")] = None,
    timeout: Annotated[float, typer.Option(help="measured: seconds one probe may take")] = 600.0,
    predicted: Annotated[bool, typer.Option("--predicted", help="answer from the trained estimators; nothing runs")] = False,
    device_type: Annotated[str | None, typer.Option(help="--predicted: model set or kind (cuda_h100, cpu) [cuda]")] = None,
    quantile: Annotated[str, typer.Option(help="--predicted: q90 (safe) or median of the predicted memory")] = "q90",
    optimizer_states: Annotated[float | None, typer.Option("--optimizer-states",
                                                           help=f"--predicted: {OPTIMIZER_STATES_HELP}")] = None,
    optimizer: Annotated[str | None, typer.Option("--optimizer", help=f"--predicted: {OPTIMIZER_HELP}")] = None,
    batch_axis: Annotated[int | None, typer.Option(help=BATCH_AXIS_HELP)] = None,
    batch_input: Annotated[str | None, typer.Option(help=BATCH_INPUT_HELP)] = None,
    dim: Annotated[list[str] | None, typer.Option("--dim", help=DIM_HELP)] = None,
    frozen: Annotated[list[str] | None, typer.Option("--frozen", help=FROZEN_HELP)] = None,
    trained: Annotated[list[str] | None, typer.Option("--trained", help=TRAINED_HELP)] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="output dir [./perfpredict-out/<model>/]")] = None,
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not log to MLflow")] = False,
    experiment: Annotated[str, typer.Option(help="MLflow experiment name")] = "perfpredict-profiles",
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False,
) -> None:
    """The largest batch size whose training (or inference) step fits the memory: measured by running steps
    (doubling until one runs out of memory, then bisection), or predicted with --predicted (a model file, a zoo
    family or an ONNX file)."""
    from perfpredict.workload_args import check_target, parse_params

    is_onnx = target.lower().endswith(".onnx")
    if is_onnx and not predicted:  # before any other check: whatever else is wrong, this is the first thing to fix
        raise UsageError(f"{target} is an ONNX file: a graph is parsed, never run, so its largest batch cannot be "
                         "measured; add --predicted (with --memory-limit, e.g. --predicted --memory-limit 16GB "
                         "--device-type cuda_h100) to predict it", step="arguments")
    check_experiment(no_mlflow, experiment)
    params = parse_params(param)
    limit = _bytes(memory_limit)
    if limit is not None and limit <= 0:
        raise UsageError(f"--memory-limit must be positive, got {memory_limit!r}", step="arguments")
    if predicted and limit is None:
        raise UsageError("--predicted needs --memory-limit: the memory of the device to fit, e.g. 80GB",
                         step="arguments")
    if not 0 < timeout < math.inf:
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout}", step="arguments")
    from perfpredict.profile.request import check_threads

    check_threads(threads, "--threads")
    if precision is not None:
        from perfpredict.workload.ref import check_precision

        precision = check_precision(precision, "--precision")
    if predicted and (compile_ or threads is not None or device != "auto"):
        raise UsageError("--compile, --threads and --device are for measuring; with --predicted the model set is "
                         "named by --device-type", step="arguments")
    if not predicted and (device_type is not None or quantile != "q90"):
        raise UsageError("--device-type and --quantile apply to --predicted only", step="arguments")
    if not predicted and (optimizer is not None or optimizer_states is not None):
        raise UsageError("--optimizer and --optimizer-states apply to --predicted only: a measured max-batch trains "
                         "with the file's own make_optimizer", step="arguments")
    dims = dims_option(dim, "--dim", is_onnx)
    frozen_prefixes, trained_prefixes = frozen_or_trained_options(frozen, trained, ("--frozen", "--trained"), is_onnx)
    for value, option in ((batch_axis, "--batch-axis"), (batch_input, "--batch-input")):
        if value is not None and not is_onnx:
            raise UsageError(f"{option} only applies to an ONNX file (a model file is exported at batch 1 and 2)",
                             step="arguments")
    if is_onnx:
        check_onnx_target(target, params)
    else:
        check_target(target, params)  # before batch_search imports torch: a typo in model.py is answered at once
    copies, named = optimizer_options(optimizer, optimizer_states)  # imports torch: after the file's check
    from perfpredict.predicted_batch_limit import check_limit_args
    from perfpredict.profile.batch_search import DEFAULT_MAX_BATCH, check_search_args

    if predicted:
        check_limit_args(limit, quantile, multiple_of, max_batch_size)
    else:
        check_search_args(multiple_of, DEFAULT_MAX_BATCH if max_batch_size is None else max_batch_size, None)
    check_out_dir(out)
    if not no_mlflow:
        prepare_mlflow(experiment)
    if not predicted:
        from perfpredict.profile import runner

        runner.warm_up()  # the fork server imports torch while this process loads the model file
    if is_onnx:  # parsed by the prediction; named as the Predictor names it
        workload, name = None, Path(target).stem
        source = {"onnx_path": target, "batch_axis": batch_axis, "batch_input": batch_input, "dims": dims or None,
                  "frozen": frozen_prefixes or None, "trained": trained_prefixes or None}
    else:
        from perfpredict.workload import resolve_workload

        workload = resolve_workload(target, params, precision, compile_ or None)
        name, source = workload.name, {"model": target, "params": params or None}
    path = output_file(out, name, "max_batch_predicted.json" if predicted else "max_batch.json")
    if predicted:
        result = _predicted(source, limit, device_type, mode.value, precision, quantile, multiple_of,
                            max_batch_size, copies, named)
    else:
        result = _measured(workload, limit, device, mode.value, multiple_of,
                           DEFAULT_MAX_BATCH if max_batch_size is None else max_batch_size, threads, timeout)
    from perfpredict.tracking import log_batch_limit

    save_result(result, path, print_batch_limit, log_batch_limit, no_mlflow=no_mlflow, experiment=experiment,
                kept="the probes")
    if result.model_error:  # the answer is where the model broke, not a memory limit: not a success
        raise PerfPredictError(f"{result.model_error} (the probes are in {path})", source=result.model,
                               step="max batch")
    if result.largest_ok is None:  # an answer, but not one a script may go on with (`max-batch ... && train`)
        raise PerfPredictError(f"no batch size fits within the limit (the probes are in {path})",
                               source=result.model, step="max batch")


def _measured(workload, limit, device, mode, multiple_of, max_batch, threads, timeout):
    from perfpredict.profile.batch_search import find_largest_batch

    with progress_bar(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()) as progress:
        task = progress.add_task("starting", total=None)
        state = {"lo": None}

        def started(b: int) -> None:
            known = f" (largest that ran: {state['lo']})" if state["lo"] else ""
            progress.update(task, description=f"running batch size {b}{known}")

        def finished(p) -> None:
            if p.status == "ok":
                state["lo"] = max(state["lo"] or 0, p.batch_size)

        return find_largest_batch(workload, device=device, mode=mode, memory_limit_bytes=limit,
                                  multiple_of=multiple_of, max_batch=max_batch, threads=threads, timeout_s=timeout,
                                  on_start=started, on_probe=finished, return_on_interrupt=True)


def _predicted(source, limit, device_type, mode, precision, quantile, multiple_of, max_batch, copies, optimizer):
    """``source``: the target as :meth:`~perfpredict.predictor.Predictor.largest_batch` takes it (``model`` and
    ``params``, or ``onnx_path`` and the ONNX file's options)."""
    from perfpredict.predictor import Predictor

    predictor = Predictor.load()
    doing = "reading the ONNX graph" if "onnx_path" in source else "exporting the model"
    with err_console.status(f"{doing} and predicting"):
        return predictor.largest_batch(**source, memory_limit_bytes=limit,
                                       device_type=device_type, mode=mode, precision=precision, quantile=quantile,
                                       multiple_of=multiple_of, max_batch=max_batch,
                                       optimizer_state_copies=copies, optimizer=optimizer)


def print_batch_limit(result, console=out_console) -> None:
    """The probes as a table, then the answer."""
    predicted = result.source == "predicted"
    limit = _fmt_bytes(result.memory_limit_bytes) if result.memory_limit_bytes else "the whole device"
    table = Table(title=escape(f"{result.model}: largest {result.mode} batch within {limit} on {result.device}"
                               f"{f' ({result.device_name})' if result.device_name else ''}, {result.precision}"
                               f"{', predicted' if predicted else ''}"), title_style="bold")
    table.add_column("batch", justify="right")
    table.add_column("fits")
    table.add_column("memory (held to the limit)" if predicted else "peak memory", justify="right")
    table.add_column("iteration", justify="right")
    table.add_column("samples/s", justify="right")
    for p in result.probes:
        mem = p.device_bytes if p.device_bytes is not None else p.peak_bytes
        ok = p.status == "ok"
        why = "no" if predicted else "over the limit" if (p.error or "").startswith("ran, but") else p.status
        table.add_row(str(p.batch_size), "[green]yes[/]" if ok else f"[red]{why}[/]",
                      _fmt_bytes(mem), f"{p.iter_time_s * 1e3:.3g} ms" if p.iter_time_s else "–",
                      f"{p.batch_size / p.iter_time_s:,.0f}" if p.iter_time_s else "–")
    console.print(table)
    if result.largest_ok is None and result.interrupted:
        console.print(f"[yellow]no answer[/]: {escape(result.stopped_because)}", highlight=False)
    elif result.largest_ok is None:
        console.print(f"[bold red]no batch size fits[/]: {escape(result.stopped_because)}", highlight=False)
    elif result.model_error:
        console.print(f"[yellow]largest batch size that ran: {result.largest_ok}[/], but no memory limit was found: "
                      f"{escape(result.stopped_because)}", highlight=False)
    else:
        above = f", {result.smallest_failed} does not" if result.smallest_failed is not None else ""
        console.print(f"[bold]largest batch size: {result.largest_ok}[/]{above} ({escape(result.stopped_because)}; "
                      f"{len(result.probes)} {'evaluations' if predicted else 'probes'} in {result.wall_s:.1f} s)",
                      highlight=False)
    for n in result.notes:
        console.print(f"note: {escape(n)}", highlight=False, style="dim")
