"""Findings of a scan with real user model files unlike the zoo's (a dynamically quantised Linear, a wholly frozen
model, an EmbeddingBag): what the commands told their authors."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from perfpredict.errors import ModelLoadError
from perfpredict.features import extract_features
from perfpredict.workload import load_model_file
from perfpredict.workload.spec import Workload, WorkloadRef

QUANTISED = """
import torch, torch.nn as nn
def build_model():
    m = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).eval()
    return torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8)
def example_inputs(batch_size):
    return torch.randn(batch_size, 32)
"""

FROZEN = """
import torch, torch.nn as nn
def build_model():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).requires_grad_(False)
def example_inputs(batch_size):
    return torch.randn(batch_size, 32)
"""


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("source", [QUANTISED, FROZEN], ids=["quantised", "wholly-frozen"])
def test_training_a_model_with_nothing_to_train_says_so_not_blames_make_optimizer(write_model, source):
    """A quantised model (no nn.Parameter) failed at 'make_optimizer: ValueError: optimizer got an empty
    parameter list' in a file with no make_optimizer; a wholly frozen one got torch's backward error. Neither
    said that the model has nothing to train, or that --mode infer measures it."""
    wl = load_model_file(write_model(source))
    model = wl.build_model()
    with pytest.raises(ModelLoadError) as e:
        wl.optimizer(model.parameters())
    assert e.value.step == "make_optimizer"
    assert "requires grad" in e.value.message and "--mode infer" in e.value.message


def test_a_file_s_own_make_optimizer_is_used_as_given_with_nothing_to_train(write_model):
    """The check is on the default optimizer only: a file's own make_optimizer is the author's business."""
    wl = load_model_file(write_model(FROZEN + """
class Noop:
    def step(self): pass
    def zero_grad(self, set_to_none=True): pass
def make_optimizer(params):
    return Noop()
"""))
    assert type(wl.optimizer(wl.build_model().parameters())).__name__ == "Noop"


class Bags(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(500, 16, mode="mean")
        self.fc = nn.Linear(16, 2)

    def forward(self, ids):
        return self.fc(self.bag(ids))


def test_an_embedding_bag_is_not_said_to_take_another_path_on_each_call():
    """EmbeddingBag exports with nodes per sample (the graph grows with the batch, exactly linearly); the card
    said 'the forward pass takes another path on each call (random or data-dependent control flow)' of a
    deterministic model, and the per-sample counts were called rough."""
    wl = Workload(name="bags", ref=WorkloadRef("file", "bags.py"), build_model=Bags,
                  example_inputs=lambda b: torch.randint(0, 500, (b, 8)))
    f = extract_features(wl, use_fvcore=False)
    assert f.available
    assert not any("traced different graphs" in n for n in f.notes), f.notes
    assert any("grows with the batch" in n for n in f.notes), f.notes
    assert f.forward_macs_per_sample == 16 * 2


COMPILED_BY_FILE = """
import torch, torch.nn as nn
def build_model():
    return torch.compile(nn.Linear(16, 4), backend="eager")
def example_inputs(batch_size):
    return torch.randn(batch_size, 16)
"""


def test_a_model_the_file_compiles_itself_is_recorded_as_compiled(write_model, tmp_path):
    """build_model returning torch.compile(...) was measured compiled (its first step compiles, its ν holds the
    compile time), but without --compile the card said run.compiled false and nothing about it."""
    from perfpredict.profile import ProfileSettings, profile_workload

    from .conftest import FAST_TIMING

    wl = load_model_file(write_model(COMPILED_BY_FILE))
    out = profile_workload(wl, ProfileSettings(batch_sizes=(4,), timing=FAST_TIMING, features=False),
                           out_dir=tmp_path / "out")
    assert out.card.throughput[0].status == "ok"
    assert out.card.run.compiled is True
    assert any("build_model returned a torch.compile'd module" in n for n in out.card.notes), out.card.notes
    from perfpredict.profile.profiler import _compiled_by_file

    assert _compiled_by_file(nn.Linear(16, 4)) is False  # a plain module is not said to be compiled
