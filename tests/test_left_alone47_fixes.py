"""Items session 47's helpers noticed: a card predicted again lost its run's precision (a bf16 job's card was
predicted with the fp32 set); a measured training card silently lacked the checkpointing and unused-parameter
adjustments when its one-step probe failed; and an unused head moved the predicted step time through the
estimators' parameter count, which counted the module's parameters while their bytes were the graph's."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfpredict import Predictor
from perfpredict.estimators.arch import from_workload
from tests.conftest import FAST_TIMING
from tests.test_unused_parameters import BODY, FROZEN_HEAD, HEAD

REPO = Path(__file__).resolve().parents[1]

#: the shipped Xeon training set and its bf16 twin (trained_models/cpu_xeon_2vcpu_bf16)
XEON = "cpu_xeon_2vcpu"

BF16_MLP = """
import torch
import torch.nn as nn

def build_model():
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))

def example_inputs(batch_size):
    return torch.randn(batch_size, 128)

PRECISION = "bf16"
"""

#: takes its labels in training, as a Hugging Face model does, and computes its loss there: its own train_step
#: passes them, so the profiler measures it, but the default step the probe runs calls forward(x) and fails
LABELS_IN_FORWARD = """
import torch
import torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x, labels=None):
        logits = self.body(x)
        if not self.training:
            return logits
        if labels is None:
            raise ValueError("a training forward needs its labels")
        return nn.functional.cross_entropy(logits, labels)

def build_model():
    return Net()

def example_inputs(batch_size):
    return torch.randn(batch_size, 64)

def example_targets(batch_size):
    return torch.randint(0, 10, (batch_size,))

def train_step(model, inputs, targets, optimizer):
    optimizer.zero_grad()
    loss = model(inputs, labels=targets)
    loss.backward()
    optimizer.step()
    return loss
"""


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


def _measured(path: Path, batch_sizes: tuple[int, ...] = (4,)):
    from perfpredict.profile import ProfileSettings, profile_workload
    from perfpredict.workload import load_model_file

    settings = ProfileSettings(batch_sizes=batch_sizes, device="cpu", timing=FAST_TIMING, threads=1, fvcore=False,
                               measure_energy=False)
    return profile_workload(load_model_file(str(path)), settings).card


def _times(card) -> list[float]:
    return [p.iter_time_s for p in card.prediction.points]


def test_a_bf16_jobs_predicted_card_predicts_with_the_bf16_set_again(predictor, write_model) -> None:
    """``_as_arch(card)`` left the precision None, so the card of a file with ``PRECISION = "bf16"`` (predicted
    with cpu_xeon_2vcpu_bf16: 0.937 and 1.008 ms at batch 16 and 64) came back from the fp32 set (0.571 and
    0.723 ms); an explicit precision still picks."""
    card = predictor.predict(str(write_model(BF16_MLP)), batch_sizes=[16, 64], device_type=XEON)
    assert card.run.precision == "bf16" and card.prediction.model_set == f"{XEON}_bf16"
    again = predictor.predict(features=card, batch_sizes=[16, 64], device_type=XEON)
    assert again.prediction.model_set == f"{XEON}_bf16" and again.run.precision == "bf16"
    assert _times(again) == _times(card)
    assert predictor.predict_values(card, [16], device_type=XEON)["precision"] == "bf16"
    fp32 = predictor.predict(features=card, batch_sizes=[16, 64], device_type=XEON, precision="fp32")
    assert fp32.prediction.model_set == XEON and _times(fp32) != _times(card)
    # no bf16 set for the H100: fp32, and the note says the job asked for bf16, as the model file's prediction does
    h100 = predictor.predict(features=card, batch_sizes=[16], device_type="cuda_h100")
    assert h100.run.precision == "fp32" and any("asks for bf16" in n for n in h100.prediction.notes)


def test_a_measured_cards_run_precision_picks_the_set(predictor, write_model) -> None:
    """A measured bf16 card picks the bf16 set; a float64 model's (run.precision fp64, no set trained at it) the
    fp32 set without a note, as its model file does."""
    card = _measured(write_model(BF16_MLP))
    assert card.run.precision == "bf16"
    assert predictor.predict(features=card, batch_sizes=[16], device_type=XEON).prediction.model_set == f"{XEON}_bf16"
    fp64 = card.model_copy(update={"run": card.run.model_copy(update={"precision": "fp64"})})
    as_fp64 = predictor.predict(features=fp64, batch_sizes=[16], device_type=XEON)
    assert as_fp64.prediction.model_set == XEON
    assert not any("mixed precision" in n for n in as_fp64.prediction.notes)


def test_a_measured_card_says_its_step_probe_failed(predictor, write_model) -> None:
    """The profiler wrote the probe's recompute ratio and unused bytes (null: none) and dropped its note when the
    step failed, so the card could not be told from one of a model that checkpoints nothing; the note is now in
    its features' notes, and a prediction from the card repeats it."""
    card = _measured(write_model(LABELS_IN_FORWARD), (4, 8))
    assert card.status == "complete" and card.features.available
    assert card.features.recompute_step_work_ratio is None and card.features.unused_param_bytes is None
    said = [n for n in card.features.notes if "one training step" in n and "failed" in n]
    assert len(said) == 1 and "a training forward needs its labels" in said[0]
    again = predictor.predict(features=card, batch_sizes=[8], device_type="cpu")
    assert said[0] in again.prediction.notes


@pytest.fixture(scope="module")
def head_files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("heads")
    out = {}
    for name, extra in (("plain", ""), ("unused", HEAD), ("frozen_unused", FROZEN_HEAD)):
        out[name] = root / f"{name}.py"
        out[name].write_text(BODY.format(extra=extra))
    return out


@pytest.mark.parametrize("device_type", [XEON, "cuda_h100"])
def test_an_unused_head_leaves_the_predicted_step_time_as_it_was(predictor, head_files, device_type) -> None:
    """The head's 16.8 M parameters were in the estimators' parameter count while its bytes were not in the
    graph's: the step time moved with it (Xeon batch 64 1.335 ms against 1.275 without, H100 1.670 against
    1.469). Training (and the Xeon's inference) times are now bit-identical, as the graph is."""
    plain, unused, frozen = (from_workload(str(head_files[n])) for n in ("plain", "unused", "frozen_unused"))
    assert unused.param_count == frozen.param_count == plain.param_count
    assert unused.unused_param_count == 4096 * 4096 + 4096
    for mode in ("train", "infer") if device_type == XEON else ("train",):  # no CUDA inference set is shipped
        want = predictor.predict_values(plain, [8, 64], device_type=device_type, mode=mode)["iter_time"]
        for arch in (unused, frozen):
            assert predictor.predict_values(arch, [8, 64], device_type=device_type, mode=mode)["iter_time"] == want


def test_the_card_still_counts_the_modules_parameters(predictor, head_files) -> None:
    """The card's model section is the module's (the head included), and the card predicts its times again (a
    guard: it held before too)."""
    body = 256 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    head = 4096 * 4096 + 4096
    for name, trainable in (("unused", body + head), ("frozen_unused", body)):
        card = predictor.predict(str(head_files[name]), batch_sizes=[8, 64], device_type=XEON)
        assert card.model.parameters == body + head and card.model.trainable_parameters == trainable
        again = predictor.predict(features=card, batch_sizes=[8, 64], device_type=XEON)
        assert _times(again) == _times(card)
        assert (again.model.parameters, again.model.trainable_parameters) == (body + head, trainable)


@pytest.mark.parametrize("family", ["mlp", "resnet", "lstm", "transformer", "dlrm"])
def test_a_zoo_models_parameter_count_is_its_modules(family) -> None:
    """The training data's parameter count is the module's; nothing of a zoo model is unused, so the estimators'
    input is unchanged (a guard: it held before too)."""
    from perfpredict.workload.zoo import load_zoo_workload

    wl = load_zoo_workload(family, {})
    arch = from_workload(f"zoo:{family}")
    assert arch.param_count == sum(p.numel() for p in wl.build_model().parameters())


#: a frozen scale and a trained shift, elementwise only: a graph without multiply-accumulates, whose frozen
#: step work cannot be weighed
FROZEN_ELEMENTWISE = """
import torch
import torch.nn as nn

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(256), requires_grad=False)
        self.shift = nn.Parameter(torch.zeros(256))

    def forward(self, x):
        return torch.tanh(x * self.scale + self.shift)

def build_model():
    return M()

def example_inputs(batch_size):
    return (torch.randn(batch_size, 256),)
"""


def test_a_measured_card_says_its_frozen_step_work_could_not_be_weighed(write_model) -> None:
    """The profiler kept the frozen step-work ratio (None here) and dropped the note saying why, so the card of a
    frozen model whose step work could not be weighed read like one that had nothing to weigh; the note, which
    the model file's prediction carries, is now in its features' notes."""
    path = write_model(FROZEN_ELEMENTWISE)
    said = [n for n in from_workload(str(path)).notes if n.startswith("the training-step time is not adjusted")]
    assert len(said) == 1
    card = _measured(path)
    assert card.features.frozen_step_work_ratio is None and said[0] in card.features.notes
