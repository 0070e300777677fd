"""Findings of the review of session 46's commits (9d53ad6..15ebf6d)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch deprecates its eager-mode quantization
def test_a_torchscript_model_is_not_said_to_hold_uncounted_packed_weights() -> None:
    """packed_weights flagged every module holding a torch.ScriptObject as a quantized module whose packed weights
    could not be unpacked; a TorchScript module's own ``_c`` is one, so a scripted model's measured card said
    "the packed weights of quantized module(s) RecursiveScriptModule, 0, 1, 2 are not counted"."""
    from perfpredict.profile.profiler import _packed_weights_notes
    from perfpredict.workload.spec import packed_weights

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    scripted = torch.jit.script(model)
    assert packed_weights(scripted).uncounted == () and packed_weights(scripted).count == 0
    assert _packed_weights_notes(scripted) == []
    # a quantised LSTM's packed weights are still named as not counted
    lstm = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.LSTM(8, 16)), {torch.nn.LSTM},
                                                  dtype=torch.qint8)
    assert any("are not counted in the model's parameters" in n for n in _packed_weights_notes(lstm))


def test_colocates_batch_axis_options_are_refused_for_a_model_file_by_their_own_name(write_model) -> None:
    """The help said --batch-axis-a takes "a model file or .onnx"; a model file or zoo target was refused only
    after the set was loaded (and, for B, after A was predicted) with the Python API's "batch_axis applies to
    ONNX files only"."""
    from typer.testing import CliRunner

    import perfpredict.cli_models  # noqa: F401 - registers colocate
    from perfpredict.cli import app
    from perfpredict.errors import UsageError

    path = write_model("import torch\ndef build_model():\n    return torch.nn.Linear(4, 2)\n"
                       "def example_inputs(batch_size):\n    return torch.randn(batch_size, 4)\n")
    for args, needle in (([str(path), "zoo:mlp", "--batch-axis-a", "0"], "--batch-axis-a only applies to an ONNX"),
                         (["zoo:mlp", str(path), "--batch-axis-b", "0"], "--batch-axis-b only applies to an ONNX")):
        res = CliRunner().invoke(app, ["colocate", *args, "--models", str(REPO / "trained_models")])
        assert isinstance(res.exception, UsageError) and needle in str(res.exception), res.output[-2000:]
        assert res.exception.step == "arguments"
    text = " ".join(CliRunner().invoke(app, ["colocate", "--help"], terminal_width=200).output.split())
    assert "a model file or .onnx: the axis" not in text
