"""Does measuring inside a Ray task change the measurement? The same zoo points collected three ways on this
machine's CPU, interleaved round by round: by the collector run here (``local``), by the same command under
``nice -n 15`` (the niceness Ray gives its workers by default), by the same command while a Ray instance idles
beside it (what Ray's own processes cost a measurement), and as Ray tasks on a Ray instance started here
(``--ray local``, which measures at niceness 0: ``perfpredict.dataset.ray_collect.normal_priority``).

Prints, per way, the median over points and rounds of (its iteration time / the local one of the same round) with
the range of the per-round medians, and its wall time. ``local`` against itself across rounds is the noise: the
spread of the same command run again. A Ray ratio inside that spread means a dataset collected on Ray is timed
as one collected locally.

    python benchmarks/collect_on_ray.py                       # 4 rounds of 11 points (~7 min on 2 vCPUs)
    python benchmarks/collect_on_ray.py --rounds 5 --families mlp,lstm
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfpredict.script_args import describe, positive_float, positive_int

SCRIPT = Path(__file__).resolve().parent.parent / "profilers" / "collect_dataset.py"
WAYS = ("local", "local at nice 15", "local, Ray idle beside", "Ray (--ray local)")


def _command(out: Path, args: argparse.Namespace) -> list[str]:
    return [sys.executable, str(SCRIPT), "measure", "--device", "cpu", "--out", str(out), "--families", args.families,
            "--batch-sizes", args.batch_sizes, "--every", str(args.every), "--max-gflop-iter", str(args.max_gflop_iter),
            "--min-time", str(args.min_time), "--no-sentinel"]


def _collect(way: str, out: Path, args: argparse.Namespace) -> float:
    cmd = _command(out, args)
    if way == "local at nice 15":
        cmd = ["nice", "-n", "15", *cmd]
    elif way.startswith("Ray"):
        cmd += ["--ray", "local"]
    beside = way == "local, Ray idle beside"
    if beside:  # Ray's own processes (GCS, raylet, idle workers) running, the measurement outside them
        import logging

        import ray

        ray.init(address="local", include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
        time.sleep(3)  # past its start
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    finally:
        if beside:
            ray.shutdown()
    if proc.returncode == 130:  # the collector had the Ctrl-C too (same process group)
        raise KeyboardInterrupt
    if proc.returncode != 0:
        raise SystemExit(f"{way}: the collector failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return time.perf_counter() - t0


def _times(path: Path) -> dict[tuple[str, str], float]:
    with open(path, newline="", encoding="utf-8") as f:
        return {(r["config"], r["batch_size"]): float(r["iter_time_s"]) for r in csv.DictReader(f)
                if r["status"] == "ok" and r["iter_time_s"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--rounds", type=positive_int, default=4, help="each way takes each place in the order once "
                    "in 4 rounds")
    ap.add_argument("--families", default="lstm,mobilenetv2,transformer,mlp")
    ap.add_argument("--batch-sizes", default="8,32")
    ap.add_argument("--every", type=positive_int, default=3, help="every N-th architecture of the plan")
    ap.add_argument("--max-gflop-iter", type=positive_float, default=3.0)
    ap.add_argument("--min-time", type=positive_float, default=0.5, help="timed seconds per point")
    args = ap.parse_args(argv)
    try:
        import ray  # noqa: F401
    except ImportError:
        ap.error("needs Ray: pip install 'perfpredict[ray]'")
    ratios: dict[str, list[list[float]]] = {w: [] for w in WAYS}
    walls: dict[str, list[float]] = {w: [] for w in WAYS}
    base: list[dict[tuple[str, str], float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        # the plan first (the collector's --dry-run): a wrong family or batch size is its one-line error, at once
        plan = subprocess.run([*_command(Path(tmp) / "plan.csv", args), "--dry-run"], capture_output=True, text=True,
                              check=False)
        if plan.returncode != 0:
            ap.error(plan.stderr.strip().splitlines()[-1] if plan.stderr.strip() else "the plan failed")
        try:
            for k in range(args.rounds):
                order = WAYS[k % len(WAYS):] + WAYS[:k % len(WAYS)]  # each way takes each position in turn
                got = {}
                for way in order:
                    out = Path(tmp) / f"r{k}-{WAYS.index(way)}.csv"
                    wall = _collect(way, out, args)
                    got[way] = _times(out)
                    walls[way].append(wall)
                base.append(got["local"])
                for way in WAYS:
                    common = sorted(set(got[way]) & set(got["local"]))
                    ratios[way].append([got[way][p] / got["local"][p] for p in common])
                print(f"round {k + 1}: " + ", ".join(f"{w} {walls[w][-1]:.0f} s" for w in order), flush=True)
        except KeyboardInterrupt:
            print(f"interrupted: {len(base)} whole round(s) measured", file=sys.stderr)
            if not base:
                return 130
    points = len(base[0])
    print(f"\n{points} points ({args.families}, batch sizes {args.batch_sizes}), {len(base)} rounds")
    # the noise: local against the local run of the other rounds, point by point
    noise = [statistics.median(b[p] / a[p] for p in set(a) & set(b)) for i, a in enumerate(base)
             for b in base[i + 1:]]
    print(f"{'way':<22} {'time / local (median)':>22} {'per-round medians':>22} {'wall s (median)':>16}")
    for way in WAYS:
        per_round = [statistics.median(r) for r in ratios[way][:len(base)] if r]
        flat = [x for r in ratios[way][:len(base)] for x in r]
        print(f"{way:<22} {statistics.median(flat):>22.3f} {min(per_round):>10.3f} - {max(per_round):<9.3f} "
              f"{statistics.median(walls[way]):>16.1f}")
    if noise:
        print(f"noise: the local run of one round against another's: medians {min(noise):.3f} - {max(noise):.3f}")
    return 0 if len(base) == args.rounds else 130


if __name__ == "__main__":
    sys.exit(main())
