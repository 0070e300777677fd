"""A graph's pass or step time on the CPU as the sum of its kernels' measured costs.

The cost of a kernel of class *c* (:mod:`perfpredict.estimators.kernel_nodes`) is

    t = o_c + a_c · MACs + b_c · activation bytes + s_c · recurrent steps   (+ g · weight bytes, every class but gather; + h · table bytes for gather)

with the parameters fitted by non-negative least squares (relative error) to microbenchmarks of single layers
on one CPU (:mod:`perfpredict.profile.kernel_bench`, run by ``python profilers/collect_kernel_costs.py``; the
table ``kernel_costs.json`` next to this module holds the parameters per mode, the benchmarks' timings and
their provenance). Nothing here is fitted to the models of the datasets: the estimate is a measured prior
that the iteration-time estimators scale and correct, and that ranks graphs by cost on any CPU where the
classes' relative costs are alike. Pure numpy (the Predictor and the service load it without torch).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from perfpredict.estimators.kernel_nodes import KERNEL_CLASSES, KernelNode, NodeRow, nodes_at_batch

TABLE_PATH = Path(__file__).with_name("kernel_costs.json")
MODES = ("infer", "train")
#: Classes whose cost has a per-MAC part; the others move bytes only.
MAC_CLASSES = ("conv", "conv_grouped", "conv_transpose", "gemm", "matmul", "lstm", "gru", "rnn")
#: Classes that loop over time steps, with a fixed cost per step whatever its size.
STEP_CLASSES = ("lstm", "gru", "rnn")


def columns() -> list[str]:
    """Names of the cost parameters, in the order of :func:`design_vector`."""
    cols = [f"{c}:call" for c in KERNEL_CLASSES] + [f"{c}:mac" for c in MAC_CLASSES]
    cols += [f"{c}:byte" for c in KERNEL_CLASSES] + [f"{c}:step" for c in STEP_CLASSES]
    return cols + ["weight:byte", "gather:table_byte"]


_INDEX = {name: i for i, name in enumerate(columns())}


def design_vector(nodes: Iterable[tuple[KernelNode, int]]) -> np.ndarray:
    """Calls, MACs, bytes and steps per class (and weight bytes) of ``(node, count)`` pairs: the vector whose
    dot product with the parameters is the estimated seconds. A class not in the table (from a newer walk)
    is priced as ``pointwise``."""
    v = np.zeros(len(_INDEX))
    for k, n in nodes:
        cls = k.cls if f"{k.cls}:call" in _INDEX else "pointwise"
        v[_INDEX[f"{cls}:call"]] += n
        v[_INDEX[f"{cls}:byte"]] += n * k.io_bytes
        v[_INDEX["gather:table_byte" if cls == "gather" else "weight:byte"]] += n * k.weight_bytes
        if cls in MAC_CLASSES:
            v[_INDEX[f"{cls}:mac"]] += n * k.macs
        if cls in STEP_CLASSES:
            v[_INDEX[f"{cls}:step"]] += n * k.steps
    return v


def fit_costs(records: Sequence[Mapping[str, Any]], mode: str) -> tuple[np.ndarray, dict[str, float]]:
    """(parameters, fit quality) from benchmark records (:func:`perfpredict.profile.kernel_bench.measure`):
    non-negative least squares on relative error (:func:`perfpredict.estimators.models.fit_baseline`, as the
    estimators' own baselines are fitted)."""
    from perfpredict.estimators.models import fit_baseline

    rows = [r for r in records if "error" not in r and r.get("nodes") and mode in r.get("seconds", {})]
    X = np.array([design_vector((KernelNode(*n), 1) for n in r["nodes"]) for r in rows])
    t = np.array([r["seconds"][mode] for r in rows])
    params = fit_baseline(X, t)
    rel = X @ params / t - 1
    return params, {"benchmarks": len(t), "median_abs_rel_error": float(np.median(np.abs(rel))),
                    "p90_abs_rel_error": float(np.percentile(np.abs(rel), 90))}


@lru_cache(maxsize=None)
def _table(path: str = str(TABLE_PATH)) -> dict:
    with open(path) as f:
        return json.load(f)


@lru_cache(maxsize=None)
def parameters(mode: str, path: str = str(TABLE_PATH)) -> np.ndarray:
    """The fitted parameters for ``mode`` in :func:`columns` order (0 for a column the table lacks)."""
    got = _table(path)["modes"][mode]["parameters"]
    return np.array([float(got.get(c, 0.0)) for c in columns()])


def kernel_seconds(rows: Iterable[NodeRow], batch: int, mode: str = "infer", path: str | Path = TABLE_PATH) -> float:
    """Estimated seconds of one pass (``mode="infer"``) or training step (``"train"``) at ``batch`` of a graph
    whose kernels are ``rows`` (:func:`perfpredict.estimators.kernel_nodes.split_nodes`)."""
    return kernel_seconds_by_mode(rows, batch, (mode,), path)[mode]


def kernel_seconds_by_mode(rows: Iterable[NodeRow], batch: int, modes: Sequence[str] = MODES,
                           path: str | Path = TABLE_PATH) -> dict[str, float]:
    """:func:`kernel_seconds` for several modes, pricing one vector of the graph's kernels."""
    v = design_vector(nodes_at_batch(rows, batch))
    return {m: float(v @ parameters(m, str(path))) for m in modes}


def provenance(path: str | Path = TABLE_PATH) -> dict:
    return dict(_table(str(path)).get("provenance", {}))
