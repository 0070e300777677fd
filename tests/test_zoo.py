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

FAMILY_NAMES = ["resnet", "vgg", "mobilenetv2", "transformer", "lstm", "mlp", "vit", "unet"]

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
]


def _id(case: tuple[str, dict[str, Any]]) -> str:
    fam, ov = case
    return fam + ("-" + "-".join(f"{k}{v}" for k, v in ov.items()) if ov else "-default")


def hooked_macs_per_sample(model: nn.Module, inputs: torch.Tensor) -> int:
    """Forward MACs counted from the shapes seen by forward hooks, independently of the closed forms."""
    batch = inputs.shape[0]
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
    try:
        model.train()  # keeps nn.TransformerEncoderLayer off its fused inference fast path
        with torch.no_grad():
            model(inputs)
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
    assert fam.description and fam.task in ("image", "language", "tabular")
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
    if name != "mlp":
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
    assert y.dtype == torch.int64
    if fam.task == "image":
        assert x.dtype == torch.float32 and x.shape == (batch, 3, cfg["image_size"], cfg["image_size"])
    elif fam.task == "language":
        assert x.dtype == torch.int64 and x.shape == (batch, cfg["seq_len"])
        assert 0 <= int(x.min()) and int(x.max()) < cfg["vocab"]

    assert hooked_macs_per_sample(model, x) == fam.closed_form_macs(cfg)

    model.train()
    out = model(x)
    if family == "lstm":
        assert out.shape == (batch, cfg["seq_len"], cfg["vocab"]) and y.shape == (batch, cfg["seq_len"])
        n_out = cfg["vocab"]
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
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert fam.example_inputs(cfg, 3).shape[0] == 3 and fam.example_targets(cfg, 3).shape[0] == 3


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
    (x,) = wl.inputs(2)
    loss = wl.loss(model(x), wl.targets(2))
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
    from perfpredict.profile.pipeline_worker import Preprocessed

    loader = torch.utils.data.DataLoader(Preprocessed(ds, wl.preprocess), batch_size=4, num_workers=0)
    x, y = next(iter(loader))
    (ex,) = wl.inputs(4)
    assert x.shape == ex.shape and x.dtype == ex.dtype
    torch.manual_seed(0)
    loss = wl.loss(wl.build_model()(x), y)
    assert math.isfinite(loss.item())
