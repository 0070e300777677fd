"""The dataset collector on the CPU: the sweep plan's filters and a real measured point, resumed."""

from __future__ import annotations

import json
from pathlib import Path

from perfpredict.dataset.collect import CollectSettings, collect, plan_sweep, read_dataset
from perfpredict.profile.timing import TimingConfig
from perfpredict.workload.zoo import get_family


def test_plan_filters_by_macs_per_sample_and_per_iteration() -> None:
    full = plan_sweep(["resnet"], batch_sizes=[4, 64])
    small = plan_sweep(["resnet"], batch_sizes=[4, 64], max_gmacs=0.1)
    assert 0 < len(small) < len(full)
    assert all(p.gmacs_per_sample <= 0.1 for p in small)
    per_iter = plan_sweep(["resnet"], batch_sizes=[4, 64], max_sample_gmacs_per_iter=2.0)
    for p in per_iter:
        assert all(p.gmacs_per_sample * b <= 2.0 for b in p.batch_sizes) and p.batch_sizes
    # an architecture whose batch 64 is too heavy keeps its batch 4
    assert any(p.batch_sizes == (4,) for p in per_iter)


def test_plan_filters_by_parameter_bytes() -> None:
    """The multi-GB DLRM tables are dropped by weight size, which no MAC filter catches (lookups are free)."""
    everything = plan_sweep(["dlrm"])
    kept = plan_sweep(["dlrm"], max_param_bytes=512 * 2**20)
    assert 0 < len(kept) < len(everything)
    fam = get_family("dlrm")
    assert all(4 * fam.closed_form_params(p.cfg) <= 512 * 2**20 for p in kept)
    dropped = {p.config for p in everything} - {p.config for p in kept}
    assert all(4 * fam.closed_form_params(p.cfg) > 512 * 2**20 for p in everything if p.config in dropped)


def test_plan_interleaves_families_so_a_cut_sweep_covers_each() -> None:
    plans = plan_sweep(["mlp", "lstm", "vgg"])
    assert [p.family for p in plans[:3]] == ["mlp", "lstm", "vgg"]


def test_collect_measures_a_cpu_point_and_resumes(tmp_path) -> None:
    plans = plan_sweep(["mlp"], batch_sizes=[8], max_gmacs=0.0005)[:1]
    out = tmp_path / "cpu.csv"
    quick = TimingConfig(warmup_iters=2, warmup_s=0.05, min_iters=5, min_time_s=0.1, max_time_s=1.0)
    settings = CollectSettings(device="cpu", timing=quick, threads=1, command="test", git_commit="abc1234")
    summary = collect(plans, out, settings)
    assert summary["counts"] == {"ok": 1}
    (row,) = read_dataset(out)
    assert row["device_kind"] == "cpu" and row["family"] == "mlp" and int(row["batch_size"]) == 8
    assert float(row["iter_time_s"]) > 0 and float(row["samples_per_s"]) > 0
    assert int(row["peak_memory_bytes"]) >= 0 and row["memory_kind"]
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["runs"][-1]["git_commit"] == "abc1234" and meta["runs"][-1]["device"] == "cpu"
    # A second run finds the point done: nothing measured, nothing appended.
    again = collect(plans, out, settings)
    assert again["counts"] == {} and len(read_dataset(out)) == 1


def test_features_are_exported_in_a_fresh_process_and_a_failure_is_one_row(tmp_path) -> None:
    """Each architecture's export runs in its own process (memory does not pile up over a sweep), gives the
    same features as in this process, and an export that fails becomes a row with the reason, not a crash."""
    from perfpredict.dataset.features_table import (
        arch_features_row,
        arch_features_row_in_subprocess,
        build_features_table,
        read_features_table,
    )

    (plan,) = plan_sweep(["mlp"], max_gmacs=0.0005)[:1]
    isolated = arch_features_row_in_subprocess("mlp", plan.cfg, timeout_s=300)
    local = arch_features_row("mlp", plan.cfg)
    assert isolated["error"] is None
    for key in ("config", "forward_macs_per_sample", "param_count", "num_nodes", "op_counts_json",
                "saved_bytes_per_sample"):
        assert isolated[key] == local[key]
    bad = dict(plan.cfg, depth="not-a-number")
    out = tmp_path / "features.csv"
    added = build_features_table([("mlp", plan.cfg), ("mlp", bad)], out, timeout_s=300)
    rows = read_features_table(out)
    assert added == 2 and len(rows) == 2
    assert not rows[plan.config]["error"]
    (failed,) = [r for name, r in rows.items() if name != plan.config]
    assert "depth" in failed["error"] and failed["family"] == "mlp"


def test_a_dataset_holds_one_precision_recorded_in_its_provenance(tmp_path) -> None:
    import pytest

    from perfpredict.dataset.collect import dataset_precision
    from perfpredict.errors import UsageError

    plans = plan_sweep(["mlp"], batch_sizes=[8], max_gmacs=0.0005)[:1]
    assert plans[0].ref_at("fp32") == plans[0].ref and plans[0].ref_at("bf16").precision == "bf16"
    out = tmp_path / "new_folder" / "cpu_bf16.csv"  # a folder that does not exist yet
    quick = TimingConfig(warmup_iters=2, warmup_s=0.05, min_iters=5, min_time_s=0.1, max_time_s=1.0)
    settings = CollectSettings(device="cpu", precision="bf16", timing=quick, threads=1, command="test")
    during = []  # what the provenance said while the run was measuring (a SIGKILL there would leave it so)
    assert collect(plans, out, settings, progress=lambda plan, row: during.append(
        json.loads(out.with_suffix(".meta.json").read_text())["runs"]))["counts"] == {"ok": 1}
    assert during[0][-1]["precision"] == "bf16" and during[0][-1]["finished_at"] is None
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["runs"][-1]["precision"] == "bf16" and dataset_precision(meta) == "bf16"
    # appending another precision would mix two kinds of step in one training set
    with pytest.raises(UsageError, match="holds bf16 measurements"):
        collect(plans, out, CollectSettings(device="cpu", timing=quick, threads=1))
    # a run killed outright (SIGKILL) has already recorded its precision: the entry is written before measuring
    runs = json.loads(out.with_suffix(".meta.json").read_text())["runs"]
    assert len(runs) == 1 and runs[0]["finished_at"] and runs[0]["run_id"]  # completed in place, not appended
    stale = tmp_path / "new_folder" / "gone.csv"  # a leftover provenance whose CSV was deleted still says what the file holds
    stale.with_suffix(".meta.json").write_text(out.with_suffix(".meta.json").read_text())
    with pytest.raises(UsageError, match="holds bf16 measurements"):
        collect(plans, stale, CollectSettings(device="cpu", timing=quick, threads=1))
    rows_only = tmp_path / "new_folder" / "rows_only.csv"  # rows without any provenance: precision unknown
    rows_only.write_text(out.read_text())
    with pytest.raises(UsageError, match="no provenance"):
        collect(plans, rows_only, settings)
    assert dataset_precision({"runs": [{"device": "cpu"}]}) == "fp32"  # runs from before precision was recorded
    with pytest.raises(UsageError, match="mixes precisions"):
        dataset_precision({"dataset": "x.csv", "runs": [{"precision": "bf16"}, {}]})


def test_a_cpu_dataset_holds_one_machine(tmp_path, monkeypatch) -> None:
    """Two VMs both named "AMD EPYC" ran the same training steps a median 0.75x apart, so a CPU dataset records
    the CPU beyond its name (cpu_id, in each run's device_info) and the collector will not append another
    machine's measurements to it."""
    import pytest

    import perfpredict.hostinfo as hostinfo
    from perfpredict.dataset.collect import dataset_cpu_id
    from perfpredict.errors import UsageError
    from perfpredict.estimators.data import load_training_data

    here = hostinfo.cpu_id()
    assert here is None or (" family " in here and " model " in here and "; " in here)
    plans = plan_sweep(["mlp"], batch_sizes=[8], max_gmacs=0.0005)[:1]
    out = tmp_path / "cpu.csv"
    quick = TimingConfig(warmup_iters=2, warmup_s=0.05, min_iters=5, min_time_s=0.1, max_time_s=1.0)
    settings = CollectSettings(device="cpu", timing=quick, threads=1, command="test")
    assert collect(plans, out, settings)["counts"] == {"ok": 1}
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["runs"][-1]["device_info"]["cpu_id"] == here and dataset_cpu_id(meta) == here
    monkeypatch.setattr(hostinfo, "cpu_id", lambda: "GenuineIntel family 6 model 143 stepping 8; avx2 amx_bf16")
    with pytest.raises(UsageError, match="measured on another CPU"):
        collect(plans, out, settings)
    monkeypatch.setattr(hostinfo, "cpu_model_name", lambda: "Some Other CPU")
    with pytest.raises(UsageError, match="measured on another CPU"):
        collect(plans, out, settings)
    with pytest.raises(UsageError, match="mixes CPUs"):
        dataset_cpu_id({"dataset": "x.csv", "cpu_id": "a", "runs": [{"device_info": {"cpu_id": "b"}}]})
    assert dataset_cpu_id({"runs": [{"device_info": {"name": "AMD EPYC"}}]}) is None   # from before it was recorded
    assert dataset_cpu_id({"cpu_id": "added by hand", "runs": [{}]}) == "added by hand"
    # the training data carries it to the model set's metadata (the Predictor's choice among same-name sets)
    features = Path(__file__).resolve().parents[1] / "datasets" / "zoo_features.csv"
    monkeypatch.undo()
    assert load_training_data(out, features_csv=features).cpu_id == here
