"""ONNX control flow in the graph features: a Loop or Scan counts its body once per iteration, an If one branch,
and what a static walk cannot settle (a trip count computed at run time, which branch runs) is a note on the
features and on the predicted card."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from perfpredict.estimators.arch import ArchFeaturesError, from_onnx_proto, load_onnx_bytes

BATCH = "N"  # the symbolic batch, declared in the bodies too, as a hand-built or scripted graph declares it
W = nh.from_array(np.ones((16, 16), np.float32), "W")


def _model(nodes, inputs, outputs, inits):
    g = h.make_graph(nodes, "g", inputs, outputs, inits)
    return load_onnx_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString())


def _unrolled(n: int = 10):
    """``x -> (MatMul W -> Relu) x n``: what a Loop of trip count n over that body runs."""
    nodes, prev = [], "x"
    for i in range(n):
        nodes += [h.make_node("MatMul", [prev, "W"], [f"m{i}"]), h.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        prev = f"r{i}"
    nodes.append(h.make_node("Identity", [prev], ["y"]))
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [BATCH, 16])],
                  [h.make_tensor_value_info("y", T.FLOAT, [BATCH, 16])], [W])


def _loop(trips: str = "initializer", cond: str = "passed", carried_shape=(BATCH, 16)):
    """A Loop over ``h -> Relu(h @ W)``; ``trips``: an "initializer" or a "constant" node of 10, or an "input";
    ``cond``: the body passes its condition through, or computes it ("computed")."""
    body_nodes = [h.make_node("MatMul", ["h_in", "W"], ["h_mm"]), h.make_node("Relu", ["h_mm"], ["h_out"])]
    if cond == "passed":
        body_nodes.insert(0, h.make_node("Identity", ["cond_in"], ["cond_out"]))
    else:  # stop once the state's sum is past a bound: data-dependent
        body_nodes += [h.make_node("ReduceSum", ["h_out"], ["s"], keepdims=0),
                       h.make_node("Less", ["s", "bound"], ["cond_out"])]
    body = h.make_graph(
        body_nodes, "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("h_in", T.FLOAT, carried_shape)],
        [h.make_tensor_value_info("cond_out", T.BOOL, []),
         h.make_tensor_value_info("h_out", T.FLOAT, carried_shape)])
    nodes = []
    inputs = [h.make_tensor_value_info("x", T.FLOAT, [BATCH, 16])]
    inits = [W, nh.from_array(np.array(True), "c"), nh.from_array(np.array(1e9, np.float32), "bound")]
    if trips == "initializer":
        inits.append(nh.from_array(np.array(10, np.int64), "M"))
    elif trips == "constant":
        nodes.append(h.make_node("Constant", [], ["M"], value=nh.from_array(np.array(10, np.int64))))
    else:
        inputs.append(h.make_tensor_value_info("M", T.INT64, []))
    nodes.append(h.make_node("Loop", ["M", "c", "x"], ["y"], body=body))
    return _model(nodes, inputs, [h.make_tensor_value_info("y", T.FLOAT, [BATCH, 16])], inits)


@pytest.mark.parametrize("trips", ["initializer", "constant"])
@pytest.mark.parametrize("carried_shape", [(BATCH, 16), None], ids=["declared", "undeclared"])
def test_a_loop_of_constant_trip_count_counts_as_its_unrolled_graph(trips, carried_shape):
    flat = from_onnx_proto(_unrolled(), "flat")
    loop = from_onnx_proto(_loop(trips, carried_shape=carried_shape), "loop")
    assert loop.forward_macs_per_sample == flat.forward_macs_per_sample == 10 * 16 * 16
    assert loop.macs_by_op == flat.macs_by_op
    assert loop.kernel_nodes == flat.kernel_nodes  # ten gemm and ten pointwise kernels, the Loop itself none
    assert loop.op_counts["MatMul"] == loop.op_counts["Relu"] == 10
    assert loop.activation_bytes_by_op["MatMul"] == flat.activation_bytes_by_op["MatMul"] == 10 * 16 * 4
    assert loop.recurrent_steps_by_op == {}
    assert not any("trip count" in n or "upper bound" in n for n in loop.notes), loop.notes


def test_a_loop_whose_trip_count_is_an_input_counts_its_body_once_and_says_so():
    loop = from_onnx_proto(_loop("input"), "loop")
    assert loop.forward_macs_per_sample == 16 * 16
    assert [r[:2] for r in loop.kernel_nodes] == [("gemm", 1), ("pointwise", 1)]
    assert any("trip count is computed at run time" in n for n in loop.notes), loop.notes


def test_a_loop_whose_condition_may_end_it_early_is_an_upper_bound_with_a_note():
    loop = from_onnx_proto(_loop(cond="computed"), "loop")
    assert loop.forward_macs_per_sample == 10 * 16 * 16
    assert any("counted 10 times" in n and "upper bound" in n for n in loop.notes), loop.notes


def test_a_loop_of_astronomical_trip_count_is_refused_readably():
    proto = _loop()
    next(t for t in proto.graph.initializer if t.name == "M").CopyFrom(nh.from_array(np.array(2**62, np.int64), "M"))
    with pytest.raises(ArchFeaturesError, match="past 1e"):
        from_onnx_proto(proto, "loop")


def _if():
    """An If whose then-branch is one MatMul and whose else-branch is two (the larger)."""
    wa, wb, wb2 = (nh.from_array(np.ones(s, np.float32), n) for n, s in (("Wa", (16, 8)), ("Wb", (16, 8)),
                                                                       ("Wb2", (8, 8))))
    small = h.make_graph([h.make_node("MatMul", ["x", "Wa"], ["ya"])], "then", [],
                         [h.make_tensor_value_info("ya", T.FLOAT, [BATCH, 8])])
    large = h.make_graph([h.make_node("MatMul", ["x", "Wb"], ["yb1"]), h.make_node("MatMul", ["yb1", "Wb2"], ["yb"])],
                         "else", [], [h.make_tensor_value_info("yb", T.FLOAT, [BATCH, 8])])
    return _model([h.make_node("If", ["c"], ["y"], then_branch=small, else_branch=large)],
                   [h.make_tensor_value_info("x", T.FLOAT, [BATCH, 16]), h.make_tensor_value_info("c", T.BOOL, [])],
                   [h.make_tensor_value_info("y", T.FLOAT, [BATCH, 8])], [wa, wb, wb2])


def test_an_if_counts_one_branch_the_larger_and_says_so():
    proto = _if()
    f = from_onnx_proto(proto, "if")
    assert f.forward_macs_per_sample == 16 * 8 + 8 * 8  # the larger branch, not both (16*8 more)
    assert f.op_counts == {"If": 1, "MatMul": 2}
    assert sum(r[1] for r in f.kernel_nodes) == 2
    assert any("If runs one of its two branches" in n for n in f.notes), f.notes


def _scan():
    """A Scan of 7 steps over x: s <- s + x[k] @ W, each step's state stacked into ys."""
    body = h.make_graph([h.make_node("MatMul", ["xs", "W"], ["m"]), h.make_node("Add", ["s_in", "m"], ["s_out"]),
                         h.make_node("Identity", ["s_out"], ["scan_out"])], "body",
                        [h.make_tensor_value_info("s_in", T.FLOAT, [BATCH, 16]),
                         h.make_tensor_value_info("xs", T.FLOAT, [BATCH, 16])],
                        [h.make_tensor_value_info("s_out", T.FLOAT, [BATCH, 16]),
                         h.make_tensor_value_info("scan_out", T.FLOAT, [BATCH, 16])])
    return _model([h.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1)],
                   [h.make_tensor_value_info("s0", T.FLOAT, [BATCH, 16]),
                    h.make_tensor_value_info("x", T.FLOAT, [7, BATCH, 16])],
                   [h.make_tensor_value_info("s", T.FLOAT, [BATCH, 16]),
                    h.make_tensor_value_info("ys", T.FLOAT, [7, BATCH, 16])], [W])


def test_a_scan_counts_its_body_once_per_step_of_the_scanned_input():
    proto = _scan()
    f = from_onnx_proto(proto, "scan")
    assert f.forward_macs_per_sample == 7 * 16 * 16
    assert f.op_counts["MatMul"] == 7
    assert ("gemm", 7) in [r[:2] for r in f.kernel_nodes]


def test_the_notes_reach_the_predicted_card(tmp_path):
    from perfpredict import Predictor

    path = tmp_path / "loop.onnx"
    path.write_bytes(_loop("input").SerializeToString())
    card = Predictor.load().predict(onnx_path=path, batch_size=8, device_type="cpu")
    assert any("trip count is computed at run time" in n for n in card.prediction.notes), card.prediction.notes
