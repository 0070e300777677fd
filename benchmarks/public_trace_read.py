"""Benchmark: how fast the public-trace readers read logs of the real ones' size.

The real logs are not shipped (download them from their repositories), so this writes logs in their formats with
the sizes and shapes of the originals, from a seeded random stream: a Helios ``cluster_log.csv`` of ``--rows``
records (half of them CPU-only jobs, as in Helios), a Philly ``cluster_job_log`` of ``--rows / 2`` jobs with one
to three attempts each (Philly's 117,325 jobs), and PAI task and job tables of ``--rows / 2`` jobs (one to three
tasks each). It then times each reader once and prints records read per second and the jobs kept.

    python benchmarks/public_trace_read.py [--rows 250000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path


def _when(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def write_helios(path: Path, rows: int, rng: random.Random) -> None:
    t = datetime(2020, 4, 1)
    with open(path, "w") as f:
        f.write("job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n")
        for i in range(rows):
            t += timedelta(seconds=rng.randint(1, 60))
            gpus = rng.choice([0, 0, 0, 0, 1, 1, 2, 4, 8, 16])
            queue, run = rng.randint(0, 600), rng.randint(1, 86_400)
            start = t + timedelta(seconds=queue)
            f.write(f"{i},u{rng.randint(0, 300)},vc{rng.randint(0, 24)},{gpus},{max(gpus, 1) * 4},1,"
                    f"{rng.choice(['COMPLETED', 'FAILED', 'CANCELLED'])},{_when(t)},{_when(start)},"
                    f"{_when(start + timedelta(seconds=run))},{run},{queue}\n")


def write_philly(path: Path, jobs: int, rng: random.Random) -> None:
    t, out = datetime(2017, 10, 1), []
    for i in range(jobs):
        t += timedelta(seconds=rng.randint(1, 120))
        gpus, begin, attempts = rng.choice([1, 1, 2, 4, 8, 16]), t, []
        for _ in range(rng.randint(1, 3)):
            begin += timedelta(seconds=rng.randint(0, 600))
            end = begin + timedelta(seconds=rng.randint(1, 86_400))
            servers = [{"ip": f"m{rng.randint(0, 550)}", "gpus": [f"gpu{g}" for g in range(min(gpus, 8))]}
                       for _ in range(max(1, gpus // 8))]
            attempts.append({"start_time": _when(begin), "end_time": _when(end), "detail": servers})
            begin = end
        out.append({"status": rng.choice(["Pass", "Killed", "Failed"]), "vc": f"vc{rng.randint(0, 14)}",
                    "jobid": f"application_{i}", "attempts": attempts, "submitted_time": _when(t),
                    "user": f"u{rng.randint(0, 300)}"})
    path.write_text(json.dumps(out))


def write_pai(tasks: Path, jobs_path: Path, jobs: int, rng: random.Random) -> None:
    t = 0.0
    with open(tasks, "w") as ft, open(jobs_path, "w") as fj:
        for i in range(jobs):
            t += rng.uniform(1, 30)
            start = t + rng.uniform(0, 300)
            end = start + rng.uniform(10, 20_000)
            fj.write(f"j{i},inst{i},u{rng.randint(0, 1000)},Terminated,{t:.1f},{end:.1f}\n")
            for k in range(rng.randint(1, 3)):
                gpu = rng.choice([0.0, 25.0, 50.0, 100.0, 200.0])
                ft.write(f"j{i},task{k},{rng.randint(1, 4)}.0,Terminated,{start:.1f},{end:.1f},600.0,29.3,{gpu},"
                         f"{rng.choice(['V100', 'T4', 'P100', 'MISC'])}\n")


def main(argv: list[str] | None = None) -> None:
    from perfpredict.script_args import describe, positive_int
    from perfpredict.sim.public_traces import read_helios, read_pai, read_philly

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--rows", type=positive_int, default=250_000, help="Helios records (Philly and PAI: half)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        write_helios(d / "cluster_log.csv", args.rows, rng)
        write_philly(d / "cluster_job_log", args.rows // 2, rng)
        write_pai(d / "pai_task_table.csv", d / "pai_job_table.csv", args.rows // 2, rng)
        cases = [("helios", lambda: read_helios(d / "cluster_log.csv")),
                 ("philly", lambda: read_philly(d / "cluster_job_log")),
                 ("pai", lambda: read_pai(d / "pai_task_table.csv", job_table=d / "pai_job_table.csv"))]
        for name, read in cases:
            t0 = time.perf_counter()
            rep = read()
            dt = time.perf_counter() - t0
            print(f"{name:7s} {rep.records:9,d} records in {dt:6.2f} s = {rep.records / dt:9,.0f} records/s; "
                  f"{len(rep.jobs):,} jobs kept, {rep.skipped:,} skipped")


if __name__ == "__main__":
    main()
