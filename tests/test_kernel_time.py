"""Kernel descriptors from the graph walk, the per-kernel cost fit, and the shipped cost table.

The graph side is checked against layers whose kernels and sizes are known by hand; the cost side against
real timings of single layers on this machine (ordering properties that hold on any CPU, not exact times).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from perfpredict.estimators import kernel_time
from perfpredict.estimators.kernel_nodes import KernelNode, nodes_at_batch, split_nodes
from perfpredict.estimators.kernel_time import columns, design_vector, fit_costs, kernel_seconds
from perfpredict.features import extract_features
from perfpredict.workload.spec import Workload, WorkloadRef
from tests.conftest import REPO, load_script


def _feats(build, inputs):
    torch.manual_seed(0)
    w = Workload(name="m", ref=WorkloadRef("file", "m.py"), build_model=build, example_inputs=inputs)
    f = extract_features(w, use_fvcore=False)
    assert f.available, f.error
    return f


def _classes(rows) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r[0]] = out.get(r[0], 0) + r[1]
    return out


def test_conv_bn_relu_pool_linear_kernels_and_sizes():
    def build():
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(8 * 5 * 5, 4))

    f = _feats(build, lambda b: (torch.randn(b, 3, 10, 10),))
    assert _classes(f.kernel_nodes) == {"conv": 1, "norm": 1, "pointwise": 1, "maxpool": 1, "gemm": 1}
    by = {r[0]: r for r in f.kernel_nodes}
    conv = by["conv"]
    assert conv[2] == 8 * 10 * 10 * 3 * 9 and conv[3] == 0  # MACs per sample, none fixed
    assert conv[4] == 4 * (3 * 100 + 8 * 100)  # reads the input, writes the output, per sample
    assert conv[6] == 4 * (8 * 3 * 9 + 8)  # weight and bias
    gemm = by["gemm"]
    assert gemm[2] == 200 * 4 and gemm[6] == 4 * (200 * 4 + 4)
    # at batch 16 the nodes scale with the batch
    at16 = dict((k.cls, k) for k, _ in nodes_at_batch(f.kernel_nodes, 16))
    assert at16["conv"].macs == 16 * conv[2] and at16["gemm"].io_bytes == 16 * gemm[4]


def test_depthwise_attention_embedding_and_views_get_their_classes():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.dw = nn.Conv1d(16, 16, 3, padding=1, groups=16)
            self.proj = nn.Linear(16, 16)

        def forward(self, idx):
            x = self.emb(idx)  # [B, L, 16]
            x = self.dw(x.transpose(1, 2)).transpose(1, 2)
            q = self.proj(x)
            att = torch.matmul(q, x.transpose(1, 2)).softmax(-1)
            return torch.matmul(att, x).reshape(x.shape[0], -1)

    f = _feats(Net, lambda b: (torch.randint(0, 50, (b, 6)),))
    got = _classes(f.kernel_nodes)
    assert got["gather"] == 1 and got["conv_grouped"] == 1 and got["gemm"] == 1 and got["softmax"] == 1
    assert got["matmul"] == 2  # activation x activation products
    # the embedding table is a lookup's weight, not read whole
    gather = next(r for r in f.kernel_nodes if r[0] == "gather")
    assert gather[6] == 50 * 16 * 4
    # views (Reshape) and shape arithmetic are no kernels
    assert f.op_counts.get("Reshape", 0) >= 1 and "Reshape" not in got


def test_gelu_written_as_erf_is_one_kernel():
    f = _feats(lambda: nn.Sequential(nn.Linear(8, 8), nn.GELU()), lambda b: (torch.randn(b, 8),))
    assert f.op_counts.get("Erf") == 1 and f.op_counts.get("Mul", 0) >= 2
    assert _classes(f.kernel_nodes) == {"gemm": 1, "pointwise": 1}
    pw = next(r for r in f.kernel_nodes if r[0] == "pointwise")
    assert pw[4] == 2 * 8 * 4  # reads x, writes y: the fused kernel's bytes, not the five nodes'


def test_recurrent_kernel_carries_its_steps():
    class First(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(5, 7, batch_first=True)

        def forward(self, x):
            return self.rnn(x)[0]

    f = _feats(First, lambda b: (torch.randn(b, 9, 5),))
    gru = [r for r in f.kernel_nodes if r[0] == "gru"]
    assert len(gru) == 1 and gru[0][7] == 9 and gru[0][2] == 9 * 3 * 7 * (5 + 7)


def test_split_refuses_graphs_whose_kernels_change_with_the_batch():
    a = [KernelNode("gemm", 10, 4, 8), KernelNode("pointwise", 0, 4, 0)]
    b = [KernelNode("gemm", 20, 8, 8)]
    assert split_nodes(a, b) == []
    assert split_nodes(a, [KernelNode("gemm", 20, 8, 8), KernelNode("pointwise", 0, 8, 0)]) == [
        ["gemm", 1, 10, 0, 4, 0, 8, 0], ["pointwise", 1, 0, 0, 4, 0, 0, 0]]


def test_onnx_file_path_gives_the_workload_path_kernels(tmp_path):
    from perfpredict.estimators.arch import from_onnx_file, from_workload

    path = tmp_path / "cnn.onnx"
    w = from_workload("zoo:resnet", {"depth": 18, "width": 16, "image_size": 32, "num_classes": 10})
    from perfpredict.workload.zoo import load_zoo_workload

    wl = load_zoo_workload("resnet", {"depth": 18, "width": 16, "image_size": 32, "num_classes": 10})
    torch.manual_seed(0)
    extract_features(wl, onnx_path=path, use_fvcore=False)
    o = from_onnx_file(path)
    assert sorted(map(list, o.kernel_nodes)) == sorted(map(list, w.kernel_nodes))


def test_fit_recovers_costs_of_an_exact_additive_model():
    truth = np.zeros(len(columns()))
    idx = {c: i for i, c in enumerate(columns())}
    truth[idx["gemm:call"]], truth[idx["gemm:mac"]], truth[idx["pointwise:byte"]] = 5e-6, 2e-11, 1e-10
    truth[idx["pointwise:call"]] = 2e-6
    rng = np.random.default_rng(0)
    recs = []
    for i in range(40):
        nodes = [["gemm", int(rng.integers(1e3, 1e8)), int(rng.integers(1e3, 1e7)), 0, 0],
                 ["pointwise", 0, int(rng.integers(1e3, 1e8)), 0, 0]][: 1 + i % 2]
        t = float(design_vector((KernelNode(*n), 1) for n in nodes) @ truth)
        recs.append({"name": str(i), "nodes": nodes, "seconds": {"infer": t}})
    params, q = fit_costs(recs, "infer")
    assert q["median_abs_rel_error"] < 1e-6
    for c in ("gemm:call", "gemm:mac", "pointwise:byte", "pointwise:call"):
        assert params[idx[c]] == pytest.approx(truth[idx[c]], rel=1e-4)


def test_real_benchmarks_time_and_describe_their_kernels():
    from perfpredict.profile.kernel_bench import catalogue, measure

    benches = [b for b in catalogue(0, 3) if b.kind in ("gemm", "conv_grouped", "pointwise")][:5]
    recs = measure(benches, ("infer",))
    for r in recs:
        assert "error" not in r, r
        assert r["seconds"]["infer"] > 0 and r["nodes"]
        assert any(n[0] == r["kind"] for n in r["nodes"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("device", ["cuda", "tpu"])
def test_collector_refuses_a_device_this_machine_lacks(tmp_path, capsys, device):
    """Asking for a GPU table where there is no GPU (or for an unknown device) is one clear message and a
    non-zero exit, and nothing is written (the CPU table least of all)."""
    mod = load_script(REPO / "profilers" / "collect_kernel_costs.py")
    before = kernel_time.TABLE_PATH.read_bytes()
    assert mod.main(["--device", device, "--out", str(tmp_path / "t.json")]) == 2
    assert "not available" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists() and kernel_time.TABLE_PATH.read_bytes() == before


def test_benchmarks_record_the_device_they_ran_on():
    from perfpredict.hostinfo import cpu_id
    from perfpredict.profile.kernel_bench import machine_description

    d = machine_description("cpu")
    assert d["device"] == "cpu" and d["cpu_model"] and "gpu_name" not in d
    assert d["cpu_id"] == cpu_id()  # the model name alone does not tell two EPYC VMs apart


# --- the shipped table ------------------------------------------------------------------------------------
def test_shipped_table_has_provenance_and_both_modes():
    prov = kernel_time.provenance()
    assert prov["cpu_model"] and prov["torch_version"] and prov["command"].startswith("python profilers/")
    for mode in kernel_time.MODES:
        p = kernel_time.parameters(mode)
        assert p.shape == (len(columns()),) and (p >= 0).all() and p.sum() > 0


def test_shipped_costs_order_as_hardware_does():
    # 3x3 convolutions over 64 channels at 28 x 28, per sample: a dense one and a depthwise one
    rows_dense = [["conv", 1, 64 * 64 * 9 * 784, 0, 4 * 2 * 64 * 784, 0, 4 * (64 * 64 * 9 + 64), 0]]
    rows_dw = [["conv_grouped", 1, 64 * 9 * 784, 0, 4 * 2 * 64 * 784, 0, 4 * (64 * 9 + 64), 0]]
    for mode in kernel_time.MODES:
        # bigger batches cost more, a training step more than a pass
        assert kernel_seconds(rows_dense, 8, mode) > kernel_seconds(rows_dense, 1, mode)
    assert kernel_seconds(rows_dense, 4, "train") > kernel_seconds(rows_dense, 4, "infer")
    for mode in kernel_time.MODES:
        # a depthwise convolution's MACs cost several times a dense one's (memory-bound)
        per_mac = [kernel_seconds(r, 4, mode) / (4 * r[0][2]) for r in (rows_dw, rows_dense)]
        assert per_mac[0] > 3 * per_mac[1]
    # a kernel costs its dispatch however small: a hundred one-element ops cost more than one 4 kB op
    tiny = [["pointwise", 100, 0, 0, 8, 0, 0, 0]]
    assert kernel_seconds(tiny, 1, "infer") > 20 * kernel_seconds([["pointwise", 1, 0, 0, 4096, 0, 0, 0]], 1, "infer")


# --- in the estimators and the Predictor -------------------------------------------------------------------
def test_cpu_only_columns_are_a_suffix_left_out_of_cuda_matrices():
    from perfpredict.estimators.data import load_training_data
    from perfpredict.estimators.design import CPU_ONLY_FEATURES, FEATURE_NAMES, design_matrix, feature_names

    assert feature_names("cpu") == FEATURE_NAMES
    assert feature_names("cuda") == FEATURE_NAMES[: -len(CPU_ONLY_FEATURES)]
    d = load_training_data(REPO / "datasets" / "cpu_xeon_2vcpu_infer.csv")
    arch = d.archs[0]
    full, short = design_matrix([(arch, 8)], "cpu"), design_matrix([(arch, 8)], "cuda")
    assert short.shape[1] == full.shape[1] - len(CPU_ONLY_FEATURES)
    np.testing.assert_array_equal(full[:, : short.shape[1]], short)
    assert np.isfinite(full[:, -len(CPU_ONLY_FEATURES):]).all()


def test_kernel_estimate_tracks_measured_cpu_time_across_families():
    """The measured prior alone, before any fitting to the dataset: across every family of the Xeon's inference
    set, log estimate and log measured time correlate (0.989 measured), and one scale factor leaves every
    family's median ratio within 2x (the one-rate roofline left 4x)."""
    from perfpredict.estimators.data import load_training_data

    d = load_training_data(REPO / "datasets" / "cpu_xeon_2vcpu_infer.csv")
    y = d.column("iter_time_s")
    est = np.array([kernel_seconds(a.kernel_nodes, int(b), "infer") for a, b in zip(d.archs, d.batch)])
    assert np.corrcoef(np.log(est), np.log(y))[0, 1] > 0.95
    ratio = y / est
    scale = np.median(ratio)
    for f in set(d.families):
        assert 0.5 < np.median(ratio[d.families == f]) / scale < 2.0, f


def test_bare_feature_vector_gets_stand_in_kernels_and_the_card_says_so():
    from dataclasses import replace

    from perfpredict import Predictor
    from perfpredict.estimators.data import load_training_data

    pred = Predictor.load(REPO / "trained_models")
    d = load_training_data(REPO / "datasets" / "cpu_xeon_2vcpu_infer.csv")
    arch = d.archs[int(np.flatnonzero(d.families == "mobilenetv2")[0])]
    full = pred.card_for(arch, [16], device_type="cpu_xeon_2vcpu_infer", allow_fallback=False)
    bare = pred.card_for(replace(arch, kernel_nodes=()), [16], device_type="cpu_xeon_2vcpu_infer",
                         allow_fallback=False)
    assert not any("kernel_nodes" in n for n in full.prediction.notes)
    assert any("no kernels given" in n for n in bare.prediction.notes)
    assert full.features.kernel_nodes and not bare.features.kernel_nodes
    t_full, t_bare = full.prediction.points[0].iter_time_s, bare.prediction.points[0].iter_time_s
    assert np.isfinite(t_bare) and 0.2 < t_bare / t_full < 5


def test_service_validates_kernel_rows():
    from fastapi.testclient import TestClient

    from perfpredict import Predictor
    from perfpredict.service import create_app

    client = TestClient(create_app(Predictor.load(REPO / "trained_models")))
    feats = {"forward_macs_per_sample": 1e6, "param_count": 1e4, "param_bytes": 4e4,
             "activation_bytes_per_sample": 1e4, "num_nodes": 3, "op_counts": {"Gemm": 2, "Relu": 1},
             "macs_by_op": {"Gemm": 1e6}}
    ok = feats | {"kernel_nodes": [["gemm", 2, 500000, 0, 4000, 0, 20000, 0], ["pointwise", 1, 0, 0, 2000, 0, 0, 0]]}
    r = client.post("/predict", json={"features": ok, "batch_sizes": [8], "device_type": "cpu", "mode": "infer"})
    assert r.status_code == 200, r.text
    assert not any("no kernels given" in n for n in r.json()["prediction"]["notes"])
    bad = feats | {"kernel_nodes": [["warp_drive", 1, 0, 0, 0, 0, 0, 0]]}
    r = client.post("/predict", json={"features": bad, "batch_sizes": [8], "device_type": "cpu"})
    assert r.status_code == 422
    neg = feats | {"kernel_nodes": [["gemm", 1, -5, 0, 0, 0, 0, 0]]}
    assert client.post("/predict", json={"features": neg, "batch_sizes": [8]}).status_code == 422
    assert client.get("/health").status_code == 200


def test_fixed_batch_onnx_file_gives_per_sample_kernels(tmp_path):
    """An ONNX file exported at a fixed batch of 4 (no symbolic dimension): its kernels' batch-proportional
    MACs and bytes are divided by 4, as the file's other features are, and match the symbolic export's."""
    import onnx

    from perfpredict.estimators.arch import from_onnx_proto

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 36, 5)).eval()
    x = torch.randn(4, 3, 6, 6)
    fixed, dynamic = tmp_path / "fixed.onnx", tmp_path / "dynamic.onnx"
    torch.onnx.export(model, (x,), str(fixed), input_names=["x"], dynamo=False)
    torch.onnx.export(model, (x,), str(dynamic), input_names=["x"], dynamic_axes={"x": {0: "b"}}, dynamo=False)
    a, b = from_onnx_proto(onnx.load(str(fixed))), from_onnx_proto(onnx.load(str(dynamic)))
    per = {r[0]: (r[2], r[4]) for r in a.kernel_nodes}
    assert per == {r[0]: (r[2], r[4]) for r in b.kernel_nodes}
    assert per["conv"][0] == 8 * 36 * 3 * 9 and per["gemm"][0] == 8 * 36 * 5
