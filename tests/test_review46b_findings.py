"""Review of the optimizer-state charge (schema 1.24): a probe that refused capturable/differentiable optimizers,
a wholly frozen model file's training card that got a "could not be probed" note, and a /max-batch test that
could not tell the route dropping optimizer_state_copies."""

from pathlib import Path

import pytest
import torch

from perfpredict import Predictor

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "trained_models"

MLP = """
import torch
import torch.nn as nn

def build_model():
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))

def example_inputs(batch_size):
    return torch.randn(batch_size, 256)
"""


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(MODELS)


@pytest.mark.parametrize(("make", "copies"), [
    (lambda p: torch.optim.AdamW(p, lr=1e-3, capturable=True), 2.0),
    (lambda p: torch.optim.Adam(p, lr=1e-3, differentiable=True), 2.0),
    (lambda p: torch.optim.NAdam(p, capturable=True), 2.0),
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, differentiable=True), 1.0),
])
def test_the_probe_counts_a_capturable_or_differentiable_optimizer(make, copies) -> None:
    """capturable=True (CUDA graphs) and differentiable=True change how the step runs, not the state it keeps;
    the probe's CPU leaf tensor failed both, and the job was charged one copy with a note."""
    from perfpredict.workload.spec import optimizer_state_copies

    opt = make(torch.nn.Linear(8, 4).parameters())
    assert optimizer_state_copies(opt) == copies
    assert not opt.state


def test_a_wholly_frozen_model_file_gets_no_probe_failure_note(predictor, write_model) -> None:
    """Nothing trains, so there is no optimizer state to charge: the default make_optimizer's refusal of a model
    with nothing to train was reported as an optimizer that "could not be probed"."""
    path = write_model(MLP + "\n_build = build_model\n\ndef build_model():\n    return _build().requires_grad_(False)\n")
    card = predictor.predict(str(path), batch_sizes=[8], device_type="cpu")
    assert card.features.optimizer_state_copies == 1.0
    assert not any("could not be probed" in n for n in card.prediction.notes), card.prediction.notes


def test_max_batch_route_takes_the_copies(predictor, write_model) -> None:
    """/max-batch with two copies fits strictly fewer samples than without (the old test's <= held as well
    when the route dropped the field)."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from perfpredict.estimators.arch import from_workload
    from perfpredict.service import create_app

    F = {k: v for k, v in from_workload(str(write_model(MLP))).as_dict().items() if v is not None}
    client = TestClient(create_app(predictor), raise_server_exceptions=False)
    body = {"features": F, "memory_limit_bytes": 2**30, "device_type": "cpu"}
    r1 = client.post("/max-batch", json=body)
    r2 = client.post("/max-batch", json={**body, "optimizer_state_copies": 2})
    r0 = client.post("/max-batch", json={**body, "optimizer_state_copies": 0})
    assert r0.status_code == r1.status_code == r2.status_code == 200, r2.text
    assert r2.json()["largest_ok"] < r1.json()["largest_ok"] < r0.json()["largest_ok"]


@pytest.mark.parametrize("copies", [1e300, 1e3])
def test_a_cards_copies_past_the_callers_range_are_refused_readably(predictor, tmp_path, copies) -> None:
    """The card schema bounds features.optimizer_state_copies below only: a card saying 1e300 copies reached the
    memory charge and failed inside the card (OverflowError: cannot convert float infinity to integer), and 1000
    predicted 190 GB; the caller's own value is refused past 100."""
    import json

    from perfpredict.card import PerformanceCard
    from perfpredict.errors import UsageError

    F = dict(name="x", forward_macs_per_sample=5e7, param_count=50_000_000, param_bytes=200e6,
             activation_bytes_per_sample=4e6, num_nodes=20, input_bytes_per_sample=4000)
    raw = json.loads(predictor.predict(features=F, batch_sizes=[8], device_type="cpu").model_dump_json())
    raw["features"]["optimizer_state_copies"] = copies
    path = tmp_path / "card.json"
    path.write_text(json.dumps(raw))
    card = PerformanceCard.load(path)
    with pytest.raises(UsageError, match="features.optimizer_state_copies must be a number from 0 to 100"):
        predictor.predict(features=card, batch_sizes=[8], device_type="cpu")
    with pytest.raises(UsageError, match="features.optimizer_state_copies must be a number from 0 to 100"):
        predictor.predict_values(card, [8], device_type="cpu")
