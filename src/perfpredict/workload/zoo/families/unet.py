"""U-Nets for semantic segmentation (Ronneberger et al. 2015, "U-Net: Convolutional Networks for Biomedical
Image Segmentation"), in the common padded form with BatchNorm.

Encoder: ``depth`` levels of two 3x3 conv-BN-ReLU layers (``base_width * 2**i`` channels, padding 1, so sizes
are kept) each followed by a 2x2 max pool; a bottleneck of two more 3x3 convs at ``base_width * 2**depth``.
Decoder: per level a 2x2 stride-2 transposed conv halving the channels, concatenation with the encoder's skip,
two 3x3 conv-BN-ReLU layers. A final 1x1 conv gives per-pixel logits ``[B, num_classes, H, W]``; targets are
integer class maps ``[B, H, W]`` and the loss is per-pixel cross-entropy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from perfpredict.errors import UsageError
from perfpredict.workload.zoo.base import ImageClassifierFamily, ZooParam, generator


def double_conv(in_ch: int, out_ch: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_ch, out_ch, 3, 1, 1, bias=False), nn.BatchNorm2d(out_ch), nn.ReLU(inplace=True),
        nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False), nn.BatchNorm2d(out_ch), nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, base_width: int, depth: int, num_classes: int) -> None:
        super().__init__()
        widths = [base_width * 2 ** i for i in range(depth + 1)]
        self.down = nn.ModuleList()
        in_ch = 3
        for c in widths[:-1]:
            self.down.append(double_conv(in_ch, c))
            in_ch = c
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = double_conv(widths[-2], widths[-1])
        self.up = nn.ModuleList()
        self.up_conv = nn.ModuleList()
        for c in reversed(widths[:-1]):
            self.up.append(nn.ConvTranspose2d(2 * c, c, 2, stride=2))
            self.up_conv.append(double_conv(2 * c, c))
        self.head = nn.Conv2d(base_width, num_classes, 1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottleneck(x)
        for up, conv, skip in zip(self.up, self.up_conv, reversed(skips)):
            x = conv(torch.cat([skip, up(x)], dim=1))
        return self.head(x)


class UNetFamily(ImageClassifierFamily):
    """U-Net semantic segmentation (dense per-pixel prediction), small CIFAR-sized to the classic 64-wide."""

    name = "unet"
    description = "U-Net segmentation CNN (Ronneberger et al. 2015): conv encoder, transposed-conv decoder, skips"
    params = (
        ZooParam("image_size", 32, "input side length; must be divisible by 2**depth", minimum=4),
        ZooParam("base_width", 8, "channels of the first level; level i has base_width * 2**i (paper: 64)",
                 minimum=1),
        ZooParam("depth", 2, "down/up-sampling levels (paper: 4)", minimum=1),
        ZooParam("num_classes", 4, "segmentation classes per pixel", minimum=2),
    )
    default_batch_sizes = (4, 8, 16, 32, 64)

    def validate(self, cfg: Mapping[str, Any]) -> None:
        s, depth = cfg["image_size"], cfg["depth"]
        # compared by s's trailing zero bits, not s % 2**depth: depth=1e18 computed 2**depth (hung), depth=1e8
        # printed its 30-million-digit power (ValueError); a depth let through is below image_size's bit length
        if depth > (s & -s).bit_length() - 1:
            raise UsageError(f"unet image_size ({s}) must be divisible by 2**depth "
                             f"({2 ** depth if depth <= 64 else f'2**{depth}'})", step="zoo parameters")

    def grid(self) -> list[dict[str, Any]]:
        return [
            {},  # the default: 32x32, width 8, 2 levels
            {"base_width": 16, "depth": 3},
            {"base_width": 8, "depth": 4, "image_size": 64},
            {"base_width": 16, "depth": 4, "image_size": 64},
            {"base_width": 32, "depth": 3, "image_size": 64, "num_classes": 8},
            {"base_width": 16, "depth": 4, "image_size": 128},
            {"base_width": 32, "depth": 4, "image_size": 96, "num_classes": 8},
            {"base_width": 32, "depth": 4, "image_size": 128, "num_classes": 21},
            {"base_width": 64, "depth": 4, "image_size": 64, "num_classes": 21},
            {"base_width": 32, "depth": 5, "image_size": 256, "num_classes": 21},
            {"base_width": 64, "depth": 3, "image_size": 128, "num_classes": 21},
            {"base_width": 64, "depth": 4, "image_size": 128, "num_classes": 21},
            {"base_width": 64, "depth": 4, "image_size": 256, "num_classes": 2},      # the paper's U-Net
            {"base_width": 64, "depth": 4, "image_size": 192, "num_classes": 21},
        ]

    def build_model(self, cfg: Mapping[str, Any]) -> nn.Module:
        return UNet(cfg["base_width"], cfg["depth"], cfg["num_classes"])

    def example_targets(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        s = cfg["image_size"]
        return torch.randint(0, cfg["num_classes"], (batch_size, s, s), generator=generator(1))

    def loss_fn(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-pixel cross-entropy of logits ``[B, C, H, W]`` against class maps ``[B, H, W]``."""
        return F.cross_entropy(outputs, targets)

    def input_pipeline(self, cfg: Mapping[str, Any]) -> tuple[Any, Any] | None:
        from perfpredict.workload.zoo.pipelines import segmentation_pipeline

        return segmentation_pipeline(dict(cfg))

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        area = cfg["image_size"] ** 2
        return {**super().closed_form_sample_tensors(cfg),
                "last decoder level's concatenation": 2 * cfg["base_width"] * area,
                "per-pixel logits": cfg["num_classes"] * area}

    def closed_form_macs(self, cfg: Mapping[str, Any]) -> int:
        w, depth, s = cfg["base_width"], cfg["depth"], cfg["image_size"]
        widths = [w * 2 ** i for i in range(depth + 1)]

        def double(a: int, b: int, side: int) -> int:
            return side * side * 9 * (a * b + b * b)

        macs, in_ch = 0, 3
        for i, c in enumerate(widths[:-1]):
            macs += double(in_ch, c, s >> i)
            in_ch = c
        macs += double(widths[-2], widths[-1], s >> depth)
        for i in reversed(range(depth)):
            c, side = widths[i], s >> i
            # transposed 2x2 stride 2: every input element (2c channels, side/2 squared) scatters into c x 2 x 2
            macs += (side // 2) ** 2 * 2 * c * c * 4
            macs += double(2 * c, c, side)
        return macs + s * s * w * cfg["num_classes"]

    def closed_form_params(self, cfg: Mapping[str, Any]) -> int:
        w, depth, nc = cfg["base_width"], cfg["depth"], cfg["num_classes"]
        widths = [w * 2 ** i for i in range(depth + 1)]

        def double(a: int, b: int) -> int:
            return 9 * a * b + 9 * b * b + 2 * (2 * b)

        total, in_ch = 0, 3
        for c in widths[:-1]:
            total += double(in_ch, c)
            in_ch = c
        total += double(widths[-2], widths[-1])
        for c in widths[:-1]:
            total += 2 * c * c * 4 + c + double(2 * c, c)
        return total + w * nc + nc
