"""The peak-live and saved-for-backward walks of an ONNX graph read its control flow as it runs: a Loop of
constant trip count and a Scan of known length unrolled (fresh tensors per iteration, a loop-carried value
passed from one to the next), an If as the branch the counts took. They read the main graph only: a Loop's
body was in neither, so a training-memory prediction for an ONNX file whose compute sits in a Loop (a scripted
RNN) under-predicted (saved bytes per sample 0 where the unrolled graph keeps 768, peak-live 64 where it holds
128)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from perfpredict.estimators.arch import from_onnx_proto
from tests.test_graph_fixes import BATCH, W, _if, _loop, _model, _scan, _unrolled
from tests.test_left_alone44_fixes import _loop_with_body_weights

MEMORY = ("peak_live_bytes_per_sample", "peak_live_bytes_fixed", "graph_saved_bytes_per_sample",
          "graph_saved_bytes_fixed")


def _memory(f) -> dict[str, float]:
    return {k: getattr(f, k) for k in MEMORY}


def _with_trips(proto, trips: int):
    next(t for t in proto.graph.initializer if t.name == "M").CopyFrom(nh.from_array(np.array(trips, np.int64), "M"))
    return proto


@pytest.mark.parametrize("trips", [1, 3, 10])
def test_a_loops_memory_walks_give_what_they_give_on_its_unrolled_graph(trips):
    loop = from_onnx_proto(_with_trips(_loop(), trips), "loop")
    flat = from_onnx_proto(_unrolled(trips), "flat")
    assert _memory(loop) == _memory(flat)
    # x and each iteration's Relu output (the next MatMul's input) kept, and the loss on y: (trips + 2) rows
    assert loop.graph_saved_bytes_per_sample == (trips + 2) * 16 * 4
    assert loop.peak_live_bytes_per_sample == 2 * 16 * 4  # one MatMul's input and output at once
    assert not any("do not unroll" in n for n in loop.notes), loop.notes
    # the Loop's output has its body's shape at the substituted batch, not the symbolic one: it is an activation
    assert loop.activation_bytes_by_op["Loop"] == flat.activation_bytes_by_op["Identity"] == 16 * 4


def test_a_scans_memory_walks_give_what_they_give_on_its_unrolled_graph():
    proto = _scan()
    scan = from_onnx_proto(proto, "scan")
    # unrolled: x[k] (a Gather of the step), the body, and the final state and the stacked scan outputs
    nodes, prev, inits = [], "s0", [W, nh.from_array(np.array([0], np.int64), "axes")]
    for k in range(7):
        inits.append(nh.from_array(np.array(k, np.int64), f"k{k}"))
        nodes += [h.make_node("Gather", ["x", f"k{k}"], [f"xs{k}"]), h.make_node("MatMul", [f"xs{k}", "W"], [f"m{k}"]),
                  h.make_node("Add", [prev, f"m{k}"], [f"st{k}"]), h.make_node("Identity", [f"st{k}"], [f"o{k}"])]
        prev = f"st{k}"
    nodes += [h.make_node("Identity", [prev], ["s"]),
              *(h.make_node("Unsqueeze", [f"o{k}", "axes"], [f"u{k}"]) for k in range(7)),
              h.make_node("Concat", [f"u{k}" for k in range(7)], ["ys"], axis=0)]
    flat = from_onnx_proto(_model(nodes, list(proto.graph.input), list(proto.graph.output), inits), "flat")
    assert _memory(scan) == _memory(flat)
    # each step's slice the MatMul keeps, and the loss on s and on ys
    assert scan.graph_saved_bytes_per_sample == (7 + 1 + 7) * 16 * 4


def test_an_ifs_memory_walks_read_the_branch_the_counts_took():
    proto = _if()
    f = from_onnx_proto(proto, "if")
    flat = from_onnx_proto(_model([h.make_node("MatMul", ["x", "Wb"], ["yb1"]),
                                   h.make_node("MatMul", ["yb1", "Wb2"], ["yb"]), h.make_node("Identity", ["yb"], ["y"])],
                                  list(proto.graph.input), list(proto.graph.output), list(proto.graph.initializer)),
                           "flat")
    assert _memory(f) == _memory(flat)
    assert f.graph_saved_bytes_per_sample == (16 + 8 + 8) * 4  # x, yb1 (the MatMuls' inputs) and the loss on y
    assert not any("do not unroll" in n for n in f.notes), f.notes


@pytest.mark.parametrize("trips", [1, 4])
def test_an_if_inside_a_loop_unrolls_at_both_levels(trips):
    nested = from_onnx_proto(_loop_with_body_weights(trips), "nested")
    wl, wt = (nh.from_array(np.ones((16, 16), np.float32), n) for n in ("Wl", "Wt"))
    nodes, prev = [], "x"
    for k in range(trips):  # the Loop's body with the If's then-branch (as large as the else-branch) inlined
        nodes += [h.make_node("MatMul", [prev, "Wl"], [f"mm{k}"]), h.make_node("MatMul", [f"mm{k}", "Wt"], [f"t{k}"]),
                  h.make_node("Identity", [f"t{k}"], [f"if{k}"]), h.make_node("Relu", [f"if{k}"], [f"h{k}"])]
        prev = f"h{k}"
    nodes.append(h.make_node("Identity", [prev], ["y"]))
    flat = from_onnx_proto(_model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [BATCH, 16])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [BATCH, 16])], [wl, wt]), "flat")
    assert _memory(nested) == _memory(flat)
    # x, each iteration's two MatMul inputs (the first the previous Relu's output), the last Relu output, the loss
    assert nested.graph_saved_bytes_per_sample == (2 * trips + 2) * 16 * 4


def test_a_loop_it_cannot_unroll_stays_one_node_with_its_note():
    """A run-time trip count, or past MAX_UNROLLED_NODES node copies: today's walks (the Loop one node, its body
    left out), and a note that says so."""
    from perfpredict.features.graph import MAX_UNROLLED_NODES

    runtime = from_onnx_proto(_loop("input"), "runtime")
    assert any("do not unroll a Loop whose trip count is computed at run time" in n for n in runtime.notes), \
        runtime.notes
    # x and the Loop's output (its last state, at its body's shape), and its loss: the body's tensors are not in them
    assert runtime.peak_live_bytes_per_sample == 2 * 16 * 4 and runtime.graph_saved_bytes_per_sample == 16 * 4
    big = from_onnx_proto(_with_trips(_loop(), MAX_UNROLLED_NODES), "big")  # 3 body nodes per iteration
    assert any(f"do not unroll a Loop of more than {MAX_UNROLLED_NODES} node copies" in n for n in big.notes), \
        big.notes
    assert big.forward_macs_per_sample == MAX_UNROLLED_NODES * 16 * 16  # the counts still take every iteration
    assert big.peak_live_bytes_per_sample == runtime.peak_live_bytes_per_sample  # (runtime's input M: 8 fixed bytes)
    assert big.graph_saved_bytes_per_sample == runtime.graph_saved_bytes_per_sample


def test_a_graph_without_control_flow_reaches_the_walks_as_it_is():
    from perfpredict.features.graph import _Unrolled

    g = _unrolled(3).graph
    u = _Unrolled({})
    u.add_main(g)
    assert u.nodes == [(n.op_type, list(n.input), list(n.output)) for n in g.node]
    assert (u.orig, u.const, u.left) == ({}, set(), {})


def test_a_loop_over_an_inputs_static_length_unrolls():
    """A scripted ``for t in range(x.shape[0])`` exports its trip count as ``Shape -> Gather``, which shape
    arithmetic settles once the shapes are known: it was a trip count computed at run time, its body counted
    once and left out of the memory walks."""
    proto = _loop()  # x [N, 16]: x.shape[1] iterations
    kept = [t for t in proto.graph.initializer if t.name != "M"]
    del proto.graph.initializer[:]
    proto.graph.initializer.extend([*kept, nh.from_array(np.array(1, np.int64), "one")])
    proto.graph.node.insert(0, h.make_node("Shape", ["x"], ["x_shape"]))
    proto.graph.node.insert(1, h.make_node("Gather", ["x_shape", "one"], ["M"]))
    f = from_onnx_proto(proto, "shape")
    flat = from_onnx_proto(_unrolled(16), "flat")
    assert f.forward_macs_per_sample == 16 * 16 * 16
    assert f.peak_live_bytes_per_sample == flat.peak_live_bytes_per_sample
    assert f.graph_saved_bytes_per_sample == flat.graph_saved_bytes_per_sample
    assert not any("run time" in n or "do not unroll" in n for n in f.notes), f.notes
