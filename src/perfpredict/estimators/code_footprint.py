"""How much of torch's machine code a graph's ops page in: the union of their measured page sets.

Each entry of ``code_pages.json`` (next to this module; measured by ``python profilers/collect_code_pages.py``
with :mod:`perfpredict.profile.code_pages`) is the set of file-backed pages a fresh profiler process faulted
in while running one kind of op, in inference or in training. A graph's footprint is the union of the sets of
its ONNX op types, plus the empty model's set: a page shared by several ops (the dispatcher, TensorIterator,
OpenMP) counts once. ``MatMul`` and ``Softmax`` together also take the ``Attention`` entry (PyTorch's
multi-head attention kernels), which no single ONNX op names.

The table is measured on one CPU model and torch build (its ``provenance`` says which). Used as a feature,
it ranks graphs by how much code they touch on any x86 machine with that build; the CPU memory estimators
charge it as a baseline term whose coefficient is fitted (0.9 on the Xeon VM where it was measured, whose
child processes' ``RssFile`` growth it predicts with a correlation of 0.97 across the zoo).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path

import numpy as np

TABLE_PATH = Path(__file__).with_name("code_pages.json")
MODES = ("infer", "train")


@lru_cache(maxsize=None)
def _table(path: str = str(TABLE_PATH)) -> dict:
    with open(path) as f:
        return json.load(f)


@lru_cache(maxsize=None)
def _sets(mode: str, path: str = str(TABLE_PATH)) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(the empty model's pages, pages by ONNX op type) for ``mode``, each a boolean mask over every page of the
    table's libraries (a union is an OR, its size a count: a few milliseconds to build, where sets of
    (library, page) tuples took a third of a second)."""
    entries = _table(path)["modes"][mode]
    ends: dict[str, int] = {}
    for e in entries.values():
        for lib, runs in e["pages"].items():
            ends[lib] = max(ends.get(lib, 0), max(b for _, b in runs) + 1)
    offset, total = {}, 0
    for lib in sorted(ends):
        offset[lib], total = total, total + ends[lib]
    base = np.zeros(total, bool)
    by_op: dict[str, np.ndarray] = {}
    for e in entries.values():
        mask = np.zeros(total, bool)
        for lib, runs in e["pages"].items():
            for a, b in runs:
                mask[offset[lib] + a: offset[lib] + b + 1] = True
        if not e["onnx_ops"]:
            base |= mask
        for op in e["onnx_ops"]:
            by_op[op] = by_op[op] | mask if op in by_op else mask.copy()
    return base, by_op


def op_types_run(op_types: Iterable[str]) -> set[str]:
    """The table's keys a graph with ``op_types`` runs: its op types, and ``Attention`` where MatMul and Softmax
    are both present."""
    ops = set(op_types)
    if {"MatMul", "Softmax"} <= ops:
        ops.add("Attention")
    return ops


def code_bytes(op_counts: Mapping[str, int] | Iterable[str], mode: str = "infer", path: str | Path = TABLE_PATH) -> int:
    """Bytes of code pages a graph with these op types faults in (the union of their page sets), in ``mode``
    ("infer" or "train"). Op types the table does not list (shape arithmetic, casts) add nothing."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    base, by_op = _sets(mode, str(path))
    return _union_bytes(frozenset(op for op in op_types_run(op_counts) if op in by_op), mode, str(path))


@lru_cache(maxsize=4096)
def _union_bytes(ops: frozenset, mode: str, path: str) -> int:
    """Cached: the Predictor asks for the same few op-type sets again and again."""
    base, by_op = _sets(mode, path)
    pages = base.copy()
    for op in ops:
        pages |= by_op[op]
    return int(pages.sum()) * int(_table(path)["provenance"].get("page_size", 4096))


def provenance(path: str | Path = TABLE_PATH) -> dict:
    return dict(_table(str(path))["provenance"])
