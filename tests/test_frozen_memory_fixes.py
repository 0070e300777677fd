"""Frozen weights in the predicted training memory. The memory baselines were fitted on models that train every
weight, so they charge each parameter byte k_P bytes (about 3 with SGD-momentum: weight, gradient, momentum);
a frozen byte was charged the same, and a 99%-frozen MLP was predicted 146 MiB of RSS against 147 MiB trained
(65 and 152 MiB measured). A frozen byte is now charged its weight alone. An ONNX file's saved tensors were
counted as if every weight trained (its --frozen moved nothing but the parameter term); a frozen backbone's
layers now keep nothing for backward there, as autograd records no op none of whose inputs needs a gradient."""

from dataclasses import replace
from pathlib import Path

import pytest

from perfpredict import Predictor
from perfpredict.estimators.arch import from_onnx_proto, from_workload

REPO = Path(__file__).resolve().parents[1]

MLP = (
    "import torch\nimport torch.nn as nn\n\n"
    "def build_model():\n"
    "    return nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))\n\n"
    "def example_inputs(batch_size):\n    return torch.randn(batch_size, 64)\n")
#: the two backbone layers' weights and biases, fp32
FROZEN = (64 * 512 + 512 + 512 * 512 + 512) * 4
FROZEN_COUNT = FROZEN // 4


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    path = tmp_path_factory.mktemp("frozen_memory") / "mlp.py"
    path.write_text(MLP)
    return from_workload(str(path))


def _k(target) -> float:
    return float(target.coef_point[1 + target.terms.index(("log_param_bytes",))])


@pytest.mark.parametrize("device_type", ["cpu", "cuda_h100"])
def test_a_frozen_parameter_byte_is_charged_its_weight_alone(predictor, full, device_type) -> None:
    """The same graph with the backbone's bytes frozen: each memory target's baseline loses (k_P - 1) bytes per
    frozen byte (the baseline-only sets: the prediction itself), at every batch size, its interval with it."""
    frozen = replace(full, frozen_param_bytes=float(FROZEN), frozen_param_count=float(FROZEN_COUNT))
    a = predictor.predict_values(full, [8, 64], device_type=device_type)
    b = predictor.predict_values(frozen, [8, 64], device_type=device_type)
    assert a["method"] == b["method"] == "estimator"
    ms = predictor.sets[a["model_set"]]
    names = [n for n in ("peak_memory", "device_memory") if n in ms.targets]
    for name in names:
        t = ms.targets[name]
        assert t.point is None and 2.5 < _k(t) < 3.5  # the shipped baseline-only set, SGD-momentum's ~3 copies
        saved = (_k(t) - 1) * FROZEN
        for full_y, frozen_y in zip(a[name]["median"], b[name]["median"], strict=True):
            assert full_y - frozen_y == pytest.approx(saved, rel=1e-9)
        for q in ("q10", "q90"):
            assert all(f < t_ for f, t_ in zip(b[name][q], a[name][q], strict=True))


def test_the_card_note_says_what_a_frozen_byte_is_charged(predictor, full) -> None:
    frozen = replace(full, frozen_param_bytes=float(FROZEN), frozen_param_count=float(FROZEN_COUNT))
    card = predictor.predict(features=frozen, batch_size=8, device_type="cpu")
    note = next(n for n in card.prediction.notes if "are frozen" in n)
    k = _k(predictor.sets[card.prediction.model_set].targets["peak_memory"])
    assert f"charges {k:.2f} bytes per parameter byte" in note and "charged 1 (its weight)" in note
    assert f"{(k - 1) * FROZEN / 2**20:,.1f} MiB less" in note
    assert "over-predicted" not in note


def test_an_onnx_frozen_backbone_keeps_only_the_heads_tensors_for_backward() -> None:
    """Per sample, fp32: every weight trained, the first Linear keeps its input (64), each ReLU its output (512,
    the next Linear's input, counted once) and the loss the logits (10); the backbone frozen, only the head's
    Linear records, keeping its input (512), and the loss its logits."""
    import torch

    from perfpredict.features.onnx_export import export_onnx

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    proto = export_onnx(model, (torch.randn(2, 64),)).model_proto
    trained = from_onnx_proto(proto)
    frozen = from_onnx_proto(proto, frozen=["0.", "2."])
    assert trained.graph_saved_bytes_per_sample == (64 + 512 + 512 + 10) * 4
    assert frozen.graph_saved_bytes_per_sample == (512 + 10) * 4
    assert frozen.frozen_param_bytes == FROZEN
    # a frozen head under a trained first layer: every op downstream of it records, as when all train
    first = from_onnx_proto(proto, frozen=["2.", "4."])
    assert first.graph_saved_bytes_per_sample == trained.graph_saved_bytes_per_sample


def test_an_onnx_files_frozen_prediction_comes_down_as_the_model_files_does(predictor, full, tmp_path) -> None:
    """Training memory with the backbone frozen, from the ONNX file with --frozen and from the model file with
    requires_grad=False: both well under the all-trained prediction (the exact saved count of the model file,
    the graph's estimate of the ONNX file)."""
    import torch

    from perfpredict.features.onnx_export import export_onnx

    frozen_file = tmp_path / "frozen.py"
    frozen_file.write_text(MLP.replace("    return nn.Sequential(", "    m = nn.Sequential(").replace(
        "nn.Linear(512, 10))\n", "nn.Linear(512, 10))\n    m[:4].requires_grad_(False)\n    return m\n"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    proto = export_onnx(model, (torch.randn(2, 64),)).model_proto
    by_onnx = [from_onnx_proto(proto), from_onnx_proto(proto, frozen=["0.", "2."])]
    by_file = [full, from_workload(str(frozen_file))]
    assert by_file[1].frozen_param_bytes == FROZEN
    for a, b in (by_onnx, by_file):
        ya = predictor.predict_values(a, [256], device_type="cpu")["peak_memory"]["median"][0]
        yb = predictor.predict_values(b, [256], device_type="cpu")["peak_memory"]["median"][0]
        assert yb < ya - 1.5 * FROZEN  # k_P - 1 ≈ 2 bytes per frozen byte, and fewer saved tensors
