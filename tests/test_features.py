"""Graph features (perfpredict.features): ONNX export, MAC / byte / op counts, the fvcore cross-check.

Every zoo family's default config is exported for real and held against its closed-form MACs; hand-written
one-layer models are held against MAC counts computed by hand from the layer's shapes.
"""

from __future__ import annotations

import copy
from math import prod
from pathlib import Path

import onnx
import pytest
import torch
from torch import nn

from perfpredict.features import extract_features, features_from_onnx
from perfpredict.features.onnx_export import TORCHSCRIPT_OPSET, export_onnx
from perfpredict.workload.spec import Workload, WorkloadRef
from perfpredict.workload.zoo import families, get_family, load_zoo_workload
from perfpredict.workload.zoo.families.mobilenetv2 import block_plan

FAMILIES = ["resnet", "vgg", "mobilenetv2", "transformer", "lstm", "mlp", "vit", "unet", "speech", "convnext", "dlrm"]

#: Horus Table 3 operators each family's graph must contain (op_type -> minimum count; None = at least 1)
EXPECTED_OPS: dict[str, dict[str, int | None]] = {
    "resnet": {"Conv": None, "BatchNormalization": None, "Relu": None, "GlobalAveragePool": 1, "Gemm": 1, "Add": None},
    "vgg": {"Conv": None, "BatchNormalization": None, "Relu": None, "MaxPool": 5, "Gemm": 3},
    "mobilenetv2": {"Conv": None, "BatchNormalization": None, "Clip": None, "GlobalAveragePool": 1, "Gemm": 1},
    "transformer": {"MatMul": None, "Softmax": 2, "LayerNormalization": 5, "Gather": None},
    "lstm": {"LSTM": 2, "MatMul": 1, "Gather": None},
    "mlp": {"Gemm": 4, "Relu": 3},
    "vit": {"Conv": 1, "MatMul": None, "Softmax": 2, "LayerNormalization": 5, "Erf": 2, "Concat": None},
    "unet": {"Conv": 11, "ConvTranspose": 2, "BatchNormalization": 10, "Relu": 10, "MaxPool": 2, "Concat": 2},
    # two conv-BN-Hardtanh (Clip) layers, one bidirectional GRU node per layer, the per-frame Linear
    "speech": {"Conv": 2, "BatchNormalization": 2, "Clip": 2, "GRU": 2, "MatMul": 1},
    # default 1-1-2-1: stem + 3 downsampling + 5 depthwise convs; LayerNorm in stem, downsampling, blocks, head
    "convnext": {"Conv": 9, "LayerNormalization": 10, "MatMul": 10, "Erf": 5, "GlobalAveragePool": 1,
                 "Gemm": 1, "Add": None, "Mul": None, "Transpose": None},
    # default 8 tables: 3 bottom + 3 top Gemms, T T^T one MatMul; per table a Gather of its index column and
    # one of its embedding rows, plus the Gather of the lower triangle; stack and cat
    "dlrm": {"Gemm": 6, "Relu": 5, "MatMul": 1, "Gather": 2 * 8 + 1, "Concat": 2},
}

class _Zoo:
    """Extracts each family's default features once per module; ``dir`` keeps the exported ONNX files."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._cache: dict[str, tuple] = {}

    def __call__(self, name: str):
        """(features, workload, cfg, built model) for ``name``'s default config."""
        if name not in self._cache:
            w = load_zoo_workload(name, {})
            feats = extract_features(w, onnx_path=self.dir / f"{name}.onnx")
            torch.manual_seed(0)
            model = w.build_model()
            self._cache[name] = (feats, w, get_family(name).resolve({}), model)
        return self._cache[name]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> _Zoo:
    return _Zoo(tmp_path_factory.mktemp("zoo-onnx"))


def test_family_list_is_complete():
    assert sorted(families()) == sorted(FAMILIES)


# --- zoo defaults --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_zoo_default_exports_with_torchscript(name, zoo):
    f, *_ = zoo(name)
    assert f.available, f.error
    assert f.error is None
    assert f.exporter == "torchscript"
    assert f.opset == TORCHSCRIPT_OPSET
    assert f.export_batch_size == 1
    assert f.onnx_file == f"{name}.onnx"
    assert f.source == "analytic" and f.device is None


@pytest.mark.parametrize("name", FAMILIES)
def test_zoo_default_macs_match_closed_form(name, zoo):
    f, _, cfg, _ = zoo(name)
    expected = get_family(name).closed_form_macs(cfg)
    assert expected > 0
    assert abs(f.forward_macs_per_sample - expected) / expected <= 0.02
    assert f.forward_macs_fixed == 0
    assert sum(f.macs_by_op.values()) == f.forward_macs_per_sample


@pytest.mark.parametrize("name", FAMILIES)
def test_zoo_default_fvcore_agrees_with_onnx(name, zoo):
    f, *_ = zoo(name)
    assert f.fvcore_error is None
    assert f.fvcore_macs_per_sample is not None
    rel = abs(f.fvcore_macs_per_sample - f.forward_macs_per_sample) / f.forward_macs_per_sample
    assert rel <= 0.01
    assert f.macs_rel_diff == pytest.approx(rel)
    # fvcore's total includes non-MAC ops (norms, pools, adds), so it is never below its MAC count
    assert f.fvcore_flops_per_sample >= f.fvcore_macs_per_sample


@pytest.mark.parametrize("name", FAMILIES)
def test_zoo_default_activation_bytes(name, zoo):
    f, w, _, _ = zoo(name)
    assert f.activation_bytes_per_sample > 0
    # the per-sample input batch itself is an activation, and so is the output
    args = w.inputs(1)
    with torch.no_grad():
        model_out_bytes = 4 * prod(zoo(name)[3].eval()(*args).shape)
    assert f.activation_bytes_per_sample >= sum(x.numel() * x.element_size() for x in args) + model_out_bytes
    assert f.activation_bytes_fixed >= 0


@pytest.mark.parametrize("name", FAMILIES)
def test_zoo_default_param_bytes_cover_torch_parameters(name, zoo):
    f, _, _, model = zoo(name)
    torch_param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert f.param_bytes >= torch_param_bytes
    # Exactly the parameters plus the buffers the eval graph reads (BatchNorm's num_batches_tracked is unused).
    buffers = sum(b.numel() * b.element_size() for n, b in model.named_buffers() if "num_batches_tracked" not in n)
    assert f.param_bytes == torch_param_bytes + buffers
    assert "Identity" not in f.op_counts


@pytest.mark.parametrize("name", FAMILIES)
def test_zoo_default_param_bytes_bounded_by_parameters_and_buffers(name, zoo):
    f, _, cfg, model = zoo(name)
    assert sum(p.numel() for p in model.parameters()) == get_family(name).closed_form_params(cfg)
    # ONNX initializers are (at most) the parameters plus the buffers
    limit = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    assert 0 < f.param_bytes <= limit


@pytest.mark.parametrize("name", FAMILIES)
def test_zoo_default_op_counts(name, zoo):
    f, *_ = zoo(name)
    for op, n in EXPECTED_OPS[name].items():
        assert f.op_counts.get(op, 0) >= (n or 1), (op, f.op_counts)
        if n is not None:
            assert f.op_counts[op] == n, (op, f.op_counts)
    assert f.num_nodes == sum(f.op_counts.values())


def _conv_groups_and_weights(onnx_path):
    """(group, weight dims) of every Conv node of the ONNX file, in graph order."""
    proto = onnx.load(str(onnx_path))
    inits = {i.name: list(i.dims) for i in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type == "Conv":
            yield next((a.i for a in node.attribute if a.name == "group"), 1), inits[node.input[1]]


def test_mobilenetv2_has_depthwise_convs(zoo):
    f, _, cfg, _ = zoo("mobilenetv2")
    depthwise = 0
    for group, w in _conv_groups_and_weights(zoo.dir / "mobilenetv2.onnx"):
        if group > 1:
            assert w[1] == 1 and w[0] == group  # one input channel per group: depthwise
            depthwise += 1
    assert depthwise == len(block_plan(cfg["width_mult"], cfg["depth_mult"]))
    # BN is not fused into the convs: one BatchNormalization per Conv
    assert f.op_counts["BatchNormalization"] == f.op_counts["Conv"]


def test_convnext_has_depthwise_convs(zoo):
    f, _, cfg, _ = zoo("convnext")
    k = cfg["kernel"]
    depthwise = 0
    for group, w in _conv_groups_and_weights(zoo.dir / "convnext.onnx"):
        if group > 1:
            assert w[0] == group and w[1:] == [1, k, k]  # one input channel per group: depthwise k x k
            depthwise += 1
        else:
            assert w[2] == w[3] in (cfg["stem_stride"], 2)  # patchify stem / 2x2 downsampling
    n_blocks = sum(int(b) for b in cfg["blocks"].split("-"))
    assert depthwise == n_blocks
    # the depthwise convs carry their share of the Conv MACs (C_in / groups == 1 per output element)
    assert f.macs_by_op["Conv"] < f.forward_macs_per_sample


def test_speech_macs_split_into_conv_gru_and_linear(zoo):
    from perfpredict.workload.zoo.families.speech import output_frames, rnn_input_size

    f, _, cfg, _ = zoo("speech")
    t, h, layers = output_frames(cfg), cfg["hidden"], cfg["rnn_layers"]
    gru = t * 2 * 3 * h * (rnn_input_size(cfg) + h) + (layers - 1) * t * 2 * 3 * h * (3 * h)
    linear = t * 2 * h * cfg["num_classes"]
    assert f.macs_by_op["GRU"] == gru and f.macs_by_op["MatMul"] == linear
    assert f.macs_by_op["Conv"] == get_family("speech").closed_form_macs(cfg) - gru - linear
    # bidirectional: each GRU node holds both directions' weights
    proto = onnx.load(str(zoo.dir / "speech.onnx"))
    for node in proto.graph.node:
        if node.op_type == "GRU":
            assert next(a.s for a in node.attribute if a.name == "direction") == b"bidirectional"


def test_dlrm_macs_split_into_mlps_and_interaction_lookups_count_none(zoo):
    from perfpredict.features.saved import saved_bytes_split

    f, w, cfg, model = zoo("dlrm")
    n, d = cfg["num_tables"] + 1, cfg["emb_dim"]
    assert f.macs_by_op == {"MatMul": n * n * d, "Gemm": get_family("dlrm").closed_form_macs(cfg) - n * n * d}
    assert f.fvcore_unsupported.get("aten::embedding") == cfg["num_tables"]  # a gather: no MACs either way
    # Saved for backward, per sample: the bottom Linears' inputs (13 + 64 + 32 floats), the bottom's last ReLU
    # output (the in-place ReLUs keep their outputs, which are the next Linear's inputs: one storage), the
    # stacked [n, d] vectors for T T^T, the top Linears' inputs (d + n(n-1)/2, 64, 32), BCE's logit and label,
    # and the int64 sparse indices the embedding backward scatters by (the weights themselves are not saved).
    floats = (13 + 64 + 32) + d + n * d + (d + n * (n - 1) // 2 + 64 + 32) + 2
    assert saved_bytes_split(w, model) == (4 * floats + 8 * cfg["num_tables"], 0)


def test_dlrm_multi_hot_exports_gather_and_reduce_sum():
    cfg = {"num_tables": 3, "lookups": 4}
    f = extract_features(load_zoo_workload("dlrm", cfg), use_fvcore=False)
    assert f.available and f.exporter == "torchscript", f.error
    assert f.op_counts["ReduceSum"] == 3 and f.op_counts["Gather"] == 2 * 3 + 1
    assert f.forward_macs_per_sample == get_family("dlrm").closed_form_macs(get_family("dlrm").resolve(cfg))


# --- models over protobuf's 2 GiB: weights as external data ----------------------------------------------
class _WideScalarOut(nn.Module):
    """Only the dynamo exporter takes it (a Python float output), and its weights are above the 256 bytes
    that the dynamo exporter's external-data writer keeps inline."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(32, 16)

    def forward(self, x):
        return self.lin(x).sum().item()


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_large_model_export_goes_through_external_data(exporter, tmp_path, monkeypatch):
    """Above EXTERNAL_DATA_BYTES the exporters write to a temporary directory and the proto keeps only weight
    references; a saved file gets its weights in one ``.data`` file beside it (dynamo externalises every
    weight; TorchScript only past 2 GiB, so this small one stays inline), and the file still runs."""
    import numpy as np
    import onnxruntime as ort

    from perfpredict.features import onnx_export

    if exporter == "torchscript":
        build, inputs = (lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))), \
            (lambda b: torch.randn(b, 6))
    else:
        build, inputs = _WideScalarOut, (lambda b: torch.randn(b, 32))  # the tracer rejects it: dynamo
    torch.manual_seed(0)
    model = build()
    small = extract_features(workload("small", build, inputs), model=model, use_fvcore=False)
    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_BYTES", 0)
    f = extract_features(workload("big", build, inputs), model=model, onnx_path=tmp_path / "m.onnx",
                         use_fvcore=False)
    assert f.available and f.exporter == exporter, f.error
    assert (f.forward_macs_per_sample, f.param_bytes, f.op_counts) == \
        (small.forward_macs_per_sample, small.param_bytes, small.op_counts)
    assert (tmp_path / "m.onnx.data").is_file() == (exporter == "dynamo")
    sess = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    x = inputs(1)
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        want = model.eval()(x)
    np.testing.assert_allclose(got, np.asarray(want, dtype=np.float32), rtol=1e-5, atol=1e-6)


# --- hand-written models with known MACs ---------------------------------------------------------------
def workload(name: str, build, inputs) -> Workload:
    return Workload(name=name, ref=WorkloadRef("file", f"{name}.py"), build_model=build, example_inputs=inputs)


class BatchedAttention(nn.Module):
    def forward(self, q, k, v):
        return torch.matmul(torch.matmul(q, k.transpose(-1, -2)).softmax(-1), v)


class EinsumProj(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 5))

    def forward(self, x):
        return torch.einsum("bij,jk->bik", x, self.w)


class FirstOutput(nn.Module):
    def __init__(self, rnn: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x):
        return self.rnn(x)[0]


def _conv_out(n, k, s, p):
    return (n + 2 * p - k) // s + 1


# (id, build, inputs(b), expected per-sample MACs computed by hand, ONNX op that carries them)
MINI = [
    ("conv", lambda: nn.Conv2d(3, 8, 3, padding=1), lambda b: torch.randn(b, 3, 10, 10),
     8 * 10 * 10 * 3 * 3 * 3, "Conv"),
    ("conv_groups_stride2", lambda: nn.Conv2d(8, 12, 3, stride=2, padding=1, groups=4),
     lambda b: torch.randn(b, 8, 9, 9),
     12 * _conv_out(9, 3, 2, 1) ** 2 * (8 // 4) * 3 * 3, "Conv"),
    ("depthwise_stride2", lambda: nn.Conv2d(6, 6, 3, stride=2, padding=1, groups=6, bias=False),
     lambda b: torch.randn(b, 6, 11, 11),
     6 * _conv_out(11, 3, 2, 1) ** 2 * 1 * 3 * 3, "Conv"),
    ("conv_transpose", lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2), lambda b: torch.randn(b, 4, 5, 5),
     4 * 5 * 5 * (6 // 2) * 3 * 3, "ConvTranspose"),  # each input element scatters into C_out/g x k x k
    ("linear_3d", lambda: nn.Linear(7, 9), lambda b: torch.randn(b, 5, 7), 5 * 9 * 7, "MatMul"),
    ("batched_matmul_attention", BatchedAttention,
     lambda b: (torch.randn(b, 2, 4, 8), torch.randn(b, 2, 6, 8), torch.randn(b, 2, 6, 3)),
     2 * 4 * 6 * 8 + 2 * 4 * 3 * 6, "MatMul"),  # Q K^T, then attn V
    ("gru_2layer", lambda: FirstOutput(nn.GRU(5, 7, num_layers=2, batch_first=True)), lambda b: torch.randn(b, 4, 5),
     4 * 3 * 7 * (5 + 7) + 4 * 3 * 7 * (7 + 7), "GRU"),  # seq x gates*H x (I + H) per layer
    ("bigru_2layer_batch_first",
     lambda: FirstOutput(nn.GRU(5, 7, num_layers=2, batch_first=True, bidirectional=True)),
     lambda b: torch.randn(b, 4, 5),
     4 * 2 * 3 * 7 * (5 + 7) + 4 * 2 * 3 * 7 * (2 * 7 + 7), "GRU"),  # x2 directions; layer 2 sees 2H inputs
    ("bilstm_2layer", lambda: FirstOutput(nn.LSTM(5, 6, num_layers=2, bidirectional=True)),
     lambda b: torch.randn(3, b, 5),  # (seq, batch, features)
     3 * 2 * 4 * 6 * (5 + 6) + 3 * 2 * 4 * 6 * (2 * 6 + 6), "LSTM"),  # x2 directions; layer 2 sees 2H inputs
    ("einsum", EinsumProj, lambda b: torch.randn(b, 4, 6), 4 * 6 * 5, "Einsum"),
]


@pytest.mark.parametrize("case", MINI, ids=[c[0] for c in MINI])
def test_mini_model_exact_macs(case):
    name, build, inputs, expected, op = case
    torch.manual_seed(0)
    f = extract_features(workload(name, build, inputs))
    assert f.available and f.error is None, f.error
    assert f.exporter == "torchscript"
    assert f.forward_macs_per_sample == expected
    assert f.forward_macs_fixed == 0
    assert f.macs_by_op == {op: expected}
    assert f.fvcore_error is None
    assert f.fvcore_macs_per_sample == expected
    assert f.macs_rel_diff == 0.0


def test_linear_on_3d_input_is_matmul_not_gemm():
    f = extract_features(workload("lin3d", lambda: nn.Linear(7, 9), lambda b: torch.randn(b, 5, 7)))
    assert f.op_counts.get("MatMul") == 1 and "Gemm" not in f.op_counts
    f2 = extract_features(workload("lin2d", lambda: nn.Linear(7, 9), lambda b: torch.randn(b, 7)))
    assert f2.op_counts.get("Gemm") == 1 and f2.forward_macs_per_sample == 7 * 9


def test_recurrent_op_counts():
    by_id = {c[0]: c for c in MINI}
    gru = extract_features(workload("gru", *by_id["gru_2layer"][1:3]))
    lstm = extract_features(workload("lstm", *by_id["bilstm_2layer"][1:3]))
    assert gru.op_counts["GRU"] == 2  # one ONNX node per stacked layer
    assert lstm.op_counts["LSTM"] == 2  # bidirectional is one node with direction=bidirectional


def test_conv_bn_relu_keeps_batchnorm():
    def build():
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU())

    f = extract_features(workload("cbr", build, lambda b: torch.randn(b, 3, 6, 6)))
    assert f.available
    assert f.op_counts.get("BatchNormalization") == 1
    assert f.op_counts.get("Conv") == 1 and f.op_counts.get("Relu") == 1
    assert f.forward_macs_per_sample == 4 * 6 * 6 * 3 * 9  # BN adds no MACs


def test_param_bytes_count_identical_layers_twice():
    def build():
        layer = nn.Linear(4, 4)
        return nn.Sequential(layer, nn.ReLU(), copy.deepcopy(layer))  # distinct tensors, equal values

    model = build()
    torch_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    assert torch_bytes == 2 * (16 + 4) * 4
    f = extract_features(workload("twins", build, lambda b: torch.randn(b, 4)))
    assert f.available
    assert f.param_bytes == torch_bytes


# --- writing the ONNX file, features_from_onnx -----------------------------------------------------------
def test_onnx_file_written_and_loadable(tmp_path):
    w = load_zoo_workload("mlp", {"input_dim": 20, "depth": 2, "width": 16, "num_classes": 3})
    path = tmp_path / "sub" / "m.onnx"
    f = extract_features(w, onnx_path=path)
    assert f.available and path.is_file()
    assert f.onnx_file == "m.onnx"
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    assert opset == f.opset == TORCHSCRIPT_OPSET
    # exported at the batch size the features say
    dims = [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [f.export_batch_size, 20]


def test_features_from_onnx_matches_extract_features(zoo):
    name = "resnet"
    f, w, _, model = zoo(name)
    proto = onnx.load(str(zoo.dir / f"{name}.onnx"))
    g1 = features_from_onnx(proto, 1)
    assert g1.available and g1.export_batch_size == 1
    assert g1.forward_macs_per_sample == f.forward_macs_per_sample
    assert g1.macs_by_op == f.macs_by_op
    assert g1.param_bytes == f.param_bytes
    assert g1.op_counts == f.op_counts
    assert g1.activation_bytes_per_sample == f.activation_bytes_per_sample + f.activation_bytes_fixed
    # at batch 2 the whole-graph count divided by the batch gives the same per-sample MACs
    g2 = features_from_onnx(export_onnx(model, w.inputs(2)).model_proto, 2)
    assert g2.forward_macs_per_sample == f.forward_macs_per_sample


def test_features_from_onnx_on_transformer_resolves_runtime_shapes(zoo):
    # nn.MultiheadAttention's reshapes defeat static shape inference; the onnxruntime fallback recovers them
    f, *_ = zoo("transformer")
    g = features_from_onnx(onnx.load(str(zoo.dir / "transformer.onnx")), 1)
    assert g.forward_macs_per_sample == f.forward_macs_per_sample
    assert g.macs_by_op.get("MatMul", 0) > 0


def test_runtime_shapes_feed_zeros_for_weights_kept_as_external_references(zoo, tmp_path, monkeypatch):
    # A model over 2 GiB is analysed without its weights' data (see onnx_export): the onnxruntime fallback
    # that resolves nn.MultiheadAttention's shapes must still run, on zero-filled weights.
    from perfpredict.features import shape_folding
    from perfpredict.features.graph import analyze_onnx

    zoo("transformer")  # exports it, when no earlier test of the module has (run alone, or on another worker)
    proto = onnx.load(str(zoo.dir / "transformer.onnx"))
    onnx.save(proto, str(tmp_path / "t.onnx"), save_as_external_data=True, location="t.onnx.data",
              size_threshold=1024)
    refs = onnx.load(str(tmp_path / "t.onnx"), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in refs.graph.initializer)
    full = analyze_onnx(proto)
    # folding the shape arithmetic resolves the attention shapes without running anything
    assert analyze_onnx(refs, run_for_shapes=False).macs == full.macs
    # without it, static inference alone loses MACs, and the runtime fallback is what finds them
    monkeypatch.setattr(shape_folding, "folded_value_infos", lambda proto, inferred=None: [])
    assert analyze_onnx(refs, run_for_shapes=False).macs < full.macs
    got = analyze_onnx(refs)
    assert (got.macs, got.macs_by_op, got.initializer_bytes, got.unknown_shape_ops) == \
        (full.macs, full.macs_by_op, full.initializer_bytes, {})


# --- failures are recorded, not raised -----------------------------------------------------------------
class SparseDouble(nn.Module):
    """Runs fine eagerly, but neither exporter has a conversion for sparse tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin((x.to_sparse() * 2).to_dense())


def test_unexportable_model_yields_unavailable_features():
    model = SparseDouble()
    assert model(torch.randn(2, 4)).shape == (2, 4)  # a working model
    f = extract_features(workload("sparse", SparseDouble, lambda b: torch.randn(b, 4)))
    assert f.available is False
    assert f.error and "\n" not in f.error
    # both exporters were tried and both rejected it (the error lists each attempt; none says "ok")
    assert "export failed with every exporter" in f.error
    assert "torchscript: UnsupportedOperatorError" in f.error and "dynamo: " in f.error
    assert ": ok" not in f.error
    assert f.forward_macs_per_sample is None and f.param_bytes is None and f.op_counts == {}


class LinearRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.lin(x))


def test_fvcore_failure_keeps_onnx_features():
    # fvcore hooks every submodule, which TorchScript modules do not allow; the ONNX exporter takes them fine
    f = extract_features(workload("scripted", lambda: torch.jit.script(LinearRelu()), lambda b: torch.randn(b, 4)))
    assert f.available and f.exporter == "torchscript"
    assert f.forward_macs_per_sample == 4 * 3
    assert f.op_counts.get("Gemm") == 1
    assert f.fvcore_error and "ScriptModule" in f.fvcore_error
    assert f.fvcore_macs_per_sample is None and f.macs_rel_diff is None


class ScalarOut(nn.Module):
    """Returns a Python float: the TorchScript tracer rejects that output, torch.export accepts it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x).sum().item()


def test_dynamo_fallback_when_tracer_fails():
    f = extract_features(workload("scalar", ScalarOut, lambda b: torch.randn(b, 4)), use_fvcore=False)
    assert f.available, f.error
    assert f.exporter == "dynamo"
    assert f.forward_macs_per_sample == 4 * 3
    assert f.fvcore_macs_per_sample is None and f.fvcore_error is None  # cross-check skipped on request


# --- model-file patterns the zoo does not use ---------------------------------------------------------------
class _SDPAttention(nn.Module):
    """Hand-written multi-head attention through F.scaled_dot_product_attention (4 heads of 16)."""

    def __init__(self):
        super().__init__()
        self.qkv, self.o = nn.Linear(64, 192), nn.Linear(64, 64)

    def forward(self, x):
        b, l_, _ = x.shape
        q, k, v = self.qkv(x).view(b, l_, 3, 4, 16).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.o(y.transpose(1, 2).reshape(b, l_, 64))


class _SeqFirstMHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = nn.MultiheadAttention(64, 4)

    def forward(self, x):
        return self.m(x, x, x)[0]


class _Conv1dBaddbmmLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(8, 16, 5, padding=2)
        self.w = nn.Parameter(torch.randn(32, 16))

    def forward(self, x):
        y = self.c(x)
        z = torch.baddbmm(torch.zeros(1), y, y.transpose(1, 2))
        return torch.nn.functional.linear(z, self.w)


_ATTN_MACS = 16 * 64 * 192 + 4 * 16 * 16 * 16 * 2 + 16 * 64 * 64  # qkv proj + QK^T + AV + out proj


@pytest.mark.parametrize("cls,inputs,expected", [
    (_SDPAttention, lambda b: torch.randn(b, 16, 64), _ATTN_MACS),
    (_SeqFirstMHA, lambda b: torch.randn(16, b, 64), _ATTN_MACS),  # batch is dim 1 here
    (_Conv1dBaddbmmLinear, lambda b: torch.randn(b, 8, 32), 16 * 32 * 8 * 5 + 16 * 16 * 32 + 16 * 16 * 32),
], ids=["sdpa", "mha_seq_first", "conv1d_baddbmm_linear"])
def test_foreign_model_patterns_count_exactly(cls, inputs, expected):
    w = Workload(name=cls.__name__, ref=WorkloadRef("file", cls.__name__), build_model=cls, example_inputs=inputs)
    f = extract_features(w)
    assert f.available and f.forward_macs_per_sample == expected
    assert f.fvcore_macs_per_sample == expected


class DeepAtOneSample(nn.Module):
    """A forward pass whose path depends on its input (ten layers for one sample, none for more), as random or
    data-dependent control flow makes the passes perfpredict traces differ."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        for _ in range(10 if x.shape[0] == 1 else 0):
            x = torch.relu(self.a(x))
        return self.b(x)


def test_a_forward_pass_that_changes_path_between_calls_is_noted_and_gets_no_negative_counts():
    """Random control flow gave 'fvcore -2.94k MACs/sample' on the card and per-sample counts taken from two
    different graphs, without a word."""
    f = extract_features(workload("deep1", DeepAtOneSample, lambda b: torch.randn(b, 16)))
    assert f.available
    assert any("traced different graphs" in n for n in f.notes), f.notes
    assert f.fvcore_macs_per_sample is None and "fewer MACs at batch 2" in f.fvcore_error
    steady = extract_features(workload("lin", lambda: nn.Linear(16, 4), lambda b: torch.randn(b, 16)))
    assert steady.notes == [] and steady.fvcore_macs_per_sample == 16 * 4


class DictWithAConstant(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        return {"logits": self.lin(x), "step": 3}


def test_an_exporters_failure_keeps_the_lines_that_say_why():
    """TorchScript's message runs over lines ('output 1 (3' then '[ torch.LongTensor{} ]) of traced region did not
    have observable data dependence with trace inputs...'): the card kept only 'output 1 (3'."""
    f = extract_features(workload("dictout", DictWithAConstant, lambda b: torch.randn(b, 8)), use_fvcore=False)
    assert not f.available
    assert "did not have observable data dependence with trace inputs" in f.error, f.error
