"""Build the estimators' datasets: measure zoo architectures × batch sizes on one device (resumable).

Two steps, each resumable (re-running skips what is already in the file):

    # 1. graph features of every zoo architecture (CPU, ONNX export; device-independent)
    python profilers/collect_dataset.py features --out datasets/zoo_features.csv

    # 2. measurements on this machine's device, one row per (architecture, batch size)
    python profilers/collect_dataset.py measure --device cpu  --out datasets/cpu_xeon2c.csv --max-gflop-iter 60
    python profilers/collect_dataset.py measure --device cuda --out datasets/cuda_h100.csv --batch-sizes 8,16,32,64,128

    python profilers/collect_dataset.py measure --dry-run ...     # list the points without measuring

Each dataset gets ``<name>.meta.json`` with its provenance (device, driver, CUDA, torch, date, command, git
commit), one entry per collection run. Each run also times one fixed step (the speed sentinel) at its start,
between architectures every ``--sentinel-every`` seconds and at its end (each reading the median of three
processes), records the readings there, and warns when the machine's speed moved by more than 10% (and more than
the readings' own noise) during the run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from perfpredict.script_args import (
    command_line,
    describe,
    device_spelling,
    int_list,
    nonneg_float,
    out_csv,
    positive_float,
    positive_int,
    run_script,
)


def _families(text: str) -> list[str]:
    """``--families``: comma-separated zoo family names (checked against the zoo when the plan is made)."""
    names = [n.strip() for n in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated zoo families such as mlp,resnet")
    return names


def _existing_csv(text: str) -> Path:
    """``--skip-configs-of``: a dataset file that exists (its rows are read when the plan is made)."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: no such dataset file")
    return path


def _features(args: argparse.Namespace) -> int:
    from perfpredict.dataset.collect import plan_sweep
    from perfpredict.dataset.features_table import build_features_table

    plans = plan_sweep(args.families, max_gmacs=args.max_gmacs)
    print(f"{len(plans)} architectures -> {args.out}", file=sys.stderr)
    t0 = time.perf_counter()

    def progress(name, row):
        if row is not None:
            err = f"  ERROR {row['error']}" if row["error"] else ""
            print(f"  {name}: {row['forward_macs_per_sample']} MACs/sample, {row['export_s']} s{err}",
                  file=sys.stderr, flush=True)

    added = build_features_table([(p.family, p.cfg) for p in plans], args.out, progress,
                                 isolate=not args.in_process, timeout_s=args.timeout)
    from perfpredict.dataset.features_table import add_graph_walk_columns, add_saved_bytes, backfill_export_columns

    # rows from before the saved-tensor (CUDA and CPU counts) / lookup-bytes / recurrent-steps columns existed
    # (all rows' saved bytes with --recompute-saved)
    filled = add_saved_bytes(args.out, recompute=args.recompute_saved)

    def backfilled(name, column, value):
        print(f"  {name}: {column} = {value}" if value is not None else
              f"  {name}: {column} NOT filled (export failed; the cell stays empty)", file=sys.stderr, flush=True)

    exported = backfill_export_columns(args.out, backfilled)

    def walk_filled(name, value):
        print(f"  {name}: peak live / graph-saved bytes = {value}" if value is not None else
              f"  {name}: peak live / graph-saved bytes NOT filled (export failed; the cells stay empty)",
              file=sys.stderr, flush=True)

    walked = add_graph_walk_columns(args.out, walk_filled, recompute=args.recompute_graph_walk)
    print(f"added {added} rows, filled saved-tensor bytes of {filled}, graph-walk counts of {walked}, "
          + ", ".join(f"{col} of {n}" for col, n in exported.items()) + f", in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr)
    return 0


def _measure(args: argparse.Namespace) -> int:
    from perfpredict.dataset.collect import (
        CUDA_DATASET_TIMING,
        CollectSettings,
        _done_points,
        collect,
        git_commit_of,
        plan_sweep,
        read_dataset,
        todo_batches,
    )
    from perfpredict.dataset.sentinel import choose_sentinel, drift_warning
    from perfpredict.errors import UsageError
    from perfpredict.profile.device import resolve_device
    from perfpredict.profile.timing import TimingConfig

    # the device first: no GPU for --device cuda is said before the plan is built and printed (on Ray, the nodes'
    # devices count, and the cluster is asked when measuring starts)
    if args.tasks_at_once is not None and args.ray is None:
        raise UsageError("--tasks-at-once caps Ray tasks: it needs --ray", step="arguments")
    if args.ray is not None and args.device not in ("cpu", "cuda"):
        raise UsageError(f"--device {args.device} with --ray: say --device cuda (one GPU per task) or --device cpu "
                         "(a node per task)", step="arguments")
    device = args.device if args.ray is not None else None if args.dry_run else resolve_device(args.device)
    plans = plan_sweep(args.families, batch_sizes=args.batch_sizes, max_gmacs=args.max_gmacs,
                       max_sample_gmacs_per_iter=args.max_gflop_iter / 6 if args.max_gflop_iter else None,
                       max_param_bytes=args.max_param_mb * 2**20 if args.max_param_mb else None)
    plans = plans[:: args.every]
    if args.skip_configs_of:
        held_out = {r.get("config") for r in read_dataset(args.skip_configs_of)}
        plans = [p for p in plans if p.config not in held_out]
    n_points = sum(len(p.batch_sizes) for p in plans)
    print(f"{len(plans)} architectures, {n_points} points", file=sys.stderr)
    chosen = choose_sentinel(plans) if args.sentinel_every is not None and args.ray is None else None
    if args.ray is not None:
        print(f"on Ray ({args.ray}): one task per architecture, "
              + ("one GPU each" if device == "cuda" else "a whole node's CPUs each") + "; no speed sentinel is timed",
              file=sys.stderr)
    elif chosen:
        print(f"speed sentinel: {chosen[0].config} b={chosen[1]}, timed at the start, every "
              f"{args.sentinel_every:g} s between architectures and at the end", file=sys.stderr)
    if args.dry_run:
        for p in plans:
            print(f"{p.config}\t{p.gmacs_per_sample:.3f} GMACs/sample\tbatch sizes {list(p.batch_sizes)}")
        if args.out.exists():
            # what a resumed run would skip: the points --out already has (read only; nothing is rewritten)
            done = _done_points(read_dataset(args.out))
            left = sum(len(todo_batches(p, done, args.mode)) for p in plans)
            in_file = sum((p.config, b, args.mode) in done.points for p in plans for b in p.batch_sizes)
            past_oom = n_points - left - in_file  # not measured: a smaller batch ran out of memory
            print(f"{in_file} of the {n_points} points are in {args.out} already"
                  + (f", {past_oom} lie above a batch size that ran out of memory there" if past_oom else "")
                  + f"; {left} are not", file=sys.stderr)
        return 0
    timing = CUDA_DATASET_TIMING if device.startswith("cuda") else TimingConfig()
    if args.min_time is not None:
        timing = TimingConfig(**{**timing.as_dict(), "min_time_s": args.min_time})
    settings = CollectSettings(device=device, mode=args.mode, precision=args.precision, timing=timing,
                               threads=args.threads,
                               time_budget_s=args.time_budget, sentinel_every_s=args.sentinel_every,
                               command=command_line(__file__, args.argv),
                               git_commit=args.git_commit or git_commit_of(Path(__file__).resolve().parent.parent))
    t0 = time.perf_counter()
    i = 0

    def progress(plan, row):
        nonlocal i
        i += 1
        what = (f"{row['iter_time_s'] * 1e3:8.2f} ms  {row['peak_memory_bytes'] / 2**20:8.1f} MiB"
                + (f"  util {row['gpu_utilization']:.2f}" if row["gpu_utilization"] is not None else "")
                if row["status"] == "ok" else f"{row['status']}: {row['error']}")
        print(f"[{i}] {time.perf_counter() - t0:6.0f}s {plan.config} b={row['batch_size']}: {what}",
              file=sys.stderr, flush=True)

    def sentinel_read(reading):
        what = (f"{reading['iter_time_s'] * 1e3:8.2f} ms (median of {len(reading['times_s'])} processes"
                + (f", {reading['spread']:.0%} apart)" if reading["spread"] is not None else ")")
                if reading["iter_time_s"] is not None else f"{reading['status']}: {reading.get('error', '')}")
        print(f"[sentinel, {reading['where']}] {time.perf_counter() - t0:6.0f}s {chosen[0].config} "
              f"b={chosen[1]}: {what}", file=sys.stderr, flush=True)

    try:
        summary = collect(plans, args.out, settings, progress, on_sentinel=sentinel_read, ray_address=args.ray,
                          tasks_at_once=args.tasks_at_once)
    except KeyboardInterrupt:
        print(f"interrupted: {i} rows written to {args.out} in this run (recorded in its .meta.json); run the "
              "same command again to resume: measured points are skipped"
              + (" and the architectures cancelled on Ray are measured" if args.ray is not None else ""),
              file=sys.stderr)
        return 130
    if summary.get("dropped_partial_row"):
        print(f"note: the cut-short last row of {args.out} (an interrupted run) was removed and measured again",
              file=sys.stderr)
    ray_run = summary.pop("ray", None)
    print(f"done: {summary}", file=sys.stderr)
    if ray_run is not None:
        print(f"on Ray: {ray_run['nodes']} node(s), {ray_run['gpus'] if device == 'cuda' else ray_run['cpus']} "
              f"{'GPUs' if device == 'cuda' else 'CPUs'}, {ray_run['tasks_at_once']} task(s) at once; measured by "
              + (", ".join(f"{h} ({n['device']}: {n['architectures']} architectures, {n['rows']} rows)"
                           for h, n in ray_run["measured_by"].items()) or "no node"), file=sys.stderr)
        for h, n in ray_run["measured_by"].items():
            if any(v > 0 for v in n["niceness"]):
                print(f"warning: {h} measured at niceness {max(n['niceness'])} (Ray's workers run at 15 unless the "
                      "cluster starts with RAY_worker_niceness=0, and this process may not lower it): every other "
                      "process on the node went first", file=sys.stderr)
        for r in ray_run["refused"]:
            print(f"warning: {r['config']}: {r['points']} point(s) not written: {r['why']} (one device type per "
                  "file; they stay to measure)", file=sys.stderr)
        for r in ray_run["failed"]:
            print(f"warning: {r['config']}: its task failed ({r['error']}); a re-run measures it", file=sys.stderr)
        for r in ray_run["lost"]:
            print(f"warning: {r['config']}: Ray lost the task ({r['error']}); a re-run measures it", file=sys.stderr)
    warning = drift_warning(summary.get("speed_drift"), summary.get("speed_noise"), f"warning: {args.out.name}")
    if warning:
        print(warning, file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=describe(__doc__))
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("features", help="graph features of every zoo architecture (CPU)")
    f.add_argument("--out", type=out_csv, default=Path("datasets/zoo_features.csv"))
    f.add_argument("--families", type=_families, help="comma-separated zoo families (default: all)")
    f.add_argument("--max-gmacs", type=positive_float)
    f.add_argument("--recompute-saved", action="store_true",
                   help="recount every row's saved-tensor bytes (after the count changed), keeping the rest")
    f.add_argument("--recompute-graph-walk", action="store_true",
                   help="redo every row's peak-live, rule-based saved and activation bytes and kernel rows "
                        "(after a walk's rules changed)")
    f.add_argument("--timeout", type=positive_float,
                   help="seconds one architecture's export may take (default: no limit)")
    f.add_argument("--in-process", action="store_true",
                   help="export every architecture in this process (faster for small ones; memory piles up)")
    m = sub.add_parser("measure", help="measure architectures x batch sizes on a device")
    m.add_argument("--out", type=out_csv, required=True)
    m.add_argument("--device", type=device_spelling, default="auto", help="auto, cpu, cuda or cuda:<index>")
    m.add_argument("--mode", default="train", choices=("train", "infer"))
    m.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                   help="autocast mixed precision of every measured step (one precision per output file)")
    m.add_argument("--families", type=_families, help="comma-separated zoo families (default: all)")
    m.add_argument("--batch-sizes", type=int_list,
                   help="override every family's default batch sizes, e.g. 8,16,32,64,128")
    m.add_argument("--max-gmacs", type=positive_float,
                   help="skip architectures above this many forward GMACs per sample")
    m.add_argument("--max-gflop-iter", type=positive_float,
                   help="skip points above this many training GFLOPs per iteration (~6 x forward GMACs x batch)")
    m.add_argument("--max-param-mb", type=positive_float,
                   help="skip architectures whose fp32 weights exceed this many MiB (training keeps ~3 copies)")
    m.add_argument("--min-time", type=nonneg_float, default=None, help="timed seconds per point")
    m.add_argument("--threads", type=positive_int)
    m.add_argument("--time-budget", type=positive_float,
                   help="stop starting new architectures after this many seconds")
    m.add_argument("--git-commit", help="commit to record in the provenance (default: this checkout's HEAD)")
    m.add_argument("--every", type=positive_int, default=1, help="measure every N-th architecture of the plan "
                   "(e.g. a repeat run for the noise floor)")
    m.add_argument("--skip-configs-of", type=_existing_csv, metavar="CSV",
                   help="leave out the architectures this dataset has (e.g. keep a held-out check's architectures "
                   "out of the training rows)")
    m.add_argument("--sentinel-every", type=nonneg_float, default=600.0, metavar="SECONDS",
                   help="time the speed sentinel between architectures once this many seconds passed since its "
                   "last reading (0: before every architecture; default 600), besides the run's start and end")
    m.add_argument("--no-sentinel", dest="sentinel_every", action="store_const", const=None,
                   help="do not time the speed sentinel")
    m.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="measure on a Ray cluster: 'local', 'auto' or the head's HOST:PORT; one task per architecture "
                   "asking for one GPU (--device cuda) or a whole node's CPUs (--device cpu); needs perfpredict[ray]")
    m.add_argument("--tasks-at-once", type=positive_int, metavar="N",
                   help="with --ray: at most N architectures measured at once (default: one per GPU or node; the "
                   "GPUs of a node share its host CPUs)")
    m.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    args.argv = argv
    return _features(args) if args.cmd == "features" else _measure(args)


if __name__ == "__main__":
    run_script(main)
