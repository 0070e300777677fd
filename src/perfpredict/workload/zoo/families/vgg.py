"""VGG-style plain CNNs (Simonyan & Zisserman 2015, "Very Deep Convolutional Networks for Large-Scale Image
Recognition").

The standard configurations A/B/D/E (VGG-11/13/16/19): stacks of 3x3 stride-1 convs (with bias, padding 1),
each optionally followed by BatchNorm (Ioffe & Szegedy 2015), then ReLU; five 2x2 stride-2 max pools. The
classifier flattens the final ``image_size/32`` square map directly (no adaptive pool) into
Linear → ReLU → Dropout → Linear → ReLU → Dropout → Linear, as in the paper (hidden 4096 there).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from perfpredict.errors import UsageError
from perfpredict.workload.zoo.base import ImageClassifierFamily, ZooParam

#: depth -> the paper's channel list at width 64; "M" is a 2x2 max pool
CONFIGS: dict[int, tuple[int | str, ...]] = {
    11: (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    13: (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
    19: (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"),
}
DROPOUT = 0.5


def scaled_layers(depth: int, width: int) -> list[int | str]:
    """The configuration's layer list with every channel count scaled by ``width / 64``."""
    return [v if v == "M" else v * width // 64 for v in CONFIGS[depth]]


class VGG(nn.Module):
    """Conv feature extractor followed by a three-layer fully connected classifier."""

    def __init__(self, depth: int, width: int, batch_norm: bool, image_size: int, hidden: int,
                 num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        for v in scaled_layers(depth, width):
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
                continue
            layers.append(nn.Conv2d(in_ch, int(v), 3, 1, 1))
            if batch_norm:
                layers.append(nn.BatchNorm2d(int(v)))
            layers.append(nn.ReLU(inplace=True))
            in_ch = int(v)
        self.features = nn.Sequential(*layers)
        side = image_size // 32
        self.classifier = nn.Sequential(
            nn.Linear(in_ch * side * side, hidden), nn.ReLU(inplace=True), nn.Dropout(DROPOUT),
            nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Dropout(DROPOUT),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


class VGGFamily(ImageClassifierFamily):
    """VGG-11/13/16/19 with channel-width, BatchNorm and classifier-width knobs."""

    name = "vgg"
    description = "VGG-style CNN (Simonyan & Zisserman 2015), configs A/B/D/E, optional BatchNorm"
    params = (
        ZooParam("depth", 16, "weighted layers: 11/13/16/19 = the paper's configs A/B/D/E",
                 choices=tuple(CONFIGS)),
        ZooParam("width", 16, "first-stage channels; every stage scales by width/64 (paper: 64)", minimum=1),
        ZooParam("batch_norm", True, "BatchNorm after every conv"),
        ZooParam("image_size", 32, "input side length; must be divisible by 32 (five 2x2 pools)", minimum=32),
        ZooParam("hidden", 512, "width of the two hidden classifier layers (paper: 4096)", minimum=1),
        ZooParam("num_classes", 10, "classifier outputs", minimum=2),
    )
    default_batch_sizes = (8, 16, 32, 64, 128)

    def validate(self, cfg: Mapping[str, Any]) -> None:
        if cfg["image_size"] % 32:
            raise UsageError(f"vgg image_size must be divisible by 32, got {cfg['image_size']}",
                             step="zoo parameters")

    def grid(self) -> list[dict[str, Any]]:
        cifar = [{"depth": d, "width": 16} for d in (11, 13, 16, 19)]
        cifar += [
            {"depth": 11, "width": 32},
            {"depth": 16, "width": 32, "batch_norm": False},
            {"depth": 11, "width": 64},
            {"depth": 16, "width": 64},
            {"depth": 19, "width": 64, "num_classes": 100},
            {"depth": 16, "width": 64, "image_size": 64, "hidden": 1024, "num_classes": 200},
        ]
        imagenet = [
            {"depth": d, "width": 64, "image_size": 224, "hidden": 4096, "num_classes": 1000}
            for d in (11, 13, 16, 19)
        ]
        imagenet += [
            {"depth": 16, "width": 64, "batch_norm": False, "image_size": 224, "hidden": 4096, "num_classes": 1000},
            {"depth": 16, "width": 32, "image_size": 224, "hidden": 1024, "num_classes": 1000},
        ]
        return cifar + imagenet

    def build_model(self, cfg: Mapping[str, Any]) -> nn.Module:
        return VGG(cfg["depth"], cfg["width"], cfg["batch_norm"], cfg["image_size"], cfg["hidden"],
                   cfg["num_classes"])

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        first = int(scaled_layers(cfg["depth"], cfg["width"])[0])
        return {**super().closed_form_sample_tensors(cfg), "first conv's output": first * cfg["image_size"] ** 2}

    def closed_form_macs(self, cfg: Mapping[str, Any]) -> int:
        s, in_ch, macs = cfg["image_size"], 3, 0
        for v in scaled_layers(cfg["depth"], cfg["width"]):
            if v == "M":
                s //= 2
            else:
                macs += int(v) * s * s * in_ch * 9
                in_ch = int(v)
        h, nc = cfg["hidden"], cfg["num_classes"]
        return macs + in_ch * s * s * h + h * h + h * nc

    def closed_form_params(self, cfg: Mapping[str, Any]) -> int:
        in_ch, total = 3, 0
        bn = 2 if cfg["batch_norm"] else 0
        for v in scaled_layers(cfg["depth"], cfg["width"]):
            if v != "M":
                total += int(v) * in_ch * 9 + int(v) + bn * int(v)
                in_ch = int(v)
        side = cfg["image_size"] // 32
        h, nc = cfg["hidden"], cfg["num_classes"]
        return total + (in_ch * side * side * h + h) + (h * h + h) + (h * nc + nc)
