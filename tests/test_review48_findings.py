"""Session 48's review of the BatchNorm-buffer commits: a ``--frozen``/``--trained`` prefix that starts only buffers.

A BatchNormalization's running statistics became buffers (``features/graph.py`` ``buffer_names``), which no prefix
freezes or trains. But a prefix that starts only their names (``--frozen 1.running_``) still passed the check that
refuses a prefix naming nothing, and was then dropped without a word: ``--frozen`` froze nothing (the card was the
unfrozen job's to the byte), ``--trained`` froze every parameter (``trainable_parameters`` 0), for ``predict``,
``max-batch --predicted``, ``colocate`` and the upload route alike. Such a prefix is now refused, saying the names it
starts are buffers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from perfpredict.errors import UsageError
from perfpredict.estimators.arch import from_onnx_file


@pytest.fixture(scope="module")
def bn_onnx(tmp_path_factory) -> Path:
    """A Conv + BatchNorm + Linear network exported as the Predictor exports a model file (module paths kept:
    ``0.weight``, ``1.weight``, ``1.running_mean``, ...)."""
    from perfpredict.features.onnx_export import export_onnx

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 8 * 8, 4))
    path = tmp_path_factory.mktemp("review48") / "bn.onnx"
    path.write_bytes(export_onnx(model, (torch.randn(2, 3, 8, 8),)).model_proto.SerializeToString())
    return path


@pytest.mark.parametrize("option", ["frozen", "trained"])
def test_a_prefix_that_starts_only_buffers_is_refused(bn_onnx, option) -> None:
    """``1.running_`` starts the BatchNorm's running mean and variance only: it freezes (or trains) nothing, and
    is refused naming them, as a prefix that starts no name is."""
    assert from_onnx_file(str(bn_onnx)).buffer_bytes == 2 * 8 * 4  # the statistics are buffers
    with pytest.raises(UsageError, match=rf"{option} prefix '1\.running_' starts only buffers' names in bn "
                                         r"\('1\.running_mean', '1\.running_var'.*its parameters are '0\.weight'"):
        from_onnx_file(str(bn_onnx), **{option: ["1.running_"]})


def test_a_prefix_over_parameters_and_buffers_and_one_over_nothing_are_as_they_were(bn_onnx) -> None:
    """``1.`` freezes the BatchNorm's weight and bias (its statistics are buffers whatever the prefix); ``1.`` as
    ``--trained`` trains them alone; a prefix that starts no name is refused as before, every initializer listed."""
    frozen = from_onnx_file(str(bn_onnx), frozen=["1."])
    assert (frozen.frozen_param_bytes, frozen.frozen_param_count) == (2 * 8 * 4, 2 * 8)
    trained = from_onnx_file(str(bn_onnx), trained=["1."])
    assert trained.param_count - trained.frozen_param_count == 2 * 8
    with pytest.raises(UsageError, match=r"frozen prefix 'nope\.' starts no initializer's name in bn; its "
                                         r"initializers are '0\.weight', '0\.bias', '1\.weight', '1\.bias', "
                                         r"'1\.running_mean', '1\.running_var'"):
        from_onnx_file(str(bn_onnx), frozen=["nope."])


@pytest.mark.parametrize("command", [
    ("predict", "-b", "8", "--device-type", "cpu_xeon_2vcpu"),
    ("max-batch", "--predicted", "--memory-limit", "1GB", "--device-type", "cpu_xeon_2vcpu", "--no-mlflow"),
])
def test_the_commands_refuse_it_in_one_line(bn_onnx, tmp_path, run_cli, command) -> None:
    """Through the real entry point: exit 2, one line, no traceback, no file written (it wrote a card, or the
    unfrozen job's largest batch, and exited 0)."""
    out = tmp_path / "out"
    name, *rest = command
    proc = run_cli(name, bn_onnx, *rest, "--frozen", "1.running_", "--out",
                   out / "card.json" if name == "predict" else out)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "starts only buffers' names" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not [f for f in out.rglob("*") if f.is_file()]
