"""``perfpredict max-batch --predicted model.onnx``: the largest batch that fits, from an exported graph.

``Predictor.largest_batch(onnx_path=...)`` answered for an ONNX file, but ``max-batch`` refused one ("expected a
Python model file"), so a user with only an exported graph could not ask what batch fits 16 GB on an H100. It now
takes one with ``predict``'s ONNX options (--batch-axis, --batch-input, --dim, --frozen, --trained) beside
--optimizer / --optimizer-states, --precision, --mode and --device-type; without --predicted an ONNX file (parsed,
never run) is refused in one line that says to add it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from perfpredict import Predictor
from perfpredict.errors import UsageError
from perfpredict.estimators.arch import from_onnx_file
from perfpredict.predicted_batch_limit import memory_target
from tests.test_optimizer_state_fixes import MLP

CPU = "cpu_xeon_2vcpu"  # named, not "cpu": the answer must not depend on the machine the tests run on
LIMIT = "512MB"


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load()  # what the command loads (max-batch has no --models)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    """The MLP as a model file and as its ONNX export (the exporter the Predictor uses on a model file)."""
    from perfpredict.features.onnx_export import export_onnx

    folder = tmp_path_factory.mktemp("max_batch_onnx")
    py, onnx_path = folder / "mlp.py", folder / "mlp.onnx"
    py.write_text(MLP)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))
    onnx_path.write_bytes(export_onnx(model, (torch.randn(2, 256),)).model_proto.SerializeToString())
    return py, onnx_path


def _invoke(*args):
    from typer.testing import CliRunner

    import perfpredict.cli_batch  # noqa: F401 - registers max-batch
    from perfpredict.cli import app

    return CliRunner().invoke(app, ["max-batch", *map(str, args), "--no-mlflow"])


def _answer(target: Path, out: Path, *args) -> dict:
    res = _invoke(target, "--predicted", "--out", out, *args)
    assert res.exit_code == 0, (res.output[-2000:], res.exception)
    return json.loads((out / "max_batch_predicted.json").read_text())


def _bound(predictor: Predictor, arch, batches: list[int], device_type: str, mode: str) -> list[float]:
    """The memory the search holds to the limit (the q90, at least the median), recomputed from
    ``predict_values``."""
    ms = predictor.model_set(device_type, mode)
    v = predictor.predict_values(arch, batches, device_type=ms.name, mode=ms.mode, precision=ms.precision)
    t = v[memory_target(ms)]
    return [max(m, q) for m, q in zip(t["median"], t["q90"])]


@pytest.mark.parametrize("device_type, mode, limit, limit_bytes", [
    (CPU, "train", LIMIT, 512 * 10**6),
    (CPU, "infer", LIMIT, 512 * 10**6),
    ("cuda_h100", "train", "16GB", 16 * 10**9),  # the user's question: what batch fits 16 GB on an H100
])
def test_the_answer_is_the_largest_batch_within_the_bound(predictor, files, tmp_path, device_type, mode, limit,
                                                          limit_bytes) -> None:
    """The batch found is predicted to fit and the next one is not, by the ONNX graph's own predicted memory."""
    _, onnx_path = files
    got = _answer(onnx_path, tmp_path, "--memory-limit", limit, "--device-type", device_type, "--mode", mode)
    b = got["largest_ok"]
    assert b is not None and got["smallest_failed"] == b + 1, got
    assert got["model"] == "mlp" and got["source"] == "predicted", got
    fits, over = _bound(predictor, from_onnx_file(onnx_path), [b, b + 1], device_type, mode)
    assert fits <= limit_bytes < over, (b, fits, over, limit_bytes)


def test_the_same_network_as_a_model_file_gets_the_same_answer(predictor, files, tmp_path) -> None:
    """For an inference pass the graph's features predict what the model file's do (the saved-tensor bytes a
    training step adds are counted from a model file, estimated from a graph), and the two answers are the same;
    for a training step each answer is its own prediction's largest batch."""
    py, onnx_path = files
    args = ("--memory-limit", LIMIT, "--device-type", CPU, "--mode", "infer")
    from_file = _answer(py, tmp_path / "py", *args)["largest_ok"]
    from_graph = _answer(onnx_path, tmp_path / "onnx", *args)["largest_ok"]
    from perfpredict.estimators.arch import from_workload

    batches = [1, 64, from_file, from_file + 1]
    assert _bound(predictor, from_workload(str(py)), batches, CPU, "infer") \
        == _bound(predictor, from_onnx_file(onnx_path), batches, CPU, "infer")
    assert from_graph == from_file, (from_graph, from_file)


def test_the_onnx_options_reach_the_prediction(predictor, files, tmp_path) -> None:
    """--optimizer, --frozen / --trained, --batch-input, --batch-axis and --precision answer what
    ``Predictor.largest_batch(onnx_path=...)`` does with them; freezing the first (largest) layer leaves AdamW
    less to keep, so a larger batch fits, whichever of --frozen and --trained names it."""
    _, onnx_path = files
    base = ("--memory-limit", LIMIT, "--device-type", CPU)

    def cli(name: str, *args: str) -> int:
        return _answer(onnx_path, tmp_path / name, *base, *args)["largest_ok"]

    def api(**kw) -> int:
        return predictor.largest_batch(onnx_path=onnx_path, memory_limit_bytes=512 * 10**6, device_type=CPU,
                                       **kw).largest_ok

    adamw = cli("adamw", "--optimizer", "adamw")
    frozen = cli("frozen", "--optimizer", "adamw", "--frozen", "0.")
    trained = cli("trained", "--optimizer", "adamw", "--trained", "2.")
    assert adamw == api(optimizer="adamw") and frozen == api(optimizer="adamw", frozen=["0."])
    assert frozen == trained > adamw, (frozen, trained, adamw)
    assert cli("states", "--optimizer-states", "2") == api(optimizer_state_copies=2)
    assert cli("input", "--batch-input", "onnx::Gemm_0", "--batch-axis", "0") == api()
    bf16 = _answer(onnx_path, tmp_path / "bf16", *base, "--precision", "bf16")
    assert bf16["precision"] == "bf16" and bf16["largest_ok"] == api(precision="bf16")


@pytest.mark.parametrize("args, needle", [
    (["--memory-limit", LIMIT], "add --predicted"),
    ([], "add --predicted"),
    (["--device", "cpu", "--frozen", "0."], "add --predicted"),
])
def test_without_predicted_an_onnx_file_is_refused_in_one_line(files, tmp_path, args, needle) -> None:
    _, onnx_path = files
    res = _invoke(onnx_path, *args, "--out", tmp_path / "bad")
    assert isinstance(res.exception, UsageError) and needle in str(res.exception), res.output[-2000:]
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("args, needle", [
    (["--frozen", "0."], "--frozen only applies to an ONNX file"),
    (["--batch-input", "x"], "--batch-input only applies to an ONNX file"),
    (["--batch-axis", "1"], "--batch-axis only applies to an ONNX file"),
    (["--dim", "seq=128"], "--dim only applies to an ONNX file"),
])
def test_the_onnx_options_are_refused_for_a_model_file(files, tmp_path, args, needle) -> None:
    py, _ = files
    res = _invoke(py, "--predicted", "--memory-limit", LIMIT, *args, "--out", tmp_path / "bad")
    assert isinstance(res.exception, UsageError) and needle in str(res.exception), res.output[-2000:]


def test_the_command_line_refusals_are_one_line_and_no_traceback(files, tmp_path, run_cli) -> None:
    """Through the real entry point: no --predicted exits 2 saying to add it; a file that is not an ONNX graph,
    or a batch input the graph does not have, ends in one readable line and a non-zero exit."""
    _, onnx_path = files
    proc = run_cli("max-batch", onnx_path, "--memory-limit", "16GB", "--no-mlflow")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "add --predicted" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not an onnx graph")
    for target, extra, needle in ((bad, (), "not an ONNX model"),
                                  (onnx_path, ("--batch-input", "nope"), "nope")):
        proc = run_cli("max-batch", target, "--predicted", "--memory-limit", "16GB", "--device-type", "cuda_h100",
                       *extra, "--no-mlflow", "--out", tmp_path / "o")
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
