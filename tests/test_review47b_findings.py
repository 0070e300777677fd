"""Review of session 47's batch_input, optimizer-step and unseen-architecture commits.

- An optimizer whose step the meta-tensor probe cannot take (``fused=True``, or a step that reads a value with
  ``.item()``: Adafactor, ASGD, many custom optimizers) threw its probed state copies away: the whole optimizer
  was charged as SGD with momentum (1 copy), where before the step probe existed its copies were charged. (Such
  steps are now probed over real CPU tensors; one no probe can take keeps the copies the same way.)
- The upload route read ``batch_input=`` (sent empty) as not sent and split the counts on the first input; the
  CLI and Python refuse an empty name.
- The unseen-model benchmarks' table left out a point whose profile failed and ended in a ZeroDivisionError when
  no point of a mode was measured.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from perfpredict import Predictor
from tests.conftest import fused_adamw_on_cpu

REPO = Path(__file__).resolve().parents[1]
MLP = ("import torch\nimport torch.nn as nn\n\n"
       "def build_model():\n"
       "    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))\n\n"
       "def example_inputs(batch_size):\n    return torch.randn(batch_size, 256)\n")
# Adam's two moments, and a trust ratio read with .item() (as LAMB-style optimizers do): a meta tensor has no value
ITEM_ADAM = '''
class TrustAdam(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                st = self.state[p]
                if not st:
                    st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p)
                st["m"].mul_(0.9).add_(p.grad, alpha=0.1)
                st["v"].mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
                trust = (p.norm() / (st["m"].norm() + 1e-8)).item()
                p.addcdiv_(st["m"], st["v"].sqrt().add_(1e-8), value=-group["lr"] * trust)


def make_optimizer(params):
    return TrustAdam(params)
'''
FUSED = "\ndef make_optimizer(params):\n    return torch.optim.AdamW(params, lr=1e-3, fused=True)\n"
# Adam's two moments over 2-D weights only (as Muon takes): the state probe's one (4, 3) tensor steps, the step
# probes over the MLP's biases cannot (meta tensors nor real ones)
MATRIX_ADAM = ITEM_ADAM.replace("                st = self.state[p]\n",
                                "                if p.dim() != 2:\n"
                                "                    raise ValueError('2-D weights only')\n"
                                "                st = self.state[p]\n")


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


@pytest.mark.parametrize("tail", [ITEM_ADAM, pytest.param(FUSED, marks=pytest.mark.skipif(
    not fused_adamw_on_cpu(), reason="this torch has no fused AdamW on the CPU")), MATRIX_ADAM],
    ids=["item", "fused", "no-probe"])
def test_a_step_the_meta_probe_cannot_take_keeps_the_probed_state_copies(predictor, tmp_path, tail) -> None:
    """Two state copies are probed (one tensor, a real step); the step's temporaries cannot be over meta
    tensors: the copies stand, so the prediction charges the second copy over SGD with momentum's (it charged none:
    copies 1, 'could not be probed'). The temporaries are counted over real CPU tensors
    (``tests/test_optimizer_step_fused.py``); where no probe can step, none are charged, with a note."""
    from perfpredict.estimators.arch import from_workload

    plain, adam = tmp_path / "plain.py", tmp_path / "adam.py"
    plain.write_text(MLP)
    adam.write_text(MLP + tail)
    base, arch = from_workload(str(plain)), from_workload(str(adam))
    assert arch.optimizer_state_copies == 2.0, arch.optimizer_state_note
    assert "keeps 2 state copies" in arch.optimizer_state_note
    if tail is MATRIX_ADAM:
        assert arch.optimizer_step_bytes is None
        assert "step temporaries could not be probed" in arch.optimizer_state_note
    else:
        assert arch.optimizer_step_bytes is not None and "could not" not in arch.optimizer_state_note
    v = {k: predictor.predict_values(a, [16], device_type="cpu")["peak_memory"]["median"][0]
         for k, a in (("plain", base), ("adam", arch))}
    assert v["adam"] - v["plain"] >= base.param_bytes - 1e-6


def test_the_upload_route_refuses_batch_input_sent_empty(predictor) -> None:
    """``batch_input=`` is a 422 as ``frozen=`` is (the CLI's ``--batch-input ""`` is refused too), not a
    prediction split on the first input (a static positions input here: 4x too few MACs a sample)."""
    from fastapi.testclient import TestClient

    from perfpredict.service import create_app

    class PosFirst(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pos, self.fc = nn.Embedding(16, 32), nn.Linear(32, 32)

        def forward(self, positions, x):
            return self.fc(x + self.pos(positions))

    buf = io.BytesIO()
    torch.onnx.export(PosFirst().eval(), (torch.arange(16), torch.randn(4, 16, 32)), buf,
                      input_names=["positions", "x"], dynamo=False)
    client = TestClient(create_app(predictor))
    sent = {"file": ("pos.onnx", buf.getvalue(), "application/octet-stream")}
    form = {"batch_sizes": "8", "device_type": "cpu"}
    named = client.post("/predict/onnx", files=sent, data={**form, "batch_input": "x"})
    assert named.status_code == 200, named.text
    empty = client.post("/predict/onnx", files=sent, data={**form, "batch_input": ""})
    assert empty.status_code == 422, empty.text[:300]
    assert "batch_input must name one of the graph's inputs" in empty.json()["detail"]
    assert client.post("/predict/onnx", files=sent, data=form).status_code == 200  # left out: the first input


def test_the_unseen_benchmarks_table_says_a_failed_point_and_has_no_mape_without_one(predictor, tmp_path,
                                                                                       capsys) -> None:
    """A model file whose step fails at the batch asked for: each mode's row says why, and the MAPE is n/a
    (it was a ZeroDivisionError after an empty table)."""
    model = tmp_path / "no_three.py"
    model.write_text("import torch\nimport torch.nn as nn\n\n"
                     "class Net(nn.Module):\n"
                     "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(64, 10)\n\n"
                     "    def forward(self, x):\n"
                     "        if x.shape[0] == 3:\n            raise RuntimeError('no batch of 3')\n"
                     "        return self.fc(x)\n\n"
                     "def build_model():\n    return Net()\n\n"
                     "def example_inputs(batch_size):\n    return torch.randn(batch_size, 64)\n")
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from unseen_recurrent_models import compare
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    compare(predictor, [model], [3])
    out = capsys.readouterr().out
    assert out.count("not measured: RuntimeError: no batch of 3") == 2, out
    assert "train: iteration time MAPE n/a" in out and "infer: iteration time MAPE n/a" in out
