"""Items the reviews of session 45 left alone: a predicted card of a frozen model predicts its step time again;
``perfpredict colocate`` resolves an ONNX job's symbolic dimensions; a dynamically quantised model's packed
weights are counted; a float64 model's run says fp64; and three rules written twice are written once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from perfpredict import Predictor
from perfpredict.card import PerformanceCard
from tests.test_review45_findings import MLP as FROZEN_MLP  # 64-512-512-10, its first two layers frozen

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


def test_a_saved_predicted_card_of_a_frozen_model_predicts_its_step_time_again(predictor, tmp_path) -> None:
    """The card carried the frozen parameters but not the step-work ratio its training-step time was multiplied
    by, so predict(features=card) gave the time of training every weight (2.8x the card's at batch 8)."""
    f0, f1, f2 = 64 * 512, 512 * 512, 512 * 10
    ratio = (f0 + f1 + 2 * f2) / (2 * f0 + 3 * f1 + 3 * f2)
    (tmp_path / "m.py").write_text(FROZEN_MLP)
    card = predictor.predict(str(tmp_path / "m.py"), batch_sizes=[8, 32], device_type="cpu")
    assert card.features.frozen_step_work_ratio == pytest.approx(ratio)
    card.save(tmp_path / "card.json")
    again = predictor.predict(features=PerformanceCard.load(tmp_path / "card.json"), batch_sizes=[8, 32],
                              device_type="cpu")
    for a, b in zip(again.prediction.points, card.prediction.points):
        assert a.iter_time_s == pytest.approx(b.iter_time_s)
        assert a.iter_time_interval_s == pytest.approx(b.iter_time_interval_s)
        assert a.peak_memory_bytes == b.peak_memory_bytes
    assert any(n.startswith(f"training-step times x {ratio:.3f}") for n in again.prediction.notes)
    # a card written before schema 1.22 still loads, and is predicted as before (the time not adjusted)
    raw = json.loads((tmp_path / "card.json").read_text())
    raw["schema_version"] = "1.21"
    del raw["features"]["frozen_step_work_ratio"]
    (tmp_path / "old.json").write_text(json.dumps(raw))
    old = predictor.predict(features=PerformanceCard.load(tmp_path / "old.json"), batch_sizes=[8], device_type="cpu")
    assert old.throughput[0].iter_time_s * ratio == pytest.approx(card.throughput[0].iter_time_s)
    # a ratio outside [0, 1] is not a card's
    raw["features"]["frozen_step_work_ratio"] = 1.5
    (tmp_path / "bad.json").write_text(json.dumps(raw))
    with pytest.raises(Exception, match="frozen_step_work_ratio"):
        PerformanceCard.load(tmp_path / "bad.json")


def test_colocate_resolves_an_onnx_jobs_symbolic_sequence_dimension_as_predict_does(predictor, tmp_path, monkeypatch,
                                                                                     colocation_pairs) -> None:
    """``perfpredict predict X.onnx --dim S=16`` counts a file with a symbolic sequence length; colocate had no such
    option, so the same file could not be colocated at all (the analysis refuses to guess the length)."""
    import io

    import torch
    from typer.testing import CliRunner

    import perfpredict.cli_models  # noqa: F401 - registers colocate
    from perfpredict.cli import app
    from perfpredict.errors import PerfPredictError, UsageError

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 16)).eval()
    x = torch.randn(2, 16, 16)  # (batch, sequence, features)
    for name, axes in (("dyn", {0: "B", 1: "S"}), ("fixed", {0: "B"})):
        buf = io.BytesIO()
        torch.onnx.export(m, (x,), buf, input_names=["x"], dynamic_axes={"x": axes}, dynamo=False)
        (tmp_path / f"{name}.onnx").write_bytes(buf.getvalue())
    dyn, fixed = tmp_path / "dyn.onnx", tmp_path / "fixed.onnx"
    pairs = colocation_pairs
    monkeypatch.setattr(Predictor, "load", classmethod(lambda cls, models=None: predictor))  # loaded once

    def run(*args):
        return CliRunner().invoke(app, ["colocate", *map(str, args), "--models", str(REPO / "trained_models"),
                                        "-b", "8", "--device-type", "cuda_h100"])

    res = run(fixed, dyn, "--dim-b", "S=16")
    assert res.exit_code == 0, res.output[-2000:]
    (a, b), = pairs
    assert b.features.forward_macs_per_sample == a.features.forward_macs_per_sample > 0
    assert b.prediction.points[0].iter_time_s == pytest.approx(a.prediction.points[0].iter_time_s)
    assert b.prediction.points[0].peak_memory_bytes == a.prediction.points[0].peak_memory_bytes
    res = run(dyn, "zoo:mlp", "--batch-axis-a", "0", "--dim-a", "S=16")  # the batch axis passes through as well
    assert res.exit_code == 0, res.output[-2000:]
    a.save(tmp_path / "a.json")
    for args, kind, needle in (
            ((fixed, dyn), PerfPredictError, "colocate --dim-a / --dim-b"),
            ((dyn, "zoo:mlp", "--dim-a", "S=16", "--dim-a", "S=8"), UsageError, "--dim-a S is given twice"),
            ((dyn, "zoo:mlp", "--dim-a", "S"), UsageError, "--dim-a 'S': expected NAME=SIZE"),
            ((dyn, "zoo:mlp", "--dim-b", "S=16"), UsageError, "--dim-b only applies to an ONNX file"),
            ((tmp_path / "a.json", dyn, "--batch-axis-a", "0"), UsageError, "--batch-axis-a does not apply to a card")):
        res = run(*args)
        assert isinstance(res.exception, kind) and needle in str(res.exception), res.output[-2000:]


QUANTISED_MLP = """
import torch, torch.nn as nn
def build_model():
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8)
def example_inputs(batch_size):
    return torch.randn(batch_size, 16)
"""


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch deprecates its eager-mode quantization
def test_a_dynamically_quantised_models_packed_weights_are_counted_at_their_int8_size(write_model) -> None:
    """quantize_dynamic's Linear holds its weights packed (no nn.Parameter), so the card said 0 parameters (0 B)."""
    from perfpredict.profile.profiler import _model_info, _packed_weights_notes
    from perfpredict.workload import load_model_file

    info, model = _model_info(load_model_file(write_model(QUANTISED_MLP)))
    weights, biases = 16 * 32 + 32 * 4, 32 + 4  # qint8 weights (1 B each), float32 biases (4 B each)
    assert info.parameters == weights + biases and info.param_bytes == weights + 4 * biases
    assert info.trainable_parameters == 0 and info.frozen_param_bytes == info.param_bytes  # no gradient
    assert any(n.startswith(f"{weights + biases:,} of the model's parameters") for n in _packed_weights_notes(model))
    # a quantised LSTM's packed weights cannot be unpacked: the card says they are not counted, not a silent 0
    lstm = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.LSTM(8, 16)), {torch.nn.LSTM},
                                                  dtype=torch.qint8)
    assert any("are not counted in the model's parameters" in n for n in _packed_weights_notes(lstm))


def test_a_float64_models_run_says_fp64(write_model, tmp_path) -> None:
    """run.precision said fp32 for a model built with .double(): every op ran in float64."""
    from perfpredict.profile import ProfileSettings, profile_workload
    from perfpredict.workload import load_model_file
    from tests.conftest import FAST_TIMING

    text = """
import torch, torch.nn as nn
def build_model():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).DTYPE
def example_inputs(batch_size):
    return torch.randn(batch_size, 16, dtype=torch.DTYPE)
"""
    settings = ProfileSettings(batch_sizes=(4,), mode="infer", device="cpu", timing=FAST_TIMING, threads=1,
                               features=False, measure_energy=False)
    wl = load_model_file(write_model(text.replace("DTYPE", "double()").replace("torch.double()", "torch.float64")))
    card = profile_workload(wl, settings).card
    assert card.run.precision == "fp64" and card.throughput[0].status == "ok"
    assert PerformanceCard.from_json(card.model_dump_json()).run.precision == "fp64"
    from perfpredict.workload.spec import weights_precision

    assert weights_precision(torch.nn.Linear(2, 2), "fp32") == "fp32"  # a float32 model is unchanged
    assert weights_precision(torch.nn.Linear(2, 2).double(), "bf16") == "bf16"


def test_a_half_or_bfloat16_models_run_says_its_dtype(write_model) -> None:
    """run.precision said fp32 for a model built with .bfloat16() (or .half()), run without autocast: every op
    ran in that dtype. A model whose weights mix dtypes keeps the autocast setting."""
    from perfpredict.profile import ProfileSettings, profile_workload
    from perfpredict.workload import load_model_file
    from perfpredict.workload.spec import weights_precision
    from tests.conftest import FAST_TIMING

    text = """
import torch, torch.nn as nn
def build_model():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).bfloat16()
def example_inputs(batch_size):
    return torch.randn(batch_size, 16, dtype=torch.bfloat16)
"""
    settings = ProfileSettings(batch_sizes=(4,), mode="infer", device="cpu", timing=FAST_TIMING, threads=1,
                               features=False, measure_energy=False)
    card = profile_workload(load_model_file(write_model(text)), settings).card
    assert card.run.precision == "bf16" and card.throughput[0].status == "ok"
    assert weights_precision(torch.nn.Linear(2, 2).half(), "fp32") == "fp16"
    mixed = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).half())
    assert weights_precision(mixed, "fp32") == "fp32"


def test_a_measured_training_card_of_a_frozen_model_carries_its_step_work_ratio(predictor, write_model) -> None:
    """A measured card of a frozen model predicted on another device (features=card) gave the step time of
    training every weight: the profiler wrote no step-work ratio. An inference card needs none."""
    from perfpredict.profile import ProfileSettings, profile_workload
    from perfpredict.workload import load_model_file
    from tests.conftest import FAST_TIMING

    f0, f1, f2 = 64 * 512, 512 * 512, 512 * 10
    path = write_model(FROZEN_MLP)

    def measured(mode: str):
        settings = ProfileSettings(batch_sizes=(4,), mode=mode, device="cpu", timing=FAST_TIMING, threads=1,
                                   fvcore=False, measure_energy=False)
        return profile_workload(load_model_file(path), settings).card

    card = measured("train")
    assert card.features.frozen_step_work_ratio == pytest.approx((f0 + f1 + 2 * f2) / (2 * f0 + 3 * f1 + 3 * f2))
    adjusted = predictor.predict(features=card, batch_sizes=[8], device_type="cpu")
    card.features.frozen_step_work_ratio = None
    full = predictor.predict(features=card, batch_sizes=[8], device_type="cpu")
    assert adjusted.prediction.points[0].iter_time_s < 0.5 * full.prediction.points[0].iter_time_s
    assert measured("infer").features.frozen_step_work_ratio is None
