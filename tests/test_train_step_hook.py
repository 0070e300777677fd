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
