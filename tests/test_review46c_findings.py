"""Review of session 46's ONNX-variety commit: Constant-node weights reached ``param_bytes`` but not the features
computed beside it.

* A model-local function's ``Constant`` weight: ``analyze_onnx`` inlined the functions, so ``param_bytes``
  counted it, but ``from_onnx_proto`` counted ``param_count`` (and the frozen prefixes) on the proto before
  inlining: 16 KiB of weights with a ``param_count`` of 0.
* A ``Constant`` embedding table read only by a Gather counted in ``param_bytes`` but not in
  ``lookup_param_bytes`` (the docs: Constant weights included, "of those, the bytes only ever read by a Gather"),
  where the same table as an initializer did.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from perfpredict.estimators.arch import from_onnx_proto
from perfpredict.features.graph import analyze_onnx


def _model(nodes, inputs, outputs, initializers=(), functions=(), extra_opsets=()):
    g = h.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), *extra_opsets], functions=list(functions))


def test_a_local_functions_constant_weight_counts_in_param_count_as_in_param_bytes():
    w = nh.from_array(np.ones((64, 64), np.float32), "w")
    fn = h.make_function("local", "Lin", ["x"], ["y"],
                         [h.make_node("Constant", [], ["w"], value=w), h.make_node("MatMul", ["x", "w"], ["y"])],
                         opset_imports=[h.make_opsetid("", 17)])
    x = h.make_tensor_value_info("x", T.FLOAT, ["N", 64])
    y = h.make_tensor_value_info("y", T.FLOAT, ["N", 64])
    called = from_onnx_proto(_model([h.make_node("Lin", ["x"], ["y"], domain="local")], [x], [y], functions=[fn],
                                    extra_opsets=[h.make_opsetid("local", 1)]))
    plain = from_onnx_proto(_model([h.make_node("Constant", [], ["w"], value=w),
                                    h.make_node("MatMul", ["x", "w"], ["y"])], [x], [y]))
    assert plain.param_count == 64 * 64 and plain.param_bytes == 64 * 64 * 4
    assert (called.param_count, called.param_bytes) == (plain.param_count, plain.param_bytes)  # was (0, 16384)


def test_a_constant_embedding_table_is_lookup_bytes_as_an_initializer_one_is():
    e = nh.from_array(np.ones((1000, 64), np.float32), "e")
    ids = h.make_tensor_value_info("ids", T.INT64, ["N", 8])
    y = h.make_tensor_value_info("y", T.FLOAT, ["N", 8, 64])
    const = analyze_onnx(_model([h.make_node("Constant", [], ["e"], value=e),
                                 h.make_node("Gather", ["e", "ids"], ["y"])], [ids], [y]), run_for_shapes=False)
    init = analyze_onnx(_model([h.make_node("Gather", ["e", "ids"], ["y"])], [ids], [y], [e]), run_for_shapes=False)
    assert init.lookup_param_bytes == init.initializer_bytes == 1000 * 64 * 4
    assert (const.initializer_bytes, const.lookup_param_bytes) == (init.initializer_bytes, init.lookup_param_bytes)
    # read whole as well (a tied output projection): not a lookup table, as for an initializer
    tied = analyze_onnx(_model([h.make_node("Constant", [], ["e"], value=e),
                                h.make_node("Gather", ["e", "ids"], ["g"]),
                                h.make_node("MatMul", ["g", "et"], ["y"]),
                                h.make_node("Transpose", ["e"], ["et"])], [ids],
                               [h.make_tensor_value_info("y", T.FLOAT, ["N", 8, 1000])]), run_for_shapes=False)
    assert tied.lookup_param_bytes == 0 and tied.initializer_bytes == 1000 * 64 * 4
