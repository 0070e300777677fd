"""A model file's own training step: ``train_step(model, inputs, targets, optimizer)``.

The model below refuses a forward that the hook did not make (``micro=True`` is passed only by the hook), so a
measured point proves the timed step was the hook's; the hook accumulates gradients over two micro-batches and
clips them, as real training code does.
"""

from __future__ import annotations

import pytest
import torch

from perfpredict.card import PerformanceCard
from perfpredict.workload import load_model_file

from .conftest import FAST_TIMING

HOOKED = """
import torch, torch.nn as nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 4)

    def forward(self, x, micro=False):
        if not micro:
            raise RuntimeError("not called by train_step")
        return self.b(torch.relu(self.a(x)))

def build_model():
    return Net()

def example_inputs(batch_size):
    return {"x": torch.randn(batch_size, 16)}

def example_targets(batch_size):
    return torch.randint(0, 4, (batch_size,))

def make_optimizer(params):
    return torch.optim.Adam(params, lr=1e-3)

CALLS = []

def train_step(model, inputs, targets, optimizer):
    assert isinstance(inputs, dict) and isinstance(optimizer, torch.optim.Adam)
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for x, y in zip(inputs["x"].chunk(2), targets.chunk(2)):  # two micro-batches, one optimizer step
        loss = nn.functional.cross_entropy(model(x, micro=True), y) / 2
        loss.backward()
        total = total + loss.detach()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    CALLS.append(1)
    return total
"""


def test_the_hook_is_the_timed_step(write_model):
    from perfpredict.profile.request import PointRequest
    from perfpredict.profile.runner import run_in_subprocess
    from perfpredict.workload import WorkloadRef

    path = write_model(HOOKED)
    res = run_in_subprocess(PointRequest(WorkloadRef("file", str(path)), 8, timing=FAST_TIMING), 120)
    assert res["status"] == "ok", res.get("error")
    # Adam's two buffers per parameter (and a step count each): the hook's optimizer took the steps
    params = 16 * 32 + 32 + 32 * 4 + 4
    assert res["optimizer_state_bytes"] >= 2 * 4 * params
    # inference mode does not use the hook: the forward then refuses, as designed
    infer = run_in_subprocess(PointRequest(WorkloadRef("file", str(path)), 8, mode="infer", timing=FAST_TIMING), 120)
    assert infer["status"] == "error" and "not called by train_step" in infer["error"]


def test_the_hook_gets_the_inputs_as_example_inputs_returned_them(write_model):
    wl = load_model_file(write_model(HOOKED))
    assert wl.train_step is not None
    inputs = wl.step_inputs(6, "cpu", "train")
    assert isinstance(inputs, dict) and inputs["x"].shape == (6, 16)
    torch.manual_seed(0)
    model = wl.build_model()
    before = [p.detach().clone() for p in model.parameters()]
    loss = wl.train_step(model, inputs, wl.targets(6), wl.optimizer(model.parameters()))
    assert torch.isfinite(loss) and any(not torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert not isinstance(wl.step_inputs(6, "cpu", "infer"), dict)  # infer: the forward's own arguments


def test_a_non_finite_loss_from_the_hook_stops_the_sweep_with_the_step_named(write_model, run_cli, tmp_path):
    path = write_model(HOOKED.replace("    return total\n", "    return total * float('nan')\n"))
    r = run_cli("profile", path, "-b", "4,8", "--min-time", "0.2", "--max-time", "1", "--no-features",
                "--no-mlflow", "--out", tmp_path / "out")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "train_step" in r.stderr and "not finite" in r.stderr
    card = PerformanceCard.load(tmp_path / "out" / "card.json")
    assert any(n.startswith("train_step:") for n in card.notes)


@pytest.mark.parametrize("bad", ["train_step = 3", "def train_step(model, inputs, targets, optimizer):\n    raise ValueError('boom')"])
def test_a_broken_hook_is_one_readable_error(write_model, run_cli, tmp_path, bad):
    path = write_model(HOOKED.split("CALLS = []")[0] + bad + "\n")
    r = run_cli("profile", path, "-b", "4", "--min-time", "0.2", "--max-time", "1", "--no-features",
                "--no-mlflow", "--out", tmp_path / "out")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert ("train_step must be a function" in r.stderr) if bad.startswith("train_step =") else \
        (": train_step: ValueError: boom" in r.stderr)


# -- findings of a review ---------------------------------------------------------------------------------

def test_the_input_pipeline_gives_the_hook_the_batch_with_its_fixed_arguments(write_model):
    from perfpredict.profile.pipeline_worker import PipelineRequest
    from perfpredict.profile.runner import run_pipeline_in_subprocess
    from perfpredict.workload import WorkloadRef

    path = write_model(HOOKED.replace('return {"x": torch.randn(batch_size, 16)}',
                                      'return {"x": torch.randn(batch_size, 16), "micro": True}')
                       .replace("model(x, micro=True)", "model(x, micro=inputs['micro'])") + '''
def make_dataset():
    return list(range(64))

def preprocess(i):
    return {"x": torch.randn(16, generator=torch.Generator().manual_seed(i))}, i % 4
''')
    res = run_pipeline_in_subprocess(PipelineRequest(WorkloadRef("file", str(path)), batch_size=8, cpus=(0,),
                                                     window_s=0.3, warmup_batches=1, num_workers=0), 120)
    assert res["status"] == "ok", res.get("error")  # micro=True came from example_inputs, not the batch


def test_an_optimizer_wrapper_without_state_keeps_every_measurement(write_model):
    """A GAN's make_optimizer may return an object holding two optimizers: it has step() and zero_grad() but
    no torch optimizer's state, so its state bytes are unknown, not an error after all the timing."""
    from perfpredict.profile.request import PointRequest
    from perfpredict.profile.runner import run_in_subprocess
    from perfpredict.workload import WorkloadRef

    path = write_model(HOOKED.replace('''def make_optimizer(params):
    return torch.optim.Adam(params, lr=1e-3)''', '''class TwoOpt:
    def __init__(self, params):
        params = list(params)
        self.g = torch.optim.Adam(params[:2], lr=1e-3)
        self.d = torch.optim.SGD(params[2:], lr=1e-3)

    def zero_grad(self, set_to_none=True):
        self.g.zero_grad(set_to_none); self.d.zero_grad(set_to_none)

    def step(self):
        self.g.step(); self.d.step()

def make_optimizer(params):
    return TwoOpt(params)''').replace("isinstance(optimizer, torch.optim.Adam)", "isinstance(optimizer, TwoOpt)"))
    res = run_in_subprocess(PointRequest(WorkloadRef("file", str(path)), 8, timing=FAST_TIMING), 120)
    assert res["status"] == "ok", res.get("error")
    assert res["optimizer_state_bytes"] is None


@pytest.mark.parametrize("bad", ["float('nan')", "torch.tensor([1.0, float('inf')])"])
def test_a_non_finite_python_number_or_vector_from_the_hook_is_caught(bad):
    from perfpredict.profile.failure import NonFiniteLoss
    from perfpredict.profile.worker import check_finite_loss

    with pytest.raises(NonFiniteLoss, match="not finite"):
        check_finite_loss(eval(bad))
    check_finite_loss(None)
    check_finite_loss(0.5)
    check_finite_loss(torch.ones(3))


def test_a_hook_reaching_a_model_attribute_under_ddp_is_told_about_model_module():
    from perfpredict.profile.failure import failure_text

    text = failure_text(AttributeError("'DistributedDataParallel' object has no attribute 'body'"))
    assert "model.module" in text and text.startswith("AttributeError:")


def test_predict_says_the_estimators_model_the_default_step_not_the_hook(write_model):
    from perfpredict.predictor import Predictor

    path = str(write_model(HOOKED.replace("if not micro:", "if False:")))
    pred = Predictor.load()
    card = pred.predict(path, batch_sizes=[8], device_type="cpu")
    assert any("defines its own train_step" in n for n in card.prediction.notes)
    # an inference prediction runs no training step, so the hook is not a caveat there
    card = pred.predict(path, batch_sizes=[8], device_type="cpu", mode="infer")
    assert card.run.mode == "infer" and not any("train_step" in n for n in card.prediction.notes)
