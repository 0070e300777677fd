"""Vision Transformers (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words"; DeiT sizes from Touvron et
al. 2021).

Patch embedding (a ``patch``x``patch`` conv with stride ``patch``) → prepend a learnable class token → add a
learned position embedding → ``depth`` pre-norm encoder layers (``nn.TransformerEncoderLayer`` with
``norm_first=True``: multi-head self-attention and a GELU MLP of ``mlp_ratio * d_model``, dropout 0.1) → final
LayerNorm on the class token → linear head. Inputs are float images ``[B, 3, image_size, image_size]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from perfpredict.errors import UsageError
from perfpredict.workload.zoo.base import ImageClassifierFamily, ZooParam

DROPOUT = 0.1


class VisionTransformer(nn.Module):
    def __init__(self, image_size: int, patch: int, d_model: int, depth: int, heads: int, mlp_ratio: int,
                 num_classes: int) -> None:
        super().__init__()
        tokens = (image_size // patch) ** 2 + 1
        self.patch_embed = nn.Conv2d(3, d_model, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.positions = nn.Parameter(torch.empty(1, tokens, d_model))
        nn.init.normal_(self.positions, std=0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=mlp_ratio * d_model, dropout=DROPOUT,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)             # [B, patches, d]
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.positions
        x = self.encoder(x)
        return self.head(self.norm(x[:, 0]))


class ViTFamily(ImageClassifierFamily):
    """ViT image classifiers, from a CIFAR-sized toy up to ViT-Base/16 and ViT-Large-like at 224."""

    name = "vit"
    description = "Vision Transformer (Dosovitskiy et al. 2021): patch embedding + pre-norm encoder + cls head"
    params = (
        ZooParam("image_size", 32, "input side length; must be a multiple of patch", minimum=4),
        ZooParam("patch", 4, "patch side length (ViT-B/16: 16)", minimum=1),
        ZooParam("d_model", 64, "token width (ViT-B: 768)", minimum=1),
        ZooParam("depth", 2, "encoder layers (ViT-B: 12)", minimum=1),
        ZooParam("heads", 4, "attention heads; must divide d_model (ViT-B: 12)", minimum=1),
        ZooParam("mlp_ratio", 4, "MLP width as a multiple of d_model", minimum=1),
        ZooParam("num_classes", 10, "classifier outputs", minimum=2),
    )
    default_batch_sizes = (4, 8, 16, 32, 64)

    def validate(self, cfg: Mapping[str, Any]) -> None:
        if cfg["image_size"] % cfg["patch"]:
            raise UsageError(f"vit patch ({cfg['patch']}) must divide image_size ({cfg['image_size']})",
                             step="zoo parameters")
        if cfg["d_model"] % cfg["heads"]:
            raise UsageError(f"vit heads ({cfg['heads']}) must divide d_model ({cfg['d_model']})",
                             step="zoo parameters")

    def grid(self) -> list[dict[str, Any]]:
        imagenet = {"image_size": 224, "patch": 16, "num_classes": 1000}
        return [
            {},  # the default: 32/4, 2 x 64
            {"depth": 4, "d_model": 128, "heads": 4},
            {"depth": 6, "d_model": 192, "heads": 3},                                  # DeiT-Tiny width, CIFAR
            {"depth": 8, "d_model": 256, "heads": 8, "num_classes": 100},
            {"patch": 2, "depth": 4, "d_model": 128, "heads": 4},                     # 257 tokens
            {"image_size": 64, "patch": 8, "depth": 6, "d_model": 256, "heads": 8, "num_classes": 200},
            {"image_size": 64, "patch": 4, "depth": 6, "d_model": 384, "heads": 6, "num_classes": 200},
            {"image_size": 96, "patch": 8, "depth": 8, "d_model": 384, "heads": 6, "num_classes": 100},
            {**imagenet, "depth": 12, "d_model": 192, "heads": 3},                    # DeiT-Tiny
            {**imagenet, "depth": 12, "d_model": 384, "heads": 6},                    # DeiT-Small / ViT-S/16
            {**imagenet, "patch": 32, "depth": 12, "d_model": 768, "heads": 12},      # ViT-B/32
            {**imagenet, "image_size": 128, "depth": 12, "d_model": 768, "heads": 12},
            {**imagenet, "depth": 12, "d_model": 768, "heads": 12},                   # ViT-B/16
            {**imagenet, "depth": 24, "d_model": 1024, "heads": 16},                  # ViT-L/16
        ]

    def build_model(self, cfg: Mapping[str, Any]) -> nn.Module:
        return VisionTransformer(cfg["image_size"], cfg["patch"], cfg["d_model"], cfg["depth"], cfg["heads"],
                                 cfg["mlp_ratio"], cfg["num_classes"])

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        t = (cfg["image_size"] // cfg["patch"]) ** 2 + 1
        return {**super().closed_form_sample_tensors(cfg), "MLP hidden layer": t * cfg["mlp_ratio"] * cfg["d_model"],
                "attention scores": cfg["heads"] * t * t}    # heads x tokens², as the transformer family counts them

    def closed_form_layers(self, cfg: Mapping[str, Any]) -> int:
        return cfg["depth"]

    def closed_form_macs(self, cfg: Mapping[str, Any]) -> int:
        d, p = cfg["d_model"], cfg["patch"]
        patches = (cfg["image_size"] // p) ** 2
        t = patches + 1
        ffn = cfg["mlp_ratio"] * d
        embed = patches * d * 3 * p * p
        projections = 4 * t * d * d          # q, k, v and output projections
        attention = 2 * t * t * d            # Q K^T and attn · V, summed over heads
        feed_forward = 2 * t * d * ffn
        return embed + cfg["depth"] * (projections + attention + feed_forward) + d * cfg["num_classes"]

    def closed_form_params(self, cfg: Mapping[str, Any]) -> int:
        d, p, nc = cfg["d_model"], cfg["patch"], cfg["num_classes"]
        t = (cfg["image_size"] // p) ** 2 + 1
        ffn = cfg["mlp_ratio"] * d
        attention = (3 * d * d + 3 * d) + (d * d + d)
        feed_forward = (d * ffn + ffn) + (ffn * d + d)
        norms = 2 * (2 * d)
        per_layer = attention + feed_forward + norms
        embeddings = (3 * p * p * d + d) + d + t * d    # patch conv, class token, positions
        return embeddings + cfg["depth"] * per_layer + 2 * d + d * nc + nc
