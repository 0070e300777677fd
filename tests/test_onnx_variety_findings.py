"""ONNX files as other tools write them (a property scan of the ONNX path): the counts of a graph built by hand with
onnx.helper, derived by hand, or a readable refusal. Each test failed before its fix."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from perfpredict.estimators.arch import from_onnx_proto, load_onnx_bytes
from perfpredict.features.graph import analyze_onnx


def _vi(name, dtype, shape):
    return h.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17, extra=(), functions=()):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset), *(h.make_opsetid(d, 1) for d in extra)],
                     functions=list(functions))
    m.ir_version = 8
    return m


def _features(m):
    return from_onnx_proto(load_onnx_bytes(m.SerializeToString(), "t"), name="t")


def _scalar(name, value, dtype):
    return nh.from_array(np.array(value, dtype), name)


@pytest.mark.parametrize("unknown", [-1, 0])
def test_a_batch_written_as_minus_one_or_zero_counts_every_op(unknown) -> None:
    # x [-1, 64] @ W [64, 32] @ W2 [32, 10], the output declared [-1, 10] as the input is (an exporter's "unknown").
    # The second MatMul's MACs were counted at the output's declared batch (-1 or 0): 2048 per sample, not 2368.
    m = _model([h.make_node("MatMul", ["x", "W"], ["y"]), h.make_node("MatMul", ["y", "W2"], ["o"])],
               [_vi("x", T.FLOAT, [unknown, 64])], [_vi("o", T.FLOAT, [unknown, 10])],
               [nh.from_array(np.ones((64, 32), np.float32), "W"), nh.from_array(np.ones((32, 10), np.float32), "W2")])
    a = _features(m)
    assert a.forward_macs_per_sample == 64 * 32 + 32 * 10
    assert a.activation_bytes_per_sample == (64 + 32 + 10) * 4
    assert a.graph_saved_bytes_per_sample == _features(_with_named_batch(m)).graph_saved_bytes_per_sample


def _with_named_batch(m):
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    for vi in [*m2.graph.input, *m2.graph.output]:
        vi.type.tensor_type.shape.dim[0].Clear()
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    return m2


_QUANT = [_scalar("s", 0.1, np.float32), _scalar("zx", 0, np.uint8), _scalar("z", 0, np.int8),
          _scalar("ys", 0.2, np.float32), _scalar("yz", 0, np.uint8)]


@pytest.mark.parametrize("op", ["MatMulInteger", "QLinearMatMul", "ConvInteger", "QLinearConv"])
def test_integer_and_quantized_products_count_their_macs_and_int8_weights_at_one_byte(op) -> None:
    # were no MACs at all: a quantized model was refused ("no multiply-accumulate ops") or, mixed with float ops,
    # silently undercounted
    conv = "Conv" in op
    w = nh.from_array(np.ones((4, 3, 3, 3) if conv else (64, 32), np.int8), "W")
    ins = {"MatMulInteger": ["x", "W", "zx", "z"], "ConvInteger": ["x", "W", "zx", "z"],
           "QLinearMatMul": ["x", "s", "zx", "W", "s", "z", "ys", "yz"],
           "QLinearConv": ["x", "s", "zx", "W", "s", "z", "ys", "yz"]}[op]
    out_type = T.INT32 if "Integer" in op else T.UINT8
    x, y = (["N", 3, 8, 8], ["N", 4, 6, 6]) if conv else (["N", 64], ["N", 32])
    a = _features(_model([h.make_node(op, ins, ["o"])], [_vi("x", T.UINT8, x)], [_vi("o", out_type, y)],
                         [w, *_QUANT], opset=13))
    assert a.forward_macs_per_sample == (4 * 6 * 6 * 3 * 3 * 3 if conv else 64 * 32)
    assert a.macs_by_op == {op: a.forward_macs_per_sample}
    assert a.param_bytes == np.prod(w.dims) * 1 + (4 + 1 + 1 + 4 + 1)  # int8 weights; every initializer counts
    assert a.kernel_nodes and sum(r[2] * r[1] for r in a.kernel_nodes) == a.forward_macs_per_sample


def test_a_float_graph_with_a_quantized_product_counts_both() -> None:
    nodes = [h.make_node("MatMul", ["x", "Wf"], ["y"]), h.make_node("QuantizeLinear", ["y", "s", "zx"], ["yq"]),
             h.make_node("QLinearMatMul", ["yq", "s", "zx", "W2", "s", "z", "ys", "yz"], ["o"])]
    a = _features(_model(nodes, [_vi("x", T.FLOAT, ["N", 64])], [_vi("o", T.UINT8, ["N", 16])],
                         [nh.from_array(np.ones((64, 32), np.float32), "Wf"),
                          nh.from_array(np.ones((32, 16), np.int8), "W2"), *_QUANT], opset=13))
    assert a.forward_macs_per_sample == 64 * 32 + 32 * 16


def test_onnxruntime_attention_is_counted_not_taken_for_onnx_attention() -> None:
    # com.microsoft Attention (x [B, S, H], packed QKV weights [H, 3H]) was read as ONNX's opset-23 Attention
    # (q, k, v = x, W, bias): "cannot analyse the graph: IndexError: list index out of range", a 400 from the service
    m = _model([h.make_node("Attention", ["x", "Wa", "ba"], ["o"], domain="com.microsoft", num_heads=4)],
               [_vi("x", T.FLOAT, ["N", 16, 64])], [_vi("o", T.FLOAT, ["N", 16, 64])],
               [nh.from_array(np.ones((64, 192), np.float32), "Wa"), nh.from_array(np.ones(192, np.float32), "ba")],
               opset=13, extra=["com.microsoft"])
    a = _features(m)
    assert a.forward_macs_per_sample == 16 * 64 * 192 + 16 * 16 * (64 + 64)


def test_fused_matmul_is_counted_and_other_custom_ops_leave_a_note() -> None:
    w2 = nh.from_array(np.ones((16, 32), np.float32), "W2")  # used transposed
    nodes = [h.make_node("MatMul", ["x", "W"], ["y"]),
             h.make_node("FusedMatMul", ["y", "W2"], ["f"], domain="com.microsoft", transB=1, alpha=1.0),
             h.make_node("FastGelu", ["f"], ["o"], domain="com.microsoft")]
    m = _model(nodes, [_vi("x", T.FLOAT, ["N", 64])], [_vi("o", T.FLOAT, ["N", 16])],
               [nh.from_array(np.ones((64, 32), np.float32), "W"), w2], opset=13, extra=["com.microsoft"])
    m.graph.value_info.append(_vi("f", T.FLOAT, ["N", 16]))
    a = _features(m)
    assert a.forward_macs_per_sample == 64 * 32 + 32 * 16
    assert any("com.microsoft.FastGelu" in n and "not counted" in n for n in a.notes)


def test_weights_written_as_constant_nodes_are_parameters() -> None:
    # tf2onnx-style: the weight a Constant node, quantized through a DequantizeLinear, and a float bias; were 0
    # parameters and 0 parameter bytes. The Constant scale (a scalar) is no weight.
    const = lambda name, arr: h.make_node("Constant", [], [name], value=nh.from_array(arr, name))  # noqa: E731
    nodes = [const("Wq", np.ones((32, 64), np.int8)), const("s", np.array(0.1, np.float32)),
             const("z", np.array(0, np.int8)), h.make_node("DequantizeLinear", ["Wq", "s", "z"], ["Wd"]),
             const("b", np.ones(32, np.float32)), h.make_node("Gemm", ["x", "Wd", "b"], ["g"], transB=1),
             const("scale", np.array([1.0, 2.0], np.float32)),  # not a weight: multiplies an activation
             h.make_node("Reshape", ["g", "shape"], ["r"]), h.make_node("Mul", ["r", "scale"], ["o"])]
    m = _model([const("shape", np.array([-1, 16, 2], np.int64)), *nodes], [_vi("x", T.FLOAT, ["N", 64])],
               [_vi("o", T.FLOAT, ["N", 16, 2])], opset=13)
    a = _features(m)
    assert a.param_count == 32 * 64 + 32
    assert a.param_bytes == 32 * 64 * 1 + 32 * 4
    assert a.forward_macs_per_sample == 64 * 32


def test_a_model_with_local_functions_counts_their_nodes() -> None:
    # onnxscript and export_modules_as_functions write a module as a function called by one node: its MatMul was
    # not seen (refused as having no multiply-accumulate ops)
    fn = h.make_function("local", "Lin", ["x", "w"], ["y"],
                         [h.make_node("MatMul", ["x", "w"], ["t"]), h.make_node("Relu", ["t"], ["y"])],
                         [h.make_opsetid("", 17)])
    m = _model([h.make_node("Lin", ["x", "W"], ["o"], domain="local")], [_vi("x", T.FLOAT, ["N", 64])],
               [_vi("o", T.FLOAT, ["N", 32])], [nh.from_array(np.ones((64, 32), np.float32), "W")],
               extra=["local"], functions=[fn])
    a = _features(m)
    assert a.forward_macs_per_sample == 64 * 32
    assert a.activation_bytes_per_sample == (64 + 32 + 32) * 4
    for vi in [*m.graph.input, *m.graph.output]:  # a model file's path too (its exports are at a fixed batch)
        vi.type.tensor_type.shape.dim[0].Clear()
        vi.type.tensor_type.shape.dim[0].dim_value = 2
    assert analyze_onnx(m).macs_by_op == {"MatMul": 2 * 64 * 32}
