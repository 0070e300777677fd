"""Time single kernels on this CPU and fit what each kernel class costs (inference passes and training steps).

Writes the table :mod:`perfpredict.estimators.kernel_time` reads: the fitted cost parameters per mode, every
benchmark's kernels and timings (so the fit can be redone or checked), and provenance (CPU model, threads,
torch version, date, command, git commit). About 2 minutes on the 2-vCPU VM. Run it on an idle machine: the
timings are the data.

    python profilers/collect_kernel_costs.py                 # -> src/perfpredict/estimators/kernel_costs.json
    python profilers/collect_kernel_costs.py --out /tmp/costs.json --per-kind 8
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from perfpredict.dataset.collect import git_commit_of
    from perfpredict.estimators.kernel_time import MODES, TABLE_PATH, columns, fit_costs
    from perfpredict.profile.kernel_bench import catalogue, machine_description, measure

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=TABLE_PATH)
    ap.add_argument("--per-kind", type=int, default=24, help="benchmark sizes per kernel kind (seeded)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    started = time.monotonic()
    benches = catalogue(args.seed, args.per_kind)
    print(f"{len(benches)} benchmarks x {len(MODES)} modes", flush=True)
    done = [0]

    def progress(_name: str) -> None:
        done[0] += 1
        if done[0] % 20 == 0 or done[0] == len(benches):
            print(f"  {done[0]}/{len(benches)} ({time.monotonic() - started:.0f} s)", flush=True)

    records = measure(benches, MODES, progress)
    failed = [r for r in records if "error" in r]
    for r in failed:
        print(f"  {r['name']}: {r['error']}", file=sys.stderr)
    if len(failed) == len(records):
        print("error: every benchmark failed; nothing written", file=sys.stderr)
        return 1
    modes = {}
    for mode in MODES:
        params, quality = fit_costs(records, mode)
        modes[mode] = {"parameters": {c: float(v) for c, v in zip(columns(), params)}, "fit": quality}
        print(f"{mode}: {quality['benchmarks']} benchmarks, median |relative error| "
              f"{quality['median_abs_rel_error']:.1%}, p90 {quality['p90_abs_rel_error']:.1%}")
    table = {
        "provenance": {**machine_description(),
                       "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                       "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
                       "git_commit": git_commit_of(Path(__file__).resolve().parents[1]),
                       "wall_s": round(time.monotonic() - started, 1), "seed": args.seed, "per_kind": args.per_kind,
                       "what": "median seconds of one inference pass (torch.inference_mode) or training step "
                               "(zero_grad, forward, mean loss, backward, SGD-momentum step) of single-layer "
                               "modules; kernels read off each module's ONNX export by the features' graph walk"},
        "modes": modes,
        "benchmarks": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(table, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({len(records) - len(failed)} benchmarks, {len(failed)} failed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
