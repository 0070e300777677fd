"""Graph features without passing the weights around: shape inference and onnxruntime get a copy of the exported
graph whose bulk weights carry no bytes (perfpredict.features.weightless), and every feature stays what it was
with them. Serialising a 38M-parameter encoder's 150 MB for each of them took 5.3 s of its 8.6 s extraction."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh
from onnx import shape_inference
from torch import nn

import perfpredict.features.weightless as weightless
from perfpredict.features import extract_features
from perfpredict.features.graph import _runtime_shapes, analyze_onnx
from perfpredict.features.onnx_export import export_onnx
from perfpredict.workload.spec import Workload, WorkloadRef
from perfpredict.workload.zoo import load_zoo_workload


class _Encoder(nn.Module):
    """An embedding, two encoder layers (whose attention reshapes onnxruntime resolves) and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(1000, 128)
        layer = nn.TransformerEncoderLayer(128, 4, 512, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(128, 3)

    def forward(self, x):
        return self.head(self.enc(self.emb(x)).mean(1))


def _encoder_workload() -> Workload:
    return Workload(name="encoder", ref=WorkloadRef("file", "encoder.py"), build_model=_Encoder,
                    example_inputs=lambda b: torch.randint(0, 1000, (b, 12)))


def _weight_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def _without_bulk_weights(monkeypatch) -> None:
    """Every weight counted as small: the copies carry all of them, as before."""
    monkeypatch.setattr(weightless, "BULK_ELEMENTS", 2**62)


def test_shape_inference_and_onnxruntime_are_not_handed_the_weights(monkeypatch):
    seen: dict[str, list[int]] = {"infer_shapes": [], "onnxruntime": []}
    infer, session = shape_inference.C.infer_shapes, onnxruntime.InferenceSession

    def counted_infer(model_bytes, *args):
        seen["infer_shapes"].append(len(model_bytes))
        return infer(model_bytes, *args)

    def counted_session(model_bytes, *args, **kwargs):
        seen["onnxruntime"].append(len(model_bytes))
        return session(model_bytes, *args, **kwargs)

    monkeypatch.setattr(shape_inference.C, "infer_shapes", counted_infer)
    monkeypatch.setattr(onnxruntime, "InferenceSession", counted_session)
    f = extract_features(_encoder_workload(), use_fvcore=False)
    assert f.available and f.error is None, f
    weights = _weight_bytes(_Encoder())
    # one inference and one run per export (batch 1 and 2), each given the graph without its 2 MB of weights
    assert len(seen["infer_shapes"]) == len(seen["onnxruntime"]) == 2, seen
    assert max(seen["infer_shapes"] + seen["onnxruntime"]) < weights / 10, (seen, weights)


@pytest.mark.parametrize("target", ["encoder", "resnet", "lstm"])
def test_every_feature_is_what_the_graph_with_its_weights_gives(target, monkeypatch):
    w = _encoder_workload() if target == "encoder" else load_zoo_workload(target, {})
    graphs_now: dict = {}
    now = extract_features(w, graphs=graphs_now).model_dump()
    _without_bulk_weights(monkeypatch)
    graphs_before: dict = {}
    before = extract_features(w, graphs=graphs_before).model_dump()
    assert now["available"] and now == before
    assert graphs_now == graphs_before  # GraphStats at both batch sizes, every field


def test_inferred_shapes_equal_onnxs_on_the_whole_proto():
    torch.manual_seed(0)
    proto = export_onnx(_Encoder(), (torch.randint(0, 1000, (2, 12)),)).model_proto
    assert weightless.without_bulk_data(proto)[1], "the encoder's weights should be bulk weights"
    assert weightless.infer_shapes(proto) == shape_inference.infer_shapes(proto, data_prop=True)
    # the upload route (shape arithmetic folded, nothing run) reads the same shapes
    assert analyze_onnx(proto, run_for_shapes=False).macs == analyze_onnx(proto).macs > 0


def test_a_bfloat16_weight_reaches_onnxruntime_as_it_is(monkeypatch):
    """numpy has no bfloat16: the weight goes to onnxruntime under its ONNX type, and the run sees its shapes."""
    import ml_dtypes

    wt = nh.from_array(np.ones((32, 64), ml_dtypes.bfloat16), "W")
    g = h.make_graph([h.make_node("Cast", ["W"], ["wf"], to=T.FLOAT), h.make_node("MatMul", ["x", "wf"], ["y"])],
                     "g", [h.make_tensor_value_info("x", T.FLOAT, [3, 32])],
                     [h.make_tensor_value_info("y", T.FLOAT, [3, 64])], [wt])
    proto = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    assert weightless.is_bulk_weight(proto.graph.initializer[0])
    now = _runtime_shapes(proto, ["wf", "y"])
    _without_bulk_weights(monkeypatch)
    assert now == _runtime_shapes(proto, ["wf", "y"]) == {"wf": ([32, 64], 4, True), "y": ([3, 64], 4, True)}


def test_the_copy_leaves_the_model_proto_as_it_was():
    torch.manual_seed(0)
    proto = export_onnx(nn.Sequential(nn.Linear(64, 64), nn.ReLU()), (torch.randn(2, 64),)).model_proto
    kept = onnx.ModelProto()
    kept.CopyFrom(proto)
    light, bulk = weightless.without_bulk_data(proto)
    assert [proto.graph.initializer[i].name for i, _ in bulk] == ["0.weight"]
    assert proto == kept and light != proto
    assert light.graph.node == proto.graph.node and light.graph.input == proto.graph.input
