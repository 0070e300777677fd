"""Review of session 45's commits: what its changes broke on inputs the old code handled."""

from __future__ import annotations

import pytest
import torch

from perfpredict.workload import load_model_file

ADVERSARIAL = """
import torch, torch.nn as nn
def build_model():   # a frozen classifier: the step crafts an adversarial input (FGSM), it trains no weight
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).requires_grad_(False)
def example_inputs(batch_size):
    return torch.randn(batch_size, 32)
def train_step(model, inputs, targets, optimizer):
    x = inputs.detach().requires_grad_(True)
    model(x).logsumexp(1).mean().backward()
    return model(x + 0.01 * x.grad.sign()).mean()
"""


def test_a_train_step_hook_that_trains_no_weight_still_gets_the_default_optimizer(write_model):
    """The nothing-to-train refusal (f0251b1) also refused a file whose own train_step trains no weight of the
    model (an adversarial input, a style transfer's image), which profiled fine before: the refusal is for the
    default step only, as it already was for a file's own make_optimizer."""
    wl = load_model_file(write_model(ADVERSARIAL))
    model = wl.build_model()
    opt = wl.optimizer(model.parameters())
    loss = wl.train_step(model, wl.example_inputs(4), None, opt)
    assert torch.isfinite(loss)


MLP = """
import torch, torch.nn as nn
def build_model():
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    model[:4].requires_grad_(False)
    return model
def example_inputs(batch_size):
    return torch.randn(batch_size, 64)
"""


def test_a_frozen_model_file_is_not_exported_again_for_its_step_work_ratio(write_model, monkeypatch):
    """from_workload exported a model with frozen weights a third time (at batch 2, which extract_features had
    just exported and analysed) for the frozen step-work ratio: +4.9 s on a 6-s feature pass for an 8-layer
    transformer encoder. The ratio now reads extract_features' batch-2 graph, with the same value."""
    import perfpredict.features as features
    from perfpredict.estimators.arch import from_workload

    calls = []
    real = features.export_onnx

    def counted(*args, **kw):
        calls.append(args[1][0].shape[0] if args[1] else None)
        return real(*args, **kw)

    monkeypatch.setattr(features, "export_onnx", counted)
    arch = from_workload(str(write_model(MLP)))
    assert sorted(calls) == [1, 2]
    f0, f1, f2 = 64 * 512, 512 * 512, 512 * 10
    assert arch.frozen_step_work_ratio == pytest.approx((f0 + f1 + 2 * f2) / (2 * f0 + 3 * f1 + 3 * f2))


def test_a_predicted_card_of_a_frozen_model_gives_its_step_time_back_and_the_docs_say_so(write_model):
    """docs/estimators.md said "a predicted card gives its own numbers back"; since 0f37d0a a frozen model file's
    step time is multiplied by its step-work ratio, which a card did not carry, so predicting again from the
    card gave 2.8x the card's time (0.72 ms against 0.25 ms at batch 8 on the CPU set). Card schema 1.22 carries
    it (features.frozen_step_work_ratio; tests/test_left_alone46_fixes.py)."""
    from pathlib import Path

    from perfpredict import Predictor

    repo = Path(__file__).resolve().parents[1]
    pred = Predictor.load(repo / "trained_models")
    card = pred.predict(str(write_model(MLP)), batch_sizes=[8], device_type="cpu")
    again = pred.predict(features=card, batch_sizes=[8], device_type="cpu")
    assert again.prediction.points[0].peak_memory_bytes == card.prediction.points[0].peak_memory_bytes
    f0, f1, f2 = 64 * 512, 512 * 512, 512 * 10
    ratio = (f0 + f1 + 2 * f2) / (2 * f0 + 3 * f1 + 3 * f2)
    assert card.features.frozen_step_work_ratio == pytest.approx(ratio)
    assert card.throughput[0].iter_time_s == pytest.approx(again.throughput[0].iter_time_s)
    text = " ".join((repo / "docs" / "estimators.md").read_text().split())
    said = text[text.index("**A card predicts again.**"):][:600]
    assert "`features.frozen_step_work_ratio` gives a frozen model's training-step time back" in said


LSTM = """
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(1000, 128)
        self.lstm = nn.LSTM(128, 256, batch_first=True)
        self.out = nn.Linear(256, 10)
    def forward(self, ids):
        h, _ = self.lstm(self.embed(ids))
        return self.out(h[:, -1])
def build_model():
    m = M()
    m.embed.requires_grad_(False)   # frozen pretrained word vectors; the LSTM and the head train
    return m
def example_inputs(batch_size):
    return torch.randint(0, 1000, (batch_size, 20))
"""


def test_a_trained_recurrent_op_under_a_frozen_input_still_runs_its_recurrence_backward(write_model):
    """step_work charged an LSTM whose weights train but whose input needs no gradient F + F, as if skipping the
    input gradient skipped the whole backward through time: a frozen embedding under a trained LSTM got a factor
    of 0.67, its step predicted 31% faster than the measured 0.97 of training every weight. Its weight gradients
    need the gradient through the hidden state at every step (R^T dgates, the recurrence's H / (I + H) share of
    F); only the input's own product (W^T dgates) is skipped."""
    from perfpredict.estimators.arch import from_workload

    arch = from_workload(str(write_model(LSTM)))
    lstm, head = 20 * 4 * 256 * (128 + 256), 256 * 10  # MACs per sample
    share = 256 / (128 + 256)
    assert arch.frozen_step_work_ratio == pytest.approx(((2 + share) * lstm + 3 * head) / (3 * lstm + 3 * head))
