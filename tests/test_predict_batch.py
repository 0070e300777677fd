"""Batched prediction: ``Predictor.cards_for`` and ``POST /predict/batch`` answer each job with the card one
``predict`` (one POST /predict) gives it, to the last bit, whatever the other jobs in the batch, and a job that
cannot be predicted gets its own error without costing the others their cards."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
#: the service tests' small feature vector
F = {"forward_macs_per_sample": 1e6, "param_count": 1e5, "param_bytes": 4e5, "activation_bytes_per_sample": 1e4,
     "num_nodes": 5}


@pytest.fixture(scope="module")
def predictor():
    from perfpredict import Predictor

    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def zoo():
    """Feature vectors of the H100 set's training architectures, one per family, and the largest MLP with 20x its
    parameters and MACs (out of distribution: the nearest profiled model answers, tests/test_fallback.py)."""
    from perfpredict.estimators.data import load_training_data

    data = load_training_data(REPO / "datasets" / "cuda_h100.csv")
    first = {}
    for a, f in zip(data.archs, data.families, strict=True):
        first.setdefault(f, a)
    i = max((i for i, f in enumerate(data.families) if f == "mlp"), key=lambda i: data.archs[i].param_bytes)
    a = data.archs[i]
    big = replace(a, param_count=20 * a.param_count, param_bytes=20 * a.param_bytes,
                  forward_macs_per_sample=20 * a.forward_macs_per_sample, name="big-mlp")
    return list(first.values()), big


def _wire(arch) -> dict:
    """An architecture as a client sends it (the service load test's way)."""
    return {k: v for k, v in arch.as_dict().items() if k not in ("family", "notes")}


def _mixed_jobs(zoo) -> list:
    """Jobs with other model sets, modes, precisions, optimizers and batch sizes, as features, ArchFeatures and
    mappings, one of them out of distribution (the nearest-profiled fallback) and one the same without it."""
    from perfpredict.predictor import CardRequest

    archs, big = zoo
    options = [dict(), dict(device_type="cpu"), dict(device_type="cuda_h200", optimizer_state_copies=2),
               dict(device_type="cpu", mode="infer"), dict(device_type="cpu_xeon_2vcpu", precision="bf16"),
               dict(optimizer_state_copies=0.0)]
    batches = [[32], [1, 8, 64, 512], [16, 4096], [8, 8, 2], [128]]
    jobs = [CardRequest(a if k % 2 else _wire(a), batches[k % len(batches)], **options[k % len(options)])
            for k, a in enumerate(archs)]
    jobs += [CardRequest(big, [1, 8, 64, 512], device_type="cuda_h100"),
             CardRequest(big, [64], device_type="cuda_h100", allow_fallback=False),
             {"features": F, "batch_sizes": [8, 32], "source": "tiny"}]
    return jobs


def _alone(predictor, job):
    """The card ``predict`` gives the job by itself."""
    from perfpredict.predictor import CardRequest

    r = CardRequest.of(job)
    card = predictor.predict(features=r.features, batch_sizes=list(r.batch_sizes), device_type=r.device_type,
                             mode=r.mode, precision=r.precision, optimizer_state_copies=r.optimizer_state_copies,
                             allow_fallback=r.allow_fallback)
    if r.source is not None:
        card.model.source = r.source
    return card


def _same(a: dict, b: dict) -> bool:
    """Two cards' dumps equal to the bit but for when each was made."""
    a, b = json.loads(json.dumps(a)), json.loads(json.dumps(b))  # float repr round-trips exactly
    for d in (a, b):
        d["run"].pop("started_at")
    return a == b


def test_each_job_gets_the_card_it_gets_alone_to_the_last_bit(predictor, zoo):
    from perfpredict.predictor import CardError

    jobs = _mixed_jobs(zoo)
    cards = predictor.cards_for(jobs)
    assert len(cards) == len(jobs) and not any(isinstance(c, CardError) for c in cards)
    methods = {c.prediction.method for c in cards}
    assert methods == {"estimator", "nearest_profiled"}  # the fallback is batched too
    assert len({c.prediction.model_set for c in cards}) >= 5  # grouped by model set
    for job, card in zip(jobs, cards, strict=True):
        assert _same(card.model_dump(mode="json"), _alone(predictor, job).model_dump(mode="json")), job
    # and in another order, among other neighbours: the same cards
    again = predictor.cards_for(jobs[::-1])[::-1]
    assert all(_same(a.model_dump(mode="json"), b.model_dump(mode="json")) for a, b in zip(cards, again, strict=True))


def test_the_forest_and_the_baselines_answer_a_row_as_they_do_alone(predictor):
    """What makes the above hold: each row's sums are its own (BLAS's matrix-vector product summed a row in an
    order that depended on the number of rows, and 124 of 500 H100 rows' memory came out some ulps apart)."""
    from perfpredict.estimators.data import load_training_data
    from perfpredict.estimators.design import design_matrix

    data = load_training_data(REPO / "datasets" / "cuda_h100.csv")
    ms = predictor.sets["cuda_h100"]
    rows = list(zip((ms.with_graph_counts(a) for a in data.archs[:300]), (int(b) for b in data.batch[:300])))
    X = design_matrix(rows, device_kind="cuda")
    for name, t in ms.targets.items():
        y, q = t.predict(X)
        for i in range(0, len(X), 7):
            y1, q1 = t.predict(X[i:i + 1])
            assert y1[0] == y[i] and np.array_equal(q1[0], q[i]), (name, i)


def test_a_bad_job_gets_its_error_and_the_others_their_cards(predictor, zoo):
    from perfpredict.errors import UsageError
    from perfpredict.predictor import CardError, CardRequest

    good = _mixed_jobs(zoo)[:3]
    bad = {1: CardRequest(F | {"param_bytes": float("nan")}), 3: CardRequest(F, [0]),
           4: CardRequest(F, device_type="tpu_v5"), 6: CardRequest(F | {"forward_macs_per_sample": 0,
                                                                      "param_count": 0}),
           7: {"features": F, "batch_size": 32}, 8: "model.py"}
    jobs, it = [], iter(good)
    for k in range(9):
        jobs.append(bad[k] if k in bad else next(it))
    out = predictor.cards_for(jobs)
    for k, why in {1: "param_bytes", 3: "batch sizes", 4: "tpu_v5", 6: "no computation", 7: "batch_size",
                   8: "CardRequest"}.items():
        assert isinstance(out[k], CardError) and out[k].index == k, out[k]
        assert str(out[k]).startswith(f"job {k}: ") and why in str(out[k]), str(out[k])
        assert isinstance(out[k].error, UsageError)
    good_out = [c for k, c in enumerate(out) if k not in bad]
    for job, card in zip(good, good_out, strict=True):
        assert _same(card.model_dump(mode="json"), _alone(predictor, job).model_dump(mode="json"))
    with pytest.raises(UsageError, match="list of CardRequests"):
        predictor.cards_for(CardRequest(F))
    assert predictor.cards_for([]) == []


# -- HTTP -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def client(predictor):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from perfpredict.service import create_app

    return TestClient(create_app(predictor, max_upload_bytes=200_000), raise_server_exceptions=False)


def test_the_batch_route_answers_each_job_as_predict_does(client, zoo):
    archs, big = zoo
    bodies = [{"features": _wire(archs[0]), "batch_sizes": [8, 64]},
              {"features": F, "device_type": "cpu", "mode": "INFER"},
              {"features": _wire(big), "batch_sizes": [1, 512], "device_type": "cuda_h100"},
              {"features": _wire(archs[1]), "optimizer_state_copies": 2, "precision": "bf16",
               "device_type": "cpu_xeon_2vcpu"}]
    r = client.post("/predict/batch", json={"jobs": bodies})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["errors"] == 0 and [x["status"] for x in body["results"]] == [200] * 4
    assert body["results"][2]["card"]["prediction"]["method"] == "nearest_profiled"
    for one, res in zip(bodies, body["results"], strict=True):
        alone = client.post("/predict", json=one)
        assert alone.status_code == 200, alone.text
        assert _same(res["card"], alone.json())
    assert "POST /predict/batch" in client.get("/").json()["endpoints"]


def test_a_bad_job_is_a_422_in_its_place_not_a_500(client):
    jobs = [{"features": F}, {"features": F | {"param_bytes": "NaN-placeholder"}}, {"features": F, "batch_size": 8},
            {"features": F, "device_type": "tpu_v5"}, 7, {"features": F, "batch_sizes": [16]}]
    raw = json.dumps({"jobs": jobs}).replace('"NaN-placeholder"', "NaN")  # what a client's json.dumps sends
    r = client.post("/predict/batch", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["status"] for x in res] == [200, 422, 422, 422, 422, 200] and r.json()["errors"] == 4
    assert res[1]["detail"][0]["loc"] == ["body", "jobs", 1, "features", "param_bytes"]
    assert res[2]["detail"][0]["loc"] == ["body", "jobs", 2, "batch_size"]  # a misspelt key is refused, as /predict
    assert isinstance(res[3]["detail"], str) and "tpu_v5" in res[3]["detail"]
    assert res[4]["detail"][0]["loc"] == ["body", "jobs", 4]
    assert [p["batch_size"] for p in res[5]["card"]["prediction"]["points"]] == [16]


def test_the_batch_route_is_capped(client):
    from perfpredict.service import MAX_BATCH_JOBS

    assert client.post("/predict/batch", json={"jobs": []}).status_code == 422
    r = client.post("/predict/batch", json={"jobs": [{"features": {"param_count": 1}}] * (MAX_BATCH_JOBS + 1)})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "jobs"], r.text
    # the body is held to the service's upload limit, as every route's (200 kB here)
    r = client.post("/predict/batch", json={"jobs": [{"features": F, "device_type": "x" * 300_000}]})
    assert r.status_code == 413, r.text


def test_the_batch_route_caps_the_rows_it_predicts(client, monkeypatch):
    """1,000 jobs at 64 batch sizes each held a worker 33 s: the batch sizes summed over the jobs are capped, the
    whole request refused in one line before anything is predicted."""
    from perfpredict import service

    monkeypatch.setattr(service, "MAX_BATCH_ROWS", 5)  # read at request time; the real cap is 16,384
    r = client.post("/predict/batch", json={"jobs": [{"features": F, "batch_sizes": [8, 16, 32]}] * 2})
    assert r.status_code == 422 and "6 batch sizes in all" in r.json()["detail"] and "at most 5" in r.json()["detail"]
    # an invalid job's batch sizes are not counted: it gets its own 422 and the others their cards
    r = client.post("/predict/batch", json={"jobs": [{"features": F, "batch_sizes": [8, 16, 32]},
                                                     {"features": F, "batch_sizes": [8, 0]}]})
    assert r.status_code == 200 and [x["status"] for x in r.json()["results"]] == [200, 422]
