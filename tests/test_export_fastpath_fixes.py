"""A frozen transformer encoder's graph and fvcore count are those of the layers the training step runs.

nn.TransformerEncoderLayer takes a fused inference fast path in eval mode whenever none of its weights requires a
grad, grad enabled or not, so a frozen encoder's export hid its attention matmuls (222 nodes against 301) and
fvcore counted 2.1M of its 4.5M MACs."""
from __future__ import annotations

import torch
import torch.nn as nn

from perfpredict.features.fvcore_check import fvcore_counts
from perfpredict.features.graph import analyze_onnx
from perfpredict.features.onnx_export import export_onnx


def _encoder(frozen: bool) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    return enc.requires_grad_(not frozen)


def test_a_frozen_encoders_graph_and_fvcore_count_are_the_trained_ones() -> None:
    x = torch.randn(2, 8, 32)
    enc = _encoder(True).train()
    frozen = analyze_onnx(export_onnx(enc, (x,)).model_proto)
    trained = analyze_onnx(export_onnx(_encoder(False), (x,)).model_proto)
    assert frozen.op_counts == trained.op_counts and frozen.macs == trained.macs > 0
    assert fvcore_counts(_encoder(True), (x,))["macs"] == fvcore_counts(_encoder(False), (x,))["macs"] > 0
    assert torch.backends.mha.get_fastpath_enabled()  # the process-wide switch is put back
    assert enc.training and not any(p.requires_grad for p in enc.parameters())  # the model is left as it was
