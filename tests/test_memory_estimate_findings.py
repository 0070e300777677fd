"""Findings of the memory-estimate property scan (Horus eq. 2 on the card, saved-tensor counting)."""

from __future__ import annotations

from perfpredict.profile import ProfileSettings, profile_workload
from perfpredict.workload import load_model_file
from tests.conftest import FAST_TIMING

FROZEN_BACKBONE = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(256, 256)
        self.backbone.requires_grad_(False)   # fine-tuning: only the head trains
        self.head = nn.Linear(256, 4)

    def forward(self, x):
        return self.head(torch.relu(self.backbone(x)))

def build_model():
    return Net()

def example_inputs(batch_size):
    return torch.randn(batch_size, 256)

def make_optimizer(params):
    return torch.optim.SGD(params, lr=0.01, momentum=0.9)
"""


def test_horus_estimate_gives_frozen_parameters_no_gradient(write_model, tmp_path):
    """Eq. 2's parameter term in train mode: weights + gradients + optimizer state. A frozen parameter
    (requires_grad=False) has no gradient, so only the head's bytes are charged twice; the estimate used to
    charge every parameter's gradient (here 2x the backbone's 263 kB that never gets one)."""
    w = load_model_file(write_model(FROZEN_BACKBONE))
    out = profile_workload(w, ProfileSettings(batch_sizes=(4,), timing=FAST_TIMING), out_dir=tmp_path / "out")
    card = out.card
    head = (256 * 4 + 4) * 4
    assert card.model.param_bytes == (256 * 256 + 256) * 4 + head
    est = card.memory[0].analytic
    assert est is not None
    # SGD-momentum keeps one buffer per parameter that got a gradient: the head's
    assert est.parameters == card.model.param_bytes + head + head


CONTRASTIVE = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, y):
        return self.a(x) @ self.b(y).t()   # batch x batch similarity logits, as in a contrastive loss

def build_model():
    return Net()

def example_inputs(batch_size):
    return torch.randn(batch_size, 4), torch.randn(batch_size, 4)
"""


def test_graph_features_of_a_superlinear_graph_are_readable_on_a_card(write_model):
    """A graph that grows faster than the batch (B x B logits) splits at batch 1 and 2 into a negative
    batch-independent part (MACs, activation, graph-saved bytes: -8 here). The card's reader refuses any negative
    count as a damaged file, so the card ``perfpredict profile`` wrote for such a model could not be read back;
    the fixed parts are held at 0 or more, as ArchFeatures holds them."""
    from perfpredict.card import GraphFeatures, _negative_numbers
    from perfpredict.features import extract_features

    w = load_model_file(write_model(CONTRASTIVE))
    feats = extract_features(w, use_fvcore=False)
    assert feats.available
    assert list(_negative_numbers(feats, "features")) == []
    GraphFeatures.model_validate(feats.model_dump())
    # still an upper bound of the exported graph at its batch sizes: B x B grows by more than the split says
    assert feats.activation_bytes_per_sample > 0 and feats.forward_macs_per_sample > 0


BN_MLP = """
import torch
from torch import nn

def build_model():
    return nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))

def example_inputs(batch_size):
    return torch.randn(batch_size, 16)
"""


def test_saved_bytes_of_a_model_that_rejects_batch_1_in_training(write_model):
    """BatchNorm1d refuses one value per channel in training mode, so the saved-tensor count at batch sizes 1
    and 2 failed, and with it ArchFeatures of any MLP with BatchNorm1d (the Predictor's path for a model file),
    although the graph export already falls back to batch sizes 2 and 4 for such models."""
    from perfpredict.estimators.arch import from_workload
    from perfpredict.features.saved import saved_bytes_split

    path = write_model(BN_MLP)
    # per sample: the first Linear's input (16 floats), BatchNorm's input (32) and ReLU's output (32, also the
    # second Linear's input); fixed: BatchNorm's saved mean and 1/std (2 x 32 floats)
    for kernels in ("cuda", "cpu"):
        assert saved_bytes_split(load_model_file(path), kernels=kernels) == ((16 + 32 + 32) * 4, 2 * 32 * 4)
    arch = from_workload(str(path))
    assert arch.saved_bytes_per_sample == (16 + 32 + 32) * 4
