"""The HTTP service answers what the Python API answers for the same input, and never a 500 (a property scan
of service.py against Predictor.predict / largest_batch / colocation)."""

import shutil
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from tests.test_service_validation import F  # noqa: E402 - after the fastapi check, as that module needs it

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pred():
    from perfpredict import Predictor

    return Predictor.load(REPO / "trained_models")


@pytest.fixture(scope="module")
def client(pred):
    from fastapi.testclient import TestClient

    from perfpredict.service import create_app

    return TestClient(create_app(pred), raise_server_exceptions=False)


def _matmul_of_two_inputs(dims: list) -> bytes:
    """x @ y with both operands graph inputs (no weights to upload): their shapes alone set the MAC count."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("MatMul", ["x", "y"], ["z"]), helper.make_node("Relu", ["z"], ["o"])]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *dims]),
                                            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *dims])],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT, [f"o{i}" for i in range(len(dims) + 1)])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("dims", [[10**9, 10**9], [10**18] * 12, [10**18] * 17])
def test_an_upload_counting_past_the_feature_bound_is_refused_as_the_json_route_refuses_its_counts(client, pred,
                                                                                                     dims, tmp_path):
    """A 400-byte upload whose input shapes give 1e27 MACs per sample (or 1e234, or past float range) was answered
    with iteration times of 1e14 s and more, then past float range with a 500 (OverflowError in the card), while
    the same features sent to /predict are a 422 (past MAX_QUANTITY). The file is refused with a 400 naming the
    count, and the Python API refuses it with the same one line."""
    from perfpredict.estimators.arch import ArchFeaturesError

    raw = _matmul_of_two_inputs(dims)
    for device_type in ("cuda", "cpu"):
        r = client.post("/predict/onnx", files={"file": ("mm.onnx", raw)},
                        data={"batch_sizes": "1,1000000", "device_type": device_type})
        assert r.status_code == 400, r.text[:300]
        assert "forward_macs_per_sample" in r.json()["detail"]
    path = tmp_path / "mm.onnx"
    path.write_bytes(raw)
    with pytest.raises(ArchFeaturesError, match="forward_macs_per_sample"):
        pred.predict(onnx_path=path, batch_sizes=[8])
    r = client.post("/predict", json={"features": F | {"forward_macs_per_sample": float(10**27)}})
    assert r.status_code == 422


def test_an_upload_within_the_bound_still_gives_the_json_routes_answer(client):
    """The bound leaves a large but representable graph alone, and the JSON route fed its features agrees."""
    r = client.post("/predict/onnx", files={"file": ("mm.onnx", _matmul_of_two_inputs([10**5, 10**5]))},
                    data={"batch_sizes": "1,64"})
    assert r.status_code == 200, r.text[:300]
    card = r.json()
    features = dict(card["features"]) | {"param_count": card["model"]["parameters"], "name": "mm"}
    again = client.post("/predict", json={"features": features, "batch_sizes": [1, 64]}).json()
    assert again["prediction"]["points"] == card["prediction"]["points"]


def test_a_model_set_copied_to_another_folder_answers_as_itself(tmp_path, pred):
    """Sets are named by their folder (GET /models, device_type). A copy of the H100 set kept as cuda_h100_old
    beside another set in a folder named cuda_h100 answered /max-batch for cuda_h100_old from the other folder's
    set (largest_batch looked its set up again by the metadata's dataset name), and its cards named that
    other set, so a pair of them was judged with the other set's interference model."""
    from fastapi.testclient import TestClient

    from perfpredict import Predictor
    from perfpredict.service import create_app

    shutil.copytree(REPO / "trained_models" / "cuda_h100", tmp_path / "cuda_h100_old")
    shutil.copytree(REPO / "trained_models" / "cuda_h200", tmp_path / "cuda_h100")
    copied = Predictor.load(tmp_path)
    client = TestClient(create_app(copied), raise_server_exceptions=False)
    big = F | {"forward_macs_per_sample": 1e9, "param_count": 1e7, "param_bytes": 4e7,
               "activation_bytes_per_sample": 1e7, "num_nodes": 50}
    want = pred.largest_batch(features=big, memory_limit_bytes=40 * 2**30, device_type="cuda_h100")
    got = client.post("/max-batch", json={"features": big, "memory_limit_bytes": 40 * 2**30,
                                          "device_type": "cuda_h100_old"}).json()
    assert (got["largest_ok"], got["smallest_failed"]) == (want.largest_ok, want.smallest_failed)
    assert [p["iter_time_s"] for p in got["probes"]] == [p.iter_time_s for p in want.probes]
    card = client.post("/predict", json={"features": big, "device_type": "cuda_h100_old"}).json()
    assert card["prediction"]["model_set"] == "cuda_h100_old"
    assert card["prediction"]["points"] == pred.predict(features=big, batch_sizes=[32], device_type="cuda_h100") \
        .model_dump(mode="json")["prediction"]["points"]


def test_a_feature_vector_with_an_empty_name_gets_the_python_apis_card(client, pred):
    """``"name": ""`` (the schema allows it) gave a card with an empty model name and source from the service,
    where Predictor.predict(features=...) names it "features"."""
    body = client.post("/predict", json={"features": F | {"name": ""}}).json()
    card = pred.predict(features=F | {"name": ""})
    assert (body["model"]["name"], body["model"]["source"]) == (card.model.name, card.model.source) == \
        ("features", "features")


def test_an_upload_growing_faster_than_the_batch_gives_a_card_that_predicts_again(client, pred):
    """A batch x batch similarity matrix (contrastive losses) grows as the batch squared, so the two-point split
    gave negative fixed terms (peak_live_bytes_fixed, graph_saved_bytes_fixed, kernel rows' fixed MACs and bytes).
    The upload was answered, but its card's features were refused by POST /predict (422) and by
    Predictor.predict(features=card): the schema takes no negative count. They are held at 0, as the MACs' and
    activations' fixed parts already were."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from perfpredict.card import PerformanceCard

    w = numpy_helper.from_array(np.eye(16, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Transpose", ["h"], ["ht"], perm=[1, 0]),
             helper.make_node("MatMul", ["h", "ht"], ["s"]), helper.make_node("Softmax", ["s"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "sim", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "N"])], [w])
    raw = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    for device_type in ("cuda", "cpu"):
        r = client.post("/predict/onnx", files={"file": ("sim.onnx", raw)},
                        data={"batch_sizes": "8,64", "device_type": device_type})
        assert r.status_code == 200, r.text[:300]
        card = r.json()
        features = dict(card["features"]) | {"param_count": card["model"]["parameters"], "name": "sim"}
        again = client.post("/predict", json={"features": features, "batch_sizes": [8, 64],
                                              "device_type": device_type})
        assert again.status_code == 200, again.text[:300]
        assert again.json()["prediction"]["points"] == card["prediction"]["points"]
        back = pred.predict(features=PerformanceCard.model_validate(card), batch_sizes=[8, 64], device_type=device_type)
        assert back.model_dump(mode="json")["prediction"]["points"] == card["prediction"]["points"]
