"""Measure pairs of zoo jobs sharing one device: the data behind Horus's interference model (resumable).

Each job is measured alone once, then next to every other job (and next to a copy of itself), in the
co-location harness (:mod:`perfpredict.profile.colocation`: warm up, meet at a barrier, time the same
wall-clock window). A row per pair holds both jobs' solo and co-located samples/s, Horus's slowdown
T_deg = |T_colo − T_solo| / T_solo for each, their solo NVML GPU utilisations and the sum of the two
(the x-axis of Horus Fig. 4). On CPU the utilisation columns stay empty: there is no such counter.

    python profilers/collect_colocation.py --device cuda --out datasets/cuda_h100_colocation.csv
    python profilers/collect_colocation.py --device cpu --out /tmp/pairs.csv --jobs 3 --window 1

The fixed list below has 8 jobs, too few to tell how well an interference model carries over to a job it
has not seen (leave-one-job-out; :func:`perfpredict.estimators.interference.leave_one_job_out`). With
``--from-dataset`` the jobs are drawn instead from the measured points of a dataset of the same device
(one per stratum of solo GPU utilisation, or of iteration time on a CPU, each from a family chosen at
random), and each is paired with ``--partners`` others at random; labels are ``<config>-b<batch>``:

    python profilers/collect_colocation.py --device cuda --out datasets/cuda_h100_colocation.csv \
        --from-dataset datasets/cuda_h100.csv --sample-jobs 24 --partners 4 --seed 1 --window 1.5

Provenance goes to ``<out>.meta.json`` as for the measured datasets.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import itertools
import sys
import time
from pathlib import Path

from perfpredict.errors import UsageError
from perfpredict.script_args import (
    command_line,
    describe,
    device_spelling,
    nonneg_int,
    out_csv,
    positive_float,
    positive_int,
    run_script,
)

#: Jobs chosen to span solo GPU utilisation from launch-bound (tiny MLP) to compute-bound (ImageNet CNNs,
#: BERT-base): (label, family, params, batch size).
JOBS: list[tuple[str, str, dict, int]] = [
    ("mlp-small-b32", "mlp", {}, 32),
    ("lstm-small-b32", "lstm", {}, 32),
    ("mobilenetv2-cifar-b64", "mobilenetv2", {}, 64),
    ("resnet18-cifar-b64", "resnet", {"depth": 18, "width": 64}, 64),
    ("transformer-small-b32", "transformer", {"layers": 4, "d_model": 256, "heads": 4, "seq_len": 128}, 32),
    ("resnet50-imagenet-b32", "resnet", {"depth": 50, "width": 64, "image_size": 224, "num_classes": 1000}, 32),
    ("vgg16-imagenet-b16", "vgg", {"depth": 16, "width": 64, "image_size": 224, "hidden": 4096,
                                   "num_classes": 1000}, 16),
    ("bert-base-b16", "transformer", {"layers": 12, "d_model": 768, "heads": 12, "seq_len": 128,
                                      "vocab": 30522, "num_classes": 2}, 16),
]

#: Columns before the host-load ones (the H100 file of 2026-11-23 was written with these): such a file is
#: given the current header when a run resumes it (:func:`perfpredict.dataset.collect.upgrade_header`).
COLUMNS_V1 = ["job", "job_batch", "partner", "partner_batch", "status", "error", "job_solo_samples_per_s",
              "partner_solo_samples_per_s", "job_colocated_samples_per_s", "partner_colocated_samples_per_s",
              "job_slowdown", "partner_slowdown", "job_solo_gpu_utilization", "partner_solo_gpu_utilization",
              "cumulative_gpu_utilization", "device", "window_s", "measured_at"]

#: ``other_cpus``: CPUs that processes outside the pair kept busy while the two were timed together (and
#: each job's solo run), from /proc/stat; empty in rows measured before it was recorded.
COLUMNS = [*COLUMNS_V1[:15], "other_cpus", "job_solo_other_cpus", "partner_solo_other_cpus", *COLUMNS_V1[15:]]

#: The numbers an ``ok`` row must have to count as measured (a row cut short, or garbled, is measured again).
DONE_NUMBERS = ["job_solo_samples_per_s", "partner_solo_samples_per_s", "job_colocated_samples_per_s",
                "partner_colocated_samples_per_s", "job_slowdown", "partner_slowdown", "window_s"]

#: Columns ``--from-dataset`` needs.
DATASET_NEEDS = ["config", "family", "batch_size", "status", "iter_time_s"]


def _finite(text: str | None) -> float | None:
    try:
        v = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def done_pairs(rows: list[dict[str, str]]) -> set[tuple[str, str]]:
    """The (job, partner) pairs of ``rows`` already measured: status ``ok`` with every number of
    :data:`DONE_NUMBERS` present and finite."""
    return {(r["job"], r["partner"]) for r in rows
            if r.get("status") == "ok" and r.get("job") and r.get("partner")
            and all(_finite(r.get(k)) is not None for k in DONE_NUMBERS)}


def sample_jobs(rows: list[dict[str, str]], n_jobs: int, seed: int, max_job_mem_gb: float | None = None,
                max_iter_s: float | None = None, source: str | None = None) -> list[tuple[str, str, dict, int]]:
    """``n_jobs`` measured points of a dataset as jobs of the list above: the ok points, sorted by solo GPU
    utilisation (iteration time where there is none), cut into ``n_jobs`` equal strata, one point from each,
    its family drawn uniformly among the families in the stratum (so big families do not crowd out small
    ones). Points above ``max_job_mem_gb`` of NVML process memory (or peak memory) or ``max_iter_s`` per
    iteration are left out (GB: 1e9 bytes). Deterministic given ``seed``. A dataset without the columns this
    needs, or with text where a number belongs, is a :class:`~perfpredict.errors.UsageError` naming ``source``
    and the row."""
    import random

    from perfpredict.dataset.collect import plan_sweep

    step = "sampling jobs"
    if rows:
        missing = [c for c in DATASET_NEEDS if c not in rows[0]]
        if missing:
            raise UsageError(f"the dataset has no {', '.join(missing)} column{'s' if len(missing) > 1 else ''} "
                             f"(a measured dataset from collect_dataset.py measure has them)", source=source,
                             step=step)

    def number(r: dict[str, str], key: str, i: int) -> float | None:
        text = r.get(key)
        if text in (None, ""):
            return None
        v = _finite(text)
        if v is None:
            raise UsageError(f"row {i + 2}: {key} is {text!r}, not a number", source=source, step=step)
        return v

    plans = {p.config: p for p in plan_sweep()}
    pts = []
    for i, r in enumerate(rows):
        if r.get("status") != "ok" or r.get("config") not in plans:
            continue
        mem = number(r, "nvml_process_bytes", i) or number(r, "peak_memory_bytes", i)
        if max_job_mem_gb is not None and mem and mem > max_job_mem_gb * 1e9:  # GB, as every *_gb in perfpredict
            continue
        it = number(r, "iter_time_s", i)
        if it is None:
            raise UsageError(f"row {i + 2}: an ok point without iter_time_s", source=source, step=step)
        if max_iter_s is not None and it > max_iter_s:
            continue
        util = number(r, "gpu_utilization", i)
        batch = number(r, "batch_size", i)
        if batch is None or batch != int(batch) or batch < 1:
            raise UsageError(f"row {i + 2}: batch_size is {r.get('batch_size')!r}, not a whole number >= 1",
                             source=source, step=step)
        pts.append((util if util is not None else it, r["config"], r["family"], int(batch)))
    if len(pts) < n_jobs:
        raise UsageError(f"only {len(pts)} usable points in the dataset, asked for {n_jobs} jobs", source=source,
                         step=step)
    pts.sort()
    rng = random.Random(seed)
    out, taken = [], set()
    for k in range(n_jobs):
        stratum = pts[k * len(pts) // n_jobs:(k + 1) * len(pts) // n_jobs]
        # one batch size per architecture where the stratum allows it: the jobs a leave-one-job-out fold
        # holds out are architectures
        stratum = [p for p in stratum if p[1] not in taken] or stratum
        fam = rng.choice(sorted({p[2] for p in stratum}))
        _, config, family, batch = rng.choice([p for p in stratum if p[2] == fam])
        taken.add(config)
        out.append((f"{config}-b{batch}", family, dict(plans[config].cfg), batch))
    return out


def random_pairs(labels: list[str], partners: int, seed: int, self_pairs: bool = False) -> list[tuple[str, str]]:
    """Unordered pairs in which every job has at least ``partners`` distinct partners (fewer only when there
    are not enough jobs), drawn at random; with ``self_pairs`` each job also runs next to a copy of itself."""
    import random

    rng = random.Random(seed)
    order = {x: i for i, x in enumerate(labels)}
    pairs: set[tuple[str, str]] = set()
    deg = dict.fromkeys(labels, 0)
    for a in labels:
        others = [b for b in labels if b != a and (min(a, b, key=order.get), max(a, b, key=order.get)) not in pairs]
        rng.shuffle(others)
        for b in others[: max(0, partners - deg[a])]:
            pairs.add((min(a, b, key=order.get), max(a, b, key=order.get)))
            deg[a] += 1
            deg[b] += 1
    if self_pairs:
        pairs.update((a, a) for a in labels)
    return sorted(pairs, key=lambda ab: (order[ab[0]], order[ab[1]]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--out", type=out_csv, required=True)
    ap.add_argument("--device", type=device_spelling, default="auto", help="auto, cpu, cuda or cuda:<index>")
    ap.add_argument("--jobs", type=positive_int, default=len(JOBS),
                    help=f"use the first N jobs of the list (1 to {len(JOBS)})")
    ap.add_argument("--window", type=positive_float, default=2.0, help="timed seconds per run")
    ap.add_argument("--time-budget", type=positive_float, help="stop starting new pairs after this many seconds")
    ap.add_argument("--from-dataset", type=Path, help="draw the jobs from this dataset's measured points instead")
    ap.add_argument("--sample-jobs", type=positive_int, default=24, help="with --from-dataset: how many jobs")
    ap.add_argument("--partners", type=nonneg_int, default=4,
                    help="with --from-dataset: partners per job (at least; 0 needs --self-pairs)")
    ap.add_argument("--self-pairs", action="store_true", help="with --from-dataset: also pair each job with a copy")
    ap.add_argument("--seed", type=int, default=0, help="with --from-dataset: seed of the draw")
    ap.add_argument("--max-job-mem-gb", type=positive_float, default=30.0,
                    help="with --from-dataset: leave out points whose measured memory is above this many GB "
                         "(1e9 bytes)")
    ap.add_argument("--max-iter-s", type=positive_float, help="with --from-dataset: leave out points slower than "
                    "this per iteration (default: a tenth of the window)")
    ap.add_argument("--dry-run", action="store_true", help="print the jobs and pairs, measure nothing")
    args = ap.parse_args(argv)
    if args.jobs > len(JOBS):
        ap.error(f"argument --jobs: the list has {len(JOBS)} jobs, not {args.jobs}")
    if args.from_dataset is not None and args.partners == 0 and not args.self_pairs:
        ap.error("argument --partners: 0 partners and no --self-pairs leaves no pair to measure")
    # imported once the arguments are known to be good: they import torch (a second and more), and a wrong flag is
    # answered at once
    from perfpredict.dataset.collect import (
        CollectSettings,
        _append_provenance,
        _run_provenance,
        check_provenance,
        git_commit_of,
        prepare_resume,
        read_dataset,
        upgrade_header,
    )
    from perfpredict.profile.colocation import measure_pair, measure_solo
    from perfpredict.profile.device import resolve_device
    from perfpredict.profile.group_request import GroupTiming
    from perfpredict.workload.spec import WorkloadRef

    if args.from_dataset is not None:
        if not args.from_dataset.is_file():
            raise SystemExit(f"error: no dataset at {args.from_dataset}")
        jobs = sample_jobs(read_dataset(args.from_dataset), args.sample_jobs, args.seed, args.max_job_mem_gb,
                           args.max_iter_s if args.max_iter_s is not None else args.window / 10,
                           source=str(args.from_dataset))
        all_pairs = random_pairs([j[0] for j in jobs], args.partners, args.seed, args.self_pairs)
    else:
        jobs = JOBS[: args.jobs]
        all_pairs = list(itertools.combinations_with_replacement([j[0] for j in jobs], 2))
    if args.dry_run:
        for label, fam, _, _ in jobs:
            print(f"job  {label} ({fam})")
        for a, b in all_pairs:
            print(f"pair {a} + {b}")
        print(f"{len(jobs)} jobs, {len(all_pairs)} pairs")
        if args.out.is_file():
            # what a resumed run would skip (read only: an older header is not upgraded by a dry run)
            done = done_pairs(read_dataset(args.out))
            left = sum(p not in done for p in all_pairs)
            print(f"{len(all_pairs) - left} of the {len(all_pairs)} pairs are in {args.out} already; {left} are not",
                  file=sys.stderr)
        return 0
    device = resolve_device(args.device)
    timing = GroupTiming(window_s=args.window)
    refs = {label: (WorkloadRef("zoo", fam, tuple(sorted(p.items()))), b) for label, fam, p, b in jobs}
    # Checked before any measuring: a bad provenance file, a file that is not this script's CSV.
    check_provenance(args.out)
    command = command_line(__file__, argv)
    upgraded = upgrade_header(args.out, COLUMNS, [COLUMNS_V1], by=command)
    if upgraded is not None:
        print(f"note: {args.out} was written before the host-load columns; its header now has them (empty in "
              "the rows already measured)", file=sys.stderr)
    rows, dropped = prepare_resume(args.out, COLUMNS)
    done = done_pairs(rows)
    new = not args.out.exists() or args.out.stat().st_size == 0
    settings = CollectSettings(device=device, command=command,
                               git_commit=git_commit_of(Path(__file__).resolve().parent.parent))
    meta = _run_provenance(settings)
    meta["window_s"] = args.window
    if dropped is not None:
        meta["dropped_partial_row"] = dropped
        print(f"note: the cut-short last row of {args.out} (an interrupted run) was removed and is measured again",
              file=sys.stderr)
    if args.from_dataset is not None:
        meta["sampled_from"] = {"dataset": args.from_dataset.name, "jobs": args.sample_jobs,
                                "partners": args.partners, "seed": args.seed, "self_pairs": args.self_pairs,
                                "max_job_mem_gb": args.max_job_mem_gb}
    t0 = time.monotonic()
    solo: dict[str, dict] = {}
    counts: dict[str, int] = {}
    pairs = [(a, b) for a, b in all_pairs if (a, b) not in done]
    print(f"{len(pairs)} pairs to measure on {device}", file=sys.stderr)
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        f = open(args.out, "a", newline="", encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write {args.out}: {e.strerror or e}", step="output") from None
    # Recorded before the first row and completed at the end, as the dataset collector does: a run killed
    # outright (SIGKILL, the lent machine taken back at its time limit) still leaves its device, window and
    # command beside the rows it wrote.
    meta["finished_at"] = None
    try:
        _append_provenance(args.out, meta, columns=COLUMNS)
    except BaseException:
        f.close()
        raise
    interrupted = False
    try:
        with f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            if new:
                w.writeheader()
            for i, (a, b) in enumerate(pairs):
                if args.time_budget is not None and time.monotonic() - t0 > args.time_budget:
                    meta["stopped_by_time_budget"] = True
                    break
                for label in (a, b):
                    if label not in solo:
                        solo[label] = measure_solo(*refs[label], device=device, timing=timing, timeout_s=300)
                (ra, ba), (rb, bb) = refs[a], refs[b]
                pc = measure_pair(ra, ba, rb, bb, device=device, timing=timing, timeout_s=300,
                                  solo={"job": solo[a], "partner": solo[b]})
                row = {"job": a, "job_batch": ba, "partner": b, "partner_batch": bb, "status": pc.status,
                       "error": pc.error, "device": device, "window_s": args.window,
                       "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                       **{k: getattr(pc, k) for k in COLUMNS
                          if hasattr(pc, k) and k not in ("partner", "status", "error", "device")}}
                w.writerow(row)
                f.flush()
                counts[pc.status] = counts.get(pc.status, 0) + 1
                desc = (f"slowdown {pc.job_slowdown:.2f} / {pc.partner_slowdown:.2f}, cumulative util "
                        f"{pc.cumulative_gpu_utilization}" if pc.status == "ok" else f"{pc.status}: {pc.error}")
                print(f"[{i + 1}/{len(pairs)}] {time.monotonic() - t0:5.0f}s {a} + {b}: {desc}", file=sys.stderr,
                      flush=True)
    except KeyboardInterrupt:
        interrupted = True
        meta["interrupted"] = True
    except BaseException as e:
        meta["interrupted"] = True
        meta["failed"] = f"{type(e).__name__}: {e}"
        raise
    finally:
        meta.update(finished_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    wall_s=round(time.monotonic() - t0, 1), counts=counts, rows_written=sum(counts.values()),
                    solo={k: {"samples_per_s": v.get("samples_per_s"), "gpu": v.get("gpu"),
                              "status": v.get("status")} for k, v in solo.items()},
                    device_info=next((v.get("device_info") for v in solo.values() if v.get("device_info")), None))
        _append_provenance(args.out, meta, columns=COLUMNS, replace_run=meta["run_id"])
    if interrupted:
        print(f"interrupted: {sum(counts.values())} rows written to {args.out} in this run (recorded in its "
              ".meta.json); run the same command again to resume: measured pairs are skipped", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    run_script(main)
