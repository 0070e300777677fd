"""The far-batch check: points measured 2-64x past the largest trained batch size are never trained on, and the
benchmark scores each against the model set of its own training set and device, with the q90 recovered with and
without the per-doubling margin."""

from __future__ import annotations

import csv
import math

import pytest

from tests.conftest import REPO, load_script

SCRIPT = REPO / "benchmarks" / "memory_past_trained_batches.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def predictor():
    from perfpredict import Predictor

    return Predictor.load()


def test_far_batch_files_are_committed_and_never_trained_on(bench):
    from perfpredict.estimators.data import training_datasets

    far = bench.far_batch_files(REPO / "datasets")
    assert far, "no datasets/*_far_batch.csv"
    trained = {p.name for p in training_datasets(REPO / "datasets")}
    assert not trained & {p.name for p in far}
    for f in far:  # each names a training set that exists, and carries its provenance
        assert f.with_name(f.name.replace("_far_batch", "")).name in trained
        assert f.with_name(f.stem + ".meta.json").exists()


def test_every_far_point_is_scored_against_its_own_devices_set(bench, predictor):
    for f in bench.far_batch_files(REPO / "datasets"):
        s = bench.coverage(f, predictor)
        assert s["same_device"], s
        with open(f, newline="") as fh:
            ok = [r for r in csv.DictReader(fh) if r["status"] == "ok"]
        assert s["targets"], "no memory target with a per-doubling margin"
        for name, t in s["targets"].items():
            groups = t["per_distance"]
            assert sum(g["points"] for g in groups) == len({(r["config"], r["batch_size"]) for r in ok})
            # every point lies past the trained sizes, so every q90 was widened, by growth ** doublings
            assert all(g["doublings"] >= 1 for g in groups)
            assert t["growth_per_doubling"] > 1
            for g in groups:
                assert g["misses_with_margin"] <= g["misses_without"]
                assert 0 < g["median_measured_over_q90"] <= g["max_measured_over_q90"]
                assert math.isfinite(g["median_measured_over_median"])


def test_a_far_file_of_another_set_name_is_refused(bench, predictor, tmp_path):
    src = bench.far_batch_files(REPO / "datasets")[0]
    for suffix in (".csv", ".meta.json"):
        (tmp_path / f"cpu_nowhere_far_batch{suffix}").write_bytes(src.with_name(src.stem + suffix).read_bytes())
    (tmp_path / "zoo_features.csv").write_bytes((REPO / "datasets" / "zoo_features.csv").read_bytes())
    with pytest.raises(SystemExit, match="no shipped model set 'cpu_nowhere'"):
        bench.coverage(tmp_path / "cpu_nowhere_far_batch.csv", predictor)
