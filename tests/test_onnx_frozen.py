"""Frozen parameters reach a prediction from an ONNX file too: ``frozen`` names the weights a training job freezes
by initializer name prefix (Python ``frozen=[...]``, ``perfpredict predict --frozen``, the upload route's
``frozen`` field), as a model file's ``requires_grad=False`` and a feature vector's ``frozen_param_bytes`` do. An
ONNX file used to be taken as training every weight, with no way to say otherwise."""

import json
import runpy
from pathlib import Path

import pytest
import torch

from perfpredict import Predictor
from perfpredict.errors import UsageError
from tests.test_estimators import _onnx_bytes

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "trained_models"
MODEL = (
    "import torch\nimport torch.nn as nn\n\n"
    "class Net(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.backbone, self.head = nn.Linear(64, 256), nn.Linear(256, 10)\n\n"
    "    def forward(self, x):\n"
    "        return self.head(torch.relu(self.backbone(x)))\n\n"
    "def build_model():\n"
    "    model = Net()\n"
    "    model.backbone.requires_grad_(False)  # a frozen feature extractor, a trained head\n"
    "    return model\n\n"
    "def example_inputs(batch_size):\n    return torch.randn(batch_size, 64)\n")
FROZEN, FROZEN_COUNT = (64 * 256 + 256) * 4, 64 * 256 + 256
TOTAL_COUNT = FROZEN_COUNT + 256 * 10 + 10
KW = {"batch_sizes": [8, 64], "device_type": "cpu"}


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(MODELS)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    """The model file, and its ONNX export (torch.onnx.export keeps the module paths: backbone.weight, ...)."""
    folder = tmp_path_factory.mktemp("onnx_frozen")
    model = folder / "net.py"
    model.write_text(MODEL)
    torch.manual_seed(0)
    onnx = folder / "net.onnx"
    onnx.write_bytes(_onnx_bytes(runpy.run_path(str(model))["build_model"](), torch.randn(2, 64), dynamic=True))
    return model, onnx


@pytest.fixture(scope="module")
def frozen_card(predictor, files):
    return predictor.predict(onnx_path=files[1], frozen=["backbone."], **KW)


def _memory(card) -> list[float]:
    return [p.peak_memory_bytes for p in card.prediction.points]


def test_an_onnx_file_with_frozen_weights_predicts_as_the_model_file_does(predictor, files, frozen_card) -> None:
    by_file = predictor.predict(str(files[0]), **KW)  # the module's own requires_grad=False
    assert frozen_card.model.frozen_param_bytes == by_file.model.frozen_param_bytes == FROZEN
    assert frozen_card.model.parameters == by_file.model.parameters == TOTAL_COUNT
    assert frozen_card.model.trainable_parameters == by_file.model.trainable_parameters == TOTAL_COUNT - FROZEN_COUNT
    note = next(n for n in frozen_card.prediction.notes if "frozen" in n)
    assert f"{FROZEN / 2**20:,.1f} MiB" in note and "charged 1 (its weight)" in note
    # the same file with every weight trained: eq. 2 charges the backbone a gradient and optimizer state
    all_trained = predictor.predict(onnx_path=files[1], **KW)
    assert all_trained.model.frozen_param_bytes == 0 and all_trained.model.trainable_parameters == TOTAL_COUNT
    assert not any("frozen" in n for n in all_trained.prediction.notes)
    assert all(f <= t for f, t in zip(_memory(frozen_card), _memory(all_trained), strict=True))
    # the Horus eq. 2 feature charges the backbone no gradient and no momentum copy, as for the model file
    from perfpredict.estimators.arch import from_onnx_file, from_workload
    from perfpredict.estimators.design import horus_train_memory

    frozen, trained = from_onnx_file(files[1], frozen=["backbone."]), from_onnx_file(files[1])
    assert (frozen.frozen_param_bytes, frozen.frozen_param_count) == (FROZEN, FROZEN_COUNT)
    assert horus_train_memory(trained, 8) - horus_train_memory(frozen, 8) == 2 * FROZEN
    module = from_workload(str(files[0]))
    assert frozen.param_bytes == module.param_bytes and frozen.frozen_param_bytes == module.frozen_param_bytes
    # overlapping prefixes count each weight once; a prefix takes its names' start as it is
    same = predictor.predict(onnx_path=files[1], frozen=["backbone.", "backbone.weight"], **KW)
    assert same.model.frozen_param_bytes == FROZEN and _memory(same) == _memory(frozen_card)
    weights = predictor.predict(onnx_path=files[1], frozen=["backbone.weight"], **KW)
    assert weights.model.frozen_param_bytes == 64 * 256 * 4


def test_a_prefix_naming_no_initializer_or_a_frozen_for_another_input_is_refused(predictor, files) -> None:
    with pytest.raises(UsageError, match=r"frozen prefix 'encoder\.' starts no initializer's name.*'backbone\.weight'"):
        predictor.predict(onnx_path=files[1], frozen=["backbone.", "encoder."], **KW)
    with pytest.raises(UsageError, match="list of initializer name prefixes"):
        predictor.predict(onnx_path=files[1], frozen="backbone.", **KW)
    with pytest.raises(UsageError, match="non-empty initializer name prefix"):
        predictor.predict(onnx_path=files[1], frozen=[""], **KW)
    # a model file says which weights train itself (requires_grad), a feature vector by frozen_param_bytes
    with pytest.raises(UsageError, match="frozen applies to ONNX files only"):
        predictor.predict(str(files[0]), frozen=["backbone."], **KW)
    with pytest.raises(UsageError, match="frozen applies to ONNX files only"):
        predictor.predict(features={"forward_macs_per_sample": 1e6, "param_count": 1e5, "param_bytes": 4e5,
                                    "activation_bytes_per_sample": 1e4, "num_nodes": 5}, frozen=["w"], **KW)


def test_the_cli_flag_reaches_the_same_prediction(files, frozen_card, tmp_path) -> None:
    from typer.testing import CliRunner

    import perfpredict.cli_models  # noqa: F401 - registers predict
    from perfpredict.cli import app

    def run(*args):
        return CliRunner().invoke(app, ["predict", *map(str, args), "--models", str(MODELS), "--device-type", "cpu"])

    out = tmp_path / "card.json"
    res = run(files[1], "--frozen", "backbone.", "-b", "8,64", "-o", out)
    assert res.exit_code == 0, res.output[-2000:]
    card = json.loads(out.read_text())
    assert card["model"]["frozen_param_bytes"] == FROZEN
    assert card["model"]["trainable_parameters"] == TOTAL_COUNT - FROZEN_COUNT
    assert [p["peak_memory_bytes"] for p in card["prediction"]["points"]] == pytest.approx(_memory(frozen_card),
                                                                                           rel=1e-12)
    for args, needle in (([files[1], "--frozen", "encoder."], "'encoder.' starts no initializer's name"),
                         ([files[1], "--frozen", " "], "--frozen is empty"),
                         ([files[0], "--frozen", "backbone."], "--frozen only applies to an ONNX file")):
        res = run(*args)  # perfpredict's entry point prints a UsageError as one line and exits 2
        assert isinstance(res.exception, UsageError) and needle in str(res.exception), res.output[-2000:]


def test_the_upload_route_takes_frozen_prefixes_and_its_schema_shows_the_field(predictor, files, frozen_card) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from perfpredict.service import create_app

    client = TestClient(create_app(predictor), raise_server_exceptions=False)
    data = files[1].read_bytes()

    def post(**form):
        return client.post("/predict/onnx", files={"file": ("net.onnx", data)},
                           data={"batch_sizes": "8,64", "device_type": "cpu", **form})

    r = post(frozen="backbone.")
    assert r.status_code == 200, r.text
    card = r.json()
    assert card["model"]["frozen_param_bytes"] == FROZEN
    assert card["model"]["trainable_parameters"] == TOTAL_COUNT - FROZEN_COUNT
    assert [p["peak_memory_bytes"] for p in card["prediction"]["points"]] == pytest.approx(_memory(frozen_card),
                                                                                           rel=1e-12)
    assert post(frozen="backbone.weight, backbone.bias").json()["model"]["frozen_param_bytes"] == FROZEN
    r = post(frozen="backbone.,encoder.")
    assert r.status_code == 422 and "'encoder.' starts no initializer's name" in r.text and "backbone.weight" in r.text
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/predict/onnx"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    form = spec["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
    assert "initializer name prefixes" in form["properties"]["frozen"]["description"]
