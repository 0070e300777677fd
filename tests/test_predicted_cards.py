"""Predicted cards as the scheduler's card provider: `perfpredict predict --out` -> `perfpredict simulate --cards`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def predicted_cards(tmp_path_factory):
    from perfpredict import Predictor
    from perfpredict.estimators.data import load_training_data

    pred = Predictor.load(REPO / "trained_models")
    data = load_training_data(REPO / "datasets" / "cuda_h100.csv")
    d = tmp_path_factory.mktemp("cards")
    cards = {}
    for fam in ("resnet", "mlp"):
        i = next(i for i, f in enumerate(data.families) if f == fam)
        card = pred.predict(features=data.archs[i].as_dict(), batch_sizes=[16, 64], device_type="cuda_h100")
        (d / f"{fam}.json").write_text(card.to_json())
        cards[fam] = card
    return d, cards


def test_a_predicted_card_becomes_a_predicted_perf_model(predicted_cards):
    from perfpredict.sched.perf import PerfModel

    _, cards = predicted_cards
    for card in cards.values():
        m = PerfModel.from_card(card)
        top = max(card.prediction.points, key=lambda p: p.batch_size)
        assert m.source == "predicted"  # never passed off as measured
        assert m.device_mem_gb == pytest.approx(top.device_memory_safe_bytes / 1e9)  # what to reserve
        assert m.device_mem_gb > top.peak_memory_bytes / 1e9  # includes the CUDA context
        assert m.gpu_util == pytest.approx(top.gpu_utilization) and 0 < m.gpu_util <= 1


def test_simulate_packs_jobs_by_their_predicted_cards(predicted_cards, tmp_path):
    from typer.testing import CliRunner

    from perfpredict.cli import app

    d, cards = predicted_cards
    trace = tmp_path / "trace.csv"
    rows = ["id,arrival_s,gpus,work_s,model"]
    for k in range(6):
        fam = ("resnet", "mlp")[k % 2]
        rows.append(f"{k},{10 * k},1,{600 + 60 * k},{fam}")
    trace.write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["simulate", "--cluster", "horus:nodes=1,gpus=2", "--trace", str(trace),
                                   "--mechanism", "obp", "--cards", str(d), "--no-mlflow", "--out", str(out)])
    assert res.exit_code == 0, res.output
    m = json.loads((out / "metrics.json").read_text())["metrics"]
    assert m["n_finished"] == 6
    # Six one-GPU jobs on two GPUs: packing them by predicted memory shares devices, so some job starts
    # before any other finishes beyond the first two.
    import csv

    with open(out / "jobs.csv", newline="") as f:
        jobs = list(csv.DictReader(f))
    starts = sorted(float(j["first_start_s"]) for j in jobs)
    first_end = min(float(j["finish_s"]) for j in jobs)
    assert sum(s < first_end for s in starts) > 2


def test_the_python_latency_of_a_predicted_card_is_the_clis(tmp_path):
    """`perfpredict latency` answered from the predicted point at its batch size, card.latency_s() from the rate
    model fitted through the points: two answers to the same question."""
    import subprocess
    import sys

    from perfpredict import Predictor

    card = Predictor.load().predict("zoo:mlp", batch_sizes=[16, 64, 256], device_type="cuda_h100")
    path = card.save(tmp_path / "card.json")
    for b in (16, 64, 256):
        point = card.predicted_point(b)
        nu = card.latency.nu_s if card.latency else 0.0
        assert card.latency_s(1000, b) == pytest.approx(1000 * point.iter_time_s + nu, rel=1e-12)
        assert card.iter_time(b) == point.iter_time_s and card.throughput_at(b) == pytest.approx(b / point.iter_time_s)
        out = subprocess.run([sys.executable, "-m", "perfpredict", "latency", str(path), "-n", "1000", "-b", str(b)],
                             capture_output=True, text=True, timeout=120).stdout
        assert f"Lat(1000, {b}) = {card.latency_s(1000, b):.2f} s" in out
    assert card.predicted_point(100) is None  # between the points: the rate model answers
    assert card.latency_s(1000, 100) > 0
