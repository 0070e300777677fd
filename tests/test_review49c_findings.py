"""Review of the batched-prediction commits (cards_for, TermComponents, POST /predict/batch's row cap)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: the service tests' small feature vector
F = {"forward_macs_per_sample": 1e6, "param_count": 1e5, "param_bytes": 4e5, "activation_bytes_per_sample": 1e4,
     "num_nodes": 5}


@pytest.fixture(scope="module")
def client():
    from fastapi.testclient import TestClient

    from perfpredict import Predictor
    from perfpredict.service import create_app

    return TestClient(create_app(Predictor.load(REPO / "trained_models")))


def test_the_batch_row_cap_counts_a_jobs_repeated_batch_sizes_once(client, monkeypatch):
    """A card has one point per distinct batch size (cards_for, as /predict, predicts [32, 32] as one row), so
    the cap on the rows a request predicts counts each job's distinct sizes: 300 jobs at [32] x 64 predict 300
    rows, and were refused as 19,200."""
    from perfpredict import service

    monkeypatch.setattr(service, "MAX_BATCH_ROWS", 5)  # read at request time; the real cap is 16,384
    r = client.post("/predict/batch", json={"jobs": [{"features": F, "batch_sizes": [32] * 4},
                                                     {"features": F, "batch_sizes": [8, 16, 8, 16]}]})
    assert r.status_code == 200, r.text
    points = [[p["batch_size"] for p in x["card"]["prediction"]["points"]] for x in r.json()["results"]]
    assert points == [[32], [8, 16]]
    # past the cap, the message counts what is predicted
    r = client.post("/predict/batch", json={"jobs": [{"features": F, "batch_sizes": [32, 32, 64]}] * 3})
    assert r.status_code == 422
    assert "6 batch sizes in all (each job's distinct ones)" in r.json()["detail"] and "at most 5" in r.json()["detail"]


@pytest.mark.parametrize("bad,word", [(memoryview(b"  "), "string"), ({32: 1}, "mapping")])
def test_a_memoryview_or_a_mapping_is_no_list_of_batch_sizes(bad, word):
    """memoryview(b"  ") was read as the batch sizes [32, 32] and {32: 1} as [32], as b"32" was as [50, 51]."""
    from perfpredict import Predictor
    from perfpredict.errors import UsageError

    pred = Predictor.load(REPO / "trained_models")
    with pytest.raises(UsageError, match=f"batch_sizes must be a list of integers .*{word}"):
        pred.predict_values(F, bad)
