"""Findings of a third review of the property-scan fixes (a local CUDA run's one-GPU-per-file check)."""

from __future__ import annotations

import csv
import json

import pytest

from perfpredict.dataset.collect import DATASET_COLUMNS, _check_same_gpu, plan_sweep, read_dataset, row_from_result
from perfpredict.errors import UsageError


def _gpu_file(out, name: str):
    """A one-row CUDA dataset as the collector writes it, the row's device named ``name`` (torch's name)."""
    (plan,) = plan_sweep(["mlp"], batch_sizes=[2], max_gmacs=0.0005)[:1]
    res = {"status": "ok", "batch_size": 2, "device_info": {"kind": "cuda", "name": name},
           "timing": {"median_s": 0.001, "p10_s": 0.001, "p90_s": 0.001, "cv": 0.01, "iterations": 10}}
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=DATASET_COLUMNS)
        w.writeheader()
        w.writerow(row_from_result(plan, res, "train", "cuda"))
    out.with_suffix(".meta.json").write_text(json.dumps(
        {"dataset": out.name, "columns": DATASET_COLUMNS, "runs": [{"device": "cuda:0", "precision": "fp32"}]}))
    return read_dataset(out)


def test_a_mig_slice_may_resume_its_own_file(tmp_path, monkeypatch) -> None:
    """On a MIG slice torch names the device with its slice (``NVIDIA A100-SXM4-40GB MIG 3g.20gb``, what a row
    records) while NVML names the board (``NVIDIA A100-SXM4-40GB``): the local-CUDA check refused to resume the
    file the same slice had written ("measured on another device"). Another board is still refused."""
    import perfpredict.hostinfo as hostinfo

    monkeypatch.setattr(hostinfo, "gpu_names", lambda: ("NVIDIA A100-SXM4-40GB",))
    out = tmp_path / "cuda_a100.csv"
    _check_same_gpu(out, _gpu_file(out, "NVIDIA A100-SXM4-40GB MIG 3g.20gb"))  # this board's slice: appended to
    _check_same_gpu(out, _gpu_file(out, "NVIDIA A100-SXM4-40GB"))  # the whole board
    with pytest.raises(UsageError, match="another device"):
        _check_same_gpu(out, _gpu_file(out, "NVIDIA H100 80GB HBM3 MIG 1g.10gb"))
    with pytest.raises(UsageError, match="another device"):
        _check_same_gpu(out, _gpu_file(out, "NVIDIA A100-SXM4-80GB MIG 3g.40gb"))
