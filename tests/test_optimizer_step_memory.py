"""The temporaries an optimizer's step holds, in the predicted training memory. The memory baselines were fitted
on SGD-momentum steps, which hold none; Adam run one tensor at a time (torch's choice on the CPU) holds
``exp_avg_sq.sqrt()`` and its quotient (2 x the tensor) plus the previous tensor's ``denom``, and its foreach step
(torch's choice on CUDA) ``_foreach_sqrt`` of every exp_avg_sq (1 x all trained bytes). A model file's AdamW was
charged its second state copy but not these: a 4.2M-parameter MLP's AdamW step measured 46 MiB more peak RSS than
SGD-momentum's (16 MiB of state, 16 MiB of temporaries by malloc's count) and was predicted 16 MiB more."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from perfpredict import Predictor

REPO = Path(__file__).resolve().parents[1]
MLP = ("import torch\nimport torch.nn as nn\n\n"
       "def build_model():\n"
       "    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))\n\n"
       "def example_inputs(batch_size):\n    return torch.randn(batch_size, 256)\n")
OPTIMIZERS = {"default": "", "adamw": "torch.optim.AdamW(params, lr=1e-3)",
              "adamw_foreach": "torch.optim.AdamW(params, lr=1e-3, foreach=True)"}
LARGEST = 256 * 1024 * 4  # the first Linear's weight, float32


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("optimizer_step")
    out = {}
    for name, make in OPTIMIZERS.items():
        out[name] = root / f"{name}.py"
        out[name].write_text(MLP + (f"\ndef make_optimizer(params):\n    return {make}\n" if make else ""))
    return out


@pytest.fixture(scope="module")
def archs(files):
    from perfpredict.estimators.arch import from_workload

    return {k: from_workload(str(v)) for k, v in files.items()}


def test_the_probe_counts_the_steps_temporaries_per_device_kind() -> None:
    """Over meta tensors shaped like the model's weights (nothing allocated): SGD with momentum holds nothing,
    AdamW one tensor at a time at least two copies of the largest weight (and less than all of them here), and
    foreach at least one copy of every trained byte, which is what AdamW with foreach left to torch runs on CUDA."""
    from perfpredict.workload.spec import optimizer_step_bytes

    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 10))
    trained = sum(p.numel() * p.element_size() for p in model.parameters())
    sgdm = optimizer_step_bytes(torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9), model.parameters())
    assert sgdm == {"cpu": 0.0, "cuda": 0.0}
    adamw = optimizer_step_bytes(torch.optim.AdamW(model.parameters(), lr=1e-3), model.parameters())
    assert 2 * LARGEST <= adamw["cpu"] < 3 * trained and adamw["cuda"] >= trained
    forced = optimizer_step_bytes(torch.optim.AdamW(model.parameters(), foreach=True), model.parameters())
    assert forced["cpu"] == forced["cuda"] == adamw["cuda"]
    assert all(p.grad is None for p in model.parameters())


def test_adamw_is_charged_its_state_copy_and_its_steps_temporaries(predictor, files, archs) -> None:
    """On the CPU, the AdamW file's predicted memory exceeds the default optimizer's by at least the second
    state copy plus two copies of its largest trained weight; with foreach by at least two copies of every
    trained byte; the card records the temporaries and the note says them."""
    trained = archs["default"].param_bytes
    v = {k: predictor.predict_values(a, [16], device_type="cpu") for k, a in archs.items()}
    assert v["default"]["method"] == "estimator"
    med = {k: x["peak_memory"]["median"][0] for k, x in v.items()}
    assert med["adamw"] - med["default"] >= trained + 2 * LARGEST - 1e-6
    assert med["adamw_foreach"] - med["default"] >= 2 * trained - 1e-6
    card = predictor.predict(str(files["adamw"]), batch_size=16, device_type="cpu")
    assert card.features.optimizer_step_bytes == archs["adamw"].optimizer_step_bytes
    assert any("MiB of temporaries at once on cpu" in n for n in card.prediction.notes)
    again = predictor.predict(features=card, batch_size=16, device_type="cpu")
    assert again.memory[0].peak_bytes == card.memory[0].peak_bytes


def test_sgd_momentum_and_a_callers_copies_predict_as_before(predictor, archs) -> None:
    """SGD with momentum (the data's optimizer) probes no temporaries and predicts bit-identically to an arch
    nobody probed; a caller's optimizer_state_copies replaces the probe, temporaries included."""
    a = archs["default"]
    assert a.optimizer_step_bytes == {"cpu": 0.0, "cuda": 0.0}
    for device_type in ("cpu", "cuda_h100"):
        probed = predictor.predict_values(a, [8, 64], device_type=device_type)
        assert probed == predictor.predict_values(replace(a, optimizer_step_bytes=None), [8, 64],
                                                  device_type=device_type)
    told = predictor.predict_values(archs["adamw"], [16], device_type="cpu", optimizer_state_copies=1)
    assert told == predictor.predict_values(a, [16], device_type="cpu")
