"""ONNX files as users get them from ``torch.onnx.export``: a tied weight the TorchScript exporter stores twice,
and the external-data file the dynamo exporter writes beside every model, uploaded to the HTTP service alone."""

import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")  # the dynamo exporter

REPO = Path(__file__).resolve().parents[1]


class _TiedLM(torch.nn.Module):
    """An embedding table tied to the output projection (GPT-2's, BERT's masked-LM head)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(1000, 64)
        self.mix = torch.nn.Linear(64, 64)
        self.head = torch.nn.Linear(64, 1000, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(torch.relu(self.mix(self.emb(ids))))


class _Untied(torch.nn.Module):
    """Two independent weights whose shapes are each other's transpose: nothing is tied."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(64, 1000, bias=False)
        self.down = torch.nn.Linear(1000, 64, bias=False)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def _export(model, args, path: Path, *, dynamo: bool, **kw) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path), dynamo=dynamo, **kw)
    return path


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied weight once


@pytest.mark.parametrize("keep_inputs", [False, True])
def test_a_tied_weight_of_a_torchscript_export_is_counted_once(tmp_path, keep_inputs):
    """The TorchScript exporter folds the head's transpose of the tied table into a second initializer
    (``onnx::MatMul_N``): 132,160 parameters were counted for this 68,160-parameter model."""
    from perfpredict.estimators.arch import from_onnx_file

    torch.manual_seed(0)
    model = _TiedLM()
    path = _export(model, (torch.randint(0, 1000, (2, 8)),), tmp_path / "lm.onnx", dynamo=False,
                   input_names=["ids"], dynamic_axes={"ids": {0: "batch"}}, opset_version=17,
                   keep_initializers_as_inputs=keep_inputs)
    arch = from_onnx_file(path)
    assert arch.param_count == _params(model) == 68_160
    assert arch.param_bytes == 4 * 68_160
    assert arch.forward_macs_per_sample == 8 * (64 * 64 + 64 * 1000)  # the head's MatMul still counted


def test_weights_that_only_share_transposed_shapes_are_both_counted(tmp_path):
    from perfpredict.estimators.arch import from_onnx_file

    torch.manual_seed(0)
    model = _Untied()
    path = _export(model, (torch.randn(2, 64),), tmp_path / "u.onnx", dynamo=False, input_names=["x"],
                   dynamic_axes={"x": {0: "batch"}}, opset_version=17)
    assert from_onnx_file(path).param_count == _params(model) == 128_000


class _IdentityBottleneck(torch.nn.Module):
    """A down and an up projection both initialised as identities (``nn.init.eye_``): two parameters whose
    values are each other's transpose, neither tied to the other."""

    def __init__(self) -> None:
        super().__init__()
        self.down = torch.nn.Linear(256, 64, bias=False)
        self.up = torch.nn.Linear(64, 256, bias=False)
        torch.nn.init.eye_(self.down.weight)
        torch.nn.init.eye_(self.up.weight)

    def forward(self, x):
        return x + self.up(torch.relu(self.down(x)))


@pytest.mark.parametrize("shape", [(2, 256), (2, 8, 256)])
def test_two_weights_that_are_only_equal_transposes_are_both_counted(tmp_path, shape):
    """The exporter folds both projections' transposes (``onnx::MatMul_9`` and ``onnx::MatMul_10``), which are
    each other's transpose: taken for one tied weight, 16,384 parameters were counted for this 32,768."""
    from perfpredict.estimators.arch import from_onnx_file

    model = _IdentityBottleneck()
    path = _export(model, (torch.randn(*shape),), tmp_path / "b.onnx", dynamo=False, opset_version=17)
    assert from_onnx_file(path).param_count == _params(model) == 32_768


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from perfpredict import Predictor
    from perfpredict.service import create_app

    return TestClient(create_app(Predictor.load(REPO / "trained_models")), raise_server_exceptions=False)


def test_a_dynamo_export_uploaded_without_its_data_file_is_predicted_as_the_file_is(client, tmp_path, monkeypatch):
    """``torch.onnx.export`` (dynamo, the default since torch 2.9) writes the weights to ``model.onnx.data`` however
    small the model; the upload route refused every such file (400). Its features need the weights' shapes only:
    the upload's card is the file's, and the data file is never looked for (not even in the working directory)."""
    from perfpredict import Predictor

    torch.manual_seed(0)
    model = _TiedLM()
    path = _export(model, (torch.randint(0, 1000, (4, 8)),), tmp_path / "lm.onnx", dynamo=True)
    assert (tmp_path / "lm.onnx.data").is_file()
    card = Predictor.load(REPO / "trained_models").predict(onnx_path=path, batch_sizes=[16], device_type="cuda_h100")
    monkeypatch.chdir(tmp_path)  # where the data file lies: the answer must not depend on it
    answers = []
    for present in (True, False):
        if not present:
            (tmp_path / "lm.onnx.data").unlink()
        r = client.post("/predict/onnx", files={"file": ("lm.onnx", path.read_bytes(), "application/octet-stream")},
                        data={"batch_sizes": "16", "device_type": "cuda_h100"})
        assert r.status_code == 200, r.text
        answers.append(r.json())
    assert answers[0]["prediction"] == answers[1]["prediction"]
    assert answers[0]["prediction"]["points"] == card.model_dump(mode="json")["prediction"]["points"]
    assert answers[0]["features"]["param_bytes"] == 4 * _params(model)


def test_an_upload_with_a_shape_in_an_external_file_is_refused(client, tmp_path):
    """Integer tensors (a Reshape's target) shape the graph: one stored in a file the upload lacks is a 400 naming
    it, not a card that leaves ops uncounted."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([-1, 16], dtype="int64"), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
                          [shape, numpy_helper.from_array(np.ones((16, 8), "float32"), "w")])
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"),
                    save_as_external_data=True, location="m.data", size_threshold=0)
    r = client.post("/predict/onnx", files={"file": ("m.onnx", (tmp_path / "m.onnx").read_bytes())},
                    data={"batch_sizes": "8"})
    assert r.status_code == 400 and "integer values such as a shape" in r.json()["detail"]
