"""Which CUDA model set answers ``device_type="cuda"`` now that two GPU models were measured (H100 and H200):
the one measured on a GPU model this machine has, by NVML's name, else the first by name; a card predicted on a
machine whose GPU has no set says so. The machine's GPUs are read by ``hostinfo.gpu_names`` (replaced here by
fixed names: the suite runs without a GPU)."""

from __future__ import annotations

import pytest

from perfpredict import Predictor, hostinfo
from perfpredict import predictor as predictor_module
from perfpredict.estimators.data import load_training_data

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


@pytest.fixture(scope="module")
def pred():
    p = Predictor.load()
    names = {s.device_name for s in p.sets.values() if s.device_kind == "cuda"}
    assert {H100, H200} <= names, "the shipped cuda_h100 and cuda_h200 sets are committed"
    return p


@pytest.fixture(scope="module")
def arch():
    return load_training_data("datasets/cuda_h200.csv").archs[0]


def _here(monkeypatch, *names: str) -> None:
    monkeypatch.setattr(predictor_module, "gpu_names", lambda: tuple(names))


@pytest.mark.parametrize("device_type", ["cuda", None])
def test_this_machines_gpu_model_picks_its_own_set(pred, monkeypatch, device_type):
    _here(monkeypatch, H200)
    assert pred.model_set(device_type).device_name == H200
    _here(monkeypatch, H100, H200)  # two GPUs: the first set by name that one of them has
    assert pred.model_set(device_type).name == "cuda_h100"


def test_without_a_gpu_or_with_another_model_the_first_set_by_name_answers(pred, monkeypatch):
    _here(monkeypatch)
    assert pred.model_set("cuda").name == "cuda_h100"
    _here(monkeypatch, "NVIDIA A100-SXM4-80GB")
    assert pred.model_set("cuda").name == "cuda_h100"


def test_a_named_set_is_kept_whatever_the_gpu(pred, monkeypatch):
    _here(monkeypatch, H100)
    assert pred.model_set("cuda_h200").device_name == H200


def test_a_card_for_a_gpu_without_a_set_says_whose_gpu_it_predicts(pred, arch, monkeypatch):
    _here(monkeypatch, "NVIDIA A100-SXM4-80GB")
    card = pred.card_for(arch, [16], device_type="cuda")
    notes = " ".join(card.prediction.notes)
    assert "this machine's GPU (NVIDIA A100-SXM4-80GB)" in notes and f"these predict {H100}" in notes
    assert card.device.name == H100


def test_a_card_on_the_sets_own_gpu_or_without_a_gpu_has_no_such_note(pred, arch, monkeypatch):
    for names in ((H200,), ()):
        _here(monkeypatch, *names)
        card = pred.card_for(arch, [16], device_type="cuda")
        assert not any("this machine's GPU" in n for n in card.prediction.notes), names
    _here(monkeypatch, "NVIDIA A100-SXM4-80GB")  # a named set is what the caller asked for: no note
    card = pred.card_for(arch, [16], device_type="cuda_h100")
    assert not any("this machine's GPU" in n for n in card.prediction.notes)


def test_memory_carries_over_between_the_two_gpus_and_time_does_not(pred):
    """``benchmarks/cross_gpu.py`` on the shipped sets: the H100's set predicts the H200's NVML memory about as
    well as the H200's own set does for families it never saw (same driver, CUDA and torch: the same bytes), and
    its time clearly worse than the H200's own set fits those rows."""
    from tests.conftest import REPO, load_script

    bench = load_script(REPO / "benchmarks" / "cross_gpu.py")
    other = bench.cross_scores(pred, "cuda_h100", REPO / "datasets" / "cuda_h200.csv")
    own = bench.cross_scores(pred, "cuda_h200", REPO / "datasets" / "cuda_h200.csv")
    assert other["device_memory"]["n"] == 315
    assert other["device_memory"]["mape"] < 0.08
    assert other["iter_time"]["mape"] > 0.15 > own["iter_time"]["mape"]


def test_gpu_names_reads_the_machine():
    """Names where NVIDIA's driver is loaded (its control device exists), none where it is not."""
    from pathlib import Path

    got = hostinfo.gpu_names()
    assert isinstance(got, tuple) and all(isinstance(n, str) and n.strip() for n in got)
    if not Path("/dev/nvidiactl").exists():
        assert got == ()
