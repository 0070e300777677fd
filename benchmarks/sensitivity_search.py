"""Synergy's optimistic CPU search vs an exhaustive CPU sweep, on live zoo jobs with their input pipelines.

For each model: measure the job (DataLoader + preprocess + training step) at every CPU count 1..C
(exhaustive), then run the optimistic binary search *live* (its own, fresh measurements) and report

* probes(optimistic) / probes(exhaustive)                       — target ≤ 0.5
* worst |reconstructed − exhaustive| / exhaustive over all c     — target ≤ 10%
* the same error for the search replayed on the exhaustive measurements (no re-measurement noise), and the
  exhaustive sweep's own re-measurement noise at c = C (the floor any live comparison has).

    python benchmarks/sensitivity_search.py                    # resnet, vgg, transformer on this machine
    python benchmarks/sensitivity_search.py --models resnet lstm --window 3

Needs a machine with many cores to mean much: with C CPUs the exhaustive sweep has C probes and the
search always makes at least 2 (the ends), so on a 2-core machine the ratio is 1 by construction.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> None:
    from perfpredict.profile.pipeline_worker import PipelineRequest
    from perfpredict.profile.runner import run_pipeline_in_subprocess, warm_up
    from perfpredict.profile.sensitivity import (
        max_relative_error,
        optimistic_cpu_search,
    )
    from perfpredict.workload.spec import WorkloadRef

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet", "vgg", "transformer"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--window", type=float, default=2.0, help="timed seconds per probe")
    ap.add_argument("--threshold", type=float, default=0.1)
    ap.add_argument("--max-cpus", type=int, default=None)
    args = ap.parse_args()

    warm_up()
    cores = sorted(os.sched_getaffinity(0))[: args.max_cpus or None]
    cpu_values = list(range(1, len(cores) + 1))
    print(f"machine: {len(cores)} usable CPUs; cpu_values = {cpu_values}; threshold {args.threshold:.0%}; "
          f"window {args.window:g} s per probe\n")
    rows = []
    for fam in args.models:
        ref = WorkloadRef("zoo", fam)

        def measure(c: int) -> float:
            r = run_pipeline_in_subprocess(PipelineRequest(ref, args.batch, tuple(cores[:c]), window_s=args.window),
                                           600)
            if r.get("status") != "ok":
                raise RuntimeError(f"{fam} at {c} CPUs: {r.get('error')}")
            return float(r["samples_per_s"])

        t0 = time.perf_counter()
        exhaustive = {c: measure(c) for c in cpu_values}
        t_ex = time.perf_counter() - t0
        ex_curve = [exhaustive[c] for c in cpu_values]
        t0 = time.perf_counter()
        live = optimistic_cpu_search(measure, cpu_values, threshold=args.threshold)
        t_live = time.perf_counter() - t0
        replay = optimistic_cpu_search(lambda c: exhaustive[c], cpu_values, threshold=args.threshold)
        noise = abs(measure(cpu_values[-1]) - exhaustive[cpu_values[-1]]) / exhaustive[cpu_values[-1]]
        row = dict(model=fam, ratio=live.n_probes / len(cpu_values), probes=[c for c, _ in live.probed],
                   err_live=max_relative_error(live.curve, ex_curve),
                   err_replay=max_relative_error(replay.curve, ex_curve), replay_ratio=replay.n_probes / len(cpu_values),
                   noise=noise, t_ex=t_ex, t_live=t_live,
                   curve=" ".join(f"{c}:{v:.0f}" for c, v in zip(cpu_values, ex_curve)))
        rows.append(row)
        print(f"{fam:12s} exhaustive samples/s by CPUs: {row['curve']}")
        print(f"{'':12s} live search probed {row['probes']} in {t_live:.0f} s (exhaustive {t_ex:.0f} s)\n")

    print(f"{'model':12s} {'probes ratio':>12s} {'worst err (live)':>17s} {'(replayed)':>11s} "
          f"{'re-measure noise':>17s}")
    for r in rows:
        print(f"{r['model']:12s} {r['ratio']:12.2f} {r['err_live']:17.1%} {r['err_replay']:11.1%} {r['noise']:17.1%}")
    print(f"\nmedian probes ratio {np.median([r['ratio'] for r in rows]):.2f} (target <= 0.5); "
          f"worst live error {max(r['err_live'] for r in rows):.1%} (target <= 10%)")


if __name__ == "__main__":
    main()
