"""Benchmark (b): profiling overhead = total profile wall time ÷ time spent in timed iterations.

Each target is profiled with the real command users type (``perfpredict profile <target>``, default
settings: ONNX features, fvcore, plots and an MLflow run in a throw-away store), timed from process start to
exit. The card gives the time spent inside timed iterations. Target (issue #2): ≤ 3×.

Two ratios are printed per target:

- ``command``: whole command wall time (interpreter start, imports, MLflow, plots included) ÷ timed;
- ``profile``: ``profile_workload`` wall time as recorded on the card (sweep + fit + features) ÷ timed.

    python benchmarks/profiling_overhead.py [--targets examples/cnn_classifier.py,zoo:resnet] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfpredict.card import PerformanceCard
from perfpredict.script_args import describe, measure_keeping_partial, out_file, stop_requested

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TARGETS = "examples/cnn_classifier.py,zoo:resnet,zoo:transformer,zoo:lstm,zoo:mlp"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--targets", default=DEFAULT_TARGETS)
    ap.add_argument("--json", type=out_file, help="also write the results here")
    ap.add_argument("extra", nargs="*", help="extra arguments passed to perfpredict profile (after --)")
    args = ap.parse_args(argv)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlruns.db"}

        def measure_all() -> None:
            for i, target in enumerate(args.targets.split(",")):
                if stop_requested():  # a Ctrl-C whose KeyboardInterrupt was swallowed
                    raise KeyboardInterrupt
                out = Path(tmp) / f"out{i}"
                tgt = str(REPO / target) if not target.startswith("zoo:") else target
                cmd = [sys.executable, "-m", "perfpredict", "profile", tgt, "--out", str(out), "--device", "cpu",
                       *args.extra]
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=env)
                wall = time.perf_counter() - t0
                if proc.returncode != 0:
                    print(f"{target}: failed ({proc.returncode}): {proc.stderr.strip()[-300:]}", file=sys.stderr)
                    continue
                card = PerformanceCard.load(out / "card.json")
                timed = card.run.timed_s
                row = {"target": target, "command_wall_s": wall, "profile_wall_s": card.run.wall_s,
                       "timed_s": timed, "command_ratio": wall / timed, "profile_ratio": card.run.wall_s / timed,
                       "batch_sizes": card.run.batch_sizes, "device": card.device.name}
                rows.append(row)
                print(f"{target:28s} command {wall:6.1f} s  profile {card.run.wall_s:6.1f} s  timed {timed:6.1f} s  "
                      f"ratio command {row['command_ratio']:.2f}x  profile {row['profile_ratio']:.2f}x", flush=True)

        # Ctrl-C: the targets profiled so far are reported and saved (the one in progress is stopped with it)
        interrupted = measure_keeping_partial(measure_all, rows)
    med_c = statistics.median(r["command_ratio"] for r in rows)
    med_p = statistics.median(r["profile_ratio"] for r in rows)
    print(f"\nmedian over {len(rows)} targets on {rows[0]['device']}: command {med_c:.2f}x, profile {med_p:.2f}x "
          f"(target <= 3x: {'MET' if med_c <= 3 else 'NOT MET'} for the whole command)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "median_command_ratio": med_c, "median_profile_ratio": med_p,
                       "interrupted": interrupted}, f, indent=2)
    if interrupted:
        raise KeyboardInterrupt
    return 0


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
