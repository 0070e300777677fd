"""A small CIFAR-style CNN classifier: the model `make demo` profiles.

It follows the perfpredict model.py convention (see README): the two required hooks, plus the optional
`example_targets`, `loss_fn`, `make_optimizer` and `BATCH_SIZES`.
"""

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 10
BATCH_SIZES = [8, 16, 32, 64, 128]


def build_model() -> nn.Module:
    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.MaxPool2d(2))

    return nn.Sequential(block(3, 16), block(16, 32), block(32, 64),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, NUM_CLASSES))


def example_inputs(batch_size: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(batch_size, 3, 32, 32, generator=g)


def example_targets(batch_size: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, NUM_CLASSES, (batch_size,), generator=g)


def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, targets)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4)
