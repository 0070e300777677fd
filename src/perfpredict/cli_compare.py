"""``perfpredict compare``: several schedulers on the same trace and cluster, paired over seeds (registered on
the main app)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from perfpredict.cli import (
    SimDropOversized,
    SimMode,
    SimRestartOverhead,
    SimRound,
    SimStartOverhead,
    SimSteady,
    app,
    check_experiment,
    check_out_dir,
    err_console,
    out_console,
    prepare_mlflow,
    progress_bar,
    sim_settings,
)
from perfpredict.errors import UsageError


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--seeds {text!r}: expected whole numbers, e.g. 0,1,2", step="arguments") from None
    if not seeds or any(k < 0 for k in seeds):
        raise UsageError(f"--seeds {text!r}: give one or more seeds >= 0, e.g. 0,1,2", step="arguments")
    twice = sorted({k for k in seeds if seeds.count(k) > 1})
    if twice:
        raise UsageError(f"--seeds {text!r}: seed {twice[0]} appears twice (each seed is one trace)", step="arguments")
    return seeds


def _cell(metric: str, value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    if metric.endswith("_s"):
        return f"{value / 3600:,.2f} h"
    if metric.endswith("util") or metric == "genie.qos_guarantee":
        return f"{value:.1%}"
    return f"{value:,.4g}"


@app.command()
def compare(
    mechanism: Annotated[list[str], typer.Option("--mechanism", "-m", help="a mechanism as `simulate` takes it "
                                                 "(options after a colon); repeat for each one to compare")],
    policy: Annotated[list[str] | None, typer.Option("--policy", "-p", help="a policy; repeat to compare "
                                                     "several (every policy runs with every mechanism)")] = None,
    cluster: Annotated[str, typer.Option(help="as for `simulate`")] = "16x8",
    trace: Annotated[str, typer.Option(help="as for `simulate`; a generated trace is drawn once per seed")] =
        "synergy:n=1000,load=9",
    seeds: Annotated[str, typer.Option(help="comma-separated seeds: one trace per seed, replayed by every "
                                            "scheduler")] = "0,1,2",
    metric: Annotated[list[str] | None, typer.Option("--metric", help="a metric to compare (repeatable; default "
                                                     "avg_jct_s, p99_jct_s, makespan_s, avg_queue_delay_s, "
                                                     "gpu_util)")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="simulations run at once, in worker processes (each "
                                       "run is single-threaded; results do not depend on it)")] = 1,
    ray: Annotated[str | None, typer.Option("--ray", help="run the simulations as Ray tasks: 'local' (a Ray "
                                            "instance on this machine), 'auto' (the cluster this machine is part "
                                            "of) or the head's HOST:PORT / ray://HOST:PORT; with it, --jobs caps "
                                            "the runs at once (needs perfpredict[ray])")] = None,
    cards: Annotated[str, typer.Option(help="as for `simulate`")] = "paper",
    mode: SimMode = "auto",
    round_s: SimRound = 300.0,
    restart_overhead: SimRestartOverhead = 0.0,
    start_overhead: SimStartOverhead = None,
    steady: SimSteady = None,
    drop_oversized: SimDropOversized = False,
    max_time: Annotated[float | None, typer.Option(help="stop each run at this simulated time (s)")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="output directory")] = Path("perfpredict-compare"),
    no_mlflow: Annotated[bool, typer.Option("--no-mlflow", help="do not log to MLflow")] = False,
    experiment: Annotated[str, typer.Option(help="MLflow experiment name")] = "perfpredict-simulations",
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False,  # noqa: ARG001
) -> None:
    """Compare schedulers on one trace and cluster: each one's mean ± sd over seeds and its paired change
    against the first (the baseline); write runs.csv, summary.csv/.json, compare.png and every run's records.

    Every scheduler replays the same trace for a seed, so each change is computed per seed and then averaged
    (± its standard error): differences smaller than the spread between traces still show."""
    from perfpredict.sim.compare import DEFAULT_METRICS, check_metrics, parse_schedulers, seed_independent
    from perfpredict.sim.compare import compare as run_compare

    check_experiment(no_mlflow, experiment)
    cfg, window = sim_settings(mode, round_s, restart_overhead, max_time, steady, drop_oversized, start_overhead,
                               mechanism)
    seed_list = _seeds(seeds)
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {jobs}", step="arguments")
    schedulers = parse_schedulers(policy or ["fifo"], mechanism)
    from perfpredict.sim.run import parse_cluster

    cluster_name = parse_cluster(cluster).name  # as `simulate` names it (2x4 -> 2x4V100); a bad spec stops here
    metrics = check_metrics(metric or DEFAULT_METRICS)
    check_out_dir(out)
    if not no_mlflow:
        prepare_mlflow(experiment)  # an unusable store is found now, not after the runs
    if len(seed_list) > 1 and seed_independent(trace):
        err_console.print(f"[yellow]note[/]: {trace} does not change with the seed (a file, or seed= in the spec): "
                          f"the {len(seed_list)} seeds replay the same trace, and a randomised scheduler takes its "
                          "seed from its own spec (andreas:seed=1), so the runs repeat one another", highlight=False)
    if len(schedulers) < 2:
        err_console.print("[yellow]note[/]: one scheduler: nothing to compare it with (give -m twice)")
    with progress_bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn()) as progress:
        task = progress.add_task("comparing", total=len(seed_list) * len(schedulers))

        def done(row, n, total) -> None:
            progress.update(task, completed=n, description=f"{row['scheduler']} seed {row['seed']}: {row['status']}")

        cmp = run_compare(trace, cluster, schedulers, seed_list, metrics=metrics, cards=cards, config=cfg,
                          steady=window, out_dir=out, jobs=jobs, on_run=done, ray_address=ray)
    summary = cmp.summary()
    for note in cmp.notes:
        err_console.print(f"[yellow]note[/]: {escape(note)}", highlight=False)
    unpaired = cmp.unpaired()
    if unpaired:
        err_console.print(f"[yellow]warning[/]: {escape(unpaired)}", highlight=False)
    table = Table(title=f"{len(schedulers)} schedulers on {trace} / {cluster_name}, {len(seed_list)} seed(s); "
                        f"change vs {cmp.baseline.label}", title_style="bold",
                  caption="mean ± sd over seeds; change paired by seed ± its standard error")
    table.add_column("scheduler")
    for m in metrics:
        table.add_column(m, justify="right")
    for s in schedulers:
        cells = []
        for m in metrics:
            r = next(x for x in summary if x["scheduler"] == s.label and x["metric"] == m)
            text = _cell(m, r["mean"])
            if r["sd"] is not None:
                text += f" ± {_cell(m, r['sd'])}"
            if r["vs_baseline"] is not None:
                se = f" ± {r['vs_baseline_se']:.1%}" if r["vs_baseline_se"] is not None else ""
                colour = {True: "green", False: "red"}.get(r["better"], "default")  # None: no change
                text += f"\n[{colour}]{r['vs_baseline']:+.1%}{se}[/]"
            cells.append(text)
        table.add_row(s.label, *cells)
    out_console.print(table)
    failed = cmp.failed()
    for r in failed:
        err_console.print(f"[red]{r['status']}[/]: {r['scheduler']} seed {r['seed']}: {r['error']}", highlight=False,
                          soft_wrap=True)
    if cmp.backend.get("backend") == "ray":
        b = cmp.backend
        out_console.print(f"ran on Ray at {b['address']}: {b['nodes']} node(s), {b['cpus']} CPU(s)", highlight=False,
                          markup=False)
    if cmp.write_error:  # the table above is the result; the files are incomplete, so nothing is logged
        raise UsageError(f"{cmp.write_error} (the table above has every finished run)", step="write")
    out_console.print(f"runs: {out / 'runs.csv'}  summary: {out / 'summary.csv'}  plot: {out / 'compare.png'}",
                      highlight=False)
    if not no_mlflow and cmp.runs:
        from perfpredict.tracking import log_comparison, tracking_uri

        try:
            run_id = log_comparison(cmp, out, trace=trace, cluster=cluster_name, experiment=experiment, cards=cards,
                                    config=cfg)
            out_console.print(f"mlflow: run {run_id} in {tracking_uri()} (experiment {experiment!r})", highlight=False)
        except Exception as e:  # noqa: BLE001 - tracking failure must not lose the results (already on disk)
            err_console.print(f"[yellow]warning[/]: MLflow logging failed ({type(e).__name__}: {e}); "
                              f"results are in {out}")
    if cmp.interrupted:
        err_console.print(f"[yellow]interrupted[/]: {len(cmp.runs)} run(s) finished and written to {out}")
        raise typer.Exit(130)
    if failed:
        raise typer.Exit(1)
