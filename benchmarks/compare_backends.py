"""One comparison three ways: serially, in local worker processes (``--jobs``) and as Ray tasks on a Ray instance
started on this machine (``--ray local``). Prints each one's wall time, its speed-up over the serial run, and
whether the three give the same rows (they must: each simulation is deterministic given its seed).

Ray is for sweeps larger than one machine; on one machine it shows what it costs. Its wall time includes
starting and stopping the instance (a few seconds), which a cluster that is already up does not pay. The first
run is made in this process in every mode (it checks the trace and cluster once), so the speed-up is bounded by
(runs) / (1 + (runs - 1) / CPUs).

    python benchmarks/compare_backends.py                         # 2 mechanisms x 6 seeds, 1500-job traces
    python benchmarks/compare_backends.py --seeds 8 --jobs 2 --trace synergy:n=3000,load=9
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from perfpredict.script_args import describe, positive_int

TIMINGS = ("sim_wall_s", "decision_time_s")


def _rows(cmp) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in cmp.runs]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--trace", default="synergy:n=1500,load=9", help="as `perfpredict compare` takes it")
    ap.add_argument("--cluster", default="8x8")
    ap.add_argument("--mechanism", "-m", action="append", help="repeatable (default: proportional and tune)")
    ap.add_argument("--seeds", type=positive_int, default=6, help="seeds 0..N-1")
    ap.add_argument("--jobs", type=positive_int, default=os.cpu_count() or 1,
                    help="worker processes for the local mode (default: this machine's CPUs)")
    args = ap.parse_args(argv)
    from perfpredict.errors import UsageError
    from perfpredict.sim.compare import compare, parse_schedulers

    try:
        scheds = parse_schedulers(["fifo"], args.mechanism or ["proportional", "tune"])
    except UsageError as e:
        ap.error(e.message)
    seeds = list(range(args.seeds))
    runs = len(seeds) * len(scheds)
    print(f"{runs} runs ({len(scheds)} schedulers x {len(seeds)} seeds) of {args.trace} on {args.cluster}; "
          f"{os.cpu_count()} CPUs here", flush=True)
    results, walls = {}, {}
    compare(args.trace, args.cluster, scheds[:1], seeds[:1])  # warm-up: imports and caches, so no mode pays them
    modes = {"serial": {}, f"processes (-j {args.jobs})": {"jobs": args.jobs},
             "Ray (--ray local)": {"ray_address": "local"}}
    try:
        for mode, kw in modes.items():
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                cmp = compare(args.trace, args.cluster, scheds, seeds, out_dir=tmp, **kw)
                walls[mode] = time.perf_counter() - t0
            if cmp.interrupted:
                raise KeyboardInterrupt
            results[mode] = _rows(cmp)
            extra = (f"; {cmp.backend['nodes']} node(s), {cmp.backend['cpus']} CPU(s)"
                     if cmp.backend.get("backend") == "ray" else "")
            print(f"{mode:24s} {walls[mode]:7.1f} s   speed-up x{walls['serial'] / walls[mode]:.2f}{extra}",
                  flush=True)
    except UsageError as e:  # Ray not installed
        print(f"error: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; the modes above finished", file=sys.stderr)
        return 130
    first = next(iter(results.values()))
    same = all(r == first for r in results.values())
    print(f"same rows in every mode: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)  # a bad --trace or --cluster (found by the warm-up run) is one line and exit 2
