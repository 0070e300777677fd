"""Findings of the review of session 44's commits."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from perfpredict.features.graph import analyze_onnx


def _vi(name: str, shape: list[int], t: int = T.FLOAT):
    return h.make_tensor_value_info(name, t, shape)


def _if_whose_branches_reuse_a_name(else_name: str):
    """An If whose then-branch holds a Loop of 3 trips (Relu(h @ W)) with output ``z`` and whose else-branch holds
    an If with output ``else_name``: sibling subgraphs, each SSA on its own, so both may name it ``z``."""
    body = h.make_graph([h.make_node("Identity", ["c"], ["co"]), h.make_node("MatMul", ["hh", "W"], ["m"]),
                         h.make_node("Relu", ["m"], ["h2"])], "body",
                        [_vi("i", [], T.INT64), _vi("c", [], T.BOOL), _vi("hh", [4, 8])],
                        [_vi("co", [], T.BOOL), _vi("h2", [4, 8])])
    then_b = h.make_graph([h.make_node("Loop", ["M", "", "x"], ["z"], body=body)], "then", [], [_vi("z", [4, 8])])
    inner = h.make_node("If", ["cc"], [else_name],
                        then_branch=h.make_graph([h.make_node("Relu", ["x"], ["t1"])], "t", [], [_vi("t1", [4, 8])]),
                        else_branch=h.make_graph([h.make_node("Neg", ["x"], ["e1"])], "e", [], [_vi("e1", [4, 8])]))
    else_b = h.make_graph([inner], "else", [], [_vi(else_name, [4, 8])])
    g = h.make_graph([h.make_node("If", ["cc"], ["y"], then_branch=then_b, else_branch=else_b)], "g",
                     [_vi("x", [4, 8]), _vi("cc", [], T.BOOL)], [_vi("y", [4, 8])],
                     [nh.from_array(np.ones((8, 8), np.float32), "W"), nh.from_array(np.array(3, np.int64), "M")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)  # a valid model
    return m


def test_sibling_subgraphs_reusing_a_name_do_not_break_the_unrolled_memory_walks():
    """The unrolling plan was keyed by a control-flow node's output names, which sibling subgraphs may share: the
    else-branch's If overwrote the then-branch Loop's entry and the walks raised KeyError('then_branch') on a
    valid model the counts read before. Keyed by where the node is, the walks give what they give with the names
    apart."""
    same, apart = analyze_onnx(_if_whose_branches_reuse_a_name("z")), analyze_onnx(_if_whose_branches_reuse_a_name("z2"))
    assert (same.peak_live_activation_bytes, same.graph_saved_bytes) == \
        (apart.peak_live_activation_bytes, apart.graph_saved_bytes)
    assert same.notes == apart.notes and not any("do not unroll" in n for n in same.notes), same.notes


def test_the_simulated_h100_memory_is_read_when_a_horus_cluster_is_built_and_must_be_one_size(tmp_path):
    """The measured H100's memory is read from the dataset's provenance when a Horus cluster is built, not when
    the module is imported (every simulation imports it); provenance naming two sizes is refused, not averaged."""
    import json

    import pytest

    from perfpredict.sim.horus_workload import h100_memory_gb, horus_cluster

    meta = tmp_path / "two.meta.json"
    meta.write_text(json.dumps({"runs": [{"device_info": {"memory_bytes": 85_017_493_504}},
                                         {"device_info": {"memory_bytes": 80_000_000_000}}]}))
    with pytest.raises(ValueError, match="2 device memory sizes"):
        h100_memory_gb(meta)
    assert {s.gpu_mem_gb for s in horus_cluster("testbed", gpu_mem_gb=16.0).servers} == {16.0}
    assert {s.gpu_mem_gb for s in horus_cluster("scale").servers} == {h100_memory_gb()}
