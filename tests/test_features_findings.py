"""Property-scan findings in the ONNX graph features (shape folding, Einsum MACs)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh

from perfpredict.features.fvcore_check import fvcore_counts
from perfpredict.features.graph import analyze_onnx
from perfpredict.features.onnx_export import export_onnx
from perfpredict.features.shape_folding import _evaluate


def _model(nodes, inits, x_shape, y_rank, x_type=TP.FLOAT):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [f"y{i}" for i in range(y_rank)])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _fold_matches_run(m):
    run, fold = analyze_onnx(m, run_for_shapes=True), analyze_onnx(m, run_for_shapes=False)
    assert fold.unknown_shape_ops == run.unknown_shape_ops == {}
    assert fold.macs == run.macs
    assert fold.activation_bytes_by_op == run.activation_bytes_by_op
    assert fold.activation_bytes == run.activation_bytes
    assert fold.peak_live_activation_bytes == run.peak_live_activation_bytes


def test_folding_leaves_a_default_constant_of_shape_a_float_tensor():
    # ConstantOfShape without a value attribute fills float32 zeros; folding it as int64 doubled its bytes
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Div", ["s", "one"], ["sd"]),
             helper.make_node("ConstantOfShape", ["sd"], ["z"]), helper.make_node("Add", ["x", "z"], ["x2"]),
             helper.make_node("Reshape", ["x2", "t"], ["r"]), helper.make_node("MatMul", ["r", "W"], ["y"])]
    inits = [nh.from_array(np.ones((12, 5), np.float32), "W"), nh.from_array(np.array([1], np.int64), "one"),
             nh.from_array(np.array([2, -1, 12], np.int64), "t")]
    m = _model(nodes, inits, [2, 8, 6], 3)
    _fold_matches_run(m)
    assert analyze_onnx(m, run_for_shapes=False).activation_bytes_by_op["ConstantOfShape"] == 2 * 8 * 6 * 4


def test_folding_keeps_int32_values_int32():
    # an int32 Range whose length folding computes: counted as int64 (8 bytes an element) before
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i1"], ["g"], axis=0),
             helper.make_node("Div", ["g", "one"], ["gd"]), helper.make_node("Cast", ["gd"], ["g32"], to=TP.INT32),
             helper.make_node("Range", ["z32", "g32", "one32"], ["pos"]),
             helper.make_node("Gather", ["E", "pos"], ["e"]), helper.make_node("MatMul", ["e", "W"], ["y"])]
    inits = [nh.from_array(np.array(1, np.int64), "i1"), nh.from_array(np.array(1, np.int64), "one"),
             nh.from_array(np.array(0, np.int32), "z32"), nh.from_array(np.array(1, np.int32), "one32"),
             nh.from_array(np.ones((16, 4), np.float32), "E"), nh.from_array(np.ones((4, 5), np.float32), "W")]
    m = _model(nodes, inits, [2, 8], 2)
    _fold_matches_run(m)
    assert analyze_onnx(m, run_for_shapes=False).activation_bytes_by_op["Range"] == 8 * 4


@pytest.mark.parametrize("eq,x_shape,w_shape,w_first,expected", [
    ("...ij,jk->...ik", [2, 3, 4, 6], [6, 5], False, 2 * 3 * 4 * 6 * 5),  # was: "shapes unknown", 0 MACs
    ("bij,bjk->bik", [2, 4, 6], [1, 6, 5], False, 2 * 4 * 6 * 5),  # was: b taken as 1 from W
    ("bjk,bij->bik", [2, 4, 6], [1, 6, 5], True, 2 * 4 * 6 * 5),
    ("...j,...jk->...k", [2, 3, 6], [1, 3, 6, 5], False, 2 * 3 * 6 * 5),  # W's ellipsis broadcasts
], ids=["ellipsis", "broadcast_last", "broadcast_first", "ellipsis_broadcast"])
def test_einsum_macs_cover_ellipsis_and_broadcast_indices(eq, x_shape, w_shape, w_first, expected):
    ins = ["W", "x"] if w_first else ["x", "W"]
    m = _model([helper.make_node("Einsum", ins, ["y"], equation=eq)],
               [nh.from_array(np.ones(w_shape, np.float32), "W")], x_shape, len(x_shape))
    for run in (True, False):
        s = analyze_onnx(m, run_for_shapes=run)
        assert s.unknown_shape_ops == {}
        assert s.macs == s.macs_by_op["Einsum"] == expected


def test_reshape_allowzero_folds_a_zero_as_a_size_zero_dimension():
    node = helper.make_node("Reshape", ["d", "s"], ["y"], allowzero=1)
    out = _evaluate(node, {"d": np.zeros((0, 3), np.int64), "s": np.array([3, 0], np.int64)}, {})
    assert out.shape == (3, 0)
    node = helper.make_node("Reshape", ["d", "s"], ["y"])  # without allowzero a 0 copies the input's dimension
    out = _evaluate(node, {"d": np.arange(6).reshape(2, 3), "s": np.array([0, -1], np.int64)}, {})
    assert out.shape == (2, 3)


class _BroadcastMatmul(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 7, 5))

    def forward(self, x):  # [b, 1, 4, 7] @ [3, 7, 5] -> [b, 3, 4, 5]
        return torch.matmul(x.unsqueeze(1), self.w)


class _MatVec(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(7))

    def forward(self, x):  # [b, 4, 7] @ [7] -> [b, 4]
        return x @ self.w


@pytest.mark.parametrize("cls,expected", [(_BroadcastMatmul, 2 * 3 * 4 * 5 * 7), (_MatVec, 2 * 4 * 7)],
                         ids=["broadcast_second_operand", "matrix_vector"])
def test_fvcore_cross_check_counts_matmul_as_the_onnx_count_does(cls, expected):
    # fvcore's own matmul handle counted the broadcast once (840 -> 280) and asserted on a 1-D operand
    torch.manual_seed(0)
    model, x = cls(), torch.randn(2, 4, 7)
    assert fvcore_counts(model, (x,))["macs"] == expected
    s = analyze_onnx(export_onnx(model, (x,)).model_proto)
    assert s.macs == expected
