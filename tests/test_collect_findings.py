"""Findings of the dataset-collection logic scan: resuming after an out-of-memory point, one GPU per file."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfpredict.dataset.collect import (
    DATASET_COLUMNS,
    CollectSettings,
    _done_points,
    collect,
    plan_sweep,
    read_dataset,
    row_from_result,
    todo_batches,
)
from perfpredict.errors import UsageError
from perfpredict.profile.timing import TimingConfig

REPO = Path(__file__).resolve().parents[1]

QUICK = TimingConfig(warmup_iters=2, warmup_s=0.05, min_iters=5, min_time_s=0.05, max_time_s=1.0)


def _write(out, plan, results, device="cpu"):
    """A dataset file as the collector writes it for ``results`` (worker result dicts), with its provenance."""
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=DATASET_COLUMNS)
        w.writeheader()
        for res in results:
            w.writerow(row_from_result(plan, res, "train", device))
    out.with_suffix(".meta.json").write_text(json.dumps(
        {"dataset": out.name, "columns": DATASET_COLUMNS, "runs": [{"device": device, "precision": "fp32"}]}))


def test_a_rerun_does_not_measure_batches_above_an_out_of_memory_one(tmp_path) -> None:
    """A run stops an architecture at its first oom (larger batches would run out of memory too) and writes no row
    for them; re-running the finished command used to measure those larger batches anyway, so a resumed file held
    points an uninterrupted run never has (and, on a GPU, spent the lease running out of memory again)."""
    from perfpredict.hostinfo import cpu_model_name

    (plan,) = plan_sweep(["mlp"], batch_sizes=[2, 4, 8], max_gmacs=0.0005)[:1]
    info = {"kind": "cpu", "name": cpu_model_name()}
    ok = {"status": "ok", "batch_size": 2, "device_info": info,
          "timing": {"median_s": 0.001, "p10_s": 0.001, "p90_s": 0.001, "cv": 0.01, "iterations": 10}}
    oom = {"status": "oom", "batch_size": 4, "phase": "measure", "device_info": info, "error": "out of memory"}
    out = tmp_path / "cpu.csv"
    _write(out, plan, [ok, oom])
    done = _done_points(read_dataset(out))
    assert todo_batches(plan, done, "train") == []
    assert todo_batches(plan, done, "infer") == [2, 4, 8]  # another mode's oom is not this one's
    settings = CollectSettings(device="cpu", timing=QUICK, threads=1, command="test")
    assert collect([plan], out, settings)["counts"] == {}
    assert len(read_dataset(out)) == 2
    # the collector's dry run says why batch 8 is not to measure (it counted it as in the file)
    proc = subprocess.run([sys.executable, str(REPO / "profilers" / "collect_dataset.py"), "measure", "--dry-run",
                           "--families", "mlp", "--batch-sizes", "2,4,8", "--max-gmacs", "0.0005", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    n = 3 * len(plan_sweep(["mlp"], batch_sizes=[2, 4, 8], max_gmacs=0.0005))
    assert f"2 of the {n} points are in {out} already, 1 lie above a batch size that ran out of memory there" \
        in proc.stderr, proc.stderr[-2000:]
    # a point whose oom was superseded by a later answer (measured again by hand) no longer stops the larger ones
    rows = read_dataset(out) + [dict(read_dataset(out)[0], batch_size="4")]
    assert todo_batches(plan, _done_points(rows), "train") == [8]


def test_a_gpu_run_is_not_appended_to_another_devices_file(tmp_path, monkeypatch) -> None:
    """The CPU path refused another CPU's file and the Ray path another GPU's, but a local CUDA run appended to a
    file of another GPU model (or a CPU's): it skipped the points that device had measured and left a file the
    loader refuses ("mixes devices")."""
    import perfpredict.hostinfo as hostinfo

    (plan,) = plan_sweep(["mlp"], batch_sizes=[2, 4], max_gmacs=0.0005)[:1]
    ok = {"status": "ok", "batch_size": 2, "device_info": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3"},
          "timing": {"median_s": 0.001, "p10_s": 0.001, "p90_s": 0.001, "cv": 0.01, "iterations": 10}}
    out = tmp_path / "cuda_h100.csv"
    _write(out, plan, [ok], device="cuda:0")
    before = out.read_bytes()
    monkeypatch.setattr(hostinfo, "gpu_names", lambda: ("NVIDIA H200",))
    settings = CollectSettings(device="cuda:0", timing=QUICK, command="test")
    with pytest.raises(UsageError, match="another device"):
        collect([plan], out, settings)
    assert out.read_bytes() == before
    from perfpredict.dataset.collect import _check_same_gpu

    rows = read_dataset(out)
    monkeypatch.setattr(hostinfo, "gpu_names", lambda: ("NVIDIA H100 80GB HBM3",) * 2)
    _check_same_gpu(out, rows)  # the file's GPU: appended to
    monkeypatch.setattr(hostinfo, "gpu_names", lambda: ())
    _check_same_gpu(out, rows)  # no NVML: cannot be told before measuring, as on Ray


def test_a_family_named_twice_is_planned_once() -> None:
    """``--families mlp,lstm,mlp`` planned every mlp architecture twice, and one run measured each point twice (the
    points still to measure are read from the file before the run), doubling the rows and the time."""
    twice = plan_sweep(["mlp", "lstm", "mlp"], batch_sizes=[4])
    once = plan_sweep(["mlp", "lstm"], batch_sizes=[4])
    assert [p.config for p in twice] == [p.config for p in once]
    assert len({p.config for p in twice}) == len(twice)


def test_a_killed_cpu_run_still_records_its_cpu(tmp_path, monkeypatch) -> None:
    """The provenance entry a run writes before measuring is what a SIGKILL (a lost machine) leaves beside its rows.
    It recorded the device as "cpu" but not the CPU's cpu_id, so a file whose runs were all killed named no CPU
    beyond its model name, and another VM with a CPU of the same name (two "AMD EPYC"s ran the same steps a median
    0.75x apart) appended to it."""
    import perfpredict.hostinfo as hostinfo

    plans = plan_sweep(["mlp"], batch_sizes=[4], max_gmacs=0.0005)[:1]
    out = tmp_path / "cpu.csv"
    meta_path = out.with_suffix(".meta.json")
    settings = CollectSettings(device="cpu", timing=QUICK, threads=1, command="test")
    during = []  # the provenance on disk while the run measured: what a SIGKILL at that moment leaves
    assert collect(plans, out, settings, progress=lambda plan, row: during.append(meta_path.read_text()))["counts"] \
        == {"ok": 1}
    meta_path.write_text(during[0])
    killed = json.loads(during[0])["runs"][-1]
    assert killed["finished_at"] is None
    here = hostinfo.cpu_id()
    monkeypatch.setattr(hostinfo, "cpu_id", lambda: "GenuineIntel family 6 model 143 stepping 8; avx2 amx_bf16")
    with pytest.raises(UsageError, match="measured on another CPU"):
        collect(plan_sweep(["mlp"], batch_sizes=[4, 8], max_gmacs=0.0005)[:1], out, settings)
    assert killed["device_info"]["cpu_id"] == here
