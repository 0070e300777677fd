"""Synergy's optimistic CPU search vs an exhaustive CPU sweep, on live zoo jobs with their input pipelines.

For each model: measure the job (DataLoader + preprocess + training step) at every CPU count 1..C
(exhaustive), then run the optimistic binary search *live* (its own, fresh measurements) and report

* probes(optimistic) / probes(exhaustive)                       — target ≤ 0.5
* worst |reconstructed − exhaustive| / exhaustive over all c     — target ≤ 10%
* the same error for the search replayed on the exhaustive measurements (no re-measurement noise), and the
  exhaustive sweep's own re-measurement noise at c = C (the floor any live comparison has).

    python benchmarks/sensitivity_search.py                    # resnet, vgg, transformer on this machine
    python benchmarks/sensitivity_search.py --models resnet lstm --window 3
    python benchmarks/sensitivity_search.py --json sweeps.json   # also save the measured curves
    python benchmarks/sensitivity_search.py --replay sweeps.json # re-run the search on saved curves

``--json`` writes every exhaustive curve (and the live search's probes) with the machine it came from, so a
sweep taken on a many-core machine can be committed under ``datasets/`` and replayed anywhere with
``--replay`` (no re-measurement: the replayed column only).

Needs a machine with many cores to mean much: with C CPUs the exhaustive sweep has C probes and the
search always makes at least 2 (the ends), so on a 2-core machine the ratio is 1 by construction.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    from perfpredict.script_args import (
        describe,
        measure_keeping_partial,
        out_file,
        positive_float,
        positive_int,
        stop_requested,
    )

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--models", nargs="+", default=["resnet", "vgg", "transformer"], help="zoo families")
    ap.add_argument("--batch", type=positive_int, default=32)
    ap.add_argument("--window", type=positive_float, default=2.0, help="timed seconds per probe")
    ap.add_argument("--threshold", type=positive_float, default=0.1, help="search threshold, between 0 and 1")
    ap.add_argument("--max-cpus", type=positive_int, default=None)
    ap.add_argument("--json", type=out_file, default=None, help="write the measured curves and results here")
    ap.add_argument("--replay", default=None, help="run the search on curves saved by --json; measure nothing")
    args = ap.parse_args(argv)
    # imported once the flags are known to be good: they import torch (seconds), so a typo is answered at once
    from perfpredict.profile.pipeline_worker import PipelineRequest
    from perfpredict.profile.runner import run_pipeline_in_subprocess, warm_up
    from perfpredict.profile.sensitivity import max_relative_error, optimistic_cpu_search
    from perfpredict.workload.spec import WorkloadRef
    from perfpredict.workload.zoo import families

    if not args.threshold < 1:
        ap.error(f"argument --threshold: {args.threshold:g}: must be between 0 and 1")
    if args.replay:
        try:
            saved = load_saved(args.replay)
        except ValueError as e:
            ap.error(f"argument --replay: {e}")
        replay_saved(args.replay, args.threshold, saved)
        return 0
    unknown = [m for m in args.models if m not in families()]
    if unknown:
        ap.error(f"argument --models: unknown zoo famil{'ies' if len(unknown) > 1 else 'y'} "
                 f"{', '.join(map(repr, unknown))}; choose from {', '.join(sorted(families()))}")

    warm_up()
    cores = sorted(os.sched_getaffinity(0))[: args.max_cpus or None]
    cpu_values = list(range(1, len(cores) + 1))
    print(f"machine: {len(cores)} usable CPUs; cpu_values = {cpu_values}; threshold {args.threshold:.0%}; "
          f"window {args.window:g} s per probe\n")
    rows = []

    def measure_all() -> None:
        for fam in args.models:
            if stop_requested():  # a Ctrl-C whose KeyboardInterrupt was swallowed
                raise KeyboardInterrupt
            ref = WorkloadRef("zoo", fam)

            def measure(c: int) -> float:
                r = run_pipeline_in_subprocess(
                    PipelineRequest(ref, args.batch, tuple(cores[:c]), window_s=args.window), 600)
                if r.get("status") != "ok":
                    raise RuntimeError(f"{fam} at {c} CPUs: {r.get('error')}")
                return float(r["samples_per_s"])

            try:
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
                           err_replay=max_relative_error(replay.curve, ex_curve),
                           replay_ratio=replay.n_probes / len(cpu_values),
                           noise=noise, t_ex=t_ex, t_live=t_live,
                           curve=" ".join(f"{c}:{v:.0f}" for c, v in zip(cpu_values, ex_curve)), ex_curve=ex_curve,
                           live_probed=[list(p) for p in live.probed])
                rows.append(row)
                print(f"{fam:12s} exhaustive samples/s by CPUs: {row['curve']}")
                print(f"{'':12s} live search probed {row['probes']} in {t_live:.0f} s (exhaustive {t_ex:.0f} s)\n")
            except RuntimeError as e:  # this model failed: report it, keep the others' measurements
                print(f"{fam}: skipped: {e}\n", file=sys.stderr)

    interrupted = measure_keeping_partial(measure_all, rows)  # Ctrl-C: the models measured so far are kept

    print(f"{'model':12s} {'probes ratio':>12s} {'worst err (live)':>17s} {'(replayed)':>11s} "
          f"{'re-measure noise':>17s}")
    for r in rows:
        print(f"{r['model']:12s} {r['ratio']:12.2f} {r['err_live']:17.1%} {r['err_replay']:11.1%} {r['noise']:17.1%}")
    if args.json:
        import torch

        doc = {"machine": {"cpus": len(cores), "processor": platform.processor() or platform.machine(),
                           "torch": torch.__version__, "host": platform.node()},
               "batch": args.batch, "window_s": args.window, "threshold": args.threshold, "cpu_values": cpu_values,
               "models": [{k: v for k, v in r.items() if k != "curve"} | {"exhaustive": r["ex_curve"]}
                          for r in rows], "interrupted": interrupted}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")
    print(f"\nmedian probes ratio {np.median([r['ratio'] for r in rows]):.2f} (target <= 0.5); "
          f"worst live error {max(r['err_live'] for r in rows):.1%} (target <= 10%)")
    if interrupted:
        raise KeyboardInterrupt
    return 0


def load_saved(path: str) -> dict:
    """The curves a previous ``--json`` run saved; a ValueError with one readable line when the file is missing,
    is not JSON, or does not hold what ``--json`` writes."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not a JSON file ({e})") from None
    what = f"{path} does not hold curves saved by --json"
    if not isinstance(doc, dict):
        raise ValueError(what)
    values, models = doc.get("cpu_values"), doc.get("models")
    if (not isinstance(values, list) or not values
            or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in values)):
        raise ValueError(f"{what}: no list of CPU counts ('cpu_values', whole numbers >= 1)")
    if len(set(values)) != len(values):
        raise ValueError(f"{what}: a CPU count is listed twice in 'cpu_values' ({values})")
    if not isinstance(models, list) or not models:
        raise ValueError(f"{what}: no measured models ('models')")
    for i, m in enumerate(models):
        curve = m.get("exhaustive") if isinstance(m, dict) else None
        if (not isinstance(curve, list) or len(curve) != len(values)
                or not all(isinstance(v, (int, float)) and v > 0 for v in curve)):
            raise ValueError(f"{what}: model {i + 1} has no curve of {len(values)} positive throughputs "
                             f"('exhaustive')")
        m.setdefault("model", f"model {i + 1}")
    return doc


def replay_saved(path: str, threshold: float, doc: dict | None = None) -> None:
    """The search replayed on curves a previous run saved: probe ratio and reconstruction error, no noise."""
    from perfpredict.profile.sensitivity import (
        max_relative_error,
        optimistic_cpu_search,
    )

    if doc is None:
        doc = load_saved(path)
    values = doc["cpu_values"]
    print(f"replaying {path}: measured on {doc.get('machine')}, cpu_values {values}, threshold {threshold:.0%}\n")
    ratios, errs = [], []
    for m in doc["models"]:
        curve = dict(zip(values, m["exhaustive"]))
        r = optimistic_cpu_search(lambda c, curve=curve: curve[c], values, threshold=threshold)
        ratios.append(r.n_probes / len(values))
        # the search's curve follows its sorted cpu_values; the file's curve follows the file's order
        errs.append(max_relative_error(r.curve, [curve[c] for c in r.cpu_values]))
        print(f"{m['model']:12s} probed {sorted(r.probed_cpu_values)}  ratio {ratios[-1]:.2f}  "
              f"worst error {errs[-1]:.1%}")
    print(f"\nmedian probes ratio {np.median(ratios):.2f} (target <= 0.5); worst error {max(errs):.1%} "
          f"(target <= 10%)")


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
