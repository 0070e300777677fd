"""MobileNetV2-style networks (Sandler et al. 2018, "MobileNetV2: Inverted Residuals and Linear Bottlenecks").

Stem 3x3 conv (stride 2; stride 1 for ``image_size <= 64``, the usual CIFAR adaptation) → the paper's stage
table of inverted residual blocks (1x1 expand by t → 3x3 depthwise, groups = channels → 1x1 linear project,
residual when stride 1 and shapes match) → 1x1 conv to 1280 channels → global average pool → dropout →
linear. BatchNorm after every conv, ReLU6 after all but the projections. ``width_mult`` scales channel
counts (rounded to multiples of 8 as in the paper's reference code); ``depth_mult`` scales each stage's
repeat count (ceil, at least 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from perfpredict.workload.zoo.base import ImageClassifierFamily, ZooParam

#: (expansion t, output channels c, repeats n, first stride s) per stage, from the paper's Table 2
STAGES: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
STEM_CHANNELS = 32
LAST_CHANNELS = 1280
CIFAR_STEM_MAX = 64
DROPOUT = 0.2


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round ``value`` to the nearest multiple of ``divisor`` (at least ``divisor``), never losing >10%."""
    out = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if out < 0.9 * value:
        out += divisor
    return out


def conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output side length of a convolution window."""
    return (size + 2 * padding - kernel) // stride + 1


def stage_repeats(n: int, depth_mult: float) -> int:
    """How many blocks a stage of ``n`` in the base network has at ``depth_mult`` (ceil, at least 1)."""
    return max(1, math.ceil(n * depth_mult))


def block_plan(width_mult: float, depth_mult: float) -> list[tuple[int, int, int, int]]:
    """``(in_channels, out_channels, stride, expansion)`` for every inverted residual block, in order."""
    plan = []
    in_ch = make_divisible(STEM_CHANNELS * width_mult)
    for t, c, n, s in STAGES:
        out_ch = make_divisible(c * width_mult)
        for i in range(stage_repeats(n, depth_mult)):
            plan.append((in_ch, out_ch, s if i == 0 else 1, t))
            in_ch = out_ch
    return plan


def last_channels(width_mult: float) -> int:
    return make_divisible(LAST_CHANNELS * max(1.0, width_mult))


def _conv_bn(in_ch: int, out_ch: int, kernel: int, stride: int, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Conv2d(in_ch, out_ch, kernel, stride, kernel // 2, groups=groups, bias=False),
                               nn.BatchNorm2d(out_ch)]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """Expand (1x1, unless t == 1) → depthwise 3x3 → linear 1x1 projection, with a residual when possible."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = in_ch * expansion
        layers: list[nn.Module] = []
        if expansion != 1:
            layers.append(_conv_bn(in_ch, hidden, 1, 1))
        layers.append(_conv_bn(hidden, hidden, 3, stride, groups=hidden))
        layers.append(_conv_bn(hidden, out_ch, 1, 1, act=False))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and in_ch == out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        return x + out if self.residual else out


class MobileNetV2(nn.Module):
    def __init__(self, width_mult: float, depth_mult: float, image_size: int, num_classes: int) -> None:
        super().__init__()
        stem_stride = 1 if image_size <= CIFAR_STEM_MAX else 2
        stem_ch = make_divisible(STEM_CHANNELS * width_mult)
        plan = block_plan(width_mult, depth_mult)
        last = last_channels(width_mult)
        self.features = nn.Sequential(
            _conv_bn(3, stem_ch, 3, stem_stride),
            *(InvertedResidual(i, o, s, t) for i, o, s, t in plan),
            _conv_bn(plan[-1][1], last, 1, 1),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(DROPOUT), nn.Linear(last, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


class MobileNetV2Family(ImageClassifierFamily):
    """MobileNetV2 with width and depth multipliers."""

    name = "mobilenetv2"
    description = "MobileNetV2-style CNN (Sandler et al. 2018): inverted residuals, depthwise 3x3 convs"
    params = (
        ZooParam("width_mult", 0.5, "channel multiplier; channels rounded to multiples of 8 (paper: 0.35-1.4)",
                 minimum=0.05),
        ZooParam("depth_mult", 1.0, "multiplier on each stage's block count (ceil, at least 1)", minimum=0.05),
        ZooParam("image_size", 32, "input side length; <=64 uses a stride-1 stem", minimum=8),
        ZooParam("num_classes", 10, "classifier outputs", minimum=2),
    )
    default_batch_sizes = (4, 8, 16, 32, 64)

    def grid(self) -> list[dict[str, Any]]:
        cifar = [{"width_mult": w} for w in (0.35, 0.5, 0.75, 1.0)]
        cifar += [
            {"width_mult": 0.5, "depth_mult": 0.5},
            {"width_mult": 1.0, "depth_mult": 1.5},
            {"width_mult": 1.0, "num_classes": 100},
            {"width_mult": 1.0, "image_size": 64, "num_classes": 200},
        ]
        imagenet = [{"width_mult": w, "image_size": 224, "num_classes": 1000} for w in (0.35, 0.5, 0.75, 1.0, 1.4)]
        imagenet += [
            {"width_mult": 1.0, "image_size": s, "num_classes": 1000} for s in (96, 128, 160, 192)
        ]
        return cifar + imagenet

    def build_model(self, cfg: Mapping[str, Any]) -> nn.Module:
        return MobileNetV2(cfg["width_mult"], cfg["depth_mult"], cfg["image_size"], cfg["num_classes"])

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        s = cfg["image_size"]
        s = conv_out(s, 3, 1 if s <= CIFAR_STEM_MAX else 2, 1)
        return {**super().closed_form_sample_tensors(cfg),
                "stem output": make_divisible(STEM_CHANNELS * cfg["width_mult"]) * s * s}

    def closed_form_layers(self, cfg: Mapping[str, Any]) -> int:
        """Inverted-residual blocks, stage by stage as block_plan makes them (counted, not listed)."""
        return sum(stage_repeats(n, cfg["depth_mult"]) for _t, _c, n, _s in STAGES)

    def closed_form_macs(self, cfg: Mapping[str, Any]) -> int:
        wm, s = cfg["width_mult"], cfg["image_size"]
        stem_ch = make_divisible(STEM_CHANNELS * wm)
        s = conv_out(s, 3, 1 if s <= CIFAR_STEM_MAX else 2, 1)
        macs = stem_ch * s * s * 3 * 9
        for in_ch, out_ch, stride, t in block_plan(wm, cfg["depth_mult"]):
            hidden = in_ch * t
            if t != 1:
                macs += hidden * s * s * in_ch  # 1x1 expansion
            s = conv_out(s, 3, stride, 1)
            macs += hidden * s * s * 9  # depthwise: Cin/groups == 1
            macs += out_ch * s * s * hidden  # 1x1 projection
            in_ch = out_ch
        last = last_channels(wm)
        macs += last * s * s * in_ch
        return macs + last * cfg["num_classes"]

    def closed_form_params(self, cfg: Mapping[str, Any]) -> int:
        wm = cfg["width_mult"]
        stem_ch = make_divisible(STEM_CHANNELS * wm)
        total = stem_ch * 27 + 2 * stem_ch

        def block(in_ch: int, out_ch: int, t: int) -> int:
            hidden = in_ch * t
            return (hidden * in_ch + 2 * hidden if t != 1 else 0) + hidden * 9 + 2 * hidden + out_ch * hidden + 2 * out_ch

        # per stage, its first block and then its repeats as one product, not block by block (block_plan):
        # resolve() counts the parameters to refuse a huge model, and depth_mult=1e8 built a list of 1.7e9
        # blocks first (memory ran out)
        in_ch = stem_ch
        for t, c, n, _s in STAGES:
            out_ch = make_divisible(c * wm)
            total += block(in_ch, out_ch, t) + (stage_repeats(n, cfg["depth_mult"]) - 1) * block(out_ch, out_ch, t)
            in_ch = out_ch
        last = last_channels(wm)
        total += last * in_ch + 2 * last
        return total + last * cfg["num_classes"] + cfg["num_classes"]
