"""Review of activation checkpointing's prediction (the recompute step-work ratio and the recomputed saved bytes):
the step counting the recomputation promised to leave the random state as it found it but drew a file's random
targets outside it; a hand-edited card's checkpointing fields were bounded below only (10**400 recomputed bytes
raised OverflowError, 1e300 a step of 1e297 s); and the docs' figures came from model files the repository did not
hold."""

import json
from pathlib import Path

import pytest
import torch

from perfpredict import Predictor
from perfpredict.card import PerformanceCard
from perfpredict.errors import UsageError
from perfpredict.estimators.arch import from_workload, step_probe_of_model
from perfpredict.workload import resolve_workload

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "benchmarks" / "checkpointing_models"

LABELLED = (
    "import torch\nimport torch.nn as nn\n\n"
    "def build_model():\n    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))\n\n"
    "def example_inputs(batch_size):\n    return torch.randn(batch_size, 16)\n\n"
    "def example_targets(batch_size):\n    return torch.randint(0, 4, (batch_size,))\n\n"
    "def loss_fn(out, targets):\n    return nn.functional.cross_entropy(out, targets)\n")


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


def test_the_recompute_step_leaves_the_random_state_with_random_targets(tmp_path) -> None:
    path = tmp_path / "labelled.py"
    path.write_text(LABELLED)
    wl = resolve_workload(str(path))
    torch.manual_seed(0)
    model = wl.build_model()
    state = torch.random.get_rng_state()
    probe = step_probe_of_model(wl, model)
    assert probe.recompute_ratio is None and probe.note is None
    # the saved-bytes counts after it draw what they drew without it
    assert torch.equal(torch.random.get_rng_state(), state)


@pytest.fixture(scope="module")
def card_json(predictor, tmp_path_factory) -> dict:
    card = predictor.predict(MODELS / "mlp_checkpointed.py", batch_size=64, device_type="cpu")
    assert card.features.recompute_step_work_ratio > 1 and card.features.recompute_saved_cpu_bytes_per_sample > 0
    path = tmp_path_factory.mktemp("card") / "card.json"
    card.save(path)
    return json.loads(path.read_text())


@pytest.mark.parametrize(("field", "value"), [("recompute_saved_cpu_bytes_per_sample", 10**400),
                                              ("recompute_saved_bytes_fixed", 10**20),
                                              ("recompute_step_work_ratio", 1e300)])
def test_a_hand_edited_cards_checkpointing_fields_are_bounded(predictor, card_json, field, value) -> None:
    edited = json.loads(json.dumps(card_json))
    edited["features"][field] = value
    card = PerformanceCard.model_validate(edited)
    with pytest.raises(UsageError, match=f"features.{field}"):
        predictor.predict(features=card, batch_size=64, device_type="cpu")
    # the card as written predicts its own numbers back
    again = predictor.predict(features=PerformanceCard.model_validate(card_json), batch_size=64, device_type="cpu")
    assert again.throughput[0].iter_time_s == pytest.approx(card_json["throughput"][0]["iter_time_s"])


def test_the_docs_factors_come_from_the_model_files_they_name() -> None:
    doc = (REPO / "docs" / "estimators.md").read_text()
    assert "benchmarks/checkpointing_models/" in doc
    for name, factor in (("encoder", "1.332"), ("mlp", "1.343")):
        assert f"against {factor}" in doc or f"of {factor}" in doc
        assert from_workload(str(MODELS / f"{name}.py")).recompute_step_work_ratio is None
        assert f"{from_workload(str(MODELS / f'{name}_checkpointed.py')).recompute_step_work_ratio:.3f}" == factor
