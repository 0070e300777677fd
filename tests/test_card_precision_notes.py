"""A card's precision and its notes. A bf16 job predicted where no bf16 set exists (the H100) fell back to fp32,
and its card said only ``run.precision`` "fp32": predicted again for a CPU with a bf16 set (cpu_xeon_2vcpu), the
card took the fp32 set while its model file takes the bf16 one. The fallback note said "the model file asks for"
also for a prediction from a card. And a prediction without saved-tensor counts said its intervals were "the
wider ones calibrated for estimated counts" also on an inference set, whose two margins are equal."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfpredict import Predictor
from tests.test_left_alone47_fixes import BF16_MLP

REPO = Path(__file__).resolve().parents[1]
XEON = "cpu_xeon_2vcpu"

FP32_MLP = BF16_MLP.replace('PRECISION = "bf16"', "")


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


def _times(card) -> list[float]:
    return [p.iter_time_s for p in card.prediction.points]


def test_a_fallen_back_card_remembers_the_precision_its_job_asked_for(predictor, write_model) -> None:
    """The H100's card keeps run.precision fp32 (what it predicts) and records the asked bf16, which picks the
    Xeon's bf16 set again, as the model file does (and the same times); an explicit precision still decides."""
    path = str(write_model(BF16_MLP))
    h100 = predictor.predict(path, batch_sizes=[16, 64], device_type="cuda_h100")
    assert h100.run.precision == "fp32" and h100.prediction.asked_precision == "bf16"
    from perfpredict.card import PerformanceCard

    h100 = PerformanceCard.model_validate_json(h100.model_dump_json())  # survives a save
    on_xeon = predictor.predict(features=h100, batch_sizes=[16, 64], device_type=XEON)
    from_file = predictor.predict(path, batch_sizes=[16, 64], device_type=XEON)
    assert from_file.prediction.model_set == on_xeon.prediction.model_set == f"{XEON}_bf16"
    assert on_xeon.run.precision == "bf16" and on_xeon.prediction.asked_precision is None
    assert _times(on_xeon) == _times(from_file)
    assert predictor.predict_values(h100, [16], device_type=XEON)["precision"] == "bf16"
    assert predictor.predict(features=h100, batch_sizes=[16], device_type=XEON,
                             precision="fp32").prediction.model_set == XEON
    # predicted on the H100 again it falls back again and still remembers
    again = predictor.predict(features=h100, batch_sizes=[16], device_type="cuda_h100")
    assert again.prediction.asked_precision == "bf16"
    # a job that got its own precision's set, or asked for none, records nothing
    assert from_file.prediction.asked_precision is None
    fp32 = predictor.predict(str(write_model(FP32_MLP)), batch_sizes=[16], device_type="cuda_h100")
    assert fp32.prediction.asked_precision is None


def test_the_fallback_note_names_where_the_precision_came_from(predictor, write_model) -> None:
    path = str(write_model(BF16_MLP))
    from_file = predictor.predict(path, batch_sizes=[16], device_type="cuda_h100")
    assert any(n.startswith("the model file asks for bf16 mixed precision") for n in from_file.prediction.notes)
    xeon_card = predictor.predict(path, batch_sizes=[16], device_type=XEON)
    from_card = predictor.predict(features=xeon_card, batch_sizes=[16], device_type="cuda_h100")
    said = [n for n in from_card.prediction.notes if "mixed precision" in n]
    assert len(said) == 1 and said[0].startswith("the card asks for bf16 mixed precision"), said
    assert "model file" not in said[0]


def _without_saved_counts(card):
    return card.model_copy(update={"features": card.features.model_copy(
        update={"saved_bytes_per_sample": None, "saved_cpu_bytes_per_sample": None})})


@pytest.mark.parametrize("device_type, wider", [(f"{XEON}_infer", False), (XEON, True)])
def test_the_estimated_counts_note_claims_wider_intervals_only_where_they_are(predictor, write_model,
                                                                             device_type, wider) -> None:
    """The inference sets' margins for estimated counts equal their exact ones (so their intervals are not
    wider); a training set's memory margin is wider, and the note names the targets it widens."""
    ms = predictor.model_set(device_type)
    widened = {n for n, t in ms.targets.items() if t.interval_log_margin_estimated_counts is not None
               and t.interval_log_margin_estimated_counts > t.interval_log_margin}
    assert bool(widened) is wider and (not wider or "peak_memory" in widened)
    card = _without_saved_counts(predictor.predict(str(write_model(FP32_MLP)), batch_sizes=[16],
                                                   device_type=device_type))
    again = predictor.predict(features=card, batch_sizes=[16], device_type=device_type)
    said = [n for n in again.prediction.notes if n.startswith("saved-tensor bytes estimated")]
    assert len(said) == 1
    assert ("wider" in said[0]) is wider, said[0]
    if wider:
        assert "peak memory" in said[0] and "iter time" not in said[0], said[0]
