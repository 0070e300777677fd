"""A saved XGBoost booster evaluated with numpy, all trees at once, for one-row latency.

Why: the Predictor answers one job at a time, and XGBoost's own predictor spends ~0.45 ms on one row
of a 400-tree model on this VM (mostly per-call set-up and tree-by-tree traversal). A card calls up to
eight boosters, which alone broke the < 5 ms target. Here every tree advances one level per numpy step,
so a whole ensemble costs about ``depth`` vectorised gathers.

The semantics are XGBoost's own for numeric splits: the feature value and the split condition compare
in float32 (``x < cond`` goes left), a missing value (NaN) follows ``default_left``, a leaf's value is
its ``split_conditions`` entry, and output ``t`` sums the trees whose ``tree_info`` is ``t`` plus that
output's ``base_score``. Only identity-link regression objectives are compiled; anything else
(categorical splits, vector leaves, other objectives, an early-stopping ``best_iteration``) returns
``None`` from :func:`compile_booster`, and the caller keeps XGBoost's predictor. Agreement with
``Booster.inplace_predict`` is checked in ``tests/test_forest.py`` on the shipped models.
"""

from __future__ import annotations

import json
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

#: objectives whose prediction is the raw margin (no link function)
IDENTITY_OBJECTIVES = frozenset({"reg:squarederror", "reg:quantileerror", "reg:absoluteerror",
                                 "reg:pseudohubererror"})


class CompiledForest:
    """All trees' nodes in flat arrays (tree ``t``'s node ``j`` at ``roots[t] + j``); leaves loop onto
    themselves, so stepping every tree ``depth`` times lands each on its leaf."""

    def __init__(self, feature: np.ndarray, threshold: np.ndarray, left: np.ndarray, right: np.ndarray,
                 default_left: np.ndarray, value: np.ndarray, roots: np.ndarray, tree_output: np.ndarray,
                 base_score: np.ndarray, depth: int, num_features: int) -> None:
        self.feature, self.threshold, self.default_left = feature, threshold, default_left
        self.value, self.roots = value, roots
        self.tree_output, self.base_score = tree_output, base_score
        self.depth, self.num_features = depth, num_features
        #: both children of node j: ``children[2 j + go_left]``, so a level costs one gather, not two and a select
        self.children = np.stack([right, left], axis=1).ravel()
        self.num_outputs = len(base_score)
        #: each output's trees, summed row by row (a matrix product's sum depends on the number of rows: a job's
        #: prediction alone and among other jobs differed in the last bits)
        #: (a strided view where they take turns, as XGBoost's multi-quantile rounds do: no copy)
        turns = np.array_equal(tree_output, np.arange(len(roots)) % self.num_outputs)
        self._output_trees = [slice(o, None, self.num_outputs) if turns else np.flatnonzero(tree_output == o)
                              for o in range(self.num_outputs)]

    @property
    def left(self) -> np.ndarray:
        """Each node's left child (a leaf's is itself)."""
        return self.children[1::2]

    @property
    def right(self) -> np.ndarray:
        return self.children[0::2]

    def _leaf_nodes(self, X: Any) -> np.ndarray:
        """(n, trees) flat index of the leaf each row reaches in each tree."""
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.num_features:
            raise ValueError(f"expected an (n, {self.num_features}) array, got shape {X.shape}")
        n = len(X)
        node = np.broadcast_to(self.roots, (n, len(self.roots)))
        row_base = (np.arange(n) * self.num_features)[:, None]
        flat_x = X.ravel()
        missing = bool(np.isnan(flat_x).any())  # NaN compares False; only then is default_left needed
        for _ in range(self.depth):
            v = flat_x.take(row_base + self.feature.take(node))
            go_left = v < self.threshold.take(node)
            if missing:
                go_left = np.where(np.isnan(v), self.default_left.take(node), go_left)
            node = self.children.take(2 * node + go_left)
        return node

    def leaf_ids(self, X: Any) -> np.ndarray:
        """(n, trees) node id within its tree of each row's leaf: XGBoost's ``pred_leaf`` output."""
        return self._leaf_nodes(X) - self.roots

    def inplace_predict(self, X: Any) -> np.ndarray:
        """XGBoost's ``inplace_predict`` for a dense 2-D array: shape (n,) for one output, else (n, outputs)."""
        leaves = self.value.take(self._leaf_nodes(X))
        if self.num_outputs == 1:
            return leaves.sum(axis=1) + self.base_score[0]
        return np.column_stack([leaves[:, trees].sum(axis=1) for trees in self._output_trees]) + self.base_score


def _base_scores(param: dict[str, Any]) -> np.ndarray:
    raw = str(param["base_score"]).strip()
    vals = json.loads(raw) if raw.startswith("[") else [float(raw)]
    return np.asarray([float(v) for v in vals], dtype=np.float64)


def compile_model_json(model: dict[str, Any]) -> CompiledForest | None:
    """A :class:`CompiledForest` from XGBoost's JSON model, or None when it uses what this does not cover."""
    learner = model["learner"]
    if learner["objective"]["name"] not in IDENTITY_OBJECTIVES:
        return None
    if "best_iteration" in learner.get("attributes", {}):
        return None  # XGBoost may truncate the ensemble there; keep its own predictor
    gb = learner["gradient_booster"]
    if gb.get("name") != "gbtree":
        return None
    trees, info = gb["model"]["trees"], gb["model"]["tree_info"]
    param = learner["learner_model_param"]
    base = _base_scores(param)
    n_features = int(param["num_feature"])
    if not trees or len(info) != len(trees) or max(info) >= len(base):
        return None
    if any(int(t["tree_param"].get("size_leaf_vector", "1")) > 1 or any(t.get("split_type", [])) for t in trees):
        return None  # vector leaves or categorical splits

    def flat(key: str, dtype: Any) -> np.ndarray:
        return np.fromiter(chain.from_iterable(t[key] for t in trees), dtype=dtype)

    sizes = np.array([len(t["left_children"]) for t in trees])
    roots = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    offset = np.repeat(roots, sizes)
    lc, rc = flat("left_children", np.int64), flat("right_children", np.int64)
    leaf = lc == -1
    here = np.arange(len(lc), dtype=np.int64)
    cond = flat("split_conditions", np.float32)
    feature = np.where(leaf, 0, flat("split_indices", np.int64))
    if feature.max() >= n_features:
        return None
    left, right = np.where(leaf, here, offset + lc), np.where(leaf, here, offset + rc)
    return CompiledForest(feature, np.where(leaf, np.float32(0), cond), left, right,
                          flat("default_left", np.int64).astype(bool),
                          np.where(leaf, cond, 0).astype(np.float64), roots, np.asarray(info, np.int64), base,
                          _max_depth(left, right, ~leaf), n_features)


def _max_depth(left: np.ndarray, right: np.ndarray, internal: np.ndarray) -> int:
    """The deepest leaf's depth over all trees (flat node tables; roots have depth 0)."""
    depth = np.zeros(len(left), np.int64)
    parents = np.flatnonzero(internal)
    for _ in range(len(left)):
        new = depth.copy()
        np.maximum.at(new, left[parents], depth[parents] + 1)
        np.maximum.at(new, right[parents], depth[parents] + 1)
        if np.array_equal(new, depth):
            return int(depth.max())
        depth = new
    raise ValueError("the tree tables have a cycle")


def compile_model_file(path: str | Path) -> CompiledForest | None:
    """Compile a booster saved as XGBoost JSON (see :func:`compile_model_json`), without loading XGBoost.

    A file this cannot read (not JSON, another schema version) gives None too: XGBoost's own loader then
    reads it or says what is wrong with it."""
    try:
        return compile_model_json(json.loads(Path(path).read_text()))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, IndexError, TypeError, ValueError):
        return None


def compile_booster(booster: Any) -> CompiledForest | None:
    """Compile a loaded ``xgboost.Booster`` (see :func:`compile_model_json`)."""
    return compile_model_json(json.loads(booster.save_raw("json").decode()))
