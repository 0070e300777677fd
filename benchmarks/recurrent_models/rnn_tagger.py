"""A 2-layer bidirectional tanh-RNN sequence tagger (not in the zoo), seq 64."""
import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(40, 128, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(256, 12)

    def forward(self, x):
        h, _ = self.rnn(x)
        return self.head(h)


def build_model() -> nn.Module:
    return Tagger()


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 64, 40)
