"""How well the code-page table predicts the library code a real profiled process faults in.

For each zoo family (its smallest architecture of ``datasets/zoo_features.csv`` at batch 4, or every
architecture with ``--all``), one profiler measurement runs in a fresh process (the profiler's own runner) and
reports ``memory.file_backed_bytes``: the growth of its ``RssFile``. Next to it: the union of the measured page
sets of the graph's op types (:func:`perfpredict.estimators.code_footprint.code_bytes`). Prints per family the
measured and predicted MiB, then their correlation and the least-squares line measured ≈ a × predicted + b
(b: what the profiler's own loop pages in beyond the table's empty model). Linux, CPU; about 1 min.

    python benchmarks/code_footprint.py                  # inference passes
    python benchmarks/code_footprint.py --mode train     # training steps
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    from perfpredict.script_args import describe, positive_int

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--mode", choices=("infer", "train"), default="infer")
    ap.add_argument("--all", action="store_true", help="every architecture, not one per family")
    ap.add_argument("--batch", type=positive_int, default=4)
    args = ap.parse_args(argv)
    # imported once the flags are known to be good: they import torch (seconds), so a typo is answered at once
    import numpy as np

    from perfpredict.estimators.code_footprint import code_bytes, provenance
    from perfpredict.hostinfo import cpu_model_name
    from perfpredict.profile.request import PointRequest
    from perfpredict.profile.runner import run_in_subprocess
    from perfpredict.profile.timing import TimingConfig
    from perfpredict.workload.spec import WorkloadRef

    rows = [r for r in csv.DictReader(open(ROOT / "datasets" / "zoo_features.csv")) if r["op_counts_json"]]
    if not args.all:
        first: dict[str, dict] = {}
        for r in rows:
            if r["family"] not in first or float(r["param_bytes"]) < float(first[r["family"]]["param_bytes"]):
                first[r["family"]] = r
        rows = list(first.values())
    table = provenance()
    print(f"table: {table.get('cpu_model')}, torch {table.get('torch')}, {table.get('measured_at')}; "
          f"this machine: {cpu_model_name()}")
    by_family: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r["family"], r["config"])):
        ref = WorkloadRef(kind="zoo", target=r["family"], params=tuple(sorted(json.loads(r["config_json"]).items())))
        req = PointRequest(ref=ref, batch_size=args.batch, mode=args.mode, device="cpu", threads=2,
                           timing=TimingConfig(min_time_s=0.2, max_time_s=1.0), measure_energy=False)
        res = run_in_subprocess(req, 180.0)
        measured = (res.get("memory") or {}).get("file_backed_bytes")
        if res.get("status") != "ok" or measured is None:
            print(f"  {r['config']}: {res.get('status')} {res.get('error', '')}")
            continue
        predicted = code_bytes(json.loads(r["op_counts_json"]), args.mode)
        by_family[r["family"]].append((measured / 2**20, predicted / 2**20))
    print(f"\n{args.mode}, batch {args.batch}: RssFile growth of the profiled process vs the table's union (MiB)")
    print(f"{'family':12s} {'n':>3s} {'measured':>9s} {'union':>7s} {'ratio':>6s}")
    for fam, v in sorted(by_family.items()):
        a = np.array(v)
        print(f"{fam:12s} {len(a):3d} {a[:, 0].mean():9.1f} {a[:, 1].mean():7.1f} {np.mean(a[:, 0] / a[:, 1]):6.2f}")
    allv = np.array([x for v in by_family.values() for x in v])
    if len(allv) >= 3:
        slope, icpt = np.polyfit(allv[:, 1], allv[:, 0], 1)
        resid = allv[:, 0] - (slope * allv[:, 1] + icpt)
        print(f"correlation {np.corrcoef(allv[:, 0], allv[:, 1])[0, 1]:.3f}; measured = {slope:.2f} x union "
              f"+ {icpt:.1f} MiB, residual sd {resid.std():.1f} MiB over {len(allv)} points")
    return 0


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
