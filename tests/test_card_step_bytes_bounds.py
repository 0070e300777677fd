"""A hand-edited card's ``features.optimizer_step_bytes`` is held to its range as the card's other fields are: a
negative, infinite or huge value used to be dropped without a word, and the card then predicted as if its optimizer
held no temporaries (its AdamW's 2 x the largest weight vanished from the memory)."""

import json
from pathlib import Path

import pytest

from perfpredict import Predictor
from perfpredict.card import PerformanceCard
from perfpredict.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
ADAMW = ("import torch\nimport torch.nn as nn\n\n"
         "def build_model():\n    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8))\n\n"
         "def example_inputs(batch_size):\n    return torch.randn(batch_size, 64)\n\n"
         "def make_optimizer(params):\n    return torch.optim.AdamW(params, lr=1e-3)\n")


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def card_json(predictor, tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("adamw")
    (d / "adamw.py").write_text(ADAMW)
    card = predictor.predict(str(d / "adamw.py"), batch_size=16, device_type="cpu")
    assert card.features.optimizer_step_bytes["cpu"] > 0
    card.save(d / "card.json")
    return json.loads((d / "card.json").read_text())


@pytest.mark.parametrize("value", [-5.0, 1e300, 2.0**50, float("inf")])
def test_a_hand_edited_cards_step_bytes_out_of_range_is_refused(predictor, card_json, value) -> None:
    edited = json.loads(json.dumps(card_json))
    edited["features"]["optimizer_step_bytes"]["cpu"] = value
    card = PerformanceCard.model_validate(edited)
    with pytest.raises(UsageError, match=r"features.optimizer_step_bytes\['cpu'\]"):
        predictor.predict(features=card, batch_size=16, device_type="cpu")


def test_the_card_as_written_and_with_another_kinds_entry_predicts_its_own_memory(predictor, card_json) -> None:
    again = predictor.predict(features=PerformanceCard.model_validate(card_json), batch_size=16, device_type="cpu")
    assert again.memory[0].peak_bytes == card_json["memory"][0]["peak_bytes"]
    edited = json.loads(json.dumps(card_json))
    edited["features"]["optimizer_step_bytes"]["mps"] = -1.0  # a kind this version does not read
    same = predictor.predict(features=PerformanceCard.model_validate(edited), batch_size=16, device_type="cpu")
    assert same.memory[0].peak_bytes == card_json["memory"][0]["peak_bytes"]
