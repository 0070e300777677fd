"""A job's optimizer by name, for an ONNX file (and over a model file's make_optimizer): ``optimizer="adamw"``.

An ONNX file could only say ``optimizer_state_copies`` (a number), so an AdamW job was charged its second state
copy but never the temporaries its step holds (2 x the largest trained weight one tensor at a time on the CPU,
1 x every trained byte with foreach), and a caller had to know the copies. Now one of torch.optim's own classes is
named (never the caller's code: the service runs none) and probed over "meta" tensors shaped like the graph's
trained weights (its float initializers less the frozen ones), as a model file's make_optimizer is.

Also: the step probe read ``opt.defaults`` as one group (``foreach``/``amsgrad`` set in one param group only were
missed) and assumed foreach on CUDA for ``differentiable=True``, where torch runs one tensor at a time; the profiler
wrote ``optimizer_state_copies`` null on a card whose copies were probed but whose step the meta probe could not
take.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from perfpredict import Predictor
from perfpredict.errors import UsageError
from tests.test_optimizer_state_fixes import MLP

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "trained_models"
TRAINED = (256 * 1024 + 1024 + 1024 * 10 + 10) * 4
LARGEST = 256 * 1024 * 4  # the first Linear's weight, float32


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(MODELS)


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory) -> Path:
    from perfpredict.features.onnx_export import export_onnx

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))
    path = tmp_path_factory.mktemp("onnx_optimizer") / "mlp.onnx"
    path.write_bytes(export_onnx(model, (torch.randn(2, 256),)).model_proto.SerializeToString())
    return path


def _peak(card) -> float:
    return card.memory[0].peak_bytes


def test_an_onnx_files_adamw_is_charged_as_the_same_model_files(predictor, onnx_file, tmp_path) -> None:
    """``optimizer="adamw"`` on the ONNX export probes what the model file with ``make_optimizer`` AdamW probes
    (2 copies, the same step temporaries per device kind), so the two predict the same optimizer charge: at
    least the second copy plus 2 x the largest weight over SGD with momentum on the CPU."""
    from perfpredict.estimators.arch import from_workload

    py = tmp_path / "mlp.py"
    py.write_text(MLP + "\ndef make_optimizer(params):\n    return torch.optim.AdamW(params, lr=1e-3)\n")
    by_file = from_workload(str(py))
    plain = predictor.predict(onnx_path=onnx_file, batch_size=16, device_type="cpu")
    adamw = predictor.predict(onnx_path=onnx_file, batch_size=16, device_type="cpu", optimizer="AdamW")
    assert adamw.features.optimizer_state_copies == 2.0
    assert adamw.features.optimizer_step_bytes == by_file.optimizer_step_bytes
    assert _peak(adamw) - _peak(plain) >= TRAINED + 2 * LARGEST - 1
    assert any("AdamW keeps 2 state copies" in n and "temporaries at once on cpu" in n
               for n in adamw.prediction.notes)
    # sgd-momentum is the training data's optimizer: predicted as if nobody said
    same = predictor.predict(onnx_path=onnx_file, batch_size=16, device_type="cpu", optimizer="sgd-momentum")
    assert _peak(same) == _peak(plain)
    # foreach (the CUDA default) holds a copy of every trained byte at once, on the CPU too when asked for
    foreach = predictor.predict(onnx_path=onnx_file, batch_size=16, device_type="cpu",
                                optimizer="adamw:foreach=true")
    assert foreach.features.optimizer_step_bytes["cpu"] >= TRAINED


def test_frozen_weights_are_not_stepped(predictor, onnx_file) -> None:
    """The optimizer is built over the trained weights only: with the first Linear frozen, AdamW's step holds
    less than two copies of that (largest) weight."""
    import onnx

    names = [t.name for t in onnx.load(str(onnx_file)).graph.initializer]
    first = min(names)  # the exporter's names: "0.weight", "0.bias", "2.weight", "2.bias"
    assert first.startswith("0.")
    card = predictor.predict(onnx_path=onnx_file, batch_size=16, device_type="cpu", optimizer="adamw",
                             frozen=["0."])
    assert 0 < card.features.optimizer_step_bytes["cpu"] < 2 * LARGEST


def test_a_named_optimizer_replaces_a_model_files_make_optimizer(predictor, tmp_path) -> None:
    py = tmp_path / "sgd.py"
    py.write_text(MLP + "\ndef make_optimizer(params):\n    return torch.optim.SGD(params, lr=0.1)\n")
    card = predictor.predict(str(py), batch_size=8, device_type="cpu", optimizer="adam:amsgrad=true")
    assert card.features.optimizer_state_copies == 3.0


def test_the_python_api_refuses_what_it_cannot_build(predictor, onnx_file) -> None:
    with pytest.raises(UsageError, match="unknown optimizer 'adamx'.*adamw.*sgd-momentum"):
        predictor.predict(onnx_path=onnx_file, device_type="cpu", optimizer="adamx")
    with pytest.raises(UsageError, match="its step needs a closure"):
        predictor.predict(onnx_path=onnx_file, device_type="cpu", optimizer="lbfgs")
    with pytest.raises(UsageError, match="not both"):
        predictor.predict(onnx_path=onnx_file, device_type="cpu", optimizer="adamw", optimizer_state_copies=2)
    with pytest.raises(UsageError, match="KEY one of lr, momentum"):
        predictor.predict(onnx_path=onnx_file, device_type="cpu", optimizer="sgd:moment=0.9")
    with pytest.raises(UsageError, match="Invalid momentum value"):
        predictor.predict(onnx_path=onnx_file, device_type="cpu", optimizer="sgd:momentum=-1")
    card = predictor.predict(onnx_path=onnx_file, device_type="cpu")
    with pytest.raises(UsageError, match="for features give optimizer_state_copies"):
        predictor.predict(features=card, device_type="cpu", optimizer="adamw")
    limit = predictor.largest_batch(onnx_path=onnx_file, memory_limit_bytes=2**27, device_type="cpu",
                                    optimizer="adamw")
    plain = predictor.largest_batch(onnx_path=onnx_file, memory_limit_bytes=2**27, device_type="cpu")
    assert limit.largest_ok < plain.largest_ok


def test_the_cli_takes_the_optimizer_and_says_a_wrong_one(onnx_file, tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    import perfpredict.cli_models  # noqa: F401 - registers predict
    from perfpredict.cli import app

    def run(*args):
        return CliRunner().invoke(app, ["predict", str(onnx_file), "-b", "8", "--models", str(MODELS),
                                        "--device-type", "cpu", *map(str, args)])

    out = tmp_path / "card.json"
    res = run("--optimizer", "adamw", "-o", out)
    assert res.exit_code == 0, res.output[-2000:]
    assert json.loads(out.read_text())["features"]["optimizer_state_copies"] == 2.0
    res = run("--optimizer", "adamx")
    assert isinstance(res.exception, UsageError) and "--optimizer: unknown optimizer 'adamx'" in str(res.exception)
    res = run("--optimizer", "adamw", "--optimizer-states", "2")
    assert isinstance(res.exception, UsageError) and "not both" in str(res.exception)
    res = CliRunner().invoke(app, ["colocate", str(out), str(onnx_file), "--optimizer-a", "adamw",
                                   "--models", str(MODELS)])
    assert isinstance(res.exception, UsageError) and "--optimizer-a does not apply to a card" in str(res.exception)


def test_the_upload_route_takes_the_optimizer(predictor, onnx_file) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from perfpredict.service import create_app

    client = TestClient(create_app(predictor), raise_server_exceptions=False)
    sent = {"file": ("mlp.onnx", onnx_file.read_bytes(), "application/octet-stream")}
    form = {"batch_sizes": "8", "device_type": "cpu"}
    r = client.post("/predict/onnx", files=sent, data={**form, "optimizer": "AdamW"})
    assert r.status_code == 200, r.text[:500]
    assert r.json()["features"]["optimizer_state_copies"] == 2.0
    assert r.json()["features"]["optimizer_step_bytes"]["cpu"] >= 2 * LARGEST
    for bad, why in (("adamx", "unknown optimizer"), ("", "give an optimizer name"),
                     ("torch.optim.AdamW", "unknown optimizer")):
        r = client.post("/predict/onnx", files=sent, data={**form, "optimizer": bad})
        assert r.status_code == 422 and why in r.json()["detail"], (bad, r.text[:300])
    r = client.post("/predict/onnx", files=sent, data={**form, "optimizer": "adamw", "optimizer_state_copies": "2"})
    assert r.status_code == 422 and "not both" in r.json()["detail"]


def test_the_step_probe_reads_each_param_group() -> None:
    """``foreach`` or ``amsgrad`` set in a param group counts as set in the constructor, and a
    ``differentiable`` Adam runs one tensor at a time on CUDA too (SGD asks torch's default without it)."""
    from perfpredict.workload.spec import optimizer_state_copies, optimizer_step_bytes

    model = nn.Sequential(nn.Linear(256, 1024), nn.Linear(1024, 10))
    ps = list(model.parameters())
    grouped = torch.optim.Adam([{"params": ps, "foreach": True}])
    assert optimizer_step_bytes(grouped, ps) == optimizer_step_bytes(torch.optim.Adam(ps, foreach=True), ps)
    assert optimizer_state_copies(torch.optim.Adam([{"params": ps, "amsgrad": True}])) == 3.0
    # one group of two with amsgrad: its share of the trained bytes keeps a third copy
    half = torch.optim.Adam([{"params": ps[:2], "amsgrad": True}, {"params": ps[2:]}])
    share = sum(p.numel() for p in ps[:2]) / sum(p.numel() for p in ps)
    assert optimizer_state_copies(half) == pytest.approx(2 + share)
    diff = optimizer_step_bytes(torch.optim.AdamW(ps, differentiable=True), ps)
    assert diff["cuda"] == diff["cpu"] == optimizer_step_bytes(torch.optim.AdamW(ps, foreach=False), ps)["cuda"]
    sgd = dict(lr=0.1, momentum=0.9, weight_decay=0.01)
    assert (optimizer_step_bytes(torch.optim.SGD(ps, differentiable=True, **sgd), ps)
            == optimizer_step_bytes(torch.optim.SGD(ps, **sgd), ps))


def test_a_training_card_keeps_copies_probed_beside_a_step_the_probe_cannot_take(tmp_path) -> None:
    """ASGD keeps one copy (its ax) and reads a value with .item(), which a meta tensor has not: the card says 1
    copy (it said null, "nobody could tell"), and its step's temporaries as real CPU tensors count them: none one
    tensor at a time (the CPU's), 1 x the trained bytes foreach (CUDA's; they were null,
    ``tests/test_optimizer_step_fused.py``)."""
    from perfpredict.profile import ProfileSettings, profile_workload
    from perfpredict.workload import load_model_file
    from tests.conftest import FAST_TIMING

    py = tmp_path / "asgd.py"
    py.write_text(MLP + "\ndef make_optimizer(params):\n    return torch.optim.ASGD(params, lr=1e-3)\n")
    settings = ProfileSettings(batch_sizes=(4,), mode="train", device="cpu", timing=FAST_TIMING, threads=1,
                               fvcore=False, measure_energy=False)
    workload = load_model_file(str(py))
    card = profile_workload(workload, settings).card
    assert card.features.optimizer_state_copies == 1.0
    trained = sum(p.numel() * p.element_size() for p in workload.build_model().parameters())
    assert card.features.optimizer_step_bytes == {"cpu": 0.0, "cuda": float(trained)}
