"""Review of the frozen-parameter commit (0dc72b1): a measured card counts ``model.param_bytes`` (and the frozen
bytes) on the built module, while its graph features' ``param_bytes`` are the exported graph's initializers,
which leave out weights the forward does not use. Such a card, old (schema 1.20, counts only) or new (1.21, with
``frozen_param_bytes``), was refused by ``Predictor.predict(features=card)`` ("frozen_param_bytes is part of
param_bytes") although it predicted before the commit; and a card predicted from the model file recorded more
frozen bytes than parameter bytes, so its JSON round trip changed them."""

from pathlib import Path

import pytest

from perfpredict import Predictor
from perfpredict.card import PerformanceCard

REPO = Path(__file__).resolve().parents[1]

# a frozen module the forward does not use (a teacher kept on the model, a replaced head kept as an attribute):
# the module has 16,640 frozen parameters, the exported graph only the trained head's 650
UNUSED_FROZEN = (
    "import torch\nimport torch.nn as nn\n\n"
    "class M(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.teacher = nn.Linear(64, 256).requires_grad_(False)\n"
    "        self.head = nn.Linear(64, 10)\n\n"
    "    def forward(self, x):\n"
    "        return self.head(x)\n\n"
    "def build_model():\n    return M()\n\n"
    "def example_inputs(batch_size):\n    return torch.randn(batch_size, 64)\n")


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("unused_frozen") / "unused_frozen.py"
    path.write_text(UNUSED_FROZEN)
    return path


def test_a_measured_card_whose_graph_has_fewer_weights_than_its_frozen_module_predicts(predictor, model_file,
                                                                                       tmp_path) -> None:
    from perfpredict.profile import ProfileSettings, TimingConfig, profile_workload
    from perfpredict.workload import resolve_workload

    timing = TimingConfig(warmup_iters=1, warmup_s=0.0, min_iters=2, min_time_s=0.0, max_time_s=0.2)
    out = profile_workload(resolve_workload(str(model_file)),
                           ProfileSettings(batch_sizes=(2,), timing=timing, fvcore=False, threads=1),
                           out_dir=tmp_path / "out")
    card = PerformanceCard.model_validate_json(out.card.model_dump_json())
    assert card.model.frozen_param_bytes == 16_640 * 4 and card.features.param_bytes == 650 * 4
    again = predictor.predict(features=card, batch_sizes=[4], device_type="cpu")
    assert again.model.trainable_parameters == 650
    assert again.model.frozen_param_bytes <= again.model.param_bytes
    # a card written before schema 1.21 (the counts only) predicts as it did before the commit
    old = card.model_copy(update={"model": card.model.model_copy(update={"frozen_param_bytes": None})})
    assert predictor.predict(features=old, batch_sizes=[4], device_type="cpu").model.trainable_parameters == 650


def test_a_predicted_cards_frozen_bytes_are_part_of_its_parameter_bytes_and_survive_a_round_trip(
        predictor, model_file) -> None:
    card = predictor.predict(str(model_file), batch_sizes=[4, 16], device_type="cpu")
    assert card.model.frozen_param_bytes <= card.model.param_bytes
    read = PerformanceCard.model_validate_json(card.model_dump_json())
    again = predictor.predict(features=read, batch_sizes=[4, 16], device_type="cpu")
    assert again.model.frozen_param_bytes == card.model.frozen_param_bytes
    assert again.model.trainable_parameters == card.model.trainable_parameters
    assert [p.peak_memory_bytes for p in again.prediction.points] == \
        pytest.approx([p.peak_memory_bytes for p in card.prediction.points], rel=1e-12)
