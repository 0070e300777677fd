"""Benchmark: a scheduler's round of cards, one call per job against one batched call, in Python and over HTTP.

Jobs are feature vectors of the H100 set's training architectures (the service load test's), one batch size each,
for the default (CUDA) model set. For N = 1, 10, 100, 500 jobs it times, alternating the two ways in each of
``--repeats`` rounds so that both see the same load: ``Predictor.predict(features=...)`` once per job against one
``Predictor.cards_for`` for all of them, and N ``POST /predict`` requests against one ``POST /predict/batch``,
through FastAPI's TestClient in this process (the ASGI app, JSON encoding and validation included; no socket).
It prints the median time per card of each way and their ratio, and checks that the batched cards are the
one-by-one cards to the last bit.

    python benchmarks/predict_batch.py [--repeats 5] [--sizes 1,10,100,500]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _feature_vectors(n: int) -> list[tuple[dict, int]]:
    """``n`` (feature mapping, batch size) jobs: the H100 dataset's rows, cycled."""
    from perfpredict.estimators.data import load_training_data

    data = load_training_data(REPO / "datasets" / "cuda_h100.csv")
    rows = [({k: v for k, v in a.as_dict().items() if k not in ("family", "notes")}, int(b))
            for a, b in zip(data.archs, data.batch, strict=True)]
    return [rows[i % len(rows)] for i in range(n)]


def _seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _without_time(card: dict) -> str:
    card["run"].pop("started_at")
    return json.dumps(card, sort_keys=True)


def main(argv: list[str] | None = None) -> None:
    from perfpredict.script_args import describe, positive_int

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--repeats", type=positive_int, default=5, help="alternating rounds per size (median)")
    ap.add_argument("--sizes", default="1,10,100,500", help="comma-separated job counts")
    args = ap.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
        if any(s < 1 for s in sizes):
            raise ValueError
    except ValueError:
        ap.error(f"argument --sizes: give comma-separated whole numbers >= 1, got {args.sizes!r}")

    from fastapi.testclient import TestClient

    from perfpredict import Predictor
    from perfpredict.predictor import CardError, CardRequest
    from perfpredict.service import create_app

    pred = Predictor.load(REPO / "trained_models")
    client = TestClient(create_app(pred))
    jobs_all = _feature_vectors(max(sizes))
    pred.cards_for([CardRequest(f, [b]) for f, b in jobs_all[:20]])  # warm (imports, first calls)
    client.post("/predict", json={"features": jobs_all[0][0]})
    print(f"model set: {pred.model_set().name}; {args.repeats} alternating rounds per size, median per card")
    print(f"{'N':>5} | {'Python one-by-one':>17} {'cards_for':>10} {'ratio':>6} | "
          f"{'HTTP N x /predict':>17} {'/predict/batch':>14} {'ratio':>6}")
    for n in sizes:
        jobs = jobs_all[:n]
        requests = [CardRequest(f, [b]) for f, b in jobs]
        bodies = [{"features": f, "batch_sizes": [b]} for f, b in jobs]
        times: dict[str, list[float]] = {k: [] for k in ("one", "batch", "http_one", "http_batch")}
        for _ in range(args.repeats):
            times["one"].append(_seconds(lambda: [pred.predict(features=f, batch_sizes=[b]) for f, b in jobs]))
            times["batch"].append(_seconds(lambda: pred.cards_for(requests)))
            times["http_one"].append(_seconds(lambda: [client.post("/predict", json=b).raise_for_status()
                                                       for b in bodies]))
            times["http_batch"].append(_seconds(lambda: client.post("/predict/batch", json={"jobs": bodies})
                                                .raise_for_status()))
        ms = {k: statistics.median(v) / n * 1e3 for k, v in times.items()}
        print(f"{n:>5} | {ms['one']:>14.3f} ms {ms['batch']:>7.3f} ms {ms['one'] / ms['batch']:>5.2f}x | "
              f"{ms['http_one']:>14.3f} ms {ms['http_batch']:>11.3f} ms {ms['http_one'] / ms['http_batch']:>5.2f}x")

    # the batched cards are the one-by-one cards (but for when each was made), over HTTP too
    jobs = jobs_all[:max(sizes)]
    batched = pred.cards_for([CardRequest(f, [b]) for f, b in jobs])
    assert not any(isinstance(c, CardError) for c in batched)
    same = sum(_without_time(c.model_dump(mode="json")) ==
               _without_time(pred.predict(features=f, batch_sizes=[b]).model_dump(mode="json"))
               for c, (f, b) in zip(batched, jobs, strict=True))
    some = jobs[:50]
    http = client.post("/predict/batch", json={"jobs": [{"features": f, "batch_sizes": [b]} for f, b in some]})
    same_http = sum(_without_time(r["card"]) == _without_time(client.post("/predict", json={
        "features": f, "batch_sizes": [b]}).json()) for r, (f, b) in zip(http.json()["results"], some, strict=True))
    print(f"\nbatched == one-by-one, bit for bit: {same}/{len(jobs)} cards (Python), {same_http}/{len(some)} (HTTP)")


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
