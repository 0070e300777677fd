"""Code pages: the pagemap reader, the per-op measurement in fork-server children, and the shipped table's union."""

from __future__ import annotations

import json
import os
import sys

import pytest

from perfpredict.estimators import code_footprint
from perfpredict.estimators.code_footprint import code_bytes, op_types_run

linux = pytest.mark.skipif(not (sys.platform.startswith("linux") and os.access("/proc/self/pagemap", os.R_OK)),
                           reason="needs a readable /proc/self/pagemap")


def _table_sets(mode: str):
    return code_footprint._sets(mode, str(code_footprint.TABLE_PATH))


@linux
def test_resident_file_pages_sees_torch_code():
    import torch

    from perfpredict.profile.code_pages import resident_file_pages

    torch.ones(8).relu()
    pages = resident_file_pages()
    libs = {lib for lib, _ in pages}
    assert any(lib.startswith("libtorch_cpu") for lib in libs) and any(lib.startswith("libc") for lib in libs)
    assert all(isinstance(i, int) and i >= 0 for _, i in pages)


@linux
def test_measured_entries_in_fresh_processes():
    from perfpredict.profile.code_pages import measure_catalogue

    res = measure_catalogue("infer", names=("identity", "linear_2d", "lstm"))
    size = {n: sum(b - a + 1 for runs in e["pages"].values() for a, b in runs) for n, e in res.items()}
    assert res["lstm"]["onnx_ops"] == ["LSTM"] and res["identity"]["onnx_ops"] == []
    # a GEMM runs more library code than returning the input, an LSTM (oneDNN) more than a GEMM
    assert 0 < size["identity"] < size["linear_2d"] < size["lstm"]
    assert any(lib.startswith("libtorch_cpu") for lib in res["lstm"]["pages"])
    for e in res.values():  # [first, last] runs, sorted and disjoint
        for runs in e["pages"].values():
            assert all(a <= b for a, b in runs) and all(r[1] < s[0] for r, s in zip(runs, runs[1:]))


def test_shipped_table_matches_the_catalogue():
    from perfpredict.profile.code_pages import CATALOGUE, onnx_ops_of

    table = json.loads(code_footprint.TABLE_PATH.read_text())
    assert set(table["modes"]) == set(code_footprint.MODES)
    for mode, entries in table["modes"].items():
        assert list(entries) == list(CATALOGUE), mode
        for name, e in entries.items():
            assert tuple(e["onnx_ops"]) == onnx_ops_of(name)
    for key in ("cpu_model", "torch", "measured_at", "command", "page_size"):
        assert table["provenance"][key]


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_union_counts_shared_pages_once(mode):
    base, by_op = _table_sets(mode)
    a, b = {"Conv": 2, "Relu": 3}, {"Gemm": 1, "Relu": 1}
    ab = {**a, **b}
    assert code_bytes({}, mode) == int(base.sum()) * 4096
    assert max(code_bytes(a, mode), code_bytes(b, mode)) <= code_bytes(ab, mode) < code_bytes(a, mode) + code_bytes(b, mode)
    # shape arithmetic the table does not list adds nothing; counts do not matter, only which ops run
    assert code_bytes({**a, "Shape": 4, "Unsqueeze": 9}, mode) == code_bytes(a, mode) == code_bytes(set(a), mode)
    # a training step runs the backward kernels too
    assert code_bytes(ab, "train") > code_bytes(ab, "infer")


def test_attention_entry_only_with_matmul_and_softmax():
    assert "Attention" in op_types_run({"MatMul", "Softmax", "Add"})
    assert "Attention" not in op_types_run({"MatMul", "Add"}) and "Attention" not in op_types_run({"Softmax"})
    base, by_op = _table_sets("infer")
    plain = int((base | by_op["MatMul"] | by_op["Softmax"]).sum()) * 4096
    assert code_bytes({"MatMul": 1, "Softmax": 1}) > plain


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="mode"):
        code_bytes({"Relu": 1}, "serve")
