"""The optimizer's state in the predicted training memory. Every training row of the datasets was measured with
the default optimizer, SGD with momentum (one state copy of each trained weight), so the memory baselines'
k_P (about 3: weight, gradient, momentum) holds one copy; a job training with AdamW (two: exp_avg and exp_avg_sq)
was predicted the same memory as one with SGD-momentum, and so was plain SGD (none). A model file's optimizer is
now probed for its copies, an ONNX file or a feature vector is told them (``optimizer_state_copies``,
``--optimizer-states``), each copy past 1 is charged the trained parameter bytes on top of the baselines, and a
predicted card records the copies it charged."""

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from perfpredict import Predictor
from perfpredict.card import PerformanceCard
from perfpredict.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "trained_models"

MLP = ("import torch\nimport torch.nn as nn\n\n"
       "def build_model():\n"
       "    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))\n\n"
       "def example_inputs(batch_size):\n    return torch.randn(batch_size, 256)\n")


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(MODELS)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """The MLP with the default optimizer, with AdamW, and with a wrapper that is no torch optimizer."""
    root = tmp_path_factory.mktemp("optimizer_state")
    out = {}
    for name, hook in (("default", ""), ("adamw", "def make_optimizer(params):\n"
                                                   "    return torch.optim.AdamW(params, lr=1e-3)\n"),
                       ("wrapper", "class Two:\n    def step(self):\n        pass\n\n"
                                   "    def zero_grad(self):\n        pass\n\n"
                                   "def make_optimizer(params):\n    return Two()\n")):
        out[name] = root / f"{name}.py"
        out[name].write_text(MLP + "\n" + hook)
    return out


@pytest.fixture(scope="module")
def archs(files):
    from perfpredict.estimators.arch import from_workload

    return {k: from_workload(str(v)) for k, v in files.items()}


@pytest.fixture(scope="module")
def F(archs) -> dict:
    """The MLP's graph features as a feature vector (the estimators answer it, not the nearest profiled model)."""
    return {k: v for k, v in archs["default"].as_dict().items() if v is not None}


@pytest.mark.parametrize(("make", "copies"), [
    (lambda p: torch.optim.SGD(p, lr=0.0, momentum=0.9), 1.0),
    (lambda p: torch.optim.SGD(p, lr=0.1), 0.0),
    (lambda p: torch.optim.AdamW(p, lr=1e-3), 2.0),
    (lambda p: torch.optim.Adam(p, lr=1e-3, amsgrad=True), 3.0),
])
def test_the_probe_counts_the_state_copies_of_a_trained_weight(make, copies) -> None:
    """On a tiny model's optimizer, built and never stepped: a probe of its class and defaults over one small
    tensor is stepped, and its state tensors shaped like the tensor counted (Adam's scalar step is not)."""
    from perfpredict.workload.spec import optimizer_state_copies

    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))
    opt = make(model.parameters())
    assert optimizer_state_copies(opt) == copies
    assert not opt.state  # the real optimizer allocated nothing
    with pytest.raises(ValueError, match="could not take a step"):  # a step that needs a closure
        optimizer_state_copies(torch.optim.LBFGS(model.parameters()))


def test_a_model_files_optimizer_reaches_its_prediction(predictor, files, archs) -> None:
    """A model file whose make_optimizer returns AdamW is charged one trained-weight copy more than the same
    file with the default optimizer, says so in its card, and records 2 there; a wrapper that is no torch
    optimizer is charged as the data's optimizer, with a note."""
    assert archs["default"].optimizer_state_copies == 1.0 and archs["adamw"].optimizer_state_copies == 2.0
    assert archs["default"].optimizer_state_note is None  # the data's optimizer: nothing to say
    assert archs["wrapper"].optimizer_state_copies == 1.0 and "could not be probed" in archs["wrapper"].optimizer_state_note
    a = predictor.predict_values(archs["default"], [16], device_type="cpu")
    b = predictor.predict_values(archs["adamw"], [16], device_type="cpu")
    assert a["method"] == "estimator"
    # the second state copy, and the temporaries AdamW's step holds on the CPU (tests/test_optimizer_step_memory.py)
    charged = archs["adamw"].param_bytes + archs["adamw"].optimizer_step_bytes["cpu"]
    assert b["peak_memory"]["median"][0] - a["peak_memory"]["median"][0] == pytest.approx(charged, rel=1e-9)
    card = predictor.predict(str(files["adamw"]), batch_size=16, device_type="cpu")
    assert card.features.optimizer_state_copies == 2.0
    assert any(n.startswith("AdamW keeps 2 state copies") and "+1 x" in n for n in card.prediction.notes)
    wrapped = predictor.predict(str(files["wrapper"]), batch_size=16, device_type="cpu")
    assert any("Two's could not be probed" in n for n in wrapped.prediction.notes)


@pytest.mark.parametrize("device_type", ["cpu", "cuda_h100"])
def test_each_copy_past_one_is_charged_the_trained_parameter_bytes(predictor, F, device_type) -> None:
    """AdamW minus SGD-momentum is the trained parameter bytes on every memory target (the shipped sets'
    memory is the baseline alone), plain SGD the same less, each interval with it; frozen bytes get none."""
    v = {c: predictor.predict_values(F, [8, 64], device_type=device_type, optimizer_state_copies=c)
         for c in (0, 1, 2)}
    TRAINED = F["param_bytes"]
    assert v[1]["method"] == "estimator"
    ms = predictor.sets[v[1]["model_set"]]
    names = [n for n in ("peak_memory", "device_memory") if n in ms.targets]
    assert names
    for name in names:
        assert ms.targets[name].point is None  # baseline-only: the prediction is the baseline
        for c, sign in ((2, 1), (0, -1)):
            for y1, yc in zip(v[1][name]["median"], v[c][name]["median"], strict=True):
                assert yc - y1 == pytest.approx(sign * TRAINED, rel=1e-9)
            for q in ("q10", "q90"):
                assert all((yc - y1) * sign > 0 for y1, yc in zip(v[1][name][q], v[c][name][q], strict=True))
    frozen = {**F, "frozen_param_bytes": F["param_bytes"]}  # nothing trains: no state to charge
    a = predictor.predict_values(frozen, [8], device_type=device_type, optimizer_state_copies=1)
    b = predictor.predict_values(frozen, [8], device_type=device_type, optimizer_state_copies=2)
    assert all(a[n] == b[n] for n in names)
    half = {**F, "frozen_param_bytes": F["param_bytes"] / 4}
    a = predictor.predict_values(half, [8], device_type=device_type, optimizer_state_copies=1)
    b = predictor.predict_values(half, [8], device_type=device_type, optimizer_state_copies=2)
    assert b[names[0]]["median"][0] - a[names[0]]["median"][0] == pytest.approx(TRAINED * 3 / 4, rel=1e-9)


def test_one_copy_predicts_as_before_and_infer_is_untouched(predictor, F) -> None:
    """1 is the training data's optimizer: the same numbers as not saying it (and as before the fix: no memory
    changes for it), and an inference set charges no optimizer at all."""
    for mode in ("train", "infer"):
        base = predictor.predict_values(F, [8, 64], device_type="cpu", mode=mode)
        assert predictor.predict_values(F, [8, 64], device_type="cpu", mode=mode, optimizer_state_copies=1) == base
    infer = predictor.predict_values(F, [8], device_type="cpu", mode="infer", optimizer_state_copies=2)
    assert infer == predictor.predict_values(F, [8], device_type="cpu", mode="infer")
    card = predictor.predict(features=F, batch_size=8, device_type="cpu")
    assert card.features.optimizer_state_copies == 1.0
    assert not any("state copies" in n for n in card.prediction.notes)


def test_a_predicted_card_repeats_its_optimizer_state(predictor, F, tmp_path) -> None:
    """Saved and loaded, a card predicted with two copies predicts its memory again with two; an explicit value
    replaces the card's; a card without the field (before schema 1.24) loads and is charged one copy."""
    card = predictor.predict(features=F, batch_sizes=[8, 64], device_type="cpu", optimizer_state_copies=2)
    assert any("keeps 2 state copies" in n and f"{F['param_bytes'] / 2**20:+,.1f} MiB" in n
               for n in card.prediction.notes)
    path = tmp_path / "card.json"
    card.save(path)
    loaded = PerformanceCard.load(path)
    assert loaded.features.optimizer_state_copies == 2.0
    again = predictor.predict(features=loaded, batch_sizes=[8, 64], device_type="cpu")
    assert [m.peak_bytes for m in again.memory] == [m.peak_bytes for m in card.memory]
    one = predictor.predict(features=loaded, batch_sizes=[8, 64], device_type="cpu", optimizer_state_copies=1)
    plain = predictor.predict(features=F, batch_sizes=[8, 64], device_type="cpu")
    assert [m.peak_bytes for m in one.memory] == [m.peak_bytes for m in plain.memory]
    raw = json.loads(path.read_text())
    del raw["features"]["optimizer_state_copies"]
    raw["schema_version"] = "1.23"
    path.write_text(json.dumps(raw))
    old = predictor.predict(features=PerformanceCard.load(path), batch_sizes=[8, 64], device_type="cpu")
    assert [m.peak_bytes for m in old.memory] == [m.peak_bytes for m in plain.memory]


@pytest.mark.parametrize("bad", [-1, -0.5, math.nan, math.inf, True, "2", 1e9])
def test_a_bad_copy_count_is_refused_readably(predictor, F, bad) -> None:
    with pytest.raises(UsageError, match="optimizer_state_copies must be a number from 0 to 100"):
        predictor.predict(features=F, batch_size=8, device_type="cpu", optimizer_state_copies=bad)
    with pytest.raises(UsageError, match="optimizer_state_copies must be a number"):
        predictor.largest_batch(features=F, memory_limit_bytes=2**30, device_type="cpu", optimizer_state_copies=bad)


def test_the_cli_and_the_service_take_the_copies(predictor, F, tmp_path) -> None:
    from typer.testing import CliRunner

    import perfpredict.cli_models  # noqa: F401 - registers predict
    from perfpredict.cli import app
    from perfpredict.features.onnx_export import export_onnx

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    onnx = tmp_path / "net.onnx"
    onnx.write_bytes(export_onnx(model, (torch.randn(2, 256),)).model_proto.SerializeToString())
    trained = (256 * 1024 + 1024 + 1024 * 10 + 10) * 4

    def run(*args):
        return CliRunner().invoke(app, ["predict", str(onnx), "-b", "8", "--models", str(MODELS),
                                        "--device-type", "cpu", *map(str, args)])

    peaks = {}
    for c in ("1", "2"):
        out = tmp_path / f"card{c}.json"
        res = run("--optimizer-states", c, "-o", out)
        assert res.exit_code == 0, res.output[-2000:]
        peaks[c] = json.loads(out.read_text())["prediction"]["points"][0]["peak_memory_bytes"]
    assert peaks["2"] - peaks["1"] == pytest.approx(trained, rel=1e-9)
    for bad in ("-1", "nan"):
        res = run("--optimizer-states", bad)
        assert isinstance(res.exception, UsageError) and "--optimizer-states must be a number" in str(res.exception)

    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from perfpredict.service import create_app

    client = TestClient(create_app(predictor), raise_server_exceptions=False)
    r1 = client.post("/predict", json={"features": F, "batch_sizes": [8], "device_type": "cpu"})
    r2 = client.post("/predict", json={"features": F, "batch_sizes": [8], "device_type": "cpu",
                                       "optimizer_state_copies": 2})
    assert r1.status_code == r2.status_code == 200, r2.text
    assert r2.json()["features"]["optimizer_state_copies"] == 2.0
    gap = r2.json()["memory"][0]["peak_bytes"] - r1.json()["memory"][0]["peak_bytes"]
    assert abs(gap - F["param_bytes"]) <= 1  # whole bytes on a card
    r = client.post("/predict", json={"features": F, "optimizer_state_copies": -1})
    assert r.status_code == 422 and "optimizer_state_copies" in r.text
    data = onnx.read_bytes()
    r = client.post("/predict/onnx", files={"file": ("net.onnx", data)},
                    data={"batch_sizes": "8", "device_type": "cpu", "optimizer_state_copies": "2"})
    assert r.status_code == 200, r.text
    assert r.json()["prediction"]["points"][0]["peak_memory_bytes"] == pytest.approx(peaks["2"], rel=1e-12)
    r = client.post("/predict/onnx", files={"file": ("net.onnx", data)}, data={"optimizer_state_copies": "nan"})
    assert r.status_code == 422
    r = client.post("/max-batch", json={"features": F, "memory_limit_bytes": 2**30, "device_type": "cpu",
                                        "optimizer_state_copies": 2})
    r1 = client.post("/max-batch", json={"features": F, "memory_limit_bytes": 2**30, "device_type": "cpu"})
    assert r.status_code == r1.status_code == 200, r.text
    assert r.json()["largest_ok"] <= r1.json()["largest_ok"]


def test_with_optimizer_state_copies_leaves_an_arch_alone_without_a_value(F) -> None:
    from perfpredict.estimators.arch import ArchFeatures
    from perfpredict.predictor import with_optimizer_state_copies

    arch = ArchFeatures.from_dict(F)
    assert arch.optimizer_state_copies == 1.0
    assert with_optimizer_state_copies(arch, None) is arch
    probed = replace(arch, optimizer_state_copies=2.0, optimizer_state_note="AdamW keeps 2")
    said = with_optimizer_state_copies(probed, 0.0)
    assert said.optimizer_state_copies == 0.0 and said.optimizer_state_note is None


def test_a_measured_training_card_records_its_optimizers_state(predictor, files) -> None:
    """A measured card of an AdamW job predicted elsewhere (features=card) is charged AdamW's two copies (one
    copy of its trained bytes more than one copy), as its model file is; an inference card, and a wrapper no probe can tell, say nothing (one copy)."""
    from perfpredict.profile import ProfileSettings, profile_workload
    from perfpredict.workload import load_model_file
    from tests.conftest import FAST_TIMING

    def measured(name: str, mode: str = "train"):
        settings = ProfileSettings(batch_sizes=(4,), mode=mode, device="cpu", timing=FAST_TIMING, threads=1,
                                   fvcore=False, measure_energy=False)
        return profile_workload(load_model_file(str(files[name])), settings).card

    adamw = measured("adamw")
    assert adamw.features.optimizer_state_copies == 2.0
    by_card = predictor.predict(features=adamw, batch_sizes=[8], device_type="cpu")
    as_sgd = predictor.predict(features=adamw, batch_sizes=[8], device_type="cpu", optimizer_state_copies=1)
    # the second copy and the step's temporaries the card records (tests/test_optimizer_step_memory.py)
    charged = adamw.model.param_bytes + adamw.features.optimizer_step_bytes["cpu"]
    assert by_card.memory[0].peak_bytes - as_sgd.memory[0].peak_bytes == pytest.approx(charged, abs=1)
    assert measured("default").features.optimizer_state_copies == 1.0
    assert measured("wrapper").features.optimizer_state_copies is None
    assert measured("adamw", mode="infer").features.optimizer_state_copies is None
