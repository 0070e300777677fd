"""The smallest valid model file: only the two required hooks.

perfpredict fills in the rest: the loss is the mean of the outputs, the optimizer is SGD, and the batch
sizes are the default sweep.
"""

import torch
from torch import nn


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 128)
