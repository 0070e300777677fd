"""Per-job records of a simulation: one row per job, written as ``jobs.csv`` and ``jobs.parquet``.

The columns cover every scheduler in the core, so one table answers the questions each seed asks per job:
JCT and queueing (Synergy, moldable), tardiness against the due date and energy cost (ANDREAS), the QoS class
and whether its expected completion time was met (GENIE), out-of-memory failures and wait to first placement
(Horus). Parquet keeps the types (a 100 000-job run is read back in milliseconds, with nulls as nulls); the
CSV is for people and spreadsheets.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

#: (name, Arrow type, meaning); the order of jobs.csv and jobs.parquet
JOB_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("id", "string", "job id from the trace"),
    ("model", "string", "the model whose card gives its throughput"),
    ("task", "string", "workload class (image / language / speech; training / inference)"),
    ("user", "string", "the user whose tasks form one job in seed 002's flow time"),
    ("arrival_s", "float64", "arrival time"),
    ("gpus", "float64", "GPUs asked for"),
    ("min_gpus", "float64", "smallest size a moldable/malleable mechanism may give (null: its default)"),
    ("max_gpus", "float64", "largest size a moldable/malleable mechanism may give (null: its default)"),
    ("work_s", "float64", "work, in seconds at the card's reference allocation"),
    ("priority", "int64", "priority (higher first, where a policy uses it)"),
    ("weight", "float64", "tardiness weight (ANDREAS' omega)"),
    ("qos", "string", "QoS class (GENIE: urgent / prior / normal)"),
    ("deadline_s", "float64", "due date (ANDREAS) or expected completion time (GENIE), null when none"),
    ("first_start_s", "float64", "first placement (null: never placed)"),
    ("finish_s", "float64", "completion (null: unfinished)"),
    ("jct_s", "float64", "finish - arrival"),
    ("run_time_s", "float64", "time holding an allocation"),
    ("queueing_s", "float64", "jct - run time"),
    ("wait_s", "float64", "first start - arrival"),
    ("tardiness_s", "float64", "max(0, finish - deadline); null without a deadline or a finish"),
    ("met_deadline", "bool", "finished by its deadline (GENIE's QoS guarantee, eq. 14); null without a deadline"),
    ("preemptions", "int64", "times it was suspended"),
    ("restarts", "int64", "times it was restarted (moved or resumed)"),
    ("lost_work_s", "float64", "progress lost by rolling back to the last epoch checkpoint"),
    ("ooms", "int64", "out-of-memory failures on a shared GPU (Horus)"),
    ("energy_cost", "float64", "energy cost of the GPUs it held (ANDREAS; the servers' energy_cost per GPU-hour)"),
    ("mean_gpus", "float64", "GPUs held, time-averaged over its run time (a resizing mechanism's, not the demand)"),
    ("mean_cpus", "float64", "CPUs held, time-averaged over its run time"),
    ("mean_mem_gb", "float64", "host memory held, time-averaged over its run time"),
    ("finished", "bool", "it finished within the simulation"),
)
COLUMN_NAMES = tuple(c[0] for c in JOB_COLUMNS)


def job_records(result: Any) -> list[dict[str, Any]]:
    """One dict per job state of a :class:`~perfpredict.sim.simulator.SimResult`, keyed by :data:`COLUMN_NAMES`,
    in arrival order (ties in trace order), as the trace lists them; ``finish_s`` gives the completion order."""
    from perfpredict.sched.genie import meets_ect

    rows = []
    for js in sorted(result.states, key=lambda js: js.arrival_key):
        j = js.job
        done = js.finish is not None
        jct = js.finish - j.arrival if done else None
        rt = js.run_time
        late = None
        met = None
        if j.deadline is not None:
            met = bool(done and meets_ect(js.finish, j.deadline))
            if done:  # within round-off of the deadline counts as on time, as for met_deadline
                late = 0.0 if met else max(0.0, js.finish - j.deadline)
        rows.append({
            "id": j.id, "model": j.model, "task": j.task, "user": j.user, "arrival_s": j.arrival, "gpus": j.gpus,
            "min_gpus": j.min_gpus, "max_gpus": j.max_gpus, "work_s": j.work, "priority": j.priority,
            "weight": j.weight, "qos": j.qos, "deadline_s": j.deadline, "first_start_s": js.first_start,
            "finish_s": js.finish, "jct_s": jct, "run_time_s": rt, "queueing_s": (jct - rt) if jct is not None else None,
            "wait_s": (js.first_start - j.arrival) if js.first_start is not None else None,
            "tardiness_s": late, "met_deadline": met, "preemptions": js.preemptions, "restarts": js.restarts,
            "lost_work_s": js.lost_work, "ooms": js.ooms, "energy_cost": js.energy_cost,
            "mean_gpus": js.attained / rt if rt else None, "mean_cpus": js.cpu_seconds / rt if rt else None, "mean_mem_gb": js.mem_gb_seconds / rt if rt else None,
            "finished": done,
        })
    return rows


def write_jobs_csv(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """``rows`` as CSV; a missing value is an empty cell."""
    p = Path(path)
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")  # csv's default "\r\n" left a "\r" in awk's and cut's last field
        w.writerow(COLUMN_NAMES)
        for r in rows:
            w.writerow(["" if r[c] is None else r[c] for c in COLUMN_NAMES])
    return p


def jobs_table(rows: list[dict[str, Any]]):
    """``rows`` as a typed :class:`pyarrow.Table` (the schema of :data:`JOB_COLUMNS`, nulls kept)."""
    import pyarrow as pa

    schema = pa.schema([pa.field(name, getattr(pa, "bool_" if kind == "bool" else kind)(), metadata={"description": doc})
                        for name, kind, doc in JOB_COLUMNS])
    return pa.Table.from_pylist(rows, schema=schema)


def write_jobs_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    import pyarrow.parquet as pq

    p = Path(path)
    pq.write_table(jobs_table(rows), p)
    return p


__all__ = ["COLUMN_NAMES", "JOB_COLUMNS", "job_records", "jobs_table", "write_jobs_csv", "write_jobs_parquet"]
