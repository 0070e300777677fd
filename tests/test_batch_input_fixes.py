"""An ONNX graph whose first input is not batched (a static positions input first, the batched tensor second):
its per-sample counts were divided by the first input's first dimension (the sequence length), and a dynamic
batch on the batched input sized the positions input as the batch too. ``batch_input`` (Python, ``--batch-input``,
colocate ``--batch-input-a`` / ``-b``, the service's form field) names the batched input. And weights written as
``Constant`` nodes train in the frozen step-work ratio as initializers do."""

from __future__ import annotations

import io
from pathlib import Path

import onnx
import pytest
import torch
from torch import nn

from perfpredict import Predictor
from perfpredict.errors import UsageError
from perfpredict.estimators.arch import ArchFeaturesError, from_onnx_proto

REPO = Path(__file__).resolve().parents[1]
SEQ, D, BATCH = 16, 32, 4


class _PosFirst(nn.Module):
    """A learned positional embedding added to the batched input, then an MLP: forward(positions, x)."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Embedding(SEQ, D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, positions, x):
        return self.fc2(torch.relu(self.fc1(x + self.pos(positions))))


class _XFirst(_PosFirst):
    """The same model with the batched input first."""

    def forward(self, x, positions):
        return super().forward(positions, x)


def _export(x_first: bool, dynamic: bool) -> bytes:
    torch.manual_seed(0)
    pos, x = torch.arange(SEQ), torch.randn(BATCH, SEQ, D)
    model, args, names = (_XFirst(), (x, pos), ["x", "positions"]) if x_first else \
        (_PosFirst(), (pos, x), ["positions", "x"])
    buf = io.BytesIO()
    torch.onnx.export(model.eval(), args, buf, input_names=names, dynamo=False,
                      dynamic_axes={"x": {0: "batch"}} if dynamic else None)
    return buf.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """The four exports: positions or x first, every dimension fixed or a dynamic batch on x."""
    d = tmp_path_factory.mktemp("batch_input")
    out = {}
    for x_first in (False, True):
        for dynamic in (False, True):
            name = f"{'x' if x_first else 'pos'}_first_{'dyn' if dynamic else 'static'}"
            (out_path := d / f"{name}.onnx").write_bytes(_export(x_first, dynamic))
            out[name] = out_path
    return out


@pytest.fixture(scope="module")
def predictor() -> Predictor:
    return Predictor.load(REPO / "trained_models")


def _arch(path: Path, **kw):
    return from_onnx_proto(onnx.load(str(path)), **kw)


def test_a_static_positions_input_first_is_split_per_sample_on_the_input_batch_input_names(files) -> None:
    """Every dimension fixed, positions [16] first: the counts were divided by 16 (the sequence length), not by
    the batch of 4; ``batch_input="x"`` gives what the same model exported with x first gives."""
    want = _arch(files["x_first_static"])
    assert want.forward_macs_per_sample == 2 * SEQ * D * 4 * D  # two Linears, D -> 4D -> D, per position
    default = _arch(files["pos_first_static"])
    assert default.forward_macs_per_sample == pytest.approx(want.forward_macs_per_sample * BATCH / SEQ)  # the defect
    assert any("batch_input" in n for n in default.notes), default.notes
    named = _arch(files["pos_first_static"], batch_input="x")
    for field in ("forward_macs_per_sample", "activation_bytes_per_sample", "param_count", "input_bytes_per_sample"):
        assert getattr(named, field) == pytest.approx(getattr(want, field)), field
    assert any("axis 0 of input 'x'" in n for n in named.notes), named.notes
    # batch_axis is an axis of the named input, negative from the last as ever
    assert _arch(files["pos_first_static"], batch_input="x", batch_axis=-3).forward_macs_per_sample == \
        named.forward_macs_per_sample
    with pytest.raises(ArchFeaturesError, match=r"batch_axis 3 is not an axis of input 'x' \(3 dimensions\)"):
        _arch(files["pos_first_static"], batch_input="x", batch_axis=3)
    with pytest.raises(ArchFeaturesError, match=r"batch_input 'y' is not an input of the graph; its inputs are "
                                                 r"'positions', 'x'"):
        _arch(files["pos_first_static"], batch_input="y")


def test_a_dynamic_batch_on_one_input_leaves_a_fixed_input_beside_it_unbatched(files) -> None:
    """The graph says which input is batched where its batch is symbolic: positions first was already split on
    x's named batch; x first sized the positions input's fixed [16] as the batch too, which broke shape inference
    ("no multiply-accumulate ops with known shapes")."""
    want = _arch(files["x_first_static"])
    for name in ("pos_first_dyn", "x_first_dyn"):
        got = _arch(files[name])
        assert got.forward_macs_per_sample == want.forward_macs_per_sample, name
        assert got.input_bytes_per_sample == want.input_bytes_per_sample == SEQ * D * 4 + SEQ * 8, name
        assert _arch(files[name], batch_input="x").forward_macs_per_sample == want.forward_macs_per_sample


def test_the_predictor_the_cli_and_the_service_carry_batch_input(files, predictor, tmp_path, monkeypatch,
                                                                 colocation_pairs, run_cli) -> None:
    """``predict`` and ``largest_batch`` take ``batch_input=``, the CLI ``--batch-input`` (colocate
    ``--batch-input-a`` / ``-b``), the upload route a ``batch_input`` field; a name that is no input is one
    readable error (exit 2, 400), and the option is refused where there is no ONNX file."""
    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    import perfpredict.cli_models  # noqa: F401 - registers colocate
    from perfpredict.cli import app
    from perfpredict.service import create_app

    kw = {"batch_size": 8, "device_type": "cpu", "allow_fallback": False}  # the estimators, not a neighbour
    want = predictor.predict(onnx_path=files["x_first_static"], **kw).prediction.points[0]
    got = predictor.predict(onnx_path=files["pos_first_static"], batch_input="x", **kw).prediction.points[0]
    assert got.iter_time_s == pytest.approx(want.iter_time_s)
    assert got.peak_memory_bytes == want.peak_memory_bytes
    limit = {"memory_limit_bytes": 2**28, "device_type": "cpu"}
    fits = predictor.largest_batch(onnx_path=files["x_first_static"], **limit)
    assert fits.smallest_failed is not None  # a limit found, not the search's end
    assert predictor.largest_batch(onnx_path=files["pos_first_static"], batch_input="x", **limit).largest_ok == \
        fits.largest_ok
    with pytest.raises(UsageError, match="batch_input applies to ONNX files only"):
        predictor.predict("zoo:mlp", batch_size=8, batch_input="x")
    with pytest.raises(UsageError, match="batch_input must be the name"):
        predictor.predict(onnx_path=files["pos_first_static"], batch_size=8, batch_input=1)

    bad = run_cli("predict", files["pos_first_static"], "-b", "8", "--device-type", "cpu", "--batch-input", "y")
    assert bad.returncode == 2 and "Traceback" not in bad.stdout + bad.stderr
    assert "batch_input 'y' is not an input of the graph; its inputs are 'positions', 'x'" in \
        " ".join((bad.stdout + bad.stderr).split())

    monkeypatch.setattr(Predictor, "load", classmethod(lambda cls, models=None: predictor))  # loaded once

    def colocate(*args):
        return CliRunner().invoke(app, ["colocate", *map(str, args), "-b", "8", "--device-type", "cuda_h100"])

    res = colocate(files["x_first_static"], files["pos_first_static"], "--batch-input-b", "x")
    assert res.exit_code == 0, res.output[-2000:]
    (a, b), = colocation_pairs
    assert b.features.forward_macs_per_sample == a.features.forward_macs_per_sample
    res = colocate("zoo:mlp", files["pos_first_static"], "--batch-input-a", "x")
    assert isinstance(res.exception, UsageError) and "--batch-input-a only applies to an ONNX file" in \
        str(res.exception)

    client = TestClient(create_app(predictor))
    sent = {"file": ("pos.onnx", files["pos_first_static"].read_bytes(), "application/octet-stream")}
    ok = client.post("/predict/onnx", files=sent, data={"batch_sizes": "8", "device_type": "cpu",
                                                        "batch_input": "x", "allow_fallback": "false"})
    assert ok.status_code == 200, ok.text
    assert ok.json()["prediction"]["points"][0]["iter_time_s"] == pytest.approx(want.iter_time_s, rel=1e-6)
    refused = client.post("/predict/onnx", files=sent, data={"batch_input": "y"})
    assert refused.status_code == 400 and "'positions', 'x'" in refused.json()["detail"]


def test_weights_written_as_constant_nodes_train_in_the_frozen_step_work_ratio() -> None:
    """``Constant``-node weights are counted as parameters and frozen by prefix, but the step-work ratio's
    trainable set held the initializers only: nothing trained in it, so a frozen backbone's ratio read 1.0 (the
    step time not adjusted) where the same graph with initializers reads 0.37."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
            self.head = nn.Linear(256, 10)

        def forward(self, x):
            return self.head(self.backbone(x))

    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.onnx.export(Net().eval(), (torch.randn(2, 64),), buf, input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}}, dynamo=False)
    proto = onnx.load_from_string(buf.getvalue())
    const = onnx.ModelProto()
    const.CopyFrom(proto)
    nodes = [onnx.helper.make_node("Constant", [], [t.name], value=t) for t in const.graph.initializer]
    rest = list(const.graph.node)
    del const.graph.initializer[:]
    del const.graph.node[:]
    const.graph.node.extend(nodes + rest)
    want = from_onnx_proto(proto, frozen=["backbone."])
    got = from_onnx_proto(const, frozen=["backbone."])
    assert got.param_count == want.param_count and got.frozen_param_count == want.frozen_param_count > 0
    assert want.frozen_step_work_ratio < 0.5
    assert got.frozen_step_work_ratio == pytest.approx(want.frozen_step_work_ratio)
