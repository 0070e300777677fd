"""ONNX files as a scan found them refused or miscounted: every tensor stored in the side file (a Reshape's target
too), onnxruntime's QOperator quantised Gemm (``com.microsoft`` ``QGemm``), and integer initializers (shape
constants, quantisation scales and zero points) counted as parameters."""

import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from perfpredict.estimators.arch import ArchFeaturesError, from_onnx_file  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _reshaping_mlp():
    """x [N, 64] @ W [64, 32], reshaped to [N, 4, 8] by an int64 initializer: a value shape inference needs."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([-1, 4, 8], dtype=np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Reshape", ["h", "shape"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _all_external(model, path: Path, location: str = "m.data") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location,
                    size_threshold=0)
    return path


def test_a_file_with_every_tensor_in_its_data_file_predicts_as_with_them_inside(tmp_path, monkeypatch):
    """``onnx.save_model(..., size_threshold=0)`` puts the Reshape's target in the side file too: the file was
    refused ("Cannot parse data from external tensors"), the checker's shape inference reading no file. Read from
    beside the model (whatever the working directory), its card is the inline model's."""
    from perfpredict import Predictor

    inline = tmp_path / "inline.onnx"
    onnx.save_model(_reshaping_mlp(), str(inline))
    external = _all_external(_reshaping_mlp(), tmp_path / "export" / "m.onnx")
    refs = onnx.load(str(external), load_external_data=False)
    assert all(t.data_location == TensorProto.EXTERNAL for t in refs.graph.initializer)
    monkeypatch.chdir(tmp_path)
    assert from_onnx_file(external).as_dict() | {"name": "x"} == from_onnx_file(inline).as_dict() | {"name": "x"}
    predictor = Predictor.load(REPO / "trained_models")
    cards = [predictor.predict(onnx_path=p, batch_sizes=[32], device_type="cuda_h100").model_dump(mode="json")
             for p in (inline, external)]
    assert cards[0]["prediction"]["points"] == cards[1]["prediction"]["points"]


@pytest.mark.parametrize("where", ["../outside.data", "/abs"])
def test_external_data_outside_the_models_folder_is_refused(tmp_path, where):
    """Only files in the model's folder are read: a location with '..' or an absolute one is refused, saying so
    (ONNX's checker refused them before, in its own words; the values are now read here, so the guard is ours)."""
    folder = tmp_path / "export"
    location = where if where.startswith("..") else str(tmp_path / "outside.data")
    _all_external(_reshaping_mlp(), folder / "m.onnx")
    (tmp_path / "outside.data").write_bytes((folder / "m.data").read_bytes())
    m = onnx.load(str(folder / "m.onnx"), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    onnx.save_model(m, str(folder / "m.onnx"))
    with pytest.raises(ArchFeaturesError, match="outside the model's folder"):
        from_onnx_file(folder / "m.onnx")


def _gemm_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((32, 64)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((32, 10)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b2")]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_qoperator_quantised_gemm_is_counted_as_its_float_gemm(tmp_path):
    """onnxruntime's static quantisation in QOperator format writes each Gemm as a ``com.microsoft`` ``QGemm``:
    it was no MAC op, so such a model was refused ("no multiply-accumulate ops with known shapes"). Its MACs are
    the Gemms' (the second QGemm's input shape comes from the first), and its parameters the float model's: the
    scales and zero points the quantiser adds are none."""
    quantization = pytest.importorskip("onnxruntime.quantization")

    class Reader(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(1)
            self.batches = iter([{"x": rng.standard_normal((4, 64)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    fp32 = _gemm_model(tmp_path / "fp32.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantization.quantize_static(str(fp32), str(tmp_path / "q.onnx"), Reader(),
                                     quant_format=quantization.QuantFormat.QOperator)
    q = onnx.load(str(tmp_path / "q.onnx"))
    assert [n.op_type for n in q.graph.node if n.domain == "com.microsoft"] == ["QGemm", "QGemm"]
    assert any(t.data_type == TensorProto.INT8 or t.data_type == TensorProto.UINT8 for t in q.graph.initializer
               if not t.dims)  # zero points among its initializers
    float_arch, q_arch = from_onnx_file(fp32), from_onnx_file(tmp_path / "q.onnx")
    assert q_arch.forward_macs_per_sample == float_arch.forward_macs_per_sample == 64 * 32 + 32 * 10
    assert q_arch.macs_by_op == {"QGemm": 64 * 32 + 32 * 10}
    assert sorted(r[0] for r in q_arch.kernel_nodes).count("gemm") == 2
    assert q_arch.param_count == float_arch.param_count == 64 * 32 + 32 + 32 * 10 + 10


def test_integer_shape_constants_are_no_parameters(tmp_path):
    """An int64 initializer (a Reshape's target, an index) was counted as a parameter: the file's param_count was
    above the model's own (torch's ``parameters()``, what the training data's param_count is); an 8-bit weight
    still counts."""
    onnx.save_model(_reshaping_mlp(), str(tmp_path / "m.onnx"))
    assert from_onnx_file(tmp_path / "m.onnx").param_count == 64 * 32  # was 64 * 32 + 3
    w8 = numpy_helper.from_array(np.ones((64, 32), dtype=np.int8), "w8")
    nodes = [helper.make_node("MatMulInteger", ["x", "w8"], ["h"]), helper.make_node("Reshape", ["h", "shape"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT8, ["N", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, ["N", 4, 8])],
                          [w8, numpy_helper.from_array(np.array([-1, 4, 8], dtype=np.int64), "shape")])
    onnx.save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "q.onnx"))
    assert from_onnx_file(tmp_path / "q.onnx").param_count == 64 * 32
