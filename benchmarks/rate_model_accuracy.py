"""Benchmark (a): how well the rate model predicts a batch size it was not fitted on, across the zoo.

For each zoo family (default config) five batch sizes are measured for real with perfpredict's profiler.
Then:

- interior: fit on the 1st, 2nd, 4th and 5th, predict the 3rd (interpolation);
- extrapolated: fit on the four smallest, predict the largest.

The error is |predicted − measured| / measured of the iteration time. Targets (issue #2, CPU): median
interior error ≤ 10%, median extrapolated error ≤ 20%. For context, the same fits are also scored with each
candidate forced (quadratic-only, linear-only), so the value of per-job selection is visible, and the two
held-out batch sizes are measured a second time in fresh processes: the run-to-run difference of the same
measurement is the noise floor no predictor can beat.

    python benchmarks/rate_model_accuracy.py [--families resnet,mlp] [--min-time 1.0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from perfpredict.errors import PerfPredictError, UsageError
from perfpredict.fit.rate import LINEAR, QUADRATIC, fit_rate_model
from perfpredict.profile.device import resolve_device
from perfpredict.profile.timing import TimingConfig
from perfpredict.script_args import describe, measure_keeping_partial, nonneg_float, out_file, stop_requested


def rel_err(pred: float, true: float) -> float:
    return abs(pred - true) / true


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def score(b: list[int], r: list[float], fit_idx: list[int], test_idx: int, kind: str | None) -> tuple[float, str]:
    m = fit_rate_model([b[i] for i in fit_idx], [r[i] for i in fit_idx], kind=kind)
    t_true = b[test_idx] / r[test_idx]
    return rel_err(float(m.iter_time(b[test_idx])), t_true), m.kind


def _measure(fam: str, args: argparse.Namespace, rows: list[dict]) -> None:
    """Measure one family and append its row (or report on stderr why it was skipped)."""
    from perfpredict.profile import ProfileSettings, profile_workload
    from perfpredict.workload.zoo import load_zoo_workload

    w = load_zoo_workload(fam)
    settings = ProfileSettings(device=args.device, timing=TimingConfig(min_time_s=args.min_time), features=False)
    try:
        card = profile_workload(w, settings).card
    except PerfPredictError as e:  # this family failed: report it, keep the others' measurements
        print(f"{fam}: skipped: {e}", file=sys.stderr)
        return
    pts = card.measured_points()
    if len(pts) < 5:
        print(f"{fam}: only {len(pts)} batch sizes measured, skipped", file=sys.stderr)
        return
    b = [p.batch_size for p in pts[:5]]
    r = [p.samples_per_s for p in pts[:5]]
    row = {"family": fam, "device": card.device.name, "batch_sizes": b, "samples_per_s": r,
           "cv": [p.cv for p in pts[:5]]}
    try:
        again = profile_workload(w, ProfileSettings(device=args.device, batch_sizes=(b[2], b[4]),
                                                    timing=settings.timing, features=False)).card
        repeat = {p.batch_size: p.iter_time_s for p in again.measured_points()}
    except PerfPredictError as e:  # the first measurement still counts; only the noise column is lost
        print(f"{fam}: remeasuring failed: {e}", file=sys.stderr)
        repeat = {}
    for name, fit_idx, test_idx in (("interior", [0, 1, 3, 4], 2), ("extrapolated", [0, 1, 2, 3], 4)):
        err, kind = score(b, r, fit_idx, test_idx, None)
        t_first = b[test_idx] / r[test_idx]
        t_again = repeat.get(b[test_idx])
        row[name] = {"error": err, "selected": kind,
                     "error_quadratic_only": score(b, r, fit_idx, test_idx, QUADRATIC)[0],
                     "error_linear_only": score(b, r, fit_idx, test_idx, LINEAR)[0],
                     "repeatability": rel_err(t_again, t_first) if t_again else None}
    rows.append(row)
    print(f"{fam:12s} b={b}  interior {row['interior']['error']:6.1%} ({row['interior']['selected']}, "
          f"remeasured {_pct(row['interior']['repeatability'])})  extrapolated "
          f"{row['extrapolated']['error']:6.1%} ({row['extrapolated']['selected']}, remeasured "
          f"{_pct(row['extrapolated']['repeatability'])})", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--families", help="comma-separated zoo families [all of them]")
    ap.add_argument("--min-time", type=nonneg_float, default=TimingConfig().min_time_s,
                    help="minimum timed seconds per batch size [the profiler's default]")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=out_file, help="also write the results here")
    args = ap.parse_args(argv)
    try:
        resolve_device(args.device)
    except UsageError as e:
        ap.error(f"argument --device: {e.message}")
    from perfpredict.workload.zoo import families  # the zoo's registry imports torch

    names = [f.strip() for f in args.families.split(",")] if args.families else list(families())
    unknown = [f for f in names if f not in families()]
    if unknown:
        ap.error(f"argument --families: unknown zoo famil{'ies' if len(unknown) > 1 else 'y'} "
                 f"{', '.join(map(repr, unknown))}; choose from {', '.join(sorted(families()))}")

    rows = []
    t0 = time.perf_counter()
    def measure_all() -> None:
        for fam in names:
            if stop_requested():  # a Ctrl-C whose KeyboardInterrupt was swallowed
                raise KeyboardInterrupt
            _measure(fam, args, rows)

    interrupted = measure_keeping_partial(measure_all, rows)  # Ctrl-C: the families measured so far are kept
    summary = {}
    print()
    print(f"{'':14s}{'selected':>10s}{'quadratic':>11s}{'linear':>9s}{'remeasured':>12s}   target")
    for name, target in (("interior", 0.10), ("extrapolated", 0.20)):
        med = statistics.median(r[name]["error"] for r in rows)
        med_q = statistics.median(r[name]["error_quadratic_only"] for r in rows)
        med_l = statistics.median(r[name]["error_linear_only"] for r in rows)
        reps = [r[name]["repeatability"] for r in rows if r[name]["repeatability"] is not None]
        med_rep = statistics.median(reps) if reps else None
        summary[name] = {"median_error": med, "median_error_quadratic_only": med_q,
                         "median_error_linear_only": med_l, "median_repeatability": med_rep,
                         "target": target, "met": med <= target}
        print(f"{name:14s}{med:10.1%}{med_q:11.1%}{med_l:9.1%}{_pct(med_rep):>12s}   <= {target:.0%}  "
              f"{'MET' if med <= target else 'NOT MET'}")
    print("(remeasured: median |difference| between two measurements of the same held-out batch size)")
    print(f"\n{len(rows)} zoo models on {rows[0]['device']} ({args.device}); median relative error of the "
          f"predicted iteration time; {time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": summary, "min_time_s": args.min_time, "interrupted": interrupted},
                      f, indent=2)
    if interrupted:
        raise KeyboardInterrupt
    return 0


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
