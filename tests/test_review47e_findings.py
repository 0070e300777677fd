"""Review of ``trained`` (an ONNX file's weights that train, every other one frozen).

- An integer weight never trains (autograd needs floating point), yet ``trained`` froze only the floating-point
  initializers, so a LoRA over an int8-quantized base (``DequantizeLinear`` of an int8 initializer) kept its base
  matrices as trained weights: ``trained=["lora."]`` predicted another job than ``frozen=["base."]`` for the same
  graph (frozen_param_bytes 4 against 4,101 below, the int8 bytes charged a gradient and optimizer state).
- ``trained=[]`` (no weight trains) was read as not given, so it predicted a job that trains every weight, the
  opposite; the CLI and the form field already refuse ``--trained ""`` / ``trained=``."""

import numpy as np
import pytest

from perfpredict import Predictor
from perfpredict.errors import UsageError
from perfpredict.estimators.arch import from_onnx_proto
from tests.test_onnx_frozen import MODELS

D, R = 64, 4
KW = {"batch_sizes": [4, 16], "device_type": "cpu", "optimizer": "adamw"}


def _qlora():
    """y = x @ dequantize(int8 base) + x @ A @ B: a LoRA over a quantized base weight."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (D, D)).astype(np.int8), "base.w_q"),
             numpy_helper.from_array(np.array(0.01, np.float32), "base.scale"),
             numpy_helper.from_array(np.array(0, np.int8), "base.zero"),
             numpy_helper.from_array(rng.standard_normal((D, R)).astype(np.float32), "lora.A"),
             numpy_helper.from_array(rng.standard_normal((R, D)).astype(np.float32), "lora.B")]
    nodes = [helper.make_node("DequantizeLinear", ["base.w_q", "base.scale", "base.zero"], ["w"]),
             helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("MatMul", ["x", "lora.A"], ["a"]),
             helper.make_node("MatMul", ["a", "lora.B"], ["b"]),
             helper.make_node("Add", ["h", "b"], ["y"])]
    graph = helper.make_graph(nodes, "qlora", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", D])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("qlora") / "qlora.onnx"
    path.write_bytes(_qlora().SerializeToString())
    return path


def test_trained_freezes_the_integer_weights(onnx_file) -> None:
    proto = _qlora()
    trained, listed = from_onnx_proto(proto, trained=["lora."]), from_onnx_proto(proto, frozen=["base."])
    base_bytes = D * D + 4 + 1  # int8 matrix, float scale, int8 zero point
    assert trained.frozen_param_bytes == listed.frozen_param_bytes == base_bytes
    # the scale and zero point are bytes, no parameters (tests/test_onnx_file_findings.py)
    assert trained.frozen_param_count == listed.frozen_param_count == D * D
    assert trained.param_count - trained.frozen_param_count == 2 * D * R
    assert trained.frozen_step_work_ratio == listed.frozen_step_work_ratio
    predictor = Predictor.load(MODELS)
    cards = [predictor.predict(onnx_path=onnx_file, **given, **KW).model_dump(mode="json", exclude={"run"})
             for given in ({"trained": ["lora."]}, {"frozen": ["base."]})]
    assert cards[0] == cards[1]


def test_trained_naming_no_weight_is_refused(onnx_file) -> None:
    predictor = Predictor.load(MODELS)
    for call in (lambda: from_onnx_proto(_qlora(), trained=[]),
                 lambda: predictor.predict(onnx_path=onnx_file, trained=[], **KW),
                 lambda: predictor.largest_batch(onnx_path=onnx_file, trained=(), memory_limit_bytes=2**30,
                                                 device_type="cpu")):
        with pytest.raises(UsageError, match=r"trained=\[\] names no weight that trains"):
            call()
    # frozen=[] freezes none, as leaving it out does
    assert from_onnx_proto(_qlora(), frozen=[]).frozen_param_bytes == 0
