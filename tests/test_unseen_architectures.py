"""The model files of ``benchmarks/unseen_architectures.py`` (architectures in no zoo family): their graph
features count the parameters and forward MACs that hand formulas give, each op the way its kernel works (the
fused causal attention's two products, dilated Conv1d, depthwise convolutions, transposed convolutions), and
the saved-for-backward rules keep what autograd keeps. Counts only, no timing."""

from __future__ import annotations

import runpy
from types import SimpleNamespace

import pytest
import torch

from perfpredict.features import extract_features
from perfpredict.workload.loader import load_model_file
from tests.conftest import REPO

MODELS = REPO / "benchmarks" / "unseen_models"


def _gpt(m) -> tuple[int, int]:
    v, w, s, n = m.VOCAB, m.WIDTH, m.SEQ, m.LAYERS
    params = v * w + s * w + n * (12 * w * w + 13 * w) + 2 * w  # the head is the embedding (tied)
    # per layer: QKV, projection and MLP products per token, then Q K^T and A V over every head (w = heads x dim)
    return params, n * (s * 12 * w * w + 2 * s * s * w) + s * w * v


def _mixer(m) -> tuple[int, int]:
    t, w, ht, hc, d, p = m.TOKENS, m.WIDTH, m.TOKEN_HIDDEN, m.CHANNEL_HIDDEN, m.DEPTH, m.PATCH
    block = 4 * w + 2 * t * ht + ht + t + 2 * w * hc + hc + w
    params = 3 * p * p * w + w + d * block + 2 * w + w * m.CLASSES + m.CLASSES
    return params, t * w * 3 * p * p + d * (w * 2 * t * ht + t * 2 * w * hc) + w * m.CLASSES


def _effnet(m) -> tuple[int, int]:
    hw, cin = 32, 16
    params, macs = 3 * 9 * 16 + 2 * 16, hw * hw * 16 * 3 * 9
    for e, cout, s in m.BLOCKS:
        mid, sq, out = cin * e, max(1, cin // 4), hw // s
        if e != 1:
            params, macs = params + mid * cin + 2 * mid, macs + hw * hw * mid * cin
        params += mid * 9 + 2 * mid + 2 * mid * sq + sq + mid + mid * cout + 2 * cout  # depthwise, SE, project
        macs += out * out * mid * 9 + 2 * mid * sq + out * out * cout * mid
        hw, cin = out, cout
    return params + cin * 320 + 2 * 320 + 3210, macs + hw * hw * 320 * cin + 3200


def _densenet(m) -> tuple[int, int]:
    hw, c, g = 32, m.STEM, m.GROWTH
    params, macs = 3 * 9 * c, hw * hw * c * 3 * 9
    for b in range(m.BLOCKS):
        for _ in range(m.LAYERS):
            params, macs = params + 2 * c + c * 9 * g, macs + hw * hw * g * c * 9
            c += g
        if b < m.BLOCKS - 1:
            params, macs = params + 2 * c + c * (c // 2), macs + hw * hw * c * (c // 2)
            c, hw = c // 2, hw // 2
    return params + 2 * c + 10 * c + 10, macs + 10 * c


def _wavenet(m) -> tuple[int, int]:
    c, k, n, length, out = m.CHANNELS, m.SKIP, m.LAYERS, m.LENGTH, m.CLASSES
    layer = c * 2 * c * 2 + 2 * c + c * k + k  # dilated kernel-2 conv to 2c (gate halves), skip 1x1
    params = 2 * c + n * layer + (n - 1) * (c * c + c) + k * k + k + k * out + out
    macs = length * (c + n * (2 * c * c * 2 + k * c) + (n - 1) * c * c + k * k + out * k)
    return params, macs


def _vae(m) -> tuple[int, int]:
    chans, z = (3, 32, 64, 128), m.LATENT
    params = sum(a * b * 16 + b for a, b in zip(chans, chans[1:]))  # encoder convs, kernel 4
    params += sum(a * b * 16 + a for a, b in zip(chans, chans[1:]))  # decoder transposed convs: bias of each out
    params += 2 * (2048 * z + z) + z * 2048 + 2048
    enc = sum((32 >> (i + 1)) ** 2 * chans[i + 1] * chans[i] * 16 for i in range(3))
    # a transposed conv: every input element times C_out x kernel elements
    dec = sum((4 << i) ** 2 * chans[3 - i] * chans[2 - i] * 16 for i in range(3))
    return params, enc + dec + 3 * 2048 * z


@pytest.mark.parametrize(("name", "formula"), [
    ("gpt_decoder", _gpt), ("mlp_mixer", _mixer), ("effnet_se", _effnet), ("densenet_small", _densenet),
    ("wavenet_tcn", _wavenet), ("conv_vae", _vae)])
def test_parameters_and_macs_match_hand_formulas(name, formula):
    workload = load_model_file(MODELS / f"{name}.py")
    params, macs = formula(SimpleNamespace(**runpy.run_path(str(MODELS / f"{name}.py"))))  # the file's constants
    model = workload.build_model()
    assert sum(p.numel() for p in model.parameters()) == params
    feats = extract_features(workload, use_fvcore=False)
    assert feats.available, feats.error
    # the export's weights: the parameters and batch norm's running statistics (not its int64 step count)
    assert feats.param_bytes - sum(b.nbytes for b in model.buffers() if b.is_floating_point()) == 4 * params
    assert (feats.forward_macs_per_sample, feats.forward_macs_fixed) == (macs, 0)


def test_the_densenets_saved_bytes_by_the_rules_are_autograds():
    """Concatenation keeps nothing, an average pool its input: the graph rules' count for the DenseNet equals the
    exact count autograd keeps (with its cross-entropy loss's log-softmax; less the loss's int64 label, 8 bytes
    a sample, which is not in the graph)."""
    from perfpredict.features.saved import saved_tensor_bytes

    workload = load_model_file(MODELS / "densenet_small.py")
    torch.manual_seed(0)
    model = workload.build_model()
    feats = extract_features(workload, model=model, use_fvcore=False)
    model.train()
    exact = [saved_tensor_bytes(model, (workload.inputs(b)[0],), loss_fn=lambda out: torch.nn.functional.cross_entropy(
        out, torch.zeros(len(out), dtype=torch.long))) for b in (2, 4)]
    assert feats.graph_saved_bytes_per_sample == (exact[1] - exact[0]) // 2 - 8
