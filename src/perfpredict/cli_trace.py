"""``perfpredict trace``: what a trace asks of a cluster, before it is replayed (registered on the main app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from perfpredict.cli import app, out_console
from perfpredict.errors import UsageError


def _seconds(x: float) -> str:
    return f"{x:,.0f} s ({x / 3600:,.2f} h)"


@app.command("trace")
def trace_command(
    trace: Annotated[str, typer.Argument(help="a trace as `simulate --trace` takes it: a file, philly:/helios:/pai: "
                                              "with options, or a generator")],
    cluster: Annotated[str | None, typer.Option(help="a cluster as `simulate --cluster` takes it: adds the offered "
                                                     "load and the jobs it cannot hold")] = None,
    seed: Annotated[int, typer.Option(help="seed of a generated trace")] = 0,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the summary as JSON here")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False,  # noqa: ARG001
) -> None:
    """What a trace asks of a cluster: jobs, arrival window, GPU demand, run times, GPU-hours, and with --cluster
    the offered load (GPU-seconds asked / the cluster's GPU-seconds over the arrival window)."""
    from perfpredict.sim.run import parse_cluster, parse_trace
    from perfpredict.sim.trace_summary import summarize_trace

    if seed < 0:
        raise UsageError(f"--seed must be >= 0, got {seed}", step="arguments")
    spec = parse_cluster(cluster) if cluster is not None else None
    notes: list[str] = []
    jobs = parse_trace(trace, seed=seed, notes=notes)
    s = summarize_trace(jobs, trace=trace, cluster=spec, notes=notes)
    table = Table(title=escape(f"trace {trace}"), show_header=False)
    table.add_row("jobs", f"{s.jobs:,}" + (f" ({s.users:,} users)" if s.users else ""))
    if s.jobs:
        table.add_row("arrivals", f"{s.first_arrival_s:,.0f} .. {s.last_arrival_s:,.0f} s (window "
                      f"{_seconds(s.arrival_window_s)})")
        table.add_row("GPU demand", ", ".join(f"{g}: {n:,}" for g, n in s.gpu_demand.items()))
        table.add_row("run time", ", ".join(f"{k} {_seconds(v)}" if k in ("p50", "max") else f"{k} {v:,.0f} s"
                                            for k, v in s.work_s.items()))
        table.add_row("GPU-hours asked", f"{s.gpu_hours:,.1f}")
        top = list(s.models.items())
        table.add_row("models", escape(", ".join(f"{m or '(none)'}: {n:,}" for m, n in top[:8])
                                       + (f", ... ({len(top)} in all)" if len(top) > 8 else "")))
    if spec is not None:
        table.add_row("cluster", escape(f"{s.cluster}: {s.cluster_gpus:,} GPUs"))
        idle = "n/a (no job)" if not s.jobs else "n/a (every job arrives at once)"
        table.add_row("offered load", idle if s.offered_load is None
                      else f"{s.offered_load:.3f}" + (" (the queue grows: above 1)" if s.offered_load > 1 else ""))
        table.add_row("jobs wider than a server", f"{s.jobs_wider_than_a_server:,}")
        table.add_row("jobs larger than the cluster", f"{s.jobs_larger_than_the_cluster:,}"
                      + (" (simulate refuses them unless --drop-oversized, or a mechanism that resizes jobs shrinks them)"
                         if s.jobs_larger_than_the_cluster else ""))
    out_console.print(table)
    for note in s.notes:
        out_console.print(f"note: {escape(note)}")
    if json_out is not None:
        try:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            json_out.write_text(s.model_dump_json(indent=2) + "\n")
        except OSError as e:
            raise UsageError(f"--json {json_out}: cannot write it ({e.strerror or e})", step="output") from None
        out_console.print(f"summary: {escape(str(json_out))}")
