"""Measure which pages of torch's libraries each kind of op faults into a profiled process (Linux, CPU).

Writes the table :mod:`perfpredict.estimators.code_footprint` reads: per op kind of
:data:`perfpredict.profile.code_pages.CATALOGUE` and per mode (inference passes, training steps), the
file-backed pages that became resident in a fresh fork of the profiler's fork server, with provenance (CPU
model, torch version, date, command, git commit). About 10 s.

    python profilers/collect_code_pages.py                      # -> src/perfpredict/estimators/code_pages.json
    python profilers/collect_code_pages.py --out /tmp/pages.json --modes infer
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
    from perfpredict.estimators.code_footprint import MODES, TABLE_PATH
    from perfpredict.profile.code_pages import PAGE, machine_description, measure_catalogue
    from perfpredict.script_args import command_line

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=TABLE_PATH)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated: infer,train")
    args = ap.parse_args(argv)
    started = time.monotonic()
    modes = {}
    for mode in [m for m in args.modes.split(",") if m]:
        if mode not in MODES:
            print(f"unknown mode {mode!r}; expected some of {', '.join(MODES)}", file=sys.stderr)
            return 2
        print(f"{mode}: ", end="", flush=True)
        try:
            modes[mode] = measure_catalogue(mode, progress=lambda n: print(n, end=" ", flush=True))
        except RuntimeError as e:  # no pagemap (not Linux), or an entry failed: one line, nothing written
            print(f"\nerror: {e}", file=sys.stderr)
            return 1
        print()
    table = {
        "provenance": {**machine_description(),
                       "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                       "command": "python " + command_line(__file__, argv),
                       "git_commit": git_commit_of(Path(__file__).resolve().parents[1]),
                       "wall_s": round(time.monotonic() - started, 1),
                       "what": "file-backed pages resident in a fresh fork of the profiler's fork server after "
                               "building one op's module and running 5 inference passes or training steps"},
        "modes": modes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(table, separators=(",", ":")) + "\n")
    for mode, entries in modes.items():
        sizes = {n: sum(b - a + 1 for runs in e["pages"].values() for a, b in runs) * PAGE / 2**20
                 for n, e in entries.items()}
        print(f"{mode}: {len(entries)} entries, {min(sizes.values()):.1f}-{max(sizes.values()):.1f} MiB each")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
