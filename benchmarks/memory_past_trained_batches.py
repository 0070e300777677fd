"""Is a memory q90 still an upper bound far past the batch sizes its estimator was trained on?

Training calibrates how much a memory target's q90 grows per doubling past the largest batch an architecture
was measured at (``evaluate.batch_extrapolation_margin``), on each architecture's own two largest batches: one or
two doublings. The Predictor counts the doublings past the largest batch the request's nearest profiled
architecture was measured at (``ModelSet.reach``; a training configuration is its own nearest) and applies the
margin linearly in doublings however far out it is asked: ``perfpredict max-batch --predicted`` asks thousands
of times past the trained sizes for a small model. This benchmark checks that reading against points
measured *far* past the trained sizes: ``datasets/<set>_far_batch.csv`` holds the zoo configurations of the
training set ``<set>``, measured on the same device by the same collector at batch sizes 2-64× past the largest
one they were trained at. They are never trained on (``estimators.data.NON_TRAINING_SUFFIXES``).

For each measured point, the shipped model set of that training set predicts the median and the (widened) q90,
and the q90 without the widening is recovered from the stored margin. Per distance (doublings past the point's
largest trained batch) it prints how many measurements lie above the q90 with and without the margin (nominal:
10%), the median of measured / median prediction, and the median and largest measured / q90; then each point above its
widened q90.

    python benchmarks/memory_past_trained_batches.py       # every committed *_far_batch.csv (a few seconds)
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from perfpredict.script_args import describe

REPO = Path(__file__).resolve().parents[1]
SUFFIX = "_far_batch"


def far_batch_files(datasets: Path) -> list[Path]:
    return sorted(datasets.glob(f"*{SUFFIX}.csv"))


def coverage(far_csv: Path, predictor) -> dict:
    """Per memory target with a per-doubling margin, per distance past the largest trained batch: the points, the
    q90 misses with and without the margin, and measured / predicted ratios. Also the devices both sides recorded,
    since a far file scored against another machine's set would say nothing about the margin."""
    from perfpredict.estimators.data import load_training_data
    from perfpredict.estimators.targets import targets_for

    data = load_training_data(far_csv)
    if not data.name.endswith(SUFFIX):
        raise SystemExit(f"{far_csv.name}: not a far-batch file (expected <model set>{SUFFIX}.csv, scored against "
                         f"that model set)")
    set_name = data.name[: -len(SUFFIX)]
    if set_name not in predictor.sets:
        raise SystemExit(f"{far_csv.name}: no shipped model set {set_name!r} (have {', '.join(predictor.sets)})")
    ms = predictor.sets[set_name]
    same_device = (data.device_kind, data.device_name, data.cpu_id) == (ms.device_kind, ms.device_name, ms.cpu_id)
    specs = targets_for(data.device_kind, data.mode)
    out: dict = {"file": far_csv.name, "model_set": ms.name,
                 "largest_trained_batch_of_set": int(max(ms.trained_batches)),
                 "device": data.device_name, "cpu_id": data.cpu_id, "same_device": bool(same_device), "targets": {}}
    by_config: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(data.configs):
        by_config[str(c)].append(i)
    for name, growth in ms.q90_growth_per_doubling().items():
        column = specs[name].column
        rows = []  # (doublings, measured, median, q90 widened, q90 plain)
        above = []  # the points above the widened q90: (config, batch, measured / q90)
        for idxs in by_config.values():
            batches = [int(data.batch[i]) for i in idxs]
            v = predictor.predict_values(data.archs[idxs[0]], batches, device_type=ms.name)
            p, past = v[name], ms.doublings_past(batches, v["largest_measured_batch"])
            for k, i in enumerate(idxs):
                measured = float(data.rows[i].get(column) or "nan")
                if math.isfinite(measured) and measured > 0:
                    rows.append((float(past[k]), measured, p["median"][k], p["q90"][k],
                                 p["q90"][k] / growth ** float(past[k])))
                    if measured > p["q90"][k]:
                        above.append((str(data.configs[i]), batches[k], measured / p["q90"][k]))
        groups: dict[float, list] = defaultdict(list)
        for r in rows:
            groups[round(r[0], 1)].append(r)
        per_distance = []
        for d in sorted(groups):
            a = np.array(groups[d])
            per_distance.append({
                "doublings": d, "points": len(a),
                "misses_with_margin": float(np.mean(a[:, 1] > a[:, 3])),
                "misses_without": float(np.mean(a[:, 1] > a[:, 4])),
                "median_measured_over_median": float(np.median(a[:, 1] / a[:, 2])),
                "median_measured_over_q90": float(np.median(a[:, 1] / a[:, 3])),
                "max_measured_over_q90": float(np.max(a[:, 1] / a[:, 3]))})
        out["targets"][name] = {"growth_per_doubling": growth, "per_distance": per_distance,
                                "above_q90": sorted(above, key=lambda a: (a[1], a[0]))}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=describe(__doc__))
    p.add_argument("--csv", action="append", type=Path, help="a far-batch file (default: every committed one)")
    args = p.parse_args(argv)
    files = args.csv or far_batch_files(REPO / "datasets")
    if not files:
        print("no *_far_batch.csv under datasets/")
        return 1
    from perfpredict import Predictor

    predictor = Predictor.load()
    for f in files:
        s = coverage(f, predictor)
        print(f"{s['file']} against {s['model_set']} (largest trained batch of the set "
              f"{s['largest_trained_batch_of_set']}; "
              f"measured on {s['device']}{', ' + s['cpu_id'] if s['cpu_id'] else ''}"
              f"{'' if s['same_device'] else '; NOT the device the set was trained on'})")
        for name, t in s["targets"].items():
            print(f"  {name}: q90 widened x{t['growth_per_doubling']:.3f} per doubling")
            print("    doublings  points  q90 misses: with margin  without  measured/median  measured/q90: median  max")
            for g in t["per_distance"]:
                print(f"    {g['doublings']:9.1f}  {g['points']:6d}  {g['misses_with_margin']:23.0%}  "
                      f"{g['misses_without']:7.0%}  {g['median_measured_over_median']:15.2f}  "
                      f"{g['median_measured_over_q90']:19.2f}  {g['max_measured_over_q90']:4.2f}")
            for config, batch, ratio in t["above_q90"]:
                print(f"    above its q90: {config} at batch {batch} ({ratio:.2f}x)")
    return 0


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
