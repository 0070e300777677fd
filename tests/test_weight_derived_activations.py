"""The exporter's weight-derived tensors (a transposed weight feeding a MatMul, an LSTM's sliced and
concatenated gate weights, a tied embedding's transposed table) are weights, constant-folded at run time: the
graph's activation bytes leave them out, as its peak-live walk and its kernels already did. Counted, they were
the whole ``activation_bytes_fixed`` of every zoo graph that had one (e.g. 1.1 GB on the largest transformer),
which Horus' eq. 2 then charged twice in training (activations and their gradients)."""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto as TP
from onnx import helper
from onnx import numpy_helper as nh

from perfpredict.features.graph import analyze_onnx
from perfpredict.features.onnx_export import export_onnx


def test_a_transposed_weight_is_no_activation():
    w = nh.from_array(np.zeros((16, 8), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
         helper.make_node("MatMul", ["x", "wt"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 4, 8])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [2, 4, 16])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    s = analyze_onnx(onnx.shape_inference.infer_shapes(m))
    # the input (2*4*8 floats) and the MatMul's output (2*4*16 floats); not the 16*8-float transposed weight
    assert s.activation_bytes == 4 * (2 * 4 * 8 + 2 * 4 * 16)
    assert "Transpose" not in s.activation_bytes_by_op


class TiedLM(torch.nn.Module):
    """An embedding whose table is also the output projection (GPT-2's tied weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(500, 32)
        self.lstm = torch.nn.LSTM(32, 32, batch_first=True)

    def forward(self, x):
        h, _ = self.lstm(self.emb(x))
        return h @ self.emb.weight.t()


def _act(model, batch: int) -> int:
    x = torch.randint(0, 500, (batch, 12))
    return analyze_onnx(export_onnx(model, (x,)).model_proto).activation_bytes


def test_tied_table_and_lstm_gate_weights_leave_no_fixed_activation_bytes():
    torch.manual_seed(0)
    model = TiedLM().eval()
    a1, a2 = _act(model, 1), _act(model, 2)
    # what does not grow with the batch is the exporter's shape arithmetic (a few int64 vectors, 128 bytes
    # here), not the 64 000-byte transposed table nor the LSTM's 33 000 bytes of re-sliced gate weights
    assert a1 > 0 and 0 <= 2 * a1 - a2 < 1024
