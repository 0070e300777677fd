"""ResNet-style residual networks (He et al. 2016, "Deep Residual Learning for Image Recognition").

Depths 10/18/34 use basic blocks (two 3x3 convs), depths 50/101/152 use bottleneck blocks (1x1 → 3x3 → 1x1,
expansion 4, stride on the 3x3 as in the widely used "v1.5" variant). Four stages of ``width``, ``2*width``,
``4*width`` and ``8*width`` planes; stages 2-4 halve the resolution in their first block, whose shortcut is a
strided 1x1 conv + BatchNorm whenever shape changes. Small images (``image_size <= 64``) get the CIFAR stem (one
3x3 stride-1 conv, no max pool); larger ones the ImageNet stem (7x7 stride-2 conv, 3x3 stride-2 max pool).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from perfpredict.workload.zoo.base import ImageClassifierFamily, ZooParam

#: depth -> (block kind, blocks per stage)
LAYOUTS: dict[int, tuple[str, tuple[int, int, int, int]]] = {
    10: ("basic", (1, 1, 1, 1)),
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}
#: images up to this side length use the CIFAR stem
CIFAR_STEM_MAX = 64


def conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output side length of a convolution / pooling window."""
    return (size + 2 * padding - kernel) // stride + 1


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity (or 1x1 projection) shortcut."""

    expansion = 1

    def __init__(self, in_ch: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(in_ch, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce → 3x3 (strided) → 1x1 expand (x4), with an identity (or 1x1 projection) shortcut."""

    expansion = 4

    def __init__(self, in_ch: int, planes: int, stride: int) -> None:
        super().__init__()
        out_ch = planes * self.expansion
        self.conv1 = nn.Conv2d(in_ch, planes, 1, 1, 0, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_ch, 1, 1, 0, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(in_ch, out_ch, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


def _shortcut(in_ch: int, out_ch: int, stride: int) -> nn.Module | None:
    if stride == 1 and in_ch == out_ch:
        return None
    return nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, 0, bias=False), nn.BatchNorm2d(out_ch))


class ResNet(nn.Module):
    """Stem → four residual stages → global average pool → fully connected classifier."""

    def __init__(self, depth: int, width: int, image_size: int, num_classes: int) -> None:
        super().__init__()
        kind, counts = LAYOUTS[depth]
        block = BasicBlock if kind == "basic" else Bottleneck
        if image_size <= CIFAR_STEM_MAX:
            self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width),
                                      nn.ReLU(inplace=True))
        else:
            self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                      nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        stages = []
        in_ch = width
        for i, n in enumerate(counts):
            planes = width * 2 ** i
            blocks = []
            for b in range(n):
                stride = 2 if i > 0 and b == 0 else 1
                blocks.append(block(in_ch, planes, stride))
                in_ch = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


class ResNetFamily(ImageClassifierFamily):
    """ResNet-10/18/34 (basic blocks) and ResNet-50/101/152 (bottlenecks) with a base-width knob."""

    name = "resnet"
    description = "ResNet-style CNN (He et al. 2016): basic blocks for depth<=34, bottlenecks for 50+"
    params = (
        ZooParam("depth", 18, "number of weighted layers: 10/18/34 basic blocks, 50/101/152 bottlenecks",
                 choices=tuple(LAYOUTS)),
        ZooParam("width", 16, "base channels of the first stage; stages use width, 2w, 4w, 8w (paper: 64)",
                 minimum=1),
        ZooParam("image_size", 32, "input side length; <=64 uses the CIFAR stem, larger the ImageNet stem",
                 minimum=8),
        ZooParam("num_classes", 10, "classifier outputs", minimum=2),
    )
    default_batch_sizes = (4, 8, 16, 32, 64)

    def grid(self) -> list[dict[str, Any]]:
        cifar = [
            {"depth": 10, "width": 16},
            {"depth": 18, "width": 16},
            {"depth": 34, "width": 16},
            {"depth": 50, "width": 16},
            {"depth": 18, "width": 32},
            {"depth": 18, "width": 64},
            {"depth": 34, "width": 64},
            {"depth": 50, "width": 64, "num_classes": 100},
            {"depth": 18, "width": 64, "image_size": 64, "num_classes": 200},
        ]
        imagenet = [
            {"depth": d, "width": 64, "image_size": 224, "num_classes": 1000} for d in (18, 34, 50, 101, 152)
        ]
        imagenet += [
            {"depth": 50, "width": 64, "image_size": 128, "num_classes": 1000},
            {"depth": 18, "width": 32, "image_size": 224, "num_classes": 1000},
        ]
        return cifar + imagenet

    def build_model(self, cfg: Mapping[str, Any]) -> nn.Module:
        return ResNet(cfg["depth"], cfg["width"], cfg["image_size"], cfg["num_classes"])

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        kind, _ = LAYOUTS[cfg["depth"]]
        w, s = cfg["width"], cfg["image_size"]
        if s > CIFAR_STEM_MAX:
            s = conv_out(s, 7, 2, 3)
        stage1 = s if cfg["image_size"] <= CIFAR_STEM_MAX else conv_out(s, 3, 2, 1)
        return {**super().closed_form_sample_tensors(cfg), "stem output": w * s * s,
                "first stage's output": (4 if kind == "bottleneck" else 1) * w * stage1 * stage1}

    def closed_form_macs(self, cfg: Mapping[str, Any]) -> int:
        kind, counts = LAYOUTS[cfg["depth"]]
        w, s = cfg["width"], cfg["image_size"]
        if s <= CIFAR_STEM_MAX:
            macs = w * s * s * 3 * 3 * 3
        else:
            s = conv_out(s, 7, 2, 3)
            macs = w * s * s * 3 * 7 * 7
            s = conv_out(s, 3, 2, 1)
        in_ch = w
        for i, n in enumerate(counts):
            planes = w * 2 ** i
            for b in range(n):
                stride = 2 if i > 0 and b == 0 else 1
                so = conv_out(s, 3, stride, 1)  # same as a strided 1x1 with no padding
                if kind == "basic":
                    out_ch = planes
                    macs += planes * so * so * in_ch * 9 + planes * so * so * planes * 9
                else:
                    out_ch = 4 * planes
                    macs += planes * s * s * in_ch + planes * so * so * planes * 9 + out_ch * so * so * planes
                if stride != 1 or in_ch != out_ch:
                    macs += out_ch * so * so * in_ch
                in_ch, s = out_ch, so
        return macs + in_ch * cfg["num_classes"]

    def closed_form_params(self, cfg: Mapping[str, Any]) -> int:
        kind, counts = LAYOUTS[cfg["depth"]]
        w = cfg["width"]
        k = 3 if cfg["image_size"] <= CIFAR_STEM_MAX else 7
        total = 3 * w * k * k + 2 * w
        in_ch = w
        for i, n in enumerate(counts):
            planes = w * 2 ** i
            for b in range(n):
                stride = 2 if i > 0 and b == 0 else 1
                if kind == "basic":
                    out_ch = planes
                    total += 9 * in_ch * planes + 9 * planes * planes + 2 * (2 * planes)
                else:
                    out_ch = 4 * planes
                    total += in_ch * planes + 9 * planes * planes + planes * out_ch + 2 * (2 * planes + out_ch)
                if stride != 1 or in_ch != out_ch:
                    total += in_ch * out_ch + 2 * out_ch
                in_ch = out_ch
        return total + in_ch * cfg["num_classes"] + cfg["num_classes"]
