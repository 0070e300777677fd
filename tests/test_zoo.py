"""The built-in model zoo: registry, parameter parsing, grids, and the closed-form ground truth.

Closed-form MACs are checked against an independent count taken with forward hooks while the model runs,
and against published figures for the classic ImageNet models (checked by formula only; nothing big is built).
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch
from torch import nn

from perfpredict.errors import UsageError
from perfpredict.workload.spec import Workload
from perfpredict.workload.zoo import (
    enumerate_configs,
    families,
    get_family,
    load_zoo_workload,
)
from perfpredict.workload.zoo.base import ZooFamily
from perfpredict.workload.zoo.families import ALL_FAMILIES
from perfpredict.workload.zoo.families.dlrm import DotInteraction

FAMILY_NAMES = ["resnet", "vgg", "mobilenetv2", "transformer", "lstm", "mlp", "vit", "unet", "speech", "convnext", "dlrm"]

#: per family: the default config plus small configs that exercise the other code paths
SMALL_CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("resnet", {}),
    ("resnet", {"depth": 50, "width": 4, "image_size": 16, "num_classes": 5}),
    ("resnet", {"depth": 10, "width": 4, "image_size": 72, "num_classes": 3}),  # ImageNet stem + max pool
    ("vgg", {}),
    ("vgg", {"depth": 13, "width": 8, "batch_norm": False, "image_size": 64, "hidden": 32, "num_classes": 4}),
    ("vgg", {"depth": 19, "width": 4, "image_size": 32, "hidden": 16}),
    ("mobilenetv2", {}),
    ("mobilenetv2", {"width_mult": 0.35, "depth_mult": 0.5, "image_size": 72}),  # stride-2 stem
    ("mobilenetv2", {"width_mult": 1.4, "depth_mult": 0.3, "image_size": 16}),   # last conv widened past 1280
    ("transformer", {}),
    ("transformer", {"layers": 3, "d_model": 48, "heads": 3, "ffn_mult": 2, "seq_len": 10, "vocab": 50,
                     "num_classes": 3}),
    ("lstm", {}),
    ("lstm", {"embed": 8, "hidden": 16, "layers": 3, "seq_len": 7, "vocab": 20}),
    ("lstm", {"embed": 12, "hidden": 6, "layers": 1, "seq_len": 5, "vocab": 9}),
    ("mlp", {}),
    ("mlp", {"input_dim": 20, "depth": 5, "width": 16, "num_classes": 3}),
    ("mlp", {"depth": 0, "input_dim": 7}),
    ("vit", {}),
    ("vit", {"image_size": 12, "patch": 3, "d_model": 24, "depth": 3, "heads": 2, "mlp_ratio": 2,
             "num_classes": 5}),
    ("vit", {"image_size": 16, "patch": 16, "d_model": 16, "depth": 1, "heads": 1}),   # a single patch
    ("unet", {}),
    ("unet", {"image_size": 24, "base_width": 3, "depth": 3, "num_classes": 2}),
    ("unet", {"image_size": 8, "base_width": 4, "depth": 1, "num_classes": 3}),
    ("speech", {}),
    # n_mels 24, not 20-22: torch 2.13's oneDNN crashes (SIGSEGV, or hangs under pytest) in the AVX-512 weight
    # gradient of the 41x11 stride-2 convolution on 20-22 mel bands (measured on an Intel Xeon VM, 2026-11-24;
    # fine with ONEDNN_MAX_CPU_ISA=AVX2 and on AMD EPYC). A profile of such a config reports the dead worker.
    ("speech", {"conv_layers": 1, "n_mels": 24, "frames": 30, "conv_channels": 3, "rnn_layers": 3, "hidden": 12,
                "num_classes": 7, "target_len": 5}),
    ("speech", {"n_mels": 9, "frames": 23, "conv_channels": 2, "rnn_layers": 1, "hidden": 5, "num_classes": 3,
                "target_len": 5}),                                  # odd frames; 12 output frames >= 2 x 5 + 1
    ("convnext", {}),
    ("convnext", {"image_size": 40, "width": 8, "blocks": "1-2-1-1", "kernel": 3, "mlp_ratio": 2,
                  "num_classes": 5}),                                 # odd sides: 20, 10, 5, 2
    ("convnext", {"image_size": 32, "stem_stride": 4, "width": 8, "blocks": "1-1-1-1", "kernel": 11}),
    ("dlrm", {}),
    ("dlrm", {"num_tables": 1, "bottom_mlp": "", "top_mlp": ""}),    # a single pair; one Linear each side
    ("dlrm", {"num_dense": 5, "num_tables": 6, "rows_per_table": 50, "emb_dim": 4, "lookups": 3,
              "bottom_mlp": "16-8", "top_mlp": "12"}),               # multi-hot: 3 summed lookups per table
]


def _id(case: tuple[str, dict[str, Any]]) -> str:
    fam, ov = case
    return fam + ("-" + "-".join(f"{k}{v}" for k, v in ov.items()) if ov else "-default")


def hooked_macs_per_sample(model: nn.Module, inputs: torch.Tensor | tuple[torch.Tensor, ...]) -> int:
    """Forward MACs counted from the shapes seen by forward hooks, independently of the closed forms."""
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    batch = args[0].shape[0]
    total = 0

    def conv(m: nn.Conv2d, args: tuple, out: torch.Tensor) -> None:
        nonlocal total
        kh, kw = m.kernel_size
        total += out.numel() * (m.in_channels // m.groups) * kh * kw

    def conv_transpose(m: nn.ConvTranspose2d, args: tuple, out: torch.Tensor) -> None:
        nonlocal total
        kh, kw = m.kernel_size
        total += args[0].numel() * (m.out_channels // m.groups) * kh * kw  # each input element scatters

    def linear(m: nn.Linear, args: tuple, out: torch.Tensor) -> None:
        nonlocal total
        total += out.numel() * m.in_features

    def lstm(m: nn.LSTM, args: tuple, out: Any) -> None:
        nonlocal total
        x = args[0]
        assert m.batch_first and m.proj_size == 0 and not m.bidirectional
        b, t = x.shape[0], x.shape[1]
        h = m.hidden_size
        for layer in range(m.num_layers):
            i = m.input_size if layer == 0 else h
            total += b * t * 4 * h * (i + h)

    def gru(m: nn.GRU, args: tuple, out: Any) -> None:
        nonlocal total
        x = args[0]
        assert m.batch_first and m.proj_size == 0
        b, t = x.shape[0], x.shape[1]
        h, dirs = m.hidden_size, 2 if m.bidirectional else 1
        for layer in range(m.num_layers):
            i = m.input_size if layer == 0 else dirs * h
            total += dirs * b * t * 3 * h * (i + h)

    def mha(m: nn.MultiheadAttention, args: tuple, out: Any) -> None:
        # In training mode the slow path runs: the q/k/v projections use in_proj_weight and out_proj is
        # applied functionally (its Linear hook never fires), so count all four projections here.
        nonlocal total
        q, k = args[0], args[1]
        assert m.batch_first and m._qkv_same_embed_dim
        b, tq, e = q.shape
        tk = k.shape[1]
        total += b * (tq * e * e + 2 * tk * e * e)   # q, k, v projections
        total += b * 2 * tq * tk * e                 # Q K^T and attn · V summed over heads
        total += b * tq * e * e                      # output projection

    def dot_interaction(m: DotInteraction, args: tuple, out: torch.Tensor) -> None:
        nonlocal total
        b, n, d = args[0].shape
        total += b * n * n * d  # T T^T as a batched matmul, before the lower triangle is taken

    handles = []
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d):
            handles.append(mod.register_forward_hook(conv))
        elif isinstance(mod, nn.ConvTranspose2d):
            handles.append(mod.register_forward_hook(conv_transpose))
        elif isinstance(mod, nn.MultiheadAttention):
            handles.append(mod.register_forward_hook(mha))
        elif isinstance(mod, nn.Linear):
            handles.append(mod.register_forward_hook(linear))
        elif isinstance(mod, nn.LSTM):
            handles.append(mod.register_forward_hook(lstm))
        elif isinstance(mod, nn.GRU):
            handles.append(mod.register_forward_hook(gru))
        elif isinstance(mod, DotInteraction):
            handles.append(mod.register_forward_hook(dot_interaction))
    try:
        model.train()  # keeps nn.TransformerEncoderLayer off its fused inference fast path
        with torch.no_grad():
            model(*args)
    finally:
        for h in handles:
            h.remove()
    assert total % batch == 0
    return total // batch


# -- registry and metadata ----------------------------------------------------------------------------------

def test_every_family_registered_in_order() -> None:
    assert [cls.name for cls in ALL_FAMILIES] == FAMILY_NAMES
    assert sorted(families()) == sorted(FAMILY_NAMES)
    for name in FAMILY_NAMES:
        assert isinstance(get_family(name), ZooFamily)
    with pytest.raises(UsageError):
        get_family("alexnet")


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_family_metadata(name: str) -> None:
    fam = get_family(name)
    assert fam.description and fam.task in ("image", "language", "tabular", "speech", "recommendation")
    assert len(fam.params) >= 2 and len({p.name for p in fam.params}) == len(fam.params)
    sizes = fam.default_batch_sizes
    assert len(sizes) == 5 and list(sizes) == sorted(sizes)
    assert all(s > 0 and s & (s - 1) == 0 for s in sizes)
    assert all(p.help for p in fam.params)


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_default_config_is_cpu_cheap(name: str) -> None:
    fam = get_family(name)
    assert fam.closed_form_macs(fam.resolve({})) <= 60e6


# -- resolve ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_resolve_fills_defaults(name: str) -> None:
    fam = get_family(name)
    defaults = {p.name: p.default for p in fam.params}
    assert fam.resolve({}) == defaults
    assert fam.resolve(None) == defaults
    first = fam.params[0]
    cfg = fam.resolve({first.name: str(first.default)})
    assert cfg == defaults and type(cfg[first.name]) is type(first.default)


def test_resolve_parses_cli_strings() -> None:
    resnet = get_family("resnet").resolve({"depth": "50", "width": "8", "image_size": "224"})
    assert resnet["depth"] == 50 and resnet["width"] == 8 and resnet["image_size"] == 224
    assert isinstance(resnet["depth"], int) and resnet["num_classes"] == 10
    vgg = get_family("vgg")
    assert vgg.resolve({"batch_norm": "true"})["batch_norm"] is True
    assert vgg.resolve({"batch_norm": "no"})["batch_norm"] is False
    assert vgg.resolve({"batch_norm": "0"})["batch_norm"] is False
    mnv2 = get_family("mobilenetv2").resolve({"width_mult": "0.5", "depth_mult": "2"})
    assert mnv2["width_mult"] == 0.5 and mnv2["depth_mult"] == 2.0 and isinstance(mnv2["depth_mult"], float)
    assert get_family("transformer").resolve({"d_model": 64.0, "heads": "2"})["d_model"] == 64


@pytest.mark.parametrize("family, overrides", [
    ("resnet", {"depht": 18}),
    ("resnet", {"depth": 20}),                      # not a choice
    ("resnet", {"depth": "eighteen"}),
    ("resnet", {"width": "1.5"}),
    ("resnet", {"width": 0}),                       # below minimum
    ("vgg", {"depth": 12}),
    ("vgg", {"image_size": 48}),                    # not divisible by 32
    ("vgg", {"batch_norm": "maybe"}),
    ("mobilenetv2", {"width_mult": "wide"}),
    ("mobilenetv2", {"width_mult": 0.0}),
    ("transformer", {"heads": 3}),                  # does not divide d_model 128
    ("transformer", {"d_model": 100, "heads": 8}),
    ("lstm", {"layers": 0}),
    ("mlp", {"depth": -1}),
    ("mlp", {"hidden": 3}),
    ("vit", {"patch": 5}),                          # does not divide image_size 32
    ("vit", {"heads": 3}),                          # does not divide d_model 64
    ("vit", {"patch": 0}),
    ("unet", {"image_size": 36, "depth": 3}),       # not divisible by 2**3
    ("unet", {"depth": 0}),
    ("speech", {"frames": 64}),                     # 32 output frames < 2 x 16 + 1 for CTC
    ("speech", {"conv_layers": 3}),                 # not a choice
    ("speech", {"target_len": 0}),
    ("convnext", {"blocks": "3-3-9"}),               # not four stages
    ("convnext", {"blocks": "3-0-9-3"}),
    ("convnext", {"stem_stride": 3}),                # not a choice
    ("convnext", {"image_size": 16, "stem_stride": 4}),  # stage 4 would be empty
    ("convnext", {"kernel": 4}),
    ("dlrm", {"bottom_mlp": "512-0"}),             # a zero-width layer
    ("dlrm", {"top_mlp": "wide"}),
    ("dlrm", {"bottom_mlp": "512--256"}),
    ("dlrm", {"lookups": 0}),
    ("dlrm", {"rows_per_table": 0}),
])
def test_resolve_rejects_bad_values(family: str, overrides: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        get_family(family).resolve(overrides)


# -- grids and names ----------------------------------------------------------------------------------------

def test_grid_configs_resolve_with_unique_stable_names() -> None:
    configs = enumerate_configs()
    again = enumerate_configs()
    assert configs == again
    names = [get_family(f).config_name(cfg) for f, cfg in configs]
    assert names == [get_family(f).config_name(cfg) for f, cfg in again]
    assert len(set(names)) == len(names)
    for name in names:
        assert re.fullmatch(r"[A-Za-z0-9._-]+", name), name
    assert [f for f, _ in configs] == sorted(f for f, _ in configs)
    assert {f for f, _ in configs} == set(FAMILY_NAMES)


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_grid_spans_small_to_large(name: str) -> None:
    fam = get_family(name)
    grid = fam.grid()
    assert 8 <= len(grid) <= 20
    assert grid == fam.grid()  # deterministic
    resolved = [fam.resolve(ov) for ov in grid]
    assert len({tuple(sorted(c.items())) for c in resolved}) == len(resolved)
    macs = [fam.closed_form_macs(c) for c in resolved]
    assert min(macs) <= 60e6  # something CPU-feasible
    if name == "dlrm":  # memory-bound: few MACs, GPU-scale means embedding tables of several GB
        assert max(4 * fam.closed_form_params(c) for c in resolved) >= 3e9
    elif name != "mlp":
        assert max(macs) >= 5e8  # something GPU-scale
    assert enumerate_configs(name) == [(name, c) for c in resolved]


def test_grid_param_counts_on_meta_device() -> None:
    """Every grid config, big ones included, built shape-only on the meta device (no memory, no compute)."""
    for family, cfg in enumerate_configs():
        fam = get_family(family)
        with torch.device("meta"):
            model = fam.build_model(cfg)
        assert sum(p.numel() for p in model.parameters()) == fam.closed_form_params(cfg), (family, cfg)


def test_config_name_lists_every_parameter() -> None:
    fam = get_family("mobilenetv2")
    assert fam.config_name(fam.resolve({})) == "mobilenetv2-width_mult0.5-depth_mult1-image_size32-num_classes10"
    vgg = get_family("vgg")
    assert vgg.config_name(vgg.resolve({"batch_norm": False})).startswith("vgg-depth16-width16-batch_norm0-")


# -- closed forms against published figures (formula only, nothing built) ----------------------------------

@pytest.mark.parametrize("family, overrides, params, gmacs", [
    # torchvision's reference counts for the ImageNet models (params exact, GMACs to 3 significant digits)
    ("resnet", {"depth": 18}, 11_689_512, 1.81),
    ("resnet", {"depth": 34}, 21_797_672, 3.66),
    ("resnet", {"depth": 50}, 25_557_032, 4.09),
    ("resnet", {"depth": 101}, 44_549_160, 7.80),
    ("resnet", {"depth": 152}, 60_192_808, 11.5),
    ("vgg", {"depth": 11, "batch_norm": False}, 132_863_336, 7.61),
    ("vgg", {"depth": 16, "batch_norm": False}, 138_357_544, 15.5),
    ("vgg", {"depth": 16, "batch_norm": True}, 138_365_992, 15.5),
    ("vgg", {"depth": 19, "batch_norm": False}, 143_667_240, 19.6),
    ("mobilenetv2", {"width_mult": 1.0}, 3_504_872, 0.301),
    ("vit", {"patch": 16, "d_model": 768, "depth": 12, "heads": 12, "mlp_ratio": 4}, 86_567_656, 17.56),  # B/16
    ("vit", {"patch": 32, "d_model": 768, "depth": 12, "heads": 12, "mlp_ratio": 4}, 88_224_232, 4.41),   # B/32
    ("vit", {"patch": 16, "d_model": 1024, "depth": 24, "heads": 16, "mlp_ratio": 4}, 304_326_632, 61.55),  # L/16
    ("convnext", {"stem_stride": 4, "width": 96, "blocks": "3-3-9-3"}, 28_589_128, 4.46),    # ConvNeXt-T
    ("convnext", {"stem_stride": 4, "width": 96, "blocks": "3-3-27-3"}, 50_223_688, 8.68),   # ConvNeXt-S
    ("convnext", {"stem_stride": 4, "width": 128, "blocks": "3-3-27-3"}, 88_591_464, 15.36),  # ConvNeXt-B
])
def test_closed_forms_match_published_imagenet_models(family: str, overrides: dict[str, Any], params: int,
                                                      gmacs: float) -> None:
    fam = get_family(family)
    base: dict[str, Any] = {"image_size": 224, "num_classes": 1000}
    if family in ("resnet", "vgg"):
        base["width"] = 64
    if family == "vgg":
        base["hidden"] = 4096
    cfg = fam.resolve({**base, **overrides})
    assert fam.closed_form_params(cfg) == params
    assert fam.closed_form_macs(cfg) / 1e9 == pytest.approx(gmacs, rel=5e-3)


# -- building and running small configs ---------------------------------------------------------------------

@pytest.mark.parametrize("case", SMALL_CONFIGS, ids=_id)
def test_small_config_builds_runs_and_matches_closed_forms(case: tuple[str, dict[str, Any]]) -> None:
    family, overrides = case
    fam = get_family(family)
    cfg = fam.resolve(overrides)
    torch.manual_seed(0)
    model = fam.build_model(cfg)

    assert sum(p.numel() for p in model.parameters()) == fam.closed_form_params(cfg)

    batch = 2
    x = fam.example_inputs(cfg, batch)
    y = fam.example_targets(cfg, batch)
    assert y.dtype == (torch.float32 if fam.task == "recommendation" else torch.int64)
    if fam.task == "image":
        assert x.dtype == torch.float32 and x.shape == (batch, 3, cfg["image_size"], cfg["image_size"])
    elif fam.task == "language":
        assert x.dtype == torch.int64 and x.shape == (batch, cfg["seq_len"])
        assert 0 <= int(x.min()) and int(x.max()) < cfg["vocab"]
    elif fam.task == "speech":
        assert x.dtype == torch.float32 and x.shape == (batch, 1, cfg["n_mels"], cfg["frames"])
    elif fam.task == "recommendation":
        dense, sparse = x
        lookups = (cfg["lookups"],) if cfg["lookups"] > 1 else ()
        assert dense.dtype == torch.float32 and dense.shape == (batch, cfg["num_dense"])
        assert sparse.dtype == torch.int64 and sparse.shape == (batch, cfg["num_tables"], *lookups)
        assert 0 <= int(sparse.min()) and int(sparse.max()) < cfg["rows_per_table"]

    assert hooked_macs_per_sample(model, x) == fam.closed_form_macs(cfg)

    model.train()
    out = model(*(x if isinstance(x, tuple) else (x,)))
    if family == "lstm":
        assert out.shape == (batch, cfg["seq_len"], cfg["vocab"]) and y.shape == (batch, cfg["seq_len"])
        n_out = cfg["vocab"]
    elif family == "speech":  # per-frame character logits, label sequences without the blank (0)
        n_out = cfg["num_classes"]
        assert out.shape == (batch, (cfg["frames"] + 1) // 2, n_out) and y.shape == (batch, cfg["target_len"])
        assert int(y.min()) >= 1
    elif family == "dlrm":  # one click logit per sample, 0/1 labels of the same shape
        n_out = 2
        assert out.shape == (batch, 1) and y.shape == (batch, 1)
    elif family == "unet":  # dense prediction: per-pixel logits and class maps
        s = cfg["image_size"]
        n_out = cfg["num_classes"]
        assert out.shape == (batch, n_out, s, s) and y.shape == (batch, s, s)
    else:
        n_out = cfg["num_classes"]
        assert out.shape == (batch, n_out) and y.shape == (batch,)
    assert 0 <= int(y.min()) and int(y.max()) < n_out
    loss = fam.loss_fn(out, y)
    assert loss.dim() == 0 and math.isfinite(loss.item())
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname


@pytest.mark.parametrize("case", [c for c in SMALL_CONFIGS if not c[1]], ids=_id)
def test_build_is_reproducible_under_a_seed(case: tuple[str, dict[str, Any]]) -> None:
    family, overrides = case
    fam = get_family(family)
    cfg = fam.resolve(overrides)
    torch.manual_seed(0)
    a = fam.build_model(cfg).state_dict()
    torch.manual_seed(0)
    b = fam.build_model(cfg).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    torch.manual_seed(1)
    c = fam.build_model(cfg).state_dict()
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point() and a[k].numel() > 1)


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_example_data_is_deterministic(name: str) -> None:
    fam = get_family(name)
    cfg = fam.resolve({})
    torch.manual_seed(123)  # the global RNG must not matter
    x1, y1 = fam.example_inputs(cfg, 4), fam.example_targets(cfg, 4)
    torch.manual_seed(456)
    x2, y2 = fam.example_inputs(cfg, 4), fam.example_targets(cfg, 4)
    x1, x2 = (x if isinstance(x, tuple) else (x,) for x in (x1, x2))
    assert len(x1) == len(x2) and all(torch.equal(a, b) for a, b in zip(x1, x2)) and torch.equal(y1, y2)
    x3 = fam.example_inputs(cfg, 3)
    assert all(a.shape[0] == 3 for a in (x3 if isinstance(x3, tuple) else (x3,)))
    assert fam.example_targets(cfg, 3).shape[0] == 3


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_load_zoo_workload_runs_a_loss(name: str) -> None:
    fam = get_family(name)
    small = dict(next(ov for f, ov in SMALL_CONFIGS[::-1] if f == name))
    wl = load_zoo_workload(name, {k: str(v) for k, v in small.items()})
    assert isinstance(wl, Workload)
    cfg = fam.resolve(small)
    assert wl.name == fam.config_name(cfg) and wl.extra["config"] == cfg
    assert wl.batch_sizes == fam.default_batch_sizes and wl.description == fam.description
    assert wl.source.startswith(f"zoo:{name}")
    torch.manual_seed(0)
    model = wl.build_model()
    loss = wl.loss(model(*wl.inputs(2)), wl.targets(2))
    assert math.isfinite(loss.item())
    assert wl.ref.load().name == wl.name


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_input_pipeline_feeds_the_model_like_its_example_inputs(name: str) -> None:
    """make_dataset + preprocess through a real DataLoader give batches of the example inputs' shape and dtype,
    targets the loss accepts, and deterministic raw items."""
    small = dict(next(ov for f, ov in SMALL_CONFIGS[::-1] if f == name))
    wl = load_zoo_workload(name, small)
    assert wl.make_dataset is not None and wl.preprocess is not None
    ds = wl.make_dataset()
    assert len(ds) >= 64 and ds[5] == wl.make_dataset()[5]  # raw items are reproducible per index
    from perfpredict.profile.pipeline_worker import Preprocessed, forward_args

    loader = torch.utils.data.DataLoader(Preprocessed(ds, wl.preprocess), batch_size=4, num_workers=0)
    x, y = next(iter(loader))
    args, ex = forward_args(x, isinstance(wl.example_inputs(4), tuple)), wl.inputs(4)
    assert len(args) == len(ex)
    assert all(a.shape == e.shape and a.dtype == e.dtype for a, e in zip(args, ex))
    torch.manual_seed(0)
    loss = wl.loss(wl.build_model()(*args), y)
    assert math.isfinite(loss.item())


# -- the speech family: CTC feasibility and its input pipeline ---------------------------------------------

def test_speech_requires_enough_output_frames_for_ctc() -> None:
    fam = get_family("speech")
    cfg = fam.resolve({"frames": 65, "target_len": 16})  # ceil(65 / 2) = 33 = 2 x 16 + 1 output frames: enough
    with pytest.raises(UsageError, match="CTC"):
        fam.resolve({"frames": 64, "target_len": 16})
    # at the limit, even the hardest transcript (one label repeated: blanks needed in between) has a finite loss
    torch.manual_seed(0)
    model = fam.build_model(cfg)
    y = torch.full((2, 16), 3, dtype=torch.long)
    loss = fam.loss_fn(model(fam.example_inputs(cfg, 2)), y)
    assert math.isfinite(loss.item())


def test_speech_pipeline_log_mel_and_labels() -> None:
    from perfpredict.workload.zoo.pipelines import (
        HOP_LENGTH,
        N_FFT,
        SAMPLE_RATE,
        WIN_LENGTH,
        SpeechPreprocess,
        SyntheticUtterances,
        mel_filterbank,
    )

    n_mels = 40
    fb = mel_filterbank(n_mels)
    assert fb.shape == (n_mels, N_FFT // 2 + 1) and float(fb.min()) >= 0.0 and float(fb.max()) <= 1.0
    peaks = fb.argmax(dim=1)
    assert (peaks[1:] >= peaks[:-1]).all()  # bands rise in frequency
    # a 1 kHz tone lands in the band whose centre is nearest 1 kHz (HTK mel: 2595 log10(1 + f / 700))
    t = torch.arange(SAMPLE_RATE) / SAMPLE_RATE
    spec = torch.stft(torch.sin(2 * torch.pi * 1000.0 * t), N_FFT, HOP_LENGTH, WIN_LENGTH,
                      torch.hann_window(WIN_LENGTH), return_complex=True).abs().square()
    band = int((fb @ spec).mean(dim=1).argmax())
    mel_max = 2595.0 * math.log10(1.0 + SAMPLE_RATE / 2 / 700.0)
    centres = [700.0 * (10 ** (mel_max * (k + 1) / (n_mels + 1) / 2595.0) - 1.0) for k in range(n_mels)]
    assert band == min(range(n_mels), key=lambda k: abs(centres[k] - 1000.0))

    ds = SyntheticUtterances(frames=50, min_chars=30)
    raw, text = ds[3]
    assert len(raw) == 50 * HOP_LENGTH * 2 and len(text) >= 30  # int16 samples of 0.5 s; a long enough text
    prep = SpeechPreprocess(n_mels, 50, num_classes=29, target_len=30)
    x, y = prep((raw, text))
    assert x.shape == (1, n_mels, 50) and x.dtype == torch.float32 and torch.isfinite(x).all()
    assert y.shape == (30,) and y.dtype == torch.int64 and 1 <= int(y.min()) and int(y.max()) <= 28
    assert prep.labels(b"ab c'").tolist() == [2, 3, 28, 4, 1]  # DeepSpeech2's "_'abc...z " order, 0 = blank
    assert SpeechPreprocess(n_mels, 50, num_classes=3, target_len=5).labels(b"ab c'").tolist() == [2, 1, 2, 2, 1]


# -- the dlrm family: interaction, multi-hot lookups, click-log pipeline ----------------------------------

def test_dlrm_forward_matches_a_reference_computation() -> None:
    """Bottom MLP, summed multi-hot lookups, lower-triangle dot products and top MLP, written out by hand."""
    fam = get_family("dlrm")
    cfg = fam.resolve({"num_dense": 5, "num_tables": 3, "rows_per_table": 20, "emb_dim": 4, "lookups": 2,
                       "bottom_mlp": "8", "top_mlp": "6"})
    torch.manual_seed(0)
    model = fam.build_model(cfg).eval()
    dense, sparse = fam.example_inputs(cfg, 3)
    bl = [m for m in model.bottom if isinstance(m, nn.Linear)]
    tl = [m for m in model.top if isinstance(m, nn.Linear)]
    x = torch.relu(bl[1](torch.relu(bl[0](dense))))  # ReLU after every bottom layer, the last included
    vecs = [x] + [emb.weight[sparse[:, t, 0]] + emb.weight[sparse[:, t, 1]] for t, emb in enumerate(model.embeddings)]
    pairs = [(vecs[i] * vecs[j]).sum(1) for i in range(len(vecs)) for j in range(i)]  # i > j: no self-pairs
    assert len(pairs) == 4 * 3 // 2
    expected = tl[1](torch.relu(tl[0](torch.cat([x, torch.stack(pairs, 1)], 1))))  # no ReLU on the logit
    with torch.no_grad():
        assert torch.allclose(model(dense, sparse), expected, atol=1e-6)


def test_dlrm_grid_spans_gigabyte_tables_without_the_cpu_paths_building_them() -> None:
    fam = get_family("dlrm")
    sizes = [4 * fam.closed_form_params(fam.resolve(ov)) for ov in fam.grid()]
    assert max(sizes) <= 3.5e9  # params + dense gradients + SGD momentum fit one GPU easily
    assert sum(s >= 3e9 for s in sizes) >= 3 and min(sizes) <= 1e6
    assert 4 * fam.closed_form_params(fam.resolve({})) <= 1e6  # the default every CPU test builds
    assert all(4 * fam.closed_form_params(fam.resolve(ov)) <= 1e6 for f, ov in SMALL_CONFIGS if f == "dlrm")
    assert {ov.get("lookups", 1) > 1 for ov in fam.grid()} == {True, False}  # one-hot and multi-hot


def test_dlrm_click_log_pipeline_parses_criteo_rows() -> None:
    from perfpredict.workload.zoo.pipelines import ClickLogRows, click_log_preprocess

    row = b"1\t3\t\t-2\t0\t" + b"\t".join([b"0000000a", b"", b"ffffffff"])
    (dense, sparse), label = click_log_preprocess(row, 4, 3, 1, rows=7)
    assert torch.allclose(dense, torch.log1p(torch.tensor([3.0, 0.0, 0.0, 0.0])))  # missing and negative: 0
    assert sparse.tolist() == [10 % 7, 0, 0xFFFFFFFF % 7] and sparse.dtype == torch.int64  # missing id: 0
    assert label.tolist() == [1.0] and label.dtype == torch.float32

    ds = ClickLogRows(num_dense=13, num_tables=26, lookups=3)
    fields = ds[7].split(b"\t")
    assert len(fields) == 1 + 13 + 26 and fields[0] in (b"0", b"1")
    assert all(len(v.split(b",")) == 3 for v in fields[14:] if v)  # multi-hot: 3 hashes per present feature
    (dense, sparse), label = click_log_preprocess(ds[7], 13, 26, 3, rows=1000)
    assert dense.shape == (13,) and bool((dense >= 0).all()) and sparse.shape == (26, 3)
    assert 0 <= int(sparse.min()) and int(sparse.max()) < 1000
    labels = [int(ClickLogRows(1, 1, 1)[i].split(b"\t")[0]) for i in range(400)]
    assert 0.15 < sum(labels) / len(labels) < 0.35  # a Criteo-like click-through rate


def test_pipeline_forward_args_unpack_collated_tuples() -> None:
    from perfpredict.profile.pipeline_worker import forward_args

    a, b = torch.zeros(2), torch.ones(2)
    # default_collate turns a tuple of forward arguments into a list
    batch = torch.utils.data.default_collate([((a, b), 0), ((a, b), 1)])
    assert isinstance(batch[0], list)
    assert len(forward_args(batch[0], multi=True)) == 2
    one = forward_args(batch[0], multi=False)  # a model that takes one list
    assert len(one) == 1 and one[0] is batch[0]
    two = forward_args((a, b), multi=False)  # an explicit tuple is always the arguments
    assert len(two) == 2 and two[0] is a and two[1] is b
    assert len(forward_args(a, multi=False)) == 1
