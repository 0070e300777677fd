"""Frozen parameters (``requires_grad=False``) reach a prediction from every input that can say which weights
train: a model file, a card (its model section) and a feature vector (Python or HTTP). They used to reach it
from model files only, and a predicted card said every parameter trained."""

from pathlib import Path

import pytest

from perfpredict import Predictor
from perfpredict.errors import UsageError
from tests.test_service_validation import F  # the service tests' feature vector
from tests.test_zoo_card_fixes import FROZEN_MODEL

REPO = Path(__file__).resolve().parents[1]
FROZEN, TRAINED = (64 * 256 + 256) * 4, (256 * 10 + 10) * 4
FROZEN_COUNT, TRAINED_COUNT = 64 * 256 + 256, 256 * 10 + 10


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def frozen_card(predictor, tmp_path_factory):
    path = tmp_path_factory.mktemp("frozen") / "frozen.py"
    path.write_text(FROZEN_MODEL)
    return predictor.predict(str(path), batch_sizes=[8, 64], device_type="cpu")


def _memory(card) -> list[float]:
    return [p.peak_memory_bytes for p in card.prediction.points]


def test_a_predicted_card_counts_only_the_trained_parameters_as_trainable(frozen_card) -> None:
    assert frozen_card.model.parameters == FROZEN_COUNT + TRAINED_COUNT
    assert frozen_card.model.trainable_parameters == TRAINED_COUNT
    assert frozen_card.model.frozen_param_bytes == FROZEN
    note = next(n for n in frozen_card.prediction.notes if "frozen" in n)
    assert f"{FROZEN / 2**20:,.1f} MiB" in note and "charged 1 (its weight)" in note


def test_a_card_carries_its_frozen_parameters_to_the_next_prediction(predictor, frozen_card) -> None:
    again = predictor.predict(features=frozen_card, batch_sizes=[8, 64], device_type="cpu")
    assert again.model.trainable_parameters == TRAINED_COUNT
    assert again.model.frozen_param_bytes == FROZEN
    assert _memory(again) == pytest.approx(_memory(frozen_card), rel=1e-12)
    # the same card with every parameter trained predicts more training memory (eq. 2's gradients and momentum)
    trained = frozen_card.model_copy(update={"model": frozen_card.model.model_copy(
        update={"trainable_parameters": frozen_card.model.parameters, "frozen_param_bytes": 0})})
    all_trained = predictor.predict(features=trained, batch_sizes=[8, 64], device_type="cpu")
    assert not any("frozen" in n for n in all_trained.prediction.notes)
    assert all_trained.model.frozen_param_bytes == 0


def test_a_card_written_before_the_bytes_were_recorded_takes_the_counts_share(predictor, frozen_card) -> None:
    old = frozen_card.model_copy(update={"model": frozen_card.model.model_copy(update={"frozen_param_bytes": None})})
    again = predictor.predict(features=old, batch_sizes=[8], device_type="cpu")
    assert again.model.frozen_param_bytes == FROZEN  # one dtype: the counts' share is exact
    assert again.model.trainable_parameters == TRAINED_COUNT


def test_a_feature_vector_takes_frozen_parameters_and_refuses_more_than_the_whole(predictor) -> None:
    card = predictor.predict(features={**F, "frozen_param_bytes": 3e5, "frozen_param_count": 75_000},
                             batch_sizes=[4], device_type="cpu")
    assert card.model.frozen_param_bytes == 300_000 and card.model.trainable_parameters == 25_000
    assert not any("unknown feature key" in n for n in card.prediction.notes)
    with pytest.raises(UsageError, match="frozen_param_bytes is part of param_bytes"):
        predictor.predict(features={**F, "frozen_param_bytes": 5e5}, batch_sizes=[4], device_type="cpu")
    with pytest.raises(UsageError, match="frozen_param_count is part of param_count"):
        predictor.predict(features={**F, "frozen_param_count": 2e5}, batch_sizes=[4], device_type="cpu")


def test_the_service_takes_frozen_parameters_in_a_feature_vector() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from perfpredict.service import create_app

    client = TestClient(create_app(Predictor.load(REPO / "trained_models")), raise_server_exceptions=False)
    r = client.post("/predict", json={"features": {**F, "frozen_param_bytes": 3e5}, "batch_sizes": [4],
                                      "device_type": "cpu"})
    assert r.status_code == 200, r.text
    assert r.json()["model"]["frozen_param_bytes"] == 300_000
    r = client.post("/predict", json={"features": {**F, "frozen_param_bytes": 5e5}, "batch_sizes": [4],
                                      "device_type": "cpu"})
    assert r.status_code == 422 and "frozen_param_bytes" in r.text


def test_a_profiled_card_records_the_frozen_parameter_bytes(tmp_path) -> None:
    from perfpredict.profile.profiler import _model_info
    from perfpredict.workload import resolve_workload

    path = tmp_path / "frozen.py"
    path.write_text(FROZEN_MODEL)
    info, _ = _model_info(resolve_workload(str(path)))
    assert (info.frozen_param_bytes, info.param_bytes) == (FROZEN, FROZEN + TRAINED)
    assert info.trainable_parameters == TRAINED_COUNT


def test_a_feature_vector_giving_one_half_of_its_frozen_parameters_gets_the_other_as_its_share(predictor) -> None:
    """A count alone made the card count fewer trainable parameters while eq. 2 charged every weight as trained."""
    by_count = predictor.predict(features={**F, "frozen_param_count": 75_000}, batch_sizes=[4], device_type="cpu")
    by_bytes = predictor.predict(features={**F, "frozen_param_bytes": 3e5}, batch_sizes=[4], device_type="cpu")
    both = predictor.predict(features={**F, "frozen_param_bytes": 3e5, "frozen_param_count": 75_000},
                             batch_sizes=[4], device_type="cpu")
    for card in (by_count, by_bytes):
        assert (card.model.frozen_param_bytes, card.model.trainable_parameters) == (300_000, 25_000)
        assert _memory(card) == pytest.approx(_memory(both), rel=1e-12)
        assert any("frozen" in n for n in card.prediction.notes)
