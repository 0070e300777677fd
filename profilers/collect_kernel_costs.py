"""Time single kernels on this CPU (or a GPU) and fit what each kernel class costs per pass and per step.

Writes the table :mod:`perfpredict.estimators.kernel_time` reads: the fitted cost parameters per mode, every
benchmark's kernels and timings (so the fit can be redone or checked), and provenance (CPU model, threads,
torch version, date, command, git commit). About 2 minutes on the 2-vCPU VM. Run it on an idle machine: the
timings are the data.

    python profilers/collect_kernel_costs.py                 # -> src/perfpredict/estimators/kernel_costs.json
    python profilers/collect_kernel_costs.py --out /tmp/costs.json --per-kind 8
    python profilers/collect_kernel_costs.py --device cuda   # a GPU's table -> datasets/kernel_costs_cuda.json

The CPU table is what the CPU's time baseline reads. A GPU table is data for a GPU kernel-cost baseline (not
used by the estimators yet): it is written next to the datasets, never over the CPU table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from perfpredict.dataset.collect import git_commit_of
    from perfpredict.estimators.kernel_time import MODES, TABLE_PATH, columns, fit_costs
    from perfpredict.profile.kernel_bench import catalogue, machine_description, measure
    from perfpredict.script_args import command_line

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None,
                    help=f"default: {TABLE_PATH.name} in the package (cpu), datasets/kernel_costs_cuda.json (cuda)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    ap.add_argument("--per-kind", type=int, default=24, help="benchmark sizes per kernel kind (seeded)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.device != "cpu":
        import torch

        if not args.device.startswith("cuda") or not torch.cuda.is_available():
            print(f"error: device {args.device!r} is not available here (cpu, or cuda[:i] on a machine with a GPU)",
                  file=sys.stderr)
            return 2
    if args.out is None:
        args.out = TABLE_PATH if args.device == "cpu" else Path(__file__).resolve().parents[1] / "datasets" / \
            "kernel_costs_cuda.json"
    started = time.monotonic()
    benches = catalogue(args.seed, args.per_kind)
    print(f"{len(benches)} benchmarks x {len(MODES)} modes", flush=True)
    done = [0]

    def progress(_name: str) -> None:
        done[0] += 1
        if done[0] % 20 == 0 or done[0] == len(benches):
            print(f"  {done[0]}/{len(benches)} ({time.monotonic() - started:.0f} s)", flush=True)

    records = measure(benches, MODES, progress, device=args.device)
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
        "provenance": {**machine_description(args.device),
                       "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                       "command": "python " + command_line(__file__, argv),
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
