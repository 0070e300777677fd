"""A BatchNormalization's running statistics are buffers, not trained weights, on an ONNX file as on a model file.

An ONNX file's initializers were all taken as weights that train (less the ``frozen`` ones): a BatchNormalization's
running mean and variance (its inputs 3 and 4) were counted as parameters (the card's model.parameters and
trainable_parameters), probed as trained weights for the optimizer's step temporaries (``optimizer="adamw"`` on
CUDA, foreach: a copy of every trained byte), and both an ONNX file's and a model file's training memory charged them
a gradient and the optimizer's state copies through the graph's param_bytes. Torch's optimizer sees parameters
only. Now the graph's buffers (:func:`~perfpredict.features.graph.buffer_names`) are ``features.buffer_bytes``, part
of param_bytes; the memory baselines keep charging them as they were fitted (on zoo models whose param_bytes hold
them), and an optimizer's copies beyond the data's one leave them out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from perfpredict import Predictor

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "trained_models"
C, LAYERS = 16384, 4  # BatchNorm-heavy: the running statistics are 4/5 of the parameters' bytes
BN_MLP = ("import torch\nimport torch.nn as nn\n\n"
          "def build_model():\n"
          f"    return nn.Sequential(*[nn.BatchNorm1d({C}) for _ in range({LAYERS})], nn.Linear({C}, 2))\n\n"
          f"def example_inputs(batch_size):\n    return torch.randn(batch_size, {C})\n")
BUFFERS = LAYERS * 2 * C * 4  # running mean and variance, float32
PARAMETERS = LAYERS * 2 * C + C * 2 + 2  # BatchNorm weight and bias, the Linear


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(MODELS)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    """The BatchNorm MLP as a model file and as its ONNX export."""
    from perfpredict.features.onnx_export import export_onnx

    root = tmp_path_factory.mktemp("bn_buffers")
    py = root / "bn_mlp.py"
    py.write_text(BN_MLP)
    scope: dict = {}
    exec(BN_MLP, scope)  # noqa: S102 - the module text above
    torch.manual_seed(0)
    onnx_path = root / "bn_mlp.onnx"
    proto = export_onnx(scope["build_model"](), (torch.randn(2, C),)).model_proto
    onnx_path.write_bytes(proto.SerializeToString())
    return py, onnx_path


def _peak(card) -> float:
    return card.memory[0].peak_bytes


def test_the_running_statistics_are_no_trained_weights(predictor, files) -> None:
    """The ONNX file's card counts the module's parameters, probes AdamW's step over them (on CUDA, foreach: a
    copy of each trained byte) as the model file's does, and charges the second state copy for them alone."""
    from perfpredict.estimators.arch import check_optimizer, from_onnx_file, from_workload

    py, onnx_path = files
    by_file = from_workload(str(py), optimizer=check_optimizer("adamw"))
    by_onnx = from_onnx_file(str(onnx_path), optimizer="adamw")
    assert by_file.buffer_bytes == by_onnx.buffer_bytes == BUFFERS
    assert by_file.param_count == by_onnx.param_count == PARAMETERS
    assert by_onnx.optimizer_step_bytes == by_file.optimizer_step_bytes
    assert by_onnx.optimizer_step_bytes["cuda"] == PARAMETERS * 4
    card = predictor.predict(onnx_path=onnx_path, batch_size=16, device_type="cpu", optimizer="adamw")
    assert card.model.parameters == card.model.trainable_parameters == PARAMETERS
    assert card.features.buffer_bytes == BUFFERS
    trained = f"{PARAMETERS * 4 / 2**20:,.1f} MiB of trained parameters"  # 0.6 MiB, not 1.1 with the buffers
    assert any(trained in n for n in card.prediction.notes), card.prediction.notes


def test_a_buffer_gets_no_extra_optimizer_state_and_the_baseline_stays_as_fitted(predictor, files) -> None:
    """The shipped estimators were fitted on zoo rows whose graphs' param_bytes hold the BatchNorm statistics as
    trainable (their memory baseline and the log_horus_memory feature charge them k_P bytes each): a feature must be
    computed as it was fitted, so with SGD with momentum (the data's optimizer) the buffers change nothing. What is
    not fitted, an optimizer's copies beyond the data's one, leaves them out: with AdamW's two copies a buffer byte
    costs one copy less than a trained byte. The predicted card gives its peak back (features=card)."""
    _, onnx_path = files
    peaks = {}
    for copies in (None, 2.0):
        card = predictor.predict(onnx_path=onnx_path, batch_size=16, device_type="cpu",
                                 optimizer_state_copies=copies)
        vector = {k: v for k, v in card.features.model_dump().items()
                  if k in ("forward_macs_per_sample", "param_bytes", "activation_bytes_per_sample", "num_nodes",
                           "op_counts", "macs_by_op", "activation_bytes_by_op", "kernel_nodes",
                           "peak_live_bytes_per_sample", "graph_saved_bytes_per_sample", "input_bytes_per_sample",
                           "lookup_param_bytes")}
        as_buffers = predictor.predict(features={**vector, "param_count": PARAMETERS + BUFFERS / 4,
                                                 "buffer_bytes": BUFFERS},
                                       batch_size=16, device_type="cpu", optimizer_state_copies=copies)
        unbuffered = predictor.predict(features={**vector, "param_count": PARAMETERS + BUFFERS / 4},
                                       batch_size=16, device_type="cpu", optimizer_state_copies=copies)
        peaks[copies] = (_peak(unbuffered), _peak(as_buffers))
        assert _peak(predictor.predict(features=card, batch_size=16, device_type="cpu")) == _peak(card)
    assert peaks[None][0] == peaks[None][1]
    # the copy, moved by the estimator's learned correction of the baseline (prediction / baseline, near 1)
    assert peaks[2.0][0] - peaks[2.0][1] == pytest.approx(BUFFERS, rel=0.1)


def test_which_weights_are_buffers() -> None:
    """Only a weight every taker takes at a non-trainable position: a BatchNormalization's inputs 3 and 4, not an
    InstanceNormalization's or a LayerNormalization's scale and bias, nor a statistic a MatMul reads too."""
    from onnx import TensorProto, helper

    from perfpredict.features.graph import all_initializers, buffer_names

    def init(name: str) -> TensorProto:
        return helper.make_tensor(name, TensorProto.FLOAT, [4], [1.0] * 4)

    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y"]),
             helper.make_node("BatchNormalization", ["y", "s", "b", "mean2", "shared"], ["z"]),
             helper.make_node("MatMul", ["z", "shared"], ["w"]),
             helper.make_node("InstanceNormalization", ["x", "is", "ib"], ["u"]),
             helper.make_node("LayerNormalization", ["x", "ls", "lb"], ["v"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in "wuv"],
                              [init(n) for n in ("s", "b", "mean", "var", "mean2", "shared", "is", "ib", "ls", "lb")])
    model = helper.make_model(graph)
    assert buffer_names(model.graph, all_initializers(model.graph)) == {"mean", "var", "mean2"}


def test_frozen_and_trained_prefixes_leave_the_buffers_to_themselves(predictor, files) -> None:
    """``frozen`` over a BatchNorm freezes its weight and bias (the statistics are buffers whatever the prefix);
    ``trained`` naming the Linear steps it alone."""
    from perfpredict.estimators.arch import from_onnx_file

    _, onnx_path = files
    frozen = from_onnx_file(str(onnx_path), frozen=["0."], optimizer="adamw:foreach=true")
    assert frozen.frozen_param_bytes == 2 * C * 4 and frozen.buffer_bytes == BUFFERS
    assert frozen.optimizer_step_bytes["cuda"] == (PARAMETERS - 2 * C) * 4
    head = from_onnx_file(str(onnx_path), trained=[f"{LAYERS}."], optimizer="adamw:foreach=true")
    assert head.frozen_param_bytes == LAYERS * 2 * C * 4 and head.buffer_bytes == BUFFERS
    assert head.optimizer_step_bytes["cuda"] == (C * 2 + 2) * 4
    card = predictor.predict(onnx_path=onnx_path, batch_size=16, device_type="cpu", trained=[f"{LAYERS}."])
    assert card.model.trainable_parameters == C * 2 + 2
