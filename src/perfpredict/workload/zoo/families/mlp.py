"""Multi-layer perceptrons (Rumelhart, Hinton & Williams 1986): ``depth`` hidden Linear+ReLU layers of
``width`` units, then a linear classifier. Inputs are float32 feature vectors ``[B, input_dim]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from perfpredict.workload.zoo.base import ZooFamily, ZooParam, generator


def build_mlp(input_dim: int, depth: int, width: int, num_classes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    in_dim = input_dim
    for _ in range(depth):
        layers += [nn.Linear(in_dim, width), nn.ReLU(inplace=True)]
        in_dim = width
    layers.append(nn.Linear(in_dim, num_classes))
    return nn.Sequential(*layers)


class MLPFamily(ZooFamily):
    """Fully connected ReLU network on flat feature vectors."""

    name = "mlp"
    description = "Multi-layer perceptron: depth x (Linear + ReLU) then a linear classifier"
    task = "tabular"
    params = (
        ZooParam("input_dim", 784, "input features (784 = a flattened 28x28 image)", minimum=1),
        ZooParam("depth", 3, "hidden Linear+ReLU layers (0 = a single linear classifier)", minimum=0),
        ZooParam("width", 512, "units per hidden layer", minimum=1),
        ZooParam("num_classes", 10, "classifier outputs", minimum=2),
    )
    default_batch_sizes = (16, 32, 64, 128, 256)

    def grid(self) -> list[dict[str, Any]]:
        return [
            {"depth": 1, "width": 128},
            {"depth": 2, "width": 256},
            {},  # the default: 3 x 512 on 784 features
            {"depth": 3, "width": 1024},
            {"depth": 6, "width": 512},
            {"depth": 4, "width": 2048},
            {"depth": 8, "width": 1024},
            {"depth": 4, "width": 4096},
            {"input_dim": 3072, "depth": 3, "width": 1024},
            {"input_dim": 3072, "depth": 4, "width": 4096, "num_classes": 100},
            {"input_dim": 128, "depth": 5, "width": 256, "num_classes": 2},
            {"input_dim": 8192, "depth": 3, "width": 8192, "num_classes": 1000},
        ]

    def build_model(self, cfg: Mapping[str, Any]) -> nn.Module:
        return build_mlp(cfg["input_dim"], cfg["depth"], cfg["width"], cfg["num_classes"])

    def example_inputs(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        return torch.randn(batch_size, cfg["input_dim"], generator=generator(0))

    def example_targets(self, cfg: Mapping[str, Any], batch_size: int) -> torch.Tensor:
        return torch.randint(0, cfg["num_classes"], (batch_size,), generator=generator(1))

    def _layers(self, cfg: Mapping[str, Any]) -> list[tuple[int, int, int]]:
        """``(in, out, how many)`` for the Linear layers: the hidden ones as one entry, not one per layer
        (resolve() counts the parameters to refuse a huge model, and depth=1e8 listed every layer first)."""
        d, w, n, nc = cfg["input_dim"], cfg["width"], cfg["depth"], cfg["num_classes"]
        if n == 0:
            return [(d, nc, 1)]
        return [(d, w, 1), (w, w, n - 1), (w, nc, 1)]

    def closed_form_sample_tensors(self, cfg: Mapping[str, Any]) -> dict[str, int]:
        return {"input": cfg["input_dim"]}

    def closed_form_layers(self, cfg: Mapping[str, Any]) -> int:
        return cfg["depth"] + 1

    def closed_form_macs(self, cfg: Mapping[str, Any]) -> int:
        return sum(k * a * b for a, b, k in self._layers(cfg))

    def closed_form_params(self, cfg: Mapping[str, Any]) -> int:
        return sum(k * (a * b + b) for a, b, k in self._layers(cfg))
