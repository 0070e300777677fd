"""The lent-GPU runbook script (profilers/gpu_session.py): what each step stages and runs, checked without a GPU
through its dry run, which also runs the collectors' own dry runs (flags parsed, sweeps planned)."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "profilers" / "gpu_session.py"


def _module():
    return load_script(SCRIPT)


def _run(*args: str, env_out: str | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin"} | ({"OUT": env_out} if env_out else {})
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("name, tag", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                                       ("NVIDIA A100-SXM4-40GB", "a100"), ("Tesla T4", "t4"),
                                       ("NVIDIA GeForce RTX 4090", "rtx4090"), ("NVIDIA H100 PCIe", "h100")])
def test_the_gpu_tag_is_the_model_not_the_memory_or_form_factor(name, tag):
    assert _module().gpu_tag(name) == tag


def test_an_unreadable_device_name_asks_for_the_tag():
    with pytest.raises(ValueError, match="pass --gpu"):
        _module().gpu_tag("Quadro")


def test_the_dry_run_stages_the_committed_files_and_plans_every_step_without_a_gpu(tmp_path):
    out = tmp_path / "out"
    proc = _run("all", "--gpu", "h100", "--dry-run", env_out=str(out))
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    # each resumable collection appends to the committed rows: its CSV and provenance are staged into $OUT
    assert "== train: staged cuda_h100.csv, cuda_h100.meta.json" in text
    assert "== colocation: staged cuda_h100_colocation.csv, cuda_h100_colocation.meta.json" in text
    assert f"--out {out}/cuda_h100_colocation.csv --from-dataset {REPO}/datasets/cuda_h100.csv" in text
    assert "--mode infer --out" in text and "--precision bf16 --out" in text and "collect_kernel_costs.py" in text
    # the far-batch check: a new file of every 3rd architecture past the trained batch sizes, never trained on
    assert "== far-batch: staged nothing (a new file)" in text
    assert f"--every 3 --out {out}/cuda_h100_far_batch.csv --batch-sizes 256,1024,4096" in text
    # the collectors' own dry runs: the H100 training set is complete, the sampled pairs are all still to measure
    with open(REPO / "datasets" / "cuda_h100.csv", newline="") as f:
        n = len({(r["config"], r["batch_size"]) for r in csv.DictReader(f)})
    assert f"plan: {n} of the {n} points are in datasets/cuda_h100.csv already; 0 are not" in text
    assert "plan: 24 jobs, 61 pairs" in text
    assert "0 of the 61 pairs are in datasets/cuda_h100_colocation.csv already; 61 are not" in text
    assert not out.exists()  # a dry run copies nothing


def test_a_step_that_needs_a_missing_dataset_or_bad_flags_says_so(tmp_path):
    proc = _run("colocation", "--gpu", "b200", "--dry-run")
    assert proc.returncode == 2 and "datasets/cuda_b200.csv is missing: run the 'train' step first" in proc.stderr
    for args, message in ((["all", "--gpu", "h100"], "'all' needs --dry-run"),
                          (["infer", "--gpu", "H100!", "--dry-run"], "a lower-case tag"),
                          (["infer", "--gpu", "h100", "--budget", "0", "--dry-run"], "--budget: must be above 0"),
                          (["infer", "--gpu", "h100"], "--out: required")):
        proc = _run(*args)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_staging_copies_the_dataset_once_and_never_over_what_out_holds(tmp_path):
    gs = _module()
    out = tmp_path / "out"
    assert gs.stage(["cuda_h100_colocation.csv"], out, dry_run=False) == ["cuda_h100_colocation.csv",
                                                                          "cuda_h100_colocation.meta.json"]
    committed = (REPO / "datasets" / "cuda_h100_colocation.csv").read_bytes()
    assert (out / "cuda_h100_colocation.csv").read_bytes() == committed
    (out / "cuda_h100_colocation.csv").write_bytes(committed + b"a row measured in this call\r\n")
    assert gs.stage(["cuda_h100_colocation.csv"], out, dry_run=False) == []  # the call's own rows are kept
    assert (out / "cuda_h100_colocation.csv").read_bytes().endswith(b"in this call\r\n")
    assert gs.stage(["kernel_costs_cuda.json", "cuda_h100_bf16.csv"], out, dry_run=False) == []  # none committed


def test_the_dataset_collectors_dry_run_counts_what_a_resumed_file_has(tmp_path):
    src = REPO / "datasets" / "cpu_epyc_genoa_2vcpu.csv"
    part = tmp_path / "part.csv"
    lines = src.read_text().splitlines(keepends=True)
    part.write_text("".join(lines[:11]))
    flags = ["--device", "cpu", "--max-gflop-iter", "30", "--max-param-mb", "512", "--batch-sizes", "4,8,16,32,64",
             "--dry-run"]
    said = {}
    for name, path in (("full", src), ("part", part)):
        proc = subprocess.run([sys.executable, str(REPO / "profilers" / "collect_dataset.py"), "measure", "--out",
                               str(path), *flags], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        said[name] = next(ln for ln in proc.stderr.splitlines() if " of the " in ln)
    assert said["full"].endswith("already; 0 are not")
    k, total = (int(x) for x in re.match(r"(\d+) of the (\d+) points", said["part"]).groups())
    assert 1 <= k <= 10 and total > 300 and said["part"].endswith(f"; {total - k} are not")
    assert part.read_text() == "".join(lines[:11])  # a dry run rewrites nothing
