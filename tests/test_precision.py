"""Mixed-precision profiling: ``--precision bf16|fp16`` or a model file's ``PRECISION``.

The model files below check, inside their own forward pass, which dtype autocast gives a Linear layer and
raise otherwise, so a passing measurement proves the timed step ran under the requested precision.
"""

from __future__ import annotations

import json

import pytest
import torch

from perfpredict.card import PerformanceCard
from perfpredict.workload import load_model_file, resolve_workload
from perfpredict.workload.spec import check_precision

from .conftest import FAST_TIMING

_CHECKING = """
import torch, torch.nn as nn

EXPECT = {expect}

class Checked(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.b = nn.Linear(64, 8)

    def forward(self, x):
        h = self.a(x)
        if h.dtype != EXPECT:
            raise ValueError(f"forward ran in {{h.dtype}}, expected {{EXPECT}}")
        return self.b(torch.relu(h))

def build_model():
    return Checked()

def example_inputs(batch_size):
    return torch.randn(batch_size, 32)

def make_dataset():
    return list(range(32))

def preprocess(i):
    return torch.randn(32, generator=torch.Generator().manual_seed(i))
{extra}
"""


def _model(write_model, expect: str, extra: str = "", name: str = "model.py"):
    return write_model(_CHECKING.format(expect=expect, extra=extra), name)


def test_precision_names_are_checked():
    assert check_precision(" BF16 ") == "bf16"
    for bad in ("fp8", "", None, 16):
        with pytest.raises(Exception, match="fp32, bf16, fp16"):
            check_precision(bad)


def test_the_choice_travels_with_the_reference_to_the_measuring_process(write_model):
    path = _model(write_model, "torch.bfloat16", extra='PRECISION = "bf16"')
    wl = load_model_file(path)
    assert wl.precision == "bf16" and wl.ref.precision is None  # the file says it; the ref re-reads the file
    assert wl.ref.load().precision == "bf16"
    over = resolve_workload(str(path), None, "fp32")
    assert over.precision == "fp32" and over.ref.load().precision == "fp32"  # --precision wins over PRECISION
    zoo = resolve_workload("zoo:mlp", {}, "fp16")
    assert zoo.ref.load().precision == "fp16" and zoo.grad_scaler("cpu") is not None
    assert zoo.with_options(precision="bf16").grad_scaler("cpu") is None


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_the_timed_step_runs_under_autocast(write_model, mode):
    from perfpredict.profile.request import PointRequest
    from perfpredict.profile.runner import run_in_subprocess
    from perfpredict.workload import WorkloadRef

    path = _model(write_model, "torch.bfloat16")
    ok = run_in_subprocess(PointRequest(WorkloadRef("file", str(path), precision="bf16"), 8, mode=mode,
                                        timing=FAST_TIMING), 120)
    assert ok["status"] == "ok", ok.get("error")
    fp32 = run_in_subprocess(PointRequest(WorkloadRef("file", str(path)), 8, mode=mode, timing=FAST_TIMING), 120)
    assert fp32["status"] == "error" and "expected torch.bfloat16" in fp32["error"]


def test_fp16_steps_through_a_gradient_scaler_with_unscaled_gradients(write_model):
    """The step the worker times: scaled backward, then the scaler unscales the gradients before the
    optimizer uses them (a forgotten unscale would leave them ×65536)."""
    from perfpredict.profile.worker import _train_step

    path = _model(write_model, "torch.float16", extra='''
PRECISION = "fp16"

def make_optimizer(params):
    return torch.optim.SGD(params, lr=0.0)
''')
    wl = load_model_file(path)
    torch.manual_seed(0)
    model = wl.build_model()
    x = wl.inputs(16)
    ref = _fp32_grads(model, x)
    step = _train_step(model, wl, x, None, wl.optimizer(model.parameters()), {}, "cpu")
    step()
    for p, g in zip(model.parameters(), ref):
        assert p.grad is not None and p.grad.dtype == torch.float32
        assert torch.allclose(p.grad, g, rtol=0.05, atol=1e-3), (p.grad.abs().max(), g.abs().max())


def _fp32_grads(model, x):  # the fp32 reference for the test above
    import copy

    twin = copy.deepcopy(model)
    h = twin.a(*x)
    twin.b(torch.relu(h)).float().mean().backward()
    return [p.grad.clone() for p in twin.parameters()]


def test_profile_records_the_precision_on_the_card_and_in_the_summary(write_model, run_cli, tmp_path):
    path = _model(write_model, "torch.bfloat16")
    r = run_cli("profile", path, "-b", "4,8", "--precision", "bf16", "--min-time", "0.2", "--max-time", "1",
                "--no-features", "--out", tmp_path / "out")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "train · bf16 · cpu" in r.stdout
    card = PerformanceCard.load(tmp_path / "out" / "card.json")
    assert card.run.precision == "bf16" and [p.status for p in card.throughput] == ["ok", "ok"]
    assert any("torch.autocast(bfloat16)" in n for n in card.notes)
    from mlflow.tracking import MlflowClient

    runs = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db").search_runs(
        [e.experiment_id for e in MlflowClient(f"sqlite:///{tmp_path}/mlruns.db").search_experiments()])
    assert runs and runs[0].data.params["precision"] == "bf16"


def test_co_location_and_the_input_pipeline_run_at_the_precision_too(write_model, run_cli, tmp_path):
    path = _model(write_model, "torch.bfloat16", extra='PRECISION = "bf16"')
    r = run_cli("profile", path, "-b", "8", "--colocation", "--copies", "1,2", "--partner", "none", "--sensitivity",
                "--window", "0.5", "--min-time", "0.2", "--max-time", "1", "--no-features", "--no-mlflow",
                "--out", tmp_path / "out")
    assert r.returncode == 0, r.stderr + r.stdout
    card = json.loads((tmp_path / "out" / "card.json").read_text())
    assert card["run"]["precision"] == "bf16"
    assert [p["status"] for p in card["colocation"]["points"]] == ["ok", "ok"]
    assert card["sensitivity"] is not None and card["sensitivity"]["matrix"]


def test_a_bad_precision_is_one_readable_error(write_model, run_cli, tmp_path):
    path = _model(write_model, "torch.float32")
    r = run_cli("profile", path, "--precision", "fp8", "--no-mlflow", "--out", tmp_path / "out")
    assert r.returncode == 2 and "--precision must be one of fp32, bf16, fp16" in r.stderr
    assert "Traceback" not in r.stderr
    bad = _model(write_model, "torch.float32", extra='PRECISION = "int8"', name="bad.py")
    r = run_cli("profile", bad, "--no-mlflow", "--out", tmp_path / "out2")
    assert r.returncode != 0 and "validate" in r.stderr and "PRECISION must be one of" in r.stderr


def test_cards_without_a_precision_read_as_fp32(tmp_path):
    from perfpredict.card import ProfileRun

    run = ProfileRun.model_validate({"mode": "train", "batch_sizes": [1], "started_at": "x",
                                     "perfpredict_version": "0"})
    assert run.precision == "fp32"
