"""A 1-layer unidirectional ReLU RNN over 200 frames of 80 features, sequence-first, classifying the last step."""
import torch
from torch import nn


class Clf(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(80, 512, nonlinearity="relu")
        self.head = nn.Linear(512, 10)

    def forward(self, x):
        h, _ = self.rnn(x)
        return self.head(h[-1])


def build_model() -> nn.Module:
    return Clf()


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(200, batch_size, 80)
