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

TABLE_PATH = Path(__file__).with_name("code_pages.json")
MODES = ("infer", "train")


@lru_cache(maxsize=None)
def _table(path: str = str(TABLE_PATH)) -> dict:
    with open(path) as f:
        return json.load(f)


@lru_cache(maxsize=None)
def _sets(mode: str, path: str = str(TABLE_PATH)) -> tuple[frozenset, dict[str, frozenset]]:
    """(the empty model's page set, page set by ONNX op type) for ``mode``."""
    entries = _table(path)["modes"][mode]
    by_op: dict[str, set] = {}
    base: frozenset = frozenset()
    for name, e in entries.items():
        pages = frozenset((lib, i) for lib, runs in e["pages"].items() for a, b in runs for i in range(a, b + 1))
        if not e["onnx_ops"]:
            base = base | pages
        for op in e["onnx_ops"]:
            by_op.setdefault(op, set()).update(pages)
    return base, {op: frozenset(s) for op, s in by_op.items()}


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
    """Cached: the Predictor asks for the same few op-type sets again and again, and a union of page sets
    costs about a millisecond."""
    base, by_op = _sets(mode, path)
    pages = set(base)
    for op in ops:
        pages |= by_op[op]
    return len(pages) * int(_table(path)["provenance"].get("page_size", 4096))


def provenance(path: str | Path = TABLE_PATH) -> dict:
    return dict(_table(str(path))["provenance"])
