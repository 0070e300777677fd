"""ONNX files written by torch's dynamo exporter (``torch.onnx.export(..., dynamo=True)``, the default since torch
2.9) read as the TorchScript exporter's (``dynamo=False``) of the same model: a recurrent op's zero initial state,
which the dynamo exporter folds into a batch-sized initializer, is no parameter; an ``Attention`` node (what it
writes for ``scaled_dot_product_attention`` at opset 23) keeps for backward what its decomposed form keeps."""

import contextlib
import io
import logging
import warnings

import pytest
import torch
from torch import nn

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")

from perfpredict.estimators.arch import from_onnx_file  # noqa: E402


def _export(model: nn.Module, args: tuple, path, **kwargs):
    """``model`` exported to ``path`` in eval mode, the exporters' chatter silenced."""
    model.eval()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        was = logging.root.manager.disable
        logging.disable(logging.CRITICAL)
        try:
            torch.onnx.export(model, args, str(path), **kwargs)
        finally:
            logging.disable(was)
    return path


class _RecurrentLM(nn.Module):
    def __init__(self, cell: type[nn.Module]) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.rnn = cell(16, 24, num_layers=2, batch_first=True, bidirectional=cell is nn.GRU)
        self.head = nn.Linear(24 * (2 if cell is nn.GRU else 1), 50)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embed(ids))[0])


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU])
def test_a_dynamo_exports_zero_initial_state_is_no_parameter(tmp_path, cell):
    """The dynamo exporter folds the zeros nn.LSTM / nn.GRU start from into an initializer [layers, batch, hidden]
    read only as the op's initial_h (and initial_c): it was counted as parameters (the 2-layer LSTM LM below, 10,882
    parameters, exported at batch 8: 11,074; the bidirectional GRU's 19,954: 20,338), its bytes charged a gradient
    and optimizer state, a count that grew with the export's batch. The TorchScript export computes them from the input's shape."""
    torch.manual_seed(0)
    model = _RecurrentLM(cell)
    ids = torch.randint(0, 50, (8, 12))
    dyn = from_onnx_file(_export(model, (ids,), tmp_path / "dyn.onnx", dynamo=True))
    ts = from_onnx_file(_export(model, (ids,), tmp_path / "ts.onnx", dynamo=False))
    torch_count = sum(p.numel() for p in model.parameters())
    assert ts.param_count == torch_count
    assert dyn.param_count == torch_count
    # the dynamo file's int64 shape constants stay in its parameter bytes: at most a few hundred bytes
    assert 0 <= dyn.param_bytes - 4 * torch_count < 512
    assert dyn.forward_macs_per_sample == ts.forward_macs_per_sample
    assert dyn.graph_saved_bytes_per_sample == ts.graph_saved_bytes_per_sample


class _SelfAttention(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.out(torch.relu(y.transpose(1, 2).reshape(b, n, d)))


def attention_both_ways(model: nn.Module, x: torch.Tensor, tmp_path):
    """(the dynamo export at opset 23, with one ``Attention`` node; at opset 20, decomposed), read as files, their
    MACs checked equal."""
    fused = from_onnx_file(_export(model, (x,), tmp_path / "op23.onnx", dynamo=True, opset_version=23))
    decomposed = from_onnx_file(_export(model, (x,), tmp_path / "op20.onnx", dynamo=True, opset_version=20))
    assert fused.op_counts.get("Attention") == 1 and "Attention" not in decomposed.op_counts
    assert fused.forward_macs_per_sample == decomposed.forward_macs_per_sample
    return fused, decomposed

def test_an_attention_node_keeps_what_its_decomposed_form_keeps(tmp_path):
    """At opset 23 the dynamo exporter writes scaled_dot_product_attention as one ``Attention`` node, below it as
    MatMul, Softmax, MatMul: the saved-for-backward rules had none for Attention, so the same model's training
    step was read as keeping its query, key, value and attention probabilities at opset 20 and none of them at
    opset 23 (here 15,360 bytes per sample where the decomposed graph's rules give 66,560)."""
    torch.manual_seed(0)
    model = _SelfAttention()
    fused, decomposed = attention_both_ways(model, torch.randn(2, 40, 32), tmp_path)
    assert fused.graph_saved_bytes_per_sample == decomposed.graph_saved_bytes_per_sample
    # the decomposed form's 1-element scale initializer is counted as a parameter (a learnable scalar looks the same)
    assert fused.param_count == decomposed.param_count - 1 == sum(p.numel() for p in model.parameters())
