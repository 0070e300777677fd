"""A 2-layer GRU encoder, hidden 128, over 50 steps of 32 features, batch-first."""
import torch
from torch import nn


class Enc(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(32, 128, num_layers=2, batch_first=True)
        self.head = nn.Linear(128, 4)

    def forward(self, x):
        h, _ = self.gru(x)
        return self.head(h.mean(dim=1))


def build_model() -> nn.Module:
    return Enc()


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 50, 32)
