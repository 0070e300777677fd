"""Saved-tensor bytes: what autograd keeps for backward, counted as the GPU's kernels keep it."""

from __future__ import annotations

import torch
from torch import nn

from perfpredict.features.saved import saved_bytes_split, saved_tensor_bytes


def _per_sample(model, make_input, loss_fn=None) -> int:
    return saved_tensor_bytes(model, (make_input(2),), loss_fn) - saved_tensor_bytes(model, (make_input(1),), loss_fn)


def test_an_mlp_saves_inputs_relu_outputs_and_a_one_byte_dropout_mask():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 4))
    per = _per_sample(model, lambda b: torch.randn(b, 16))
    # Linear 1 keeps its input (16 floats), ReLU its output (32 floats), dropout a bool mask (32 bytes, as
    # CUDA's fused kernel; the CPU's own path would keep 32 float noise values), Linear 2 its input (32 floats).
    assert per == 16 * 4 + 32 * 4 + 32 + 32 * 4
    assert model.training  # counted in training mode


def test_eval_mode_dropout_and_the_functional_are_restored():
    f_dropout, sdpa = nn.functional.dropout, nn.functional.scaled_dot_product_attention
    saved_tensor_bytes(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1)), (torch.randn(2, 4),))
    assert nn.functional.dropout is f_dropout and nn.functional.scaled_dot_product_attention is sdpa
    x = torch.ones(1000)
    assert (nn.functional.dropout(x, 0.5, True) == 0).any()  # the real dropout is back


def test_the_loss_counts_a_language_models_log_softmax():
    torch.manual_seed(0)
    vocab, seq = 500, 16
    model = nn.Sequential(nn.Embedding(vocab, 8), nn.Linear(8, vocab))

    def ids(b):
        return torch.randint(0, vocab, (b, seq))

    def ce(out):
        return nn.functional.cross_entropy(out.reshape(-1, vocab), torch.zeros(out.shape[0] * seq, dtype=torch.long))

    without, with_loss = _per_sample(model, ids), _per_sample(model, ids, ce)
    assert with_loss - without >= seq * vocab * 4  # log-softmax of the logits, kept until backward


def test_attention_keeps_no_score_matrix_even_with_dropout():
    torch.manual_seed(0)
    seq, d = 128, 32
    layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=64, dropout=0.1, batch_first=True)
    per = _per_sample(layer, lambda b: torch.randn(b, seq, d))
    assert per < 4 * seq * seq * 4  # the 4 heads' L x L float scores are not kept (fused attention)
    assert per > 8 * seq * d  # but the layer's activations are


def test_split_of_a_zoo_workload_includes_its_loss():
    from perfpredict.workload.zoo import load_zoo_workload

    wl = load_zoo_workload("lstm", {"embed": 16, "hidden": 32, "layers": 1, "seq_len": 8, "vocab": 300})
    per, fixed = saved_bytes_split(wl)
    torch.manual_seed(0)
    model = wl.build_model()
    no_loss = saved_tensor_bytes(model, wl.inputs(2)) - saved_tensor_bytes(model, wl.inputs(1))
    assert per - no_loss >= 8 * 300 * 4 and fixed >= 0
