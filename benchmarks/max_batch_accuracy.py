"""The largest batch size that fits a memory budget: predicted (nothing run) against measured (steps run until one
does not fit), on this machine's CPU.

For each model the measured answer comes from ``find_largest_batch`` (doubling, then bisection; a batch fits when
its training step's peak RSS increase stays within the budget), the predicted ones from ``Predictor.largest_batch``
with the local CPU's model set, holding the median and the q90 of the predicted peak memory to the budget. The
example files are jobs the estimators never saw; the zoo configurations' families are in their training data (at
batch 4-64, so every answer here is extrapolated in batch size). Prints each answer, the ratio predicted /
measured, and whether the q90 answer is safe (at or below the measured one).

    python benchmarks/max_batch_accuracy.py                    # 6 models, 768 MiB budget (about 4 min)
    python benchmarks/max_batch_accuracy.py --budget 512MiB --only examples/minimal_mlp.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from perfpredict.script_args import describe, measure_keeping_partial, out_file, stop_requested

REPO = Path(__file__).resolve().parents[1]
MODELS = [
    ("examples/cnn_classifier.py", {}),
    ("examples/minimal_mlp.py", {}),
    ("examples/keyword_lm.py", {}),
    ("zoo:resnet", {"depth": 18, "width": 32, "image_size": 64}),
    ("zoo:transformer", {"layers": 2, "d_model": 128, "seq_len": 128}),
    ("zoo:mobilenetv2", {"width_mult": 0.5, "image_size": 96}),
]


def _bytes(text: str) -> int:
    from perfpredict.cli import _bytes as parse

    return parse(text)


def measure_one(target: str, params: dict, budget: int, multiple_of: int, threads: int | None, predictor) -> dict:
    from perfpredict.profile.batch_search import find_largest_batch
    from perfpredict.workload import resolve_workload

    t0 = time.perf_counter()
    measured = find_largest_batch(resolve_workload(str(REPO / target) if target.endswith(".py") else target, params),
                                  device="cpu", memory_limit_bytes=budget, multiple_of=multiple_of, threads=threads,
                                  max_batch=2**20)
    t_measured = time.perf_counter() - t0
    t0 = time.perf_counter()
    target_path = str(REPO / target) if target.endswith(".py") else target
    q90 = predictor.largest_batch(target_path, params=params or None, memory_limit_bytes=budget, device_type="cpu",
                                  multiple_of=multiple_of)
    median = predictor.largest_batch(target_path, params=params or None, memory_limit_bytes=budget,
                                     device_type="cpu", multiple_of=multiple_of, quantile="median")
    t_predicted = time.perf_counter() - t0
    return {"model": measured.model, "target": target, "params": params, "measured": measured.largest_ok,
            "measured_failed": measured.smallest_failed, "measured_stopped": measured.stopped_because,
            "measured_probes": len(measured.probes), "measured_s": round(t_measured, 1),
            "predicted_median": median.largest_ok, "predicted_q90": q90.largest_ok, "model_set": q90.notes[0],
            "predicted_s": round(t_predicted, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--budget", default="768MiB", help="memory budget per training step (default 768MiB)")
    ap.add_argument("--multiple-of", type=int, default=8, help="answers are multiples of this (default 8)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads per measuring process [all cores]")
    ap.add_argument("--only", help="one model of the list (its target)")
    ap.add_argument("--out", type=out_file, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    budget = _bytes(args.budget)
    if args.multiple_of < 1:
        ap.error("argument --multiple-of: must be at least 1")
    models = [m for m in MODELS if args.only in (None, m[0])]
    if not models:
        ap.error(f"argument --only: not in the list ({', '.join(m[0] for m in MODELS)})")
    from perfpredict import Predictor

    predictor = Predictor.load()
    rows: list[dict] = []

    def measure_all() -> None:
        for target, params in models:
            if stop_requested():
                raise KeyboardInterrupt
            row = measure_one(target, params, budget, args.multiple_of, args.threads, predictor)
            rows.append(row)
            print(f"{row['model'][:44]:44s} measured {row['measured']!s:>6s} ({row['measured_probes']} probes, "
                  f"{row['measured_s']:.0f} s)  predicted median {row['predicted_median']!s:>6s}  q90 "
                  f"{row['predicted_q90']!s:>6s}", flush=True)

    interrupted = measure_keeping_partial(measure_all, rows)
    # a search that reached max_batch found no limit: nothing to compare
    both = [r for r in rows if r["measured"] and r["measured_failed"] and r["predicted_median"] and r["predicted_q90"]]
    if both:
        med = [r["predicted_median"] / r["measured"] for r in both]
        q90 = [r["predicted_q90"] / r["measured"] for r in both]
        print(f"\nbudget {budget / 2**20:.0f} MiB, {len(both)} models, {rows[0]['model_set']}")
        print(f"predicted / measured largest batch: median answer {statistics.median(med):.2f} (range "
              f"{min(med):.2f}-{max(med):.2f}), q90 answer {statistics.median(q90):.2f} (range {min(q90):.2f}-"
              f"{max(q90):.2f}); q90 answer at or below the measured one for {sum(x <= 1 for x in q90)} of {len(q90)}")
    if args.out:
        args.out.write_text(json.dumps({"budget_bytes": budget, "rows": rows}, indent=2))
    if interrupted:
        raise KeyboardInterrupt
    return 0


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
