"""Profile many zoo configurations into a folder of performance cards (resumable).

This is the harness a GPU box runs to build `datasets/`: each configuration of the zoo grid is profiled
with `perfpredict`'s real profiler and its card written to ``OUT/<config-name>/card.json`` (with the ONNX
file and plots); ``OUT/index.csv`` lists every configuration with its status. Re-running skips
configurations whose card is already complete, so an interrupted sweep resumes where it stopped.

    python profilers/profile_zoo.py --out runs/cpu --families mlp,lstm --max-gmacs 0.1
    python profilers/profile_zoo.py --out runs/h100 --device cuda --batch-sizes 16,32,64,128,256 --mlflow
    python profilers/profile_zoo.py --dry-run            # list what would be profiled
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

from perfpredict.card import PerformanceCard
from perfpredict.errors import PerfPredictError
from perfpredict.profile import ProfileSettings, TimingConfig, profile_workload
from perfpredict.workload import parse_batch_sizes
from perfpredict.workload.zoo import enumerate_configs, get_family, load_zoo_workload


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("perfpredict-out/zoo-sweep"))
    ap.add_argument("--families", help="comma-separated families [all]")
    ap.add_argument("--max-gmacs", type=float, help="skip configs above this many forward GMACs per sample")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--mode", default="train", choices=("train", "infer"))
    ap.add_argument("--batch-sizes", help="override every family's default batch sizes, e.g. 8,16,32")
    ap.add_argument("--min-time", type=float, default=TimingConfig().min_time_s)
    ap.add_argument("--mlflow", action="store_true", help="log each profile as an MLflow run")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)

    configs = []
    for fam in (args.families.split(",") if args.families else [None]):
        for name, cfg in enumerate_configs(fam):
            family = get_family(name)
            gmacs = family.closed_form_macs(cfg) / 1e9
            if args.max_gmacs is None or gmacs <= args.max_gmacs:
                configs.append((name, cfg, family.config_name(cfg), gmacs))
    print(f"{len(configs)} configurations", file=sys.stderr)
    if args.dry_run:
        for _, _, cname, gmacs in configs:
            print(f"{cname}\t{gmacs:.3f} GMACs/sample")
        return 0

    args.out.mkdir(parents=True, exist_ok=True)
    index = []
    for i, (name, cfg, cname, gmacs) in enumerate(configs):
        card_path = args.out / cname / "card.json"
        if card_path.exists():
            try:
                if PerformanceCard.load(card_path).status == "complete":
                    index.append((cname, name, "complete (kept)", gmacs, card_path))
                    continue
            except PerfPredictError:
                pass  # unreadable leftover: profile again
        t0 = time.perf_counter()
        settings = ProfileSettings(device=args.device, mode=args.mode, timing=TimingConfig(min_time_s=args.min_time),
                                   batch_sizes=parse_batch_sizes(args.batch_sizes) if args.batch_sizes else None)
        try:
            outcome = profile_workload(load_zoo_workload(name, cfg), settings, out_dir=card_path.parent,
                                       command=" ".join(sys.argv))
        except PerfPredictError as e:
            print(f"[{i + 1}/{len(configs)}] {cname}: {e}", file=sys.stderr)
            index.append((cname, name, f"failed: {e}", gmacs, ""))
            continue
        card = outcome.card
        if args.mlflow:
            from perfpredict.tracking import log_profile

            log_profile(card, experiment="perfpredict-zoo-sweep", failed=outcome.error is not None,
                        files=[f for f in (outcome.onnx_path,) if f])
        best = max((p.samples_per_s for p in card.measured_points()), default=0.0)
        print(f"[{i + 1}/{len(configs)}] {cname}: {card.status}, best {best:.1f} samples/s, "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
        index.append((cname, name, card.status, gmacs, card_path))

    with open(args.out / "index.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["config", "family", "status", "gmacs_per_sample", "card"])
        for cname, name, status, gmacs, path in index:
            w.writerow([cname, name, status, f"{gmacs:.4f}", path])
    print(f"index: {args.out / 'index.csv'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
