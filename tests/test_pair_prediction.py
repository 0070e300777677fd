"""Two jobs on one GPU, from their cards: Predictor.colocation, POST /colocation and `perfpredict colocate`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from perfpredict import Predictor
from perfpredict.card import DeviceInfo, EnergyInfo, EnergyPoint, MemoryPoint, ThroughputPoint
from perfpredict.errors import PerfPredictError

REPO = Path(__file__).resolve().parents[1]
RESNET50 = {"depth": 50, "width": 64, "image_size": 224, "num_classes": 1000}


@pytest.fixture(scope="module")
def pred():
    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def cards(pred):
    return (pred.predict("zoo:mlp", batch_sizes=[32, 64], device_type="cuda"),
            pred.predict("zoo:resnet", params=RESNET50, batch_sizes=[32], device_type="cuda"))


def test_pair_of_predicted_cards_follows_the_interference_model(pred, cards):
    a, b = cards
    r = pred.colocation(a, b, batch_sizes=(64, None))
    ms = pred.model_set("cuda")
    ua = next(p for p in a.prediction.points if p.batch_size == 64).gpu_utilization
    ub = b.prediction.points[0].gpu_utilization
    assert [j.batch_size for j in r.jobs] == [64, 32] and r.jobs[0].source == "predicted"
    assert r.cumulative_utilization == pytest.approx(ua + ub)
    assert r.slowdown == pytest.approx(float(ms.interference.predict(ua + ub)))
    for j in r.jobs:
        assert j.iter_time_colocated_s == pytest.approx(j.iter_time_s * (1 + r.slowdown))
    assert r.aggregate_throughput == pytest.approx(2 / (1 + r.slowdown))
    # ResNet-50 and an MLP fit an 80 GB H100 many times over; the capacity comes from the dataset's provenance.
    assert r.device_capacity_bytes == ms.device_memory_bytes > 70 * 2**30
    assert r.fits_in_memory is True and r.device_memory_bytes < r.device_capacity_bytes
    assert r.slowdown_rmse_unseen_job == ms.interference_holdout["rmse"]


def _measured_card(pred, label: str, row: dict):
    """A CUDA card holding one measured H100 point (iteration time, NVML utilisation and process memory) from
    datasets/cuda_h100.csv, as `perfpredict profile` on that GPU records them."""
    base = pred.predict("zoo:mlp", batch_sizes=[8], device_type="cuda")
    b = int(row["batch_size"])
    return base.model_copy(update={
        "prediction": None, "rate_model": None,
        "model": base.model.model_copy(update={"name": label}),
        "device": DeviceInfo(kind="cuda", name=row["device_name"]),
        "throughput": [ThroughputPoint(batch_size=b, status="ok", iter_time_s=float(row["iter_time_s"]),
                                       samples_per_s=float(row["samples_per_s"]), device="cuda")],
        "memory": [MemoryPoint(batch_size=b, peak_bytes=int(row["peak_memory_bytes"]), kind="cuda_peak_allocated",
                               nvml_process_bytes=int(row["nvml_process_bytes"]), device="cuda")],
        "energy": EnergyInfo(available=True, scope="nvml", points=[
            EnergyPoint(batch_size=b, gpu_utilization=float(row["gpu_utilization"]), device="cuda")])})


def test_measured_cards_bring_their_own_utilisation_and_memory(pred):
    rows = [r for r in csv.DictReader(open(REPO / "datasets" / "cuda_h100.csv")) if r["status"] == "ok"]
    lo = min(rows, key=lambda r: float(r["gpu_utilization"]))
    hi = max(rows, key=lambda r: float(r["gpu_utilization"]))
    r = pred.colocation(_measured_card(pred, "low", lo), _measured_card(pred, "high", hi))
    assert [j.source for j in r.jobs] == ["measured", "measured"]
    assert r.cumulative_utilization == pytest.approx(float(lo["gpu_utilization"]) + float(hi["gpu_utilization"]))
    assert r.jobs[1].iter_time_s == pytest.approx(float(hi["iter_time_s"]))
    assert r.device_memory_bytes == pytest.approx(int(lo["nvml_process_bytes"]) + int(hi["nvml_process_bytes"]))
    assert r.cumulative_utilization > 1.0 and any("over-commits" in n for n in r.notes)
    # A card measured on another GPU brings its own memory; the answer says whose interference model spoke.
    t4 = _measured_card(pred, "low", lo).model_copy(update={"device": DeviceInfo(kind="cuda", name="Tesla T4",
                                                                                  memory_bytes=16 * 2**30)})
    r2 = pred.colocation(t4, _measured_card(pred, "high", hi))
    assert r2.device_capacity_bytes == 16 * 2**30 and any("Tesla T4" in n for n in r2.notes)


def test_what_cannot_answer_is_named(pred, cards):
    a, _ = cards
    cpu = pred.predict("zoo:mlp", batch_sizes=[8], device_type="cpu")
    with pytest.raises(PerfPredictError, match="CUDA card"):
        pred.colocation(a, cpu)
    with pytest.raises(PerfPredictError, match="no predicted point at batch 128"):
        pred.colocation(a, a, batch_sizes=(128, None))
    cpu_set = next(n for n, s in pred.sets.items() if s.interference is None)
    with pytest.raises(PerfPredictError, match="no interference model"):
        pred.colocation(a, a, device_type=cpu_set)


def test_service_answers_a_pair_and_refuses_one_job(pred):
    from fastapi.testclient import TestClient

    from perfpredict.service import create_app

    c = TestClient(create_app(pred), raise_server_exceptions=False)
    feats = json.loads((REPO / "trained_models" / "cuda_h100" / "profiled.json").read_text())["architectures"]
    f1, f2 = (next(v["features"] for k, v in feats.items() if k.startswith(fam)) for fam in ("mlp", "vgg"))
    r = c.post("/colocation", json={"jobs": [{"features": f1, "batch_size": 32}, {"features": f2, "batch_size": 16}]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["slowdown"] >= 0 and body["aggregate_throughput"] == pytest.approx(2 / (1 + body["slowdown"]))
    assert [j["batch_size"] for j in body["jobs"]] == [32, 16]
    assert c.post("/colocation", json={"jobs": [{"features": f1}]}).status_code == 422
    assert c.post("/colocation", json={"jobs": [{"features": f1}, {"features": f1}],
                                       "device_type": "cpu"}).status_code == 422


def test_cli_colocate_prints_the_slowdown_and_the_memory(run_cli):
    proc = run_cli("colocate", "zoo:mlp", "zoo:resnet", "-b", "32,16")
    assert proc.returncode == 0, proc.stderr
    assert "slowdown T_deg" in proc.stdout and "fits" in proc.stdout and "RMSE" in proc.stdout
    # each job's whole name, folded over lines where the column is narrow (it was cut with an ellipsis)
    cells = "".join(line.split("│")[1].strip() for line in proc.stdout.splitlines() if line.count("│") > 2)
    assert "resnet-depth18-width16-image_size32-num_classes10" in cells, proc.stdout
    bad = run_cli("colocate", "zoo:mlp", "missing.py")
    assert bad.returncode != 0 and "file not found" in bad.stderr and "Traceback" not in bad.stderr


def test_a_card_for_another_gpu_is_paired_on_that_gpu(pred, run_cli, tmp_path):
    """An H200 card beside a model file: the model is predicted for the H200 too, and the pair's memory is held to
    the H200's (it used to be the H100 set's: both the second job and the 79 GiB capacity); the slowdown is the
    H100's interference model's, since the H200 set has none, and the pair says so."""
    card = pred.predict("zoo:resnet", batch_sizes=[32], device_type="cuda_h200")
    assert card.device.memory_bytes == pred.model_set("cuda_h200").device_memory_bytes
    (tmp_path / "r200.json").write_text(card.to_json())
    other = pred.predict("zoo:mlp", batch_sizes=[32], device_type="cuda_h200")
    pair = pred.colocation(card, other)
    assert pair.device_capacity_bytes == pred.model_set("cuda_h200").device_memory_bytes
    assert any("the interference model from NVIDIA H100" in n for n in pair.notes)
    proc = run_cli("colocate", "r200.json", "zoo:mlp")
    assert proc.returncode == 0, proc.stderr
    assert "sharing one NVIDIA H200" in proc.stdout and "of 139.8 GiB" in proc.stdout
    with pytest.raises(PerfPredictError, match="predicted for different GPUs"):
        pred.colocation(card, pred.predict("zoo:mlp", batch_sizes=[32], device_type="cuda_h100"))
