"""ConvNeXt (Liu et al. 2022, "A ConvNet for the 2020s").

Patchify stem (a ``stem_stride``x``stem_stride`` conv with the same stride, then LayerNorm; the paper's 4 at
ImageNet sizes, 2 or 1 for small images) → four stages of ``blocks`` ConvNeXt blocks with ``width``, ``2w``,
``4w``, ``8w`` channels, stages 2-4 preceded by a downsampling layer (LayerNorm, then a 2x2 conv with stride 2)
→ global average pool → LayerNorm → linear head. A block is a ``kernel``x``kernel`` depthwise conv →
LayerNorm over channels (channels-last) → Linear to ``mlp_ratio * C`` → GELU → Linear back to C → layer scale
(a learnable per-channel γ, initialised to 1e-6) → residual add. No stochastic depth (drop path 0), so the
network is deterministic in training mode. ConvNeXt-T is ``width 96, blocks 3-3-9-3``, ConvNeXt-S ``width
96, blocks 3-3-27-3``, ConvNeXt-B ``width 128, blocks 3-3-27-3`` (at ``stem_stride 4``, 224x224).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from perfpredict.errors import UsageError
from perfpredict.workload.zoo.base import ImageClassifierFamily, ZooParam

LAYER_SCALE_INIT = 1e-6
#: the downsampling layers halve the side three times
DOWNSAMPLES = 3
_BLOCKS_RE = re.compile(r"\d+-\d+-\d+-\d+")


def parse_blocks(blocks: str) -> tuple[int, int, int, int]:
    """``"3-3-9-3"`` → ``(3, 3, 9, 3)``; raises UsageError unless it is four positive integers."""
    if not _BLOCKS_RE.fullmatch(blocks):
        raise UsageError(f"convnext blocks must be four dash-separated counts like 3-3-9-3, got {blocks!r}",
                         step="zoo parameters")
    counts = tuple(int(b) for b in blocks.split("-"))
    if min(counts) < 1:
        raise UsageError(f"convnext blocks must all be >= 1, got {blocks!r}", step="zoo parameters")
    return counts  # type: ignore[return-value]


def stage_sides(image_size: int, stem_stride: int) -> list[int]:
    """Feature-map side length of each of the four stages (stride-s conv with kernel s, no padding: floor)."""
    s = image_size // stem_stride
    sides = [s]
    for _ in range(DOWNSAMPLES):
        s //= 2
        sides.append(s)
    return sides


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an NCHW tensor (the stem's and the downsampling layers' norm)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """Depthwise conv → LayerNorm → Linear (expand) → GELU → Linear (project) → layer scale, plus residual."""

    def __init__(self, dim: int, kernel: int, mlp_ratio: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, mlp_ratio * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(mlp_ratio * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), LAYER_SCALE_INIT))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)  # NCHW → NHWC: the norm and the linears act on channels
        y = self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        y = (self.gamma * y).permute(0, 3, 1, 2)
        return x + y


class ConvNeXt(nn.Module):
    def __init__(self, image_size: int, stem_stride: int, width: int, blocks: tuple[int, ...], kernel: int,
                 mlp_ratio: int, num_classes: int) -> None:
        super().__init__()
        dims = [width * 2 ** i for i in range(len(blocks))]
        self.stem = nn.Sequential(nn.Conv2d(3, dims[0], stem_stride, stride=stem_stride),
                                  LayerNorm2d(dims[0], eps=1e-6))
        self.downsample = nn.ModuleList(
            nn.Sequential(LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dims[i], 2, stride=2))
            for i in range(1, len(blocks))
        )
        self.stages = nn.ModuleList(
            nn.Sequential(*(ConvNeXtBlock(d, kernel, mlp_ratio) for _ in range(n))) for d, n in zip(dims, blocks)
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages[0](self.stem(x))
        for down, stage in zip(self.downsample, self.stages[1:]):
            x = stage(down(x))
        return self.head(self.norm(torch.flatten(self.pool(x), 1)))


class ConvNeXtFamily(ImageClassifierFamily):
    """ConvNeXt image classifiers, from a CIFAR-sized toy up to ConvNeXt-T and ConvNeXt-S at 224."""

    name = "convnext"
    description = ("ConvNeXt (Liu et al. 2022): patchify stem, depthwise 7x7 + inverted-bottleneck MLP blocks, "
                   "LayerNorm, GELU, layer scale")
    params = (
        ZooParam("image_size", 32, "input side length; at least 8 * stem_stride", minimum=8),
        ZooParam("stem_stride", 2, "patchify stem: conv with kernel = stride = this (paper: 4 at 224; 2 or 1 for "
                 "small images)", choices=(1, 2, 4)),
        ZooParam("width", 16, "channels of the first stage; stages use w, 2w, 4w, 8w (ConvNeXt-T/S: 96, B: 128)",
                 minimum=1),
        ZooParam("blocks", "1-1-2-1", "blocks per stage, dash-separated (ConvNeXt-T: 3-3-9-3, S/B: 3-3-27-3)"),
        ZooParam("kernel", 7, "depthwise conv kernel size (paper: 7)", choices=(3, 5, 7, 9, 11)),
        ZooParam("mlp_ratio", 4, "hidden width of each block's MLP as a multiple of its channels (paper: 4)",
                 minimum=1),
        ZooParam("num_classes", 10, "classifier outputs", minimum=2),
    )
    default_batch_sizes = (4, 8, 16, 32, 64)

    def validate(self, cfg: Mapping[str, Any]) -> None:
        parse_blocks(cfg["blocks"])
        if cfg["image_size"] < cfg["stem_stride"] * 2 ** DOWNSAMPLES:
            raise UsageError(f"convnext image_size ({cfg['image_size']}) must be at least "
                             f"{2 ** DOWNSAMPLES} * stem_stride ({cfg['stem_stride']})", step="zoo parameters")

    def canonical(self, cfg: dict[str, Any]) -> dict[str, Any]:
        return {**cfg, "blocks": "-".join(str(b) for b in parse_blocks(cfg["blocks"]))}

    def grid(self) -> list[dict[str, Any]]:
        tiny, small = "3-3-9-3", "3-3-27-3"
        imagenet = {"image_size": 224, "stem_stride": 4, "num_classes": 1000}
        return [
            {},                                                                         # 32², w16, 1-1-2-1
            {"width": 32, "blocks": "2-2-2-2"},
            {"width": 48, "blocks": "2-2-6-2", "kernel": 5},
            {"width": 64, "blocks": tiny, "num_classes": 100},
            {"width": 96, "blocks": tiny, "stem_stride": 1, "num_classes": 100},       # 32² feature map
            {"image_size": 64, "width": 64, "blocks": "2-2-6-2", "num_classes": 200},
            {"image_size": 64, "width": 96, "blocks": tiny, "mlp_ratio": 2, "num_classes": 200},
            {"image_size": 96, "width": 64, "blocks": tiny, "stem_stride": 4, "kernel": 3, "num_classes": 100},
            {**imagenet, "width": 48, "blocks": "2-2-6-2"},
            {**imagenet, "width": 64, "blocks": tiny},
            {**imagenet, "image_size": 128, "width": 96, "blocks": tiny},
            {**imagenet, "image_size": 160, "width": 96, "blocks": small, "kernel": 11},
            {**imagenet, "width": 96, "blocks": tiny},                                   # ConvNeXt-T
            {**imagenet, "width": 96, "blocks": small},                                  # ConvNeXt-S
        ]

    def build_model(self, cfg: Mapping[str, Any]) -> nn.Module:
        return ConvNeXt(cfg["image_size"], cfg["stem_stride"], cfg["width"], parse_blocks(cfg["blocks"]),
                        cfg["kernel"], cfg["mlp_ratio"], cfg["num_classes"])

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        area = stage_sides(cfg["image_size"], cfg["stem_stride"])[0] ** 2
        return {**super().closed_form_sample_tensors(cfg), "stem output": cfg["width"] * area,
                "first stage's MLP hidden layer": cfg["mlp_ratio"] * cfg["width"] * area}

    def closed_form_layers(self, cfg: Mapping[str, Any]) -> int:
        return sum(parse_blocks(cfg["blocks"]))

    def closed_form_macs(self, cfg: Mapping[str, Any]) -> int:
        w, st, k, r = cfg["width"], cfg["stem_stride"], cfg["kernel"], cfg["mlp_ratio"]
        sides = stage_sides(cfg["image_size"], st)
        macs = w * sides[0] ** 2 * 3 * st * st                           # patchify stem
        for i, n in enumerate(parse_blocks(cfg["blocks"])):
            d, area = w * 2 ** i, sides[i] ** 2
            if i > 0:
                macs += d * area * (d // 2) * 4                          # 2x2 stride-2 downsampling conv
            macs += n * (d * area * k * k + 2 * r * d * d * area)        # depthwise conv + the two linears
        return macs + 8 * w * cfg["num_classes"]

    def closed_form_params(self, cfg: Mapping[str, Any]) -> int:
        w, st, k, r, nc = cfg["width"], cfg["stem_stride"], cfg["kernel"], cfg["mlp_ratio"], cfg["num_classes"]
        total = (3 * st * st * w + w) + 2 * w                            # stem conv + LayerNorm
        for i, n in enumerate(parse_blocks(cfg["blocks"])):
            d = w * 2 ** i
            if i > 0:
                total += 2 * (d // 2) + (4 * (d // 2) * d + d)           # LayerNorm + 2x2 conv
            dwconv = d * k * k + d
            mlp = (d * r * d + r * d) + (r * d * d + d)
            total += n * (dwconv + 2 * d + mlp + d)                      # + block LayerNorm and layer scale γ
        return total + 2 * 8 * w + 8 * w * nc + nc                      # head LayerNorm + linear
