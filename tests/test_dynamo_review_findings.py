"""Review of the dynamo-export reading (a recurrent op's folded zero state, the opset-23 ``Attention`` node) and
of the ONNX external-data reads: a learned initial state stays a parameter; an Attention node with fewer key/value
heads than query heads, or with a past key and value, keeps and computes what its decomposed form does; a negative
external offset or length, and an external file that cannot be read, are one-line errors."""

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from perfpredict.estimators.arch import ArchFeaturesError, from_onnx_file  # noqa: E402
from tests.test_onnx_dynamo_exports import _export, attention_both_ways  # noqa: E402


class _LearnedStateLSTM(nn.Module):
    """An LSTM whose initial hidden and cell states are parameters (``[layers, batch, hidden]``)."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.rnn = nn.LSTM(16, 24, num_layers=2, batch_first=True)
        self.h0 = nn.Parameter(torch.randn(2, batch, 24))
        self.c0 = nn.Parameter(torch.randn(2, batch, 24))
        self.head = nn.Linear(24, 50)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embed(ids), (self.h0, self.c0))[0])


@pytest.mark.parametrize("dynamo", [True, False])
def test_a_learned_initial_state_stays_a_parameter(tmp_path, dynamo):
    """Both exporters write an ``nn.Parameter`` initial state as an initializer read only as the LSTM's
    initial_h / initial_c, which was taken for the dynamo exporter's folded zeros: 11,266 parameters read as
    10,882 (the TorchScript export too, which was read right before). Its values are not zero: a parameter."""
    torch.manual_seed(0)
    model = _LearnedStateLSTM(batch=4)
    path = _export(model, (torch.randint(0, 50, (4, 12)),), tmp_path / "m.onnx", dynamo=dynamo)
    assert from_onnx_file(path).param_count == sum(p.numel() for p in model.parameters()) == 11_266


class _GroupedQueryAttention(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4, kv_heads: int = 2) -> None:
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d * kv_heads // heads)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        e = d // self.heads
        q = self.q(x).reshape(b, n, self.heads, e).transpose(1, 2)
        k, v = self.kv(x).reshape(b, n, 2, self.kv_heads, e).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        return self.out(torch.relu(y.transpose(1, 2).reshape(b, n, d)))


def test_a_grouped_query_attention_node_keeps_its_key_repeated_to_the_querys_heads(tmp_path):
    """With 2 key/value heads for 4 query heads the decomposed form (opset 20) repeats K and V to 4 heads before
    its MatMuls, which keep them: the Attention node (opset 23) was read as keeping K at 2 heads, 53,760 bytes per
    sample where the decomposed graph's rules give 56,320."""
    torch.manual_seed(0)
    fused, decomposed = attention_both_ways(_GroupedQueryAttention(), torch.randn(2, 40, 32), tmp_path)
    assert fused.graph_saved_bytes_per_sample == decomposed.graph_saved_bytes_per_sample == 56_320


B, H, L, P, E = 2, 4, 6, 10, 8  # batch, heads, new positions, past positions, head size


def _with_past(fused: bool):
    """Self-attention over L new positions and P past ones: one opset-23 Attention node given past_key and
    past_value, or its decomposed form (Concat of past and new, scaled MatMul, Softmax, MatMul)."""
    rng = np.random.default_rng(0)
    w = [numpy_helper.from_array(rng.standard_normal((E, E)).astype(np.float32), f"w{i}") for i in range(3)]
    past = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, H, P, E]) for n in ("pk", "pv")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, H, L, E])
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [t]) for i, t in enumerate("qkv")]
    if fused:
        nodes.append(helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["a"]))
    else:
        scale = numpy_helper.from_array(np.array(E ** -0.25, dtype=np.float32), "s")
        w.append(scale)
        nodes += [helper.make_node("Concat", ["pk", "k"], ["kk"], axis=2),
                  helper.make_node("Concat", ["pv", "v"], ["vv"], axis=2),
                  helper.make_node("Mul", ["q", "s"], ["qs"]),
                  helper.make_node("Transpose", ["kk"], ["kt"], perm=[0, 1, 3, 2]),
                  helper.make_node("Mul", ["kt", "s"], ["ks"]),
                  helper.make_node("MatMul", ["qs", "ks"], ["sc"]),
                  helper.make_node("Softmax", ["sc"], ["pr"], axis=-1),
                  helper.make_node("MatMul", ["pr", "vv"], ["a"])]
    nodes.append(helper.make_node("Relu", ["a"], ["y"]))
    g = helper.make_graph(nodes, "g", [x, *past], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, H, L, E])], w)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])


def test_an_attention_node_with_a_past_counts_the_past_positions(tmp_path):
    """The past key and value are attended to before the new ones (S = P + L): the node's MACs and its
    probabilities counted L positions of keys where its decomposed form's MatMuls take P + L."""
    cards = []
    for fused in (True, False):
        onnx.save_model(_with_past(fused), str(tmp_path / f"{fused}.onnx"))
        cards.append(from_onnx_file(tmp_path / f"{fused}.onnx"))
    fused, decomposed = cards
    attention_macs = H * L * (P + L) * 2 * E  # per sample: Q K^T and P V
    assert fused.macs_by_op["Attention"] == attention_macs
    assert fused.forward_macs_per_sample == decomposed.forward_macs_per_sample
    assert fused.graph_saved_bytes_per_sample == decomposed.graph_saved_bytes_per_sample


def _reshaping_model():
    """x [N, 64] @ W [64, 32], reshaped to [N, 4, 8] by an int64 initializer: a value read from the side file."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([-1, 4, 8], dtype=np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Reshape", ["h", "shape"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _saved_external(path: Path) -> Path:
    onnx.save_model(_reshaping_model(), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=0)
    return path


def test_a_negative_external_offset_is_refused_in_one_line(tmp_path, monkeypatch):
    """onnx before 1.20 parses a negative offset as it is (the installed one refuses it in ExternalDataInfo; its
    parser without that check stands in for the older ones here): the range check passed (offset + length within
    the file) and reading it raised a raw error. It is refused by name."""
    from onnx import external_data_helper

    path = _saved_external(tmp_path / "m.onnx")
    m = onnx.load(str(path), load_external_data=False)
    shape = next(t for t in m.graph.initializer if t.name == "shape")
    next(e for e in shape.external_data if e.key == "offset").value = "-8"
    onnx.save_model(m, str(path))

    class OlderInfo:  # onnx 1.15's ExternalDataInfo: the keys as they are, offset and length as ints
        def __init__(self, tensor) -> None:
            self.location, self.offset, self.length, self.checksum, self.basepath = "", None, None, None, ""
            for e in tensor.external_data:
                setattr(self, e.key, e.value)
            self.offset = None if self.offset is None else int(self.offset)
            self.length = None if self.length is None else int(self.length)

    monkeypatch.setattr(external_data_helper, "ExternalDataInfo", OlderInfo)
    with pytest.raises(ArchFeaturesError, match="negative offset or length") as err:
        from_onnx_file(path)
    assert "\n" not in str(err.value)


def test_an_external_file_that_cannot_be_read_is_one_line(tmp_path, monkeypatch):
    """A side file whose place checks out but that cannot be read (permission denied: simulated, as the tests may
    run as root, who reads any file) raised the loader's raw PermissionError."""
    from onnx import external_data_helper

    def denied(tensor, base_dir):
        raise PermissionError(13, "Permission denied", str(Path(base_dir) / "m.data"))

    path = _saved_external(tmp_path / "m.onnx")
    monkeypatch.setattr(external_data_helper, "load_external_data_for_tensor", denied)
    with pytest.raises(ArchFeaturesError, match="cannot be read.*Permission denied") as err:
        from_onnx_file(path)
    assert "\n" not in str(err.value)
