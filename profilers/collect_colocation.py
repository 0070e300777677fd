"""Measure pairs of zoo jobs sharing one device: the data behind Horus's interference model (resumable).

Each job is measured alone once, then next to every other job (and next to a copy of itself), in the
co-location harness (:mod:`perfpredict.profile.colocation`: warm up, meet at a barrier, time the same
wall-clock window). A row per pair holds both jobs' solo and co-located samples/s, Horus's slowdown
T_deg = |T_colo − T_solo| / T_solo for each, their solo NVML GPU utilisations and the sum of the two
(the x-axis of Horus Fig. 4). On CPU the utilisation columns stay empty: there is no such counter.

    python profilers/collect_colocation.py --device cuda --out datasets/cuda_h100_colocation.csv
    python profilers/collect_colocation.py --device cpu --out /tmp/pairs.csv --jobs 3 --window 1

Provenance goes to ``<out>.meta.json`` as for the measured datasets.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import itertools
import shlex
import sys
import time
from pathlib import Path

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

COLUMNS = ["job", "job_batch", "partner", "partner_batch", "status", "error", "job_solo_samples_per_s",
           "partner_solo_samples_per_s", "job_colocated_samples_per_s", "partner_colocated_samples_per_s",
           "job_slowdown", "partner_slowdown", "job_solo_gpu_utilization", "partner_solo_gpu_utilization",
           "cumulative_gpu_utilization", "device", "window_s", "measured_at"]


def main(argv: list[str] | None = None) -> int:
    from perfpredict.dataset.collect import _append_provenance, _run_provenance, CollectSettings, git_commit_of
    from perfpredict.profile.colocation import measure_pair, measure_solo
    from perfpredict.profile.device import resolve_device
    from perfpredict.profile.group_request import GroupTiming
    from perfpredict.workload.spec import WorkloadRef

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--jobs", type=int, default=len(JOBS), help="use the first N jobs of the list")
    ap.add_argument("--window", type=float, default=2.0, help="timed seconds per run")
    ap.add_argument("--time-budget", type=float, help="stop starting new pairs after this many seconds")
    args = ap.parse_args(argv)

    device = resolve_device(args.device)
    jobs = JOBS[: args.jobs]
    timing = GroupTiming(window_s=args.window)
    refs = {label: (WorkloadRef("zoo", fam, tuple(sorted(p.items()))), b) for label, fam, p, b in jobs}
    done = set()
    if args.out.exists():
        with open(args.out, newline="") as f:
            done = {(r["job"], r["partner"]) for r in csv.DictReader(f) if r["status"] == "ok"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    new = not args.out.exists()
    settings = CollectSettings(device=device, command=" ".join(shlex.quote(a) for a in sys.argv),
                               git_commit=git_commit_of(Path(__file__).resolve().parent.parent))
    meta = _run_provenance(settings)
    meta["window_s"] = args.window
    t0 = time.monotonic()
    solo: dict[str, dict] = {}
    counts: dict[str, int] = {}
    pairs = [(a, b) for a, b in itertools.combinations_with_replacement([j[0] for j in jobs], 2)
             if (a, b) not in done]
    print(f"{len(pairs)} pairs to measure on {device}", file=sys.stderr)
    with open(args.out, "a", newline="") as f:
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
                   **{k: getattr(pc, k) for k in COLUMNS if hasattr(pc, k) and k not in ("partner", "status", "error", "device")}}
            w.writerow(row)
            f.flush()
            counts[pc.status] = counts.get(pc.status, 0) + 1
            desc = (f"slowdown {pc.job_slowdown:.2f} / {pc.partner_slowdown:.2f}, cumulative util "
                    f"{pc.cumulative_gpu_utilization}" if pc.status == "ok" else f"{pc.status}: {pc.error}")
            print(f"[{i + 1}/{len(pairs)}] {time.monotonic() - t0:5.0f}s {a} + {b}: {desc}", file=sys.stderr,
                  flush=True)
    meta.update(finished_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                wall_s=round(time.monotonic() - t0, 1), counts=counts,
                solo={k: {"samples_per_s": v.get("samples_per_s"), "gpu": v.get("gpu"), "status": v.get("status")}
                      for k, v in solo.items()},
                device_info=next((v.get("device_info") for v in solo.values() if v.get("device_info")), None))
    _append_provenance(args.out, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
