"""One prediction computes each physical baseline's terms once per design matrix (``TermComponents``), not once
per target, quantile and prior column (11 times for an H100 card), with the same bits; ``POST /colocation``
predicts its pair with one ``cards_for``."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def predictor():
    from perfpredict import Predictor

    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def archs():
    """Three H100 training architectures (with their kernel rows) and an MLP with 20x the parameters and MACs of
    the largest (out of distribution: the nearest profiled model answers)."""
    from perfpredict.estimators.data import load_training_data

    data = load_training_data(REPO / "datasets" / "cuda_h100.csv")
    picked = [data.archs[i] for i in (0, len(data.archs) // 2, len(data.archs) - 1)]
    i = max((i for i, f in enumerate(data.families) if f == "mlp"), key=lambda i: data.archs[i].param_bytes)
    a = data.archs[i]
    big = replace(a, param_count=20 * a.param_count, param_bytes=20 * a.param_bytes,
                  forward_macs_per_sample=20 * a.forward_macs_per_sample, name="big-mlp")
    return picked, big


@pytest.fixture
def calls(monkeypatch):
    """Each ``baseline_components`` call as (the matrix's bytes, its shape, the terms)."""
    from perfpredict.estimators import models

    seen: list[tuple[bytes, tuple[int, ...], tuple]] = []
    inner = models.baseline_components

    def counted(X, terms=models.MEMORY_TERMS):
        X = np.asarray(X, float)
        seen.append((X.tobytes(), X.shape, terms))
        return inner(X, terms)

    monkeypatch.setattr(models, "baseline_components", counted)
    monkeypatch.setattr("perfpredict.predictor.baseline_components", counted, raising=False)  # imported there before
    return seen


SETS = [dict(), dict(device_type="cuda_h200", optimizer_state_copies=2.0), dict(device_type="cpu_xeon_2vcpu"),
        dict(device_type="cpu_xeon_2vcpu_infer"), dict(device_type="cpu", precision="bf16")]


@pytest.mark.parametrize("options", SETS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_one_card_computes_each_term_set_once_per_design_matrix(predictor, archs, calls, options):
    picked, big = archs
    for arch, batch_sizes in ((picked[0], [32]), (picked[1], [1, 8, 512]), (picked[2], [64]), (big, [16, 32])):
        calls.clear()
        card = predictor.predict(features=arch, batch_sizes=batch_sizes, **options)
        assert calls, "the card rests on no physical baseline"
        # the fallback's job rows without kernel rows are a matrix of their own, which can hold the same numbers
        # as the estimators' (the MLP's do): at most twice there
        most = 1 if card.prediction.method == "estimator" else 2
        again = {k[2]: n for k, n in Counter(calls).items() if n > most}
        assert not again, f"{card.prediction.model_set} ({card.prediction.method}): term sets computed again " \
                          f"on the same rows: {again}"
        if card.prediction.method == "estimator":  # one design matrix: one call per term set its targets use
            assert len(calls) == len({terms for _, _, terms in calls})


def test_cards_for_computes_each_term_set_once_for_all_jobs(predictor, archs, calls):
    from perfpredict.predictor import CardRequest

    picked, _ = archs
    predictor.cards_for([CardRequest(picked[0], [32])])
    one = len(calls)
    calls.clear()
    cards = predictor.cards_for([CardRequest(a, bs) for a in picked for bs in ([32], [4, 256])])
    assert all(c.prediction.method == "estimator" for c in cards)
    assert len(calls) == one == len({terms for _, _, terms in calls})
    assert {shape[0] for _, shape, _ in calls} == {len(picked) * 3}  # every job's rows at once


def test_term_components_rows_are_the_rows_own_components_and_read_only(archs):
    from perfpredict.estimators.design import design_matrix
    from perfpredict.estimators.models import (
        BUSY_TERMS,
        MEMORY_TERMS,
        TermComponents,
        baseline_components,
        time_terms,
    )

    picked, big = archs
    X = design_matrix([(a, b) for a in (*picked, big) for b in (1, 32, 4096)], device_kind="cuda")
    comps = TermComponents(X)
    for terms in (MEMORY_TERMS, BUSY_TERMS, time_terms("cuda")):
        whole = comps(terms)
        assert comps(terms) is whole  # computed once
        assert np.array_equal(whole, baseline_components(X, terms))
        for sel in (slice(3, 7), np.array([8, 0, 5]), [11]):
            part = comps.rows(sel)(terms)
            assert part.tobytes() == baseline_components(X[sel], terms).tobytes()
            with pytest.raises(ValueError, match="read-only"):
                part[0, 0] = 1.0
        with pytest.raises(ValueError, match="read-only"):
            whole[0, 0] = 1.0


def test_colocation_route_predicts_its_pair_in_one_batch(predictor, archs, monkeypatch):
    from fastapi.testclient import TestClient

    from perfpredict.service import create_app

    picked, _ = archs
    wire = [{k: v for k, v in a.as_dict().items() if k not in ("family", "notes")} for a in picked[:2]]
    expected = predictor.colocation(predictor.card_for(picked[0], [32], device_type="cuda", source="features"),
                                    predictor.card_for(picked[1], [8], device_type="cuda", source="features"))
    batches = []
    inner = predictor.cards_for
    monkeypatch.setattr(predictor, "cards_for", lambda jobs: batches.append(len(jobs)) or inner(jobs))
    monkeypatch.setattr(predictor, "card_for", None)  # not called one job at a time
    client = TestClient(create_app(predictor))
    r = client.post("/colocation", json={"jobs": [{"features": wire[0], "batch_size": 32},
                                                  {"features": wire[1], "batch_size": 8}]})
    assert r.status_code == 200, r.text
    assert batches == [2]
    assert json.dumps(r.json(), sort_keys=True) == json.dumps(expected.model_dump(mode="json"), sort_keys=True)
    # a job that cannot be predicted is the route's 422, as before
    nothing = {**wire[0], "forward_macs_per_sample": 0, "forward_macs_fixed": 0, "param_count": 0}
    r = client.post("/colocation", json={"jobs": [{"features": wire[1]}, {"features": nothing}]})
    assert r.status_code == 422 and "no computation" in r.json()["detail"]
