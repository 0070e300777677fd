"""Findings of the property scan of the estimators' training and scoring (train.py, evaluate.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfpredict.estimators.train import render_report

MODELS = Path(__file__).resolve().parents[1] / "trained_models"


def _memory_baseline_lines(meta: dict) -> list[tuple[dict, str]]:
    report = render_report(meta).splitlines()
    out = []
    for name, t in meta["targets"].items():
        if t["unit"] != "bytes" or "baseline_coef" not in t or not t.get("evaluation"):
            continue
        start = report.index(f"## {name} ({t['unit']})")
        line = next(x for x in report[start:] if x.startswith("Baseline fitted on all rows:"))
        out.append((t["baseline_coef"], line))
    return out


@pytest.mark.parametrize("set_dir", sorted(p.name for p in MODELS.iterdir() if (p / "metadata.json").exists()))
def test_the_report_gives_every_memory_baseline_term_its_own_coefficient(set_dir):
    """A byte-scaled term of the memory baseline (the training step's transient term, the peak of live
    activations: 2.93 bytes per byte on the H100's NVML target) was written as a fixed block, its coefficient
    divided by 2^20 ("+ 0.0 MiB for models with log_peak_live_bytes_iter")."""
    meta = json.loads((MODELS / set_dir / "metadata.json").read_text())
    for coef, line in _memory_baseline_lines(meta):
        assert "log_" not in line, line  # every term in words, no raw feature name
        for c, term in zip(coef["point"][3:], coef["terms"][3:]):
            if term.startswith("any:"):
                assert f"+ {c / 2**20:.1f} MiB for models with" in line, (term, line)
            else:
                assert f"+ {c:.2f} × " in line, (term, line)


def test_what_training_takes_for_no_measurement_is_no_measurement_for_the_fallback(tmp_path):
    """profiled.json (the Predictor's nearest-profiled fallback) kept a 0 utilisation reading that training
    left out as no measurement; the fallback then answered 0 (0.5% after clipping) with an interval of no
    width. NaN and negative cells are treated the same way."""
    import csv
    import shutil

    import numpy as np

    from perfpredict.estimators.design import design_matrix
    from perfpredict.estimators.train import train_dataset
    from perfpredict.predictor import ModelSet, _fallback

    datasets = Path(__file__).resolve().parents[1] / "datasets"
    shutil.copy(datasets / "zoo_features.csv", tmp_path / "zoo_features.csv")
    with open(datasets / "cuda_h100.csv", newline="") as f:
        reader = csv.DictReader(f)
        header, rows = reader.fieldnames, list(reader)
    first = {}
    for r in rows:
        first.setdefault(r["family"], r["config"])
    keep = {first[f] for f in ("mlp", "resnet", "lstm")}
    rows = [r for r in rows if r["config"] in keep]
    zero = first["mlp"]
    for r in rows:
        if r["config"] == zero:
            r["gpu_utilization"] = "0"
    bad = next(r for r in rows if r["config"] == first["lstm"])
    bad["nvml_process_bytes"], bad["peak_memory_bytes"] = "nan", "-1"
    with open(tmp_path / "tiny.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(rows)

    ts = train_dataset(tmp_path / "tiny.csv", tmp_path / "models", evaluate=False)
    assert ts.metadata["targets"]["gpu_utilization"]["rows"] < len(rows)  # training left the zeros out
    points = json.loads((ts.out_dir / "profiled.json").read_text())["architectures"]
    assert all(p["gpu_utilization"] is None for p in points[zero]["points"].values())
    lstm_point = points[first["lstm"]]["points"][bad["batch_size"]]
    assert lstm_point["nvml_process_bytes"] is None and lstm_point["peak_memory_bytes"] is None
    assert lstm_point["iter_time_s"] == pytest.approx(float(bad["iter_time_s"]))

    ms = ModelSet(ts.out_dir)
    arch = ms.with_graph_counts(ms.profiled_archs[zero])
    X = design_matrix([(arch, 32)], device_kind="cuda")
    preds = {n: t.predict(X) for n, t in ms.targets.items()}
    y, q = _fallback(ms, zero, arch, [32], preds)["gpu_utilization"]
    assert y[0] > 0.005 and q[0, -1] > q[0, 0]
    assert np.all(np.diff(q, axis=1) >= 0)

    # a set trained before the fix still has the zeros in its profiled.json: the fallback skips them too
    doc = json.loads((ts.out_dir / "profiled.json").read_text())
    for p in doc["architectures"][zero]["points"].values():
        p["gpu_utilization"] = 0.0
    (ts.out_dir / "profiled.json").write_text(json.dumps(doc))
    old = ModelSet(ts.out_dir)
    y_old, q_old = _fallback(old, zero, arch, [32], preds)["gpu_utilization"]
    assert y_old == pytest.approx(y) and q_old == pytest.approx(q)
