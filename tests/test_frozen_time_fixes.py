"""A training step with frozen weights: autograd computes no weight gradient for a frozen weight and no input
gradient where no trained weight lies upstream, so a frozen backbone under a trained head costs about
F(backbone) + 3 F(head), not 3 F(all). The predicted iteration time charged every layer its full backward (a
99%-frozen MLP predicted 2.68 ms a step at batch 8 against 0.91 ms measured); it now takes the step's
MAC-weighted work with the frozen weights over the same training every weight."""

from dataclasses import replace
from pathlib import Path

import pytest

from perfpredict import Predictor
from perfpredict.estimators.arch import from_onnx_proto, from_workload

REPO = Path(__file__).resolve().parents[1]

MLP = (
    "import torch\nimport torch.nn as nn\n\n"
    "def build_model():\n"
    "    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))\n"
    "    FREEZE\n"
    "    return model\n\n"
    "def example_inputs(batch_size):\n    return torch.randn(batch_size, 64)\n")
ALL_TRAINED = MLP.replace("FREEZE", "pass")
BACKBONE_FROZEN = MLP.replace("FREEZE", "model[:4].requires_grad_(False)  # a frozen backbone, a trained head")
#: the first layer trained, the rest frozen: the gradient still flows back through every frozen layer
FIRST_TRAINED = MLP.replace("FREEZE", "model[2:].requires_grad_(False)")


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def archs(tmp_path_factory):
    d = tmp_path_factory.mktemp("frozen_time")
    out = {}
    for name, text in (("all", ALL_TRAINED), ("backbone", BACKBONE_FROZEN), ("first", FIRST_TRAINED)):
        (d / f"{name}.py").write_text(text)
        out[name] = from_workload(str(d / f"{name}.py"))
    return out


def _times(predictor, arch, mode="train"):
    return predictor.predict_values(arch, [8, 64], device_type="cpu", mode=mode)["iter_time"]


def test_a_frozen_backbone_is_predicted_well_below_the_step_training_every_weight(predictor, archs) -> None:
    full, frozen = _times(predictor, archs["all"]), _times(predictor, archs["backbone"])
    for key in ("median", "q10", "q90"):
        for f, t in zip(frozen[key], full[key]):
            assert f < 0.6 * t  # 99% of the MACs frozen: about F + 3 F(head) over 3 F
    card = predictor.predict(features=archs["backbone"], batch_size=8, device_type="cpu")
    note = next(n for n in card.prediction.notes if n.startswith("training-step times x "))
    assert f"x {archs['backbone'].frozen_step_work_ratio:.3f}" in note
    assert card.throughput[0].iter_time_s == pytest.approx(frozen["median"][0])


def test_the_factor_follows_where_the_trained_weights_lie(archs) -> None:
    """Work counts: forward F per layer; weight gradient F where the weight trains; input gradient F where a
    trained weight lies upstream (never for the first layer, whose input is the data)."""
    f0, f1, f2 = 64 * 512, 512 * 512, 512 * 10
    full = 2 * f0 + 3 * f1 + 3 * f2
    assert archs["all"].frozen_step_work_ratio is None  # nothing frozen: nothing to adjust
    assert archs["backbone"].frozen_step_work_ratio == pytest.approx((f0 + f1 + 2 * f2) / full)
    assert archs["first"].frozen_step_work_ratio == pytest.approx((2 * f0 + 2 * f1 + 2 * f2) / full)
    assert archs["first"].frozen_step_work_ratio > 0.6


def test_an_onnx_file_with_frozen_prefixes_gets_the_model_files_factor(archs, tmp_path) -> None:
    import torch

    from perfpredict.features.onnx_export import export_onnx

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    proto = export_onnx(model, (torch.randn(2, 64),)).model_proto
    arch = from_onnx_proto(proto, frozen=["0.", "2."])
    assert arch.frozen_step_work_ratio == pytest.approx(archs["backbone"].frozen_step_work_ratio)
    assert from_onnx_proto(proto).frozen_step_work_ratio is None


def test_predictions_are_unchanged_when_nothing_is_frozen_and_in_inference(predictor, archs) -> None:
    arch = archs["all"]
    # a ratio on features that freeze nothing is not applied: bit-identical times
    assert _times(predictor, replace(arch, frozen_step_work_ratio=0.5)) == _times(predictor, arch)
    # an inference pass has no backward to skip
    frozen = archs["backbone"]
    assert _times(predictor, frozen, "infer") == _times(predictor, replace(frozen, frozen_step_work_ratio=None),
                                                        "infer")


def test_frozen_bytes_without_the_graph_say_the_time_is_not_adjusted(predictor, archs) -> None:
    arch = replace(archs["backbone"], frozen_step_work_ratio=None)  # as a feature vector or a card gives it
    card = predictor.predict(features=arch, batch_size=8, device_type="cpu")
    assert any(n.startswith("the training-step time is not adjusted for the frozen parameters")
               for n in card.prediction.notes)


def test_a_feature_vector_cannot_set_the_factor(predictor, archs) -> None:
    """The ratio is read off a graph; a caller's key of that name is ignored (and named as unknown)."""
    arch = replace(archs["backbone"], frozen_step_work_ratio=None)
    sent = {**arch.as_dict(), "frozen_step_work_ratio": "0.1"}
    assert _times(predictor, sent) == _times(predictor, arch)
