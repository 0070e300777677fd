"""``perfpredict max-batch --predicted --optimizer NAME`` / ``--optimizer-states N``: the largest batch that fits
with the training job's optimizer, as ``perfpredict predict`` charges it.

``Predictor.largest_batch`` took ``optimizer=`` and ``optimizer_state_copies=``, but ``max-batch`` exposed neither,
so from the command line a model file's largest batch was always the one of its own make_optimizer (SGD with
momentum by default): an AdamW job was told a batch its second state copy and step temporaries would not leave room
for. A measured max-batch trains with the file's own optimizer, so the options are refused there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfpredict import Predictor
from perfpredict.errors import UsageError

#: Parameter-heavy: two 4096-wide layers (67 MiB of float32 weights) on a 64-wide input, so the optimizer's
#: state copies and step temporaries decide how many samples' activations are left room for.
WIDE_MLP = ("import torch\nimport torch.nn as nn\n\n"
            "def build_model():\n"
            "    return nn.Sequential(nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),\n"
            "                         nn.Linear(4096, 10))\n\n"
            "def example_inputs(batch_size):\n    return torch.randn(batch_size, 64)\n")
LIMIT = "512MB"


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("max_batch_optimizer") / "wide_mlp.py"
    path.write_text(WIDE_MLP)
    return path


def _invoke(*args):
    from typer.testing import CliRunner

    import perfpredict.cli_batch  # noqa: F401 - registers max-batch
    from perfpredict.cli import app

    return CliRunner().invoke(app, ["max-batch", *map(str, args), "--no-mlflow"])


def _largest(model_file: Path, out: Path, *args) -> int:
    res = _invoke(model_file, "--predicted", "--memory-limit", LIMIT, "--device-type", "cpu", "--out", out, *args)
    assert res.exit_code == 0, res.output[-2000:]
    return json.loads((out / "max_batch_predicted.json").read_text())["largest_ok"]


def test_adamw_leaves_room_for_a_smaller_batch_than_sgd(model_file, tmp_path) -> None:
    """AdamW's two state copies and step temporaries over 67 MiB of weights take room plain SGD (no state) leaves
    to activations; the CLI answers what ``Predictor.largest_batch(optimizer=...)`` does, and
    ``--optimizer-states 2`` (the copies alone, no temporaries) lands below the file's own SGD with momentum."""
    sgd = _largest(model_file, tmp_path / "sgd", "--optimizer", "sgd")
    adamw = _largest(model_file, tmp_path / "adamw", "--optimizer", "adamw")
    own = _largest(model_file, tmp_path / "own")
    two = _largest(model_file, tmp_path / "two", "--optimizer-states", "2")
    assert 1 <= adamw < two < own < sgd, (adamw, two, own, sgd)
    direct = Predictor.load().largest_batch(str(model_file), memory_limit_bytes=512 * 10**6, device_type="cpu",
                                            optimizer="adamw")
    assert direct.largest_ok == adamw


def test_the_files_frozen_layer_keeps_no_adamw_state(model_file, tmp_path) -> None:
    """A model file freezes weights itself (``requires_grad=False``; ``--frozen`` is an ONNX file's,
    ``tests/test_max_batch_onnx.py``): with its 4096 x 4096 layer frozen, ``--optimizer adamw`` charges state and step temporaries
    for the small layers only, so the batch that fits is far larger than with every weight trained."""
    frozen = model_file.with_name("wide_mlp_frozen.py")
    frozen.write_text(WIDE_MLP + "\n_all_trained = build_model\n\n"
                      "def build_model():\n    m = _all_trained()\n    m[2].requires_grad_(False)\n    return m\n")
    trained = _largest(model_file, tmp_path / "trained", "--optimizer", "adamw")
    kept = _largest(frozen, tmp_path / "frozen", "--optimizer", "adamw")
    assert kept > 10 * trained, (kept, trained)


@pytest.mark.parametrize("args, needle", [
    (["--optimizer", "adamw", "--memory-limit", "1GB"], "--optimizer and --optimizer-states apply to --predicted only"),
    (["--optimizer-states", "2"], "--optimizer and --optimizer-states apply to --predicted only"),
    (["--predicted", "--memory-limit", LIMIT, "--optimizer", "adamw", "--optimizer-states", "2"],
     "give --optimizer or --optimizer-states, not both"),
    (["--predicted", "--memory-limit", LIMIT, "--optimizer", "adamx"], "--optimizer: unknown optimizer 'adamx'"),
    (["--predicted", "--memory-limit", LIMIT, "--optimizer-states", "-1"], "--optimizer-states"),
])
def test_refused_without_predicted_or_beside_each_other(model_file, tmp_path, args, needle) -> None:
    """Refused before anything runs or is written, in one line (perfpredict's entry point prints a UsageError as
    one line and exits 2)."""
    res = _invoke(model_file, *args, "--out", tmp_path / "bad")
    assert isinstance(res.exception, UsageError) and needle in str(res.exception), res.output[-2000:]
    assert not (tmp_path / "bad").exists()


def test_the_command_line_refusal_is_one_line_and_exit_2(model_file, run_cli) -> None:
    proc = run_cli("max-batch", model_file, "--optimizer", "adamw", "--no-mlflow", "--out", "bad")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "--optimizer and --optimizer-states apply to --predicted only" in proc.stderr
