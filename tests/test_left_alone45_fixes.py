"""Session 45's fixes of items earlier reviews left alone: ``perfpredict colocate`` takes an ONNX file's frozen
weights (``--frozen-a`` / ``--frozen-b``, as ``predict --frozen``), and the upload route refuses a ``frozen``
field that names no prefix as the CLI refuses ``--frozen ""``."""

import pytest

from perfpredict.errors import UsageError
from tests.test_onnx_frozen import FROZEN, MODELS, files, predictor  # noqa: F401 - fixtures


def test_colocate_charges_no_optimizer_state_to_an_onnx_jobs_frozen_weights(files, colocation_pairs) -> None:  # noqa: F811
    from typer.testing import CliRunner

    import perfpredict.cli_models  # noqa: F401 - registers colocate
    from perfpredict.cli import app

    pairs = colocation_pairs

    def run(*args):
        return CliRunner().invoke(app, ["colocate", *map(str, args), "--models", str(MODELS), "-b", "64",
                                        "--device-type", "cuda_h100"])

    res = run(files[1], files[1], "--frozen-a", "backbone.")
    assert res.exit_code == 0, res.output[-2000:]
    (a, b), = pairs
    assert a.model.frozen_param_bytes == FROZEN and b.model.frozen_param_bytes == 0
    assert a.model.trainable_parameters == b.model.trainable_parameters - FROZEN // 4
    assert a.prediction.points[0].peak_memory_bytes <= b.prediction.points[0].peak_memory_bytes
    for args, needle in (((files[1], "zoo:mlp", "--frozen-a", "encoder."), "'encoder.' starts no initializer's name"),
                         ((files[1], "zoo:mlp", "--frozen-a", " "), "--frozen-a is empty"),
                         ((files[1], "zoo:mlp", "--frozen-b", "backbone."), "--frozen-b only applies to an ONNX file")):
        res = run(*args)
        assert isinstance(res.exception, UsageError) and needle in str(res.exception), res.output[-2000:]


def test_the_upload_route_refuses_a_frozen_field_naming_no_prefix_as_the_cli_does(predictor, files) -> None:  # noqa: F811
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from perfpredict.service import create_app

    client = TestClient(create_app(predictor), raise_server_exceptions=False)
    data = files[1].read_bytes()

    def post(**form):
        return client.post("/predict/onnx", files={"file": ("net.onnx", data)},
                           data={"batch_sizes": "8", "device_type": "cpu", **form})

    for empty in ("", " ", ","):
        r = post(frozen=empty)
        assert r.status_code == 422 and "frozen is empty" in r.text, (empty, r.text)
    assert post().json()["model"]["frozen_param_bytes"] == 0  # the field left out: every weight trains
    assert post(frozen="backbone.").json()["model"]["frozen_param_bytes"] == FROZEN


def test_rigid_shortest_orders_by_the_single_gpu_volume_v_k() -> None:
    """Seed 002 §V-B sorts by v_k, the task's run time alone on one GPU (§V-A). A 4-GPU job of 100 s whose curve
    gives S(4) = 2·S(1) has v = 200 s and goes before a 1-GPU job of 300 s; work × GPUs (400 s) put it after."""
    from perfpredict.sched.cluster import ClusterSpec
    from perfpredict.sched.job import Job, JobState
    from perfpredict.sched.mechanisms.moldable import MoldableEquipartition
    from perfpredict.sched.perf import PerfModel
    from perfpredict.sched.policies import ShortestFirst

    spec = ClusterSpec.homogeneous(1, gpus=4, cpus=16, mem_gb=200, gpu_mem_gb=32.0)
    wide = JobState(Job(id="wide", arrival=0.0, gpus=4, work=100.0), PerfModel("m", speedup=lambda g: g ** 0.5))
    narrow = JobState(Job(id="narrow", arrival=1.0, gpus=1, work=300.0), PerfModel("m", speedup=lambda g: g ** 0.5))
    assert [j.id for j in ShortestFirst().order([narrow, wide], 0.0, spec)] == ["wide", "narrow"]
    for j in (wide, narrow):  # the same volume the moldable mechanisms call v
        assert ShortestFirst().key(j, 0.0, spec, 2) == pytest.approx(MoldableEquipartition.volume(j, 0.0))
    linear = JobState(Job(id="linear", arrival=0.0, gpus=4, work=100.0), PerfModel("m"))
    assert ShortestFirst().key(linear, 0.0, spec, 1) == pytest.approx(400.0)  # work × GPUs where S is linear


def _sequence_models():
    """Two hand-built graphs whose tensors go through sequences. ``loop``: three iterations each append
    ``Relu(x)`` (x: [4, 256] floats, 4096 bytes) to a list, which is then concatenated (``z``, 12288 bytes).
    ``scan``: over x's 4 rows, each step builds a list of ``Relu(row)`` and ``Neg(row)`` (1024 bytes each) and
    concatenates it (2048 bytes), the scan output stacking the four."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    seq = h.make_tensor_sequence_value_info
    body = h.make_graph(
        [h.make_node("Relu", ["x"], ["y"]), h.make_node("SequenceInsert", ["s_in", "y"], ["s_out"]),
         h.make_node("Identity", ["c_in"], ["c_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
         seq("s_in", T.FLOAT, [4, 256])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), seq("s_out", T.FLOAT, [4, 256])])
    loop = h.make_graph(
        [h.make_node("SequenceEmpty", [], ["s0"], dtype=T.FLOAT), h.make_node("Loop", ["M", "cond", "s0"], ["s"], body=body),
         h.make_node("ConcatFromSequence", ["s"], ["z"], axis=0)],
        "loop", [h.make_tensor_value_info("x", T.FLOAT, [4, 256])], [h.make_tensor_value_info("z", T.FLOAT, None)],
        [nh.from_array(np.array(3, dtype=np.int64), "M"), nh.from_array(np.array(True), "cond")])
    body = h.make_graph(
        [h.make_node("Relu", ["xt"], ["a"]), h.make_node("Neg", ["xt"], ["b"]),
         h.make_node("SequenceEmpty", [], ["e"], dtype=T.FLOAT), h.make_node("SequenceInsert", ["e", "a"], ["s1"]),
         h.make_node("SequenceInsert", ["s1", "b"], ["s2"]), h.make_node("ConcatFromSequence", ["s2"], ["c"], axis=0),
         h.make_node("Identity", ["st_in"], ["st_out"])], "body",
        [h.make_tensor_value_info("st_in", T.FLOAT, [1]), h.make_tensor_value_info("xt", T.FLOAT, [256])],
        [h.make_tensor_value_info("st_out", T.FLOAT, [1]), h.make_tensor_value_info("c", T.FLOAT, None)])
    scan = h.make_graph([h.make_node("Scan", ["st", "x"], ["st_f", "ys"], body=body, num_scan_inputs=1)], "scan",
                        [h.make_tensor_value_info("st", T.FLOAT, [1]), h.make_tensor_value_info("x", T.FLOAT, [4, 256])],
                        [h.make_tensor_value_info("ys", T.FLOAT, None)])
    return {name: h.make_model(g, opset_imports=[h.make_opsetid("", 17)]) for name, g in (("loop", loop), ("scan", scan))}


@pytest.mark.parametrize("run_for_shapes", [False, True])
def test_a_sequence_holds_its_tensors_in_the_peak_and_saved_walks(run_for_shapes) -> None:
    """A list holds its tensors until it ends, and a concatenation of it is as large as they are together.
    loop: the peak is at z, with the three appended tensors still held (3 x 4096) and z (12288): 24576; x ended
    in the last iteration. Backward keeps each Relu's output (3 x 4096) and the loss's z: 24576. scan: the peak
    is at the stacked output (8192) with the four steps' concatenations it stacks (4 x 2048): 16384 (a step's
    two 1024-byte tensors, held by its list until it is concatenated, are fewer); backward keeps the four Relu
    outputs (4096) and the loss's output (8192). Run for shapes, these were 12288 / 24576 and 8192 / 12288 (an
    appended tensor freed as it was inserted, the list itself 0 bytes); without, less (z, c and ys unsized)."""
    from perfpredict.features.graph import analyze_onnx

    models = _sequence_models()
    loop = analyze_onnx(models["loop"], run_for_shapes=run_for_shapes)
    assert (loop.peak_live_activation_bytes, loop.graph_saved_bytes) == (24576, 24576)
    scan = analyze_onnx(models["scan"], run_for_shapes=run_for_shapes)
    assert (scan.peak_live_activation_bytes, scan.graph_saved_bytes) == (16384, 12288)
    assert not loop.notes and not scan.notes  # unrolled, both
