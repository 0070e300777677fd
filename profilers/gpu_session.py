"""One step of the lent-GPU runbook per call: stage the dataset to resume, run its collector, say what to copy back.

A lent GPU comes rarely (a few tasks in a hundred), for 15 minutes of device time (its start included) in calls of
at most 10, and starts bare each time: only what a call writes under ``$OUT`` comes back. Done by hand, each
collection needs its file and ``.meta.json`` copied into ``$OUT`` first (or the rows start a new file instead of
appending) and the right flags; this script does both, so a call is one line and a slip cannot waste the lease:

    PYTHONPATH=src python3 profilers/gpu_session.py check                  # the CUDA paths (30 s)
    PYTHONPATH=src python3 profilers/gpu_session.py colocation --out $OUT  # then infer, kernel-costs, bf16
    python3 profilers/gpu_session.py all --gpu h100 --dry-run              # what each step would run, here

Steps, in the order of ``datasets/README.md`` (run again until the collector reports nothing left):

- ``check``: ``tests/test_cuda.py``.
- ``train``: the fp32 training set ``cuda_<gpu>.csv`` (resumes where the last call stopped: the H100 has all 765
  points, the H200 315).
- ``colocation``: pairs of that set's points sharing the GPU, ``cuda_<gpu>_colocation.csv``.
- ``infer``: the inference set ``cuda_<gpu>_infer.csv``.
- ``kernel-costs``: per-kernel GPU costs, ``kernel_costs_cuda.json`` (not resumable: one call).
- ``bf16``: bf16 autocast training steps, ``cuda_<gpu>_bf16.csv``.
- ``far-batch``: every 3rd architecture of the training sweep at 2-32x its largest batch,
  ``cuda_<gpu>_far_batch.csv``: the held-out check of the memory q90 far past the trained batch sizes
  (``benchmarks/memory_past_trained_batches.py``; never trained on). Points that do not fit end as OOM rows.

``<gpu>`` is read from the device name (``NVIDIA H100 80GB HBM3`` → ``h100``) unless ``--gpu`` says it. After
the call, copy what came back into ``datasets/`` (the last line printed says which files), commit with the
provenance the collectors wrote, and run ``perfpredict train``. Standard library only: the device machine's
``python3`` has torch but not necessarily this package's other dependencies.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATASETS = REPO / "datasets"
BATCHES = "8,16,32,64,128"
#: Seconds a collector may start new work for, inside a device call's 600 s limit (start-up and the last
#: architecture's points come on top).
BUDGET_S = 480

#: The far-batch check's batch sizes: 1, 3 and 5 doublings past BATCHES' largest.
FAR_BATCHES = "256,1024,4096"

STEPS = ("check", "train", "colocation", "infer", "kernel-costs", "bf16", "far-batch")


def gpu_tag(name: str) -> str:
    """``h100`` from ``NVIDIA H100 80GB HBM3``: the first model token of a device name, lower case (``t4``,
    ``a100``; ``rtx4090`` from ``NVIDIA GeForce RTX 4090``)."""
    tokens = re.split(r"[\s_-]+", name)
    for i, token in enumerate(tokens):
        if re.fullmatch(r"(HBM|SXM|PCIE|GDDR)\d*[A-Za-z]?", token, flags=re.I):
            continue  # memory and form factor, not the model
        if re.fullmatch(r"[A-Za-z]{1,3}\d{1,4}[A-Za-z]?", token):
            return token.lower()
        if re.fullmatch(r"\d{3,4}", token):
            return (tokens[i - 1] if i and tokens[i - 1].isalpha() and len(tokens[i - 1]) <= 3 else "").lower() + token
    raise ValueError(f"cannot tell the GPU model from {name!r}; pass --gpu")


def detect_gpu() -> str:
    try:
        import torch
    except ImportError:
        raise SystemExit("error: torch is not importable here; pass --gpu with --dry-run to see the commands") from None
    if not torch.cuda.is_available():
        raise SystemExit("error: no CUDA GPU here; pass --gpu with --dry-run to see the commands")
    return gpu_tag(torch.cuda.get_device_name(0))


def plan(step: str, gpu: str, out: Path, budget_s: float) -> tuple[list[str], list[str]]:
    """(the command of ``step``, the files it writes under ``out`` that belong in ``datasets/``)."""
    py = sys.executable
    dataset = f"cuda_{gpu}.csv"
    if step == "check":
        return [py, "-m", "pytest", "-q", "-m", "cuda", str(REPO / "tests" / "test_cuda.py")], []
    if step == "kernel-costs":
        return [py, str(REPO / "profilers" / "collect_kernel_costs.py"), "--device", "cuda",
                "--out", str(out / "kernel_costs_cuda.json")], ["kernel_costs_cuda.json"]
    if step == "colocation":
        name = f"cuda_{gpu}_colocation.csv"
        return [py, str(REPO / "profilers" / "collect_colocation.py"), "--device", "cuda", "--out", str(out / name),
                "--from-dataset", str(DATASETS / dataset), "--sample-jobs", "24", "--partners", "4", "--seed", "1",
                "--window", "1.5", "--time-budget", f"{budget_s:g}"], [name]
    name, extra, batches = {"train": (dataset, [], BATCHES),
                            "infer": (f"cuda_{gpu}_infer.csv", ["--mode", "infer"], BATCHES),
                            "bf16": (f"cuda_{gpu}_bf16.csv", ["--precision", "bf16"], BATCHES),
                            "far-batch": (f"cuda_{gpu}_far_batch.csv", ["--every", "3"], FAR_BATCHES)}[step]
    return [py, str(REPO / "profilers" / "collect_dataset.py"), "measure", "--device", "cuda", *extra,
            "--out", str(out / name), "--batch-sizes", batches, "--time-budget", f"{budget_s:g}"], [name]


def stage(files: list[str], out: Path, dry_run: bool) -> list[str]:
    """Copy each file (and its ``.meta.json``) from ``datasets/`` to ``out`` unless ``out`` has it already, so
    the collector appends to the committed rows; returns what was (or, dry, would be) copied."""
    copied = []
    for name in (f for f in files if f.endswith(".csv")):  # the kernel-cost table is measured whole each time
        src = DATASETS / name
        for p in (src, src.with_name(src.stem + ".meta.json")):
            if p.is_file() and not (out / p.name).exists():
                copied.append(p.name)
                if not dry_run:
                    out.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(p, out / p.name)
    return copied


def _env() -> dict[str, str]:
    """This environment with the checkout's ``src`` first on the path (the device machine has no install)."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(REPO / "src") + (os.pathsep + path if path else "")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=[*STEPS, "all"], help="the runbook step ('all': every one, only with --dry-run)")
    ap.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None,
                    help="where the collector writes (default: $OUT, the folder a device call brings back)")
    ap.add_argument("--gpu", help="the GPU's tag in file names (default: read from the device, e.g. h100)")
    ap.add_argument("--budget", type=float, default=BUDGET_S,
                    help=f"seconds the collector may start new work for (default {BUDGET_S})")
    ap.add_argument("--dry-run", action="store_true",
                    help="print what would be staged and run; the collectors that can plan without a GPU do")
    args = ap.parse_args(argv)
    if args.step == "all" and not args.dry_run:
        ap.error("'all' needs --dry-run: one step per device call keeps each inside its 10 minutes")
    if args.gpu is not None and not re.fullmatch(r"[a-z0-9]+", args.gpu):
        ap.error(f"argument --gpu: a lower-case tag such as h100, not {args.gpu!r}")
    if not args.budget > 0:
        ap.error("argument --budget: must be above 0")
    if args.out is None and not args.dry_run:
        ap.error("argument --out: required outside a device call (no $OUT set)")
    out = args.out or Path("$OUT")
    gpu = args.gpu or detect_gpu()
    rc = 0
    for step in STEPS if args.step == "all" else (args.step,):
        cmd, files = plan(step, gpu, out, args.budget)
        if step == "colocation" and not (DATASETS / f"cuda_{gpu}.csv").is_file():
            print(f"{step}: datasets/cuda_{gpu}.csv is missing: run the 'train' step first (the pairs are drawn "
                  "from its measured points)", file=sys.stderr)
            rc = rc or 2
            continue
        copied = stage(files, out, args.dry_run)
        print(f"== {step}: staged {', '.join(copied) or 'nothing (a new file)'}", flush=True)
        if args.dry_run:
            print("   " + " ".join(cmd), flush=True)
            if files and files[0].endswith(".csv"):
                # the collector's own --dry-run checks the flags and plans the sweep without a GPU
                # (on a copy of the committed file, so it also says how much of the plan is done)
                with tempfile.TemporaryDirectory() as tmp:
                    probe = list(cmd)
                    probe[probe.index("--out") + 1] = str(Path(tmp) / files[0])
                    stage(files, Path(tmp), dry_run=False)
                    done = subprocess.run(probe + ["--dry-run"], capture_output=True, text=True, env=_env())
                # the co-location plan's last line ("24 jobs, 61 pairs"), then how much a resumed file holds;
                # else the sweep's size (the first line a dataset plan says)
                lines = [ln for ln in done.stdout.splitlines()[-1:] if ln.endswith(" pairs")]
                lines += [ln.replace(tmp, "datasets") for ln in done.stderr.splitlines() if " of the " in ln]
                lines = lines or done.stderr.strip().splitlines()[:1]
                print("\n".join(f"   plan: {ln}" for ln in lines) if done.returncode == 0
                      else f"   plan failed: {done.stderr.strip()[-300:]}", flush=True)
                rc = rc or done.returncode
            continue
        done = subprocess.run(cmd, env=_env())
        back = [f for f in files if (out / f).exists()]
        if back:
            print(f"== {step}: exit {done.returncode}; copy into datasets/: "
                  + ", ".join(back + [Path(f).stem + ".meta.json" for f in back if f.endswith(".csv")]), flush=True)
        rc = done.returncode
    return rc


if __name__ == "__main__":
    sys.exit(main())
