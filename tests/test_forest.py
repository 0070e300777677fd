"""The numpy tree evaluator reaches XGBoost's own leaves and predictions, or declines to compile."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xgboost as xgb

from perfpredict.estimators.arch import ArchFeatures
from perfpredict.estimators.forest import compile_booster, compile_model_file, compile_model_json

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "trained_models").glob("*/*.xgb.json"))


def _probe_rows(n_features: int, seed: int) -> np.ndarray:
    """Rows spread over the features' range, 5% missing."""
    rng = np.random.default_rng(seed)
    X = rng.normal(5.0, 3.0, (1500, n_features))
    X[rng.random(X.shape) < 0.05] = np.nan
    return X


def _check_same(booster: xgb.Booster, X: np.ndarray) -> None:
    forest = compile_booster(booster)
    assert forest is not None
    # rows whose value sits exactly on a split condition: XGBoost sends ``x < cond`` left, ``x == cond`` right
    internal = np.flatnonzero(forest.left != np.arange(len(forest.left)))[:300]
    on_split = np.tile(X[:1], (len(internal), 1))
    on_split[np.arange(len(internal)), forest.feature[internal]] = forest.threshold[internal]
    X = np.vstack([X, on_split])
    leaves = booster.predict(xgb.DMatrix(X), pred_leaf=True)
    np.testing.assert_array_equal(forest.leaf_ids(X), leaves.reshape(len(X), -1))
    ref = booster.inplace_predict(X)
    np.testing.assert_allclose(forest.inplace_predict(X), ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_boosters_reach_xgboosts_leaves(path):
    booster = xgb.Booster()
    booster.load_model(path)
    X = _probe_rows(booster.num_features(), 0)
    _check_same(booster, X)
    assert compile_model_file(path).num_outputs == booster.inplace_predict(X[:1]).size


def _train(objective: dict, seed: int = 0, depth: int = 6, rounds: int = 60) -> tuple[xgb.Booster, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(600, 8))
    y = X[:, 0] * 2 + np.sin(3 * X[:, 1]) + np.where(X[:, 2] > 0, 1.5, -0.5) + rng.normal(0, 0.1, 600)
    X[rng.random(X.shape) < 0.1] = np.nan  # missing values in training: default directions differ per split
    params = {"max_depth": depth, "eta": 0.2, "seed": seed, **objective}
    return xgb.train(params, xgb.DMatrix(X, label=y), rounds), X


@pytest.mark.parametrize("objective", [
    {"objective": "reg:squarederror"},
    {"objective": "reg:quantileerror", "quantile_alpha": np.array([0.1, 0.5, 0.9])},
    {"objective": "reg:absoluteerror"},
], ids=["squared", "multi-quantile", "absolute"])
def test_freshly_trained_boosters_agree(objective):
    booster, X = _train(objective)
    _check_same(booster, X)
    _check_same(booster, _probe_rows(8, 1) - 5.0)


def test_uneven_depth_trees_and_a_single_row():
    booster, X = _train({"objective": "reg:squarederror", "max_leaves": 5, "grow_policy": "lossguide"},
                        depth=0, rounds=30)
    forest = compile_booster(booster)
    assert forest.depth >= 2
    for row in X[:20]:
        assert forest.inplace_predict(row[None, :])[0] == pytest.approx(
            float(booster.inplace_predict(row[None, :])[0]), rel=1e-5, abs=1e-5)


def test_declines_what_it_does_not_cover():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4))
    logistic = xgb.train({"objective": "binary:logistic"}, xgb.DMatrix(X, label=(X[:, 0] > 0)), 5)
    assert compile_booster(logistic) is None  # a link function: not a raw margin
    squared = xgb.train({"objective": "reg:squarederror"}, xgb.DMatrix(X, label=X[:, 0]), 5)
    model = json.loads(squared.save_raw("json").decode())
    model["learner"]["attributes"]["best_iteration"] = "2"
    assert compile_model_json(model) is None  # XGBoost may stop at best_iteration
    model["learner"]["attributes"].pop("best_iteration")
    model["learner"]["gradient_booster"]["model"]["trees"][0]["split_type"][0] = 1
    assert compile_model_json(model) is None  # a categorical split


def test_unreadable_files_are_left_to_xgboost(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"learner": {"objective": {"name": "reg:squarederror"}}}')  # another schema
    assert compile_model_file(bad) is None
    bad.write_bytes(b"\x00\xffnot json")
    assert compile_model_file(bad) is None


def test_wrong_width_is_refused():
    booster, X = _train({"objective": "reg:squarederror"}, rounds=3)
    with pytest.raises(ValueError, match=r"\(n, 8\)"):
        compile_booster(booster).inplace_predict(X[:, :7])


def test_predictor_targets_match_xgboosts_predictor():
    from perfpredict import Predictor
    from perfpredict.estimators.design import design_matrix

    fast, ref = Predictor.load(compile_trees=True), Predictor.load(compile_trees=False)
    for name, ms in fast.sets.items():
        assert all(type(t.point).__name__ == "CompiledForest" for t in ms.targets.values() if t.point is not None)
        archs = [ArchFeatures.from_dict(p["features"]) for p in list(ms.profiled.values())[:10]]
        X = design_matrix([(ms.with_graph_counts(a), b) for a in archs for b in (8, 64)], ms.device_kind)
        for tname, t in ms.targets.items():
            (y, q), (y_ref, q_ref) = t.predict(X), ref.sets[name].targets[tname].predict(X)
            np.testing.assert_allclose(y, y_ref, rtol=1e-4)
            np.testing.assert_allclose(q, q_ref, rtol=1e-4)
