"""Items session 43 left alone: ArchFeatures.as_dict keeps the frozen parameters, an ONNX subgraph's weights are in
the parameter counts, and this CPU's calibrations are ordered by when they were made, not by their date's text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from perfpredict.estimators.arch import ArchFeatures, from_onnx_proto, from_table_row, load_onnx_bytes

REPO = Path(__file__).resolve().parents[1]
BATCH = "N"


# -- ArchFeatures.as_dict ------------------------------------------------------------------------------------------

def _zoo_arch_with_frozen() -> ArchFeatures:
    import csv
    from dataclasses import replace

    with open(REPO / "datasets" / "zoo_features.csv", newline="") as fh:
        arch = from_table_row(next(csv.DictReader(fh)))
    return replace(arch, frozen_param_bytes=arch.param_bytes / 4, frozen_param_count=round(arch.param_count / 4))


def test_as_dict_round_trips_the_frozen_parameters():
    """as_dict left frozen_param_bytes and frozen_param_count out, so from_dict(as_dict()) (a calibration's
    architectures, profiled.json, a feature vector made from features at hand) had every parameter trained."""
    arch = _zoo_arch_with_frozen()
    d = arch.as_dict()
    assert d["frozen_param_bytes"] == arch.frozen_param_bytes > 0
    assert d["frozen_param_count"] == arch.frozen_param_count > 0
    assert ArchFeatures.from_dict(d) == arch


def test_a_feature_vector_made_by_as_dict_keeps_its_frozen_parameters_on_the_card():
    from perfpredict import Predictor

    arch = _zoo_arch_with_frozen()
    card = Predictor.load(REPO / "trained_models").predict(features=arch.as_dict(), batch_sizes=[4],
                                                           device_type="cpu")
    assert card.model.frozen_param_bytes == int(arch.frozen_param_bytes)
    assert card.model.trainable_parameters == int(arch.param_count - arch.frozen_param_count)
    assert not any("unknown feature key" in n for n in card.prediction.notes), card.prediction.notes


# -- an ONNX subgraph's weights ------------------------------------------------------------------------------------

def _model(nodes, inputs, outputs, inits):
    g = h.make_graph(nodes, "g", inputs, outputs, inits)
    return load_onnx_bytes(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString())


def _loop_with_body_weights(trips: int = 10):
    """A Loop of ``trips`` iterations over ``h -> Relu(h @ Wl)`` whose body holds Wl [16, 16] itself, and inside
    it an If whose branches hold Wt and We [16, 16] each (two levels of subgraph)."""
    wl, wt, we = (nh.from_array(np.ones((16, 16), np.float32), n) for n in ("Wl", "Wt", "We"))
    then_b = h.make_graph([h.make_node("MatMul", ["h_mm", "Wt"], ["yt"])], "then", [],
                          [h.make_tensor_value_info("yt", T.FLOAT, [BATCH, 16])], [wt])
    else_b = h.make_graph([h.make_node("MatMul", ["h_mm", "We"], ["ye"])], "else", [],
                          [h.make_tensor_value_info("ye", T.FLOAT, [BATCH, 16])], [we])
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]), h.make_node("MatMul", ["h_in", "Wl"], ["h_mm"]),
         h.make_node("If", ["cond_in"], ["h_if"], then_branch=then_b, else_branch=else_b),
         h.make_node("Relu", ["h_if"], ["h_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("h_in", T.FLOAT, [BATCH, 16])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("h_out", T.FLOAT, [BATCH, 16])],
        [wl])
    inits = [nh.from_array(np.array(True), "c"), nh.from_array(np.array(trips, np.int64), "M")]
    return _model([h.make_node("Loop", ["M", "c", "x"], ["y"], body=body)],
                  [h.make_tensor_value_info("x", T.FLOAT, [BATCH, 16])],
                  [h.make_tensor_value_info("y", T.FLOAT, [BATCH, 16])], inits)


@pytest.mark.parametrize("trips", [1, 10])
def test_the_weights_inside_a_loop_body_and_its_if_branches_are_counted_once(trips):
    """A subgraph's initializers were in neither param_count nor param_bytes (the main graph's only): a Loop
    whose body holds its weights had 2 parameters. Each counts once, whatever the trip count (the iterations
    share them), and both of an If's branches count (both are stored, whichever runs)."""
    f = from_onnx_proto(_loop_with_body_weights(trips), "loop")
    assert f.forward_macs_per_sample == trips * 2 * 16 * 16  # the body runs `trips` times, one branch each
    assert f.param_count == 3 * 16 * 16  # Wl, Wt, We; the Loop's scalars c (bool) and M (int64) are no parameters
    assert f.param_bytes == 3 * 16 * 16 * 4 + 1 + 8
    assert f.lookup_param_bytes <= f.param_bytes


def test_a_loop_with_its_weights_in_the_body_counts_as_with_them_in_the_main_graph():
    from tests.test_graph_fixes import _loop

    outside = from_onnx_proto(_loop(), "outside")  # W [16, 16] a main-graph initializer the body reads
    wl = nh.from_array(np.ones((16, 16), np.float32), "W")
    proto = _loop()
    body = next(a.g for a in proto.graph.node[0].attribute if a.name == "body")
    body.initializer.append(wl)
    kept = [t for t in proto.graph.initializer if t.name != "W"]
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(kept)
    inside = from_onnx_proto(proto, "inside")
    assert (inside.param_count, inside.param_bytes) == (outside.param_count, outside.param_bytes)
    assert inside.forward_macs_per_sample == outside.forward_macs_per_sample == 10 * 16 * 16


# -- this CPU's calibrations, newest first --------------------------------------------------------------------------

def test_this_cpus_calibrations_are_ordered_by_when_they_were_made_not_by_their_dates_text(tmp_path):
    """_local_cpu_first sorted the calibrations to this CPU by created_at as text: a date with another UTC offset
    (13:00+05:00 is 08:00 UTC) or without fractional seconds ('Z' sorts after '.') came first though made
    earlier, and an unreadable date came before every real one. Now by _made_at, an unreadable date last."""
    from perfpredict.hostinfo import cpu_id, cpu_model_name
    from perfpredict.predictor import Predictor, _local_cpu_first, _measured_on_this_cpu
    from tests.test_device_calibration import _calibration_from_dataset, _models_with

    if cpu_id() is None:
        pytest.skip("this machine has no cpu_id: no calibration is to this CPU")
    made = {"newest": "2026-11-26T12:00:00.250+00:00", "second": "2026-11-26T12:00:00Z",
            "third": "2026-11-26T13:00:00+05:00", "unreadable": "not a date"}
    calibs = []
    for name, at in made.items():
        c, _ = _calibration_from_dataset("cpu_xeon_2vcpu", "cpu_epyc_2vcpu", device_name=cpu_model_name(),
                                         cpu=cpu_id(), name=name)
        c.created_at = at
        calibs.append(c)
    pred = Predictor.load(_models_with(tmp_path, ("cpu_epyc_2vcpu",), calibs))
    assert pred.unusable_calibrations == []
    order = [s.name for s in _local_cpu_first([pred.sets[n] for n in reversed(list(made))])]
    assert order == ["newest", "second", "third", "unreadable"]
    measured_here = [n for n in ("cpu_epyc_2vcpu",) if pred.sets[n].cpu_id == cpu_id()
                     and _measured_on_this_cpu(pred.sets[n])]
    assert pred.model_set("cpu").name == (measured_here[0] if measured_here else "newest")
