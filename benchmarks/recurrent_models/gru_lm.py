"""A character-level GRU language model (not in the zoo): 1 layer, unidirectional, batch-first, seq 128."""
import torch
from torch import nn


class CharGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(96, 64)
        self.gru = nn.GRU(64, 256, batch_first=True)
        self.head = nn.Linear(256, 96)

    def forward(self, x):
        h, _ = self.gru(self.emb(x))
        return self.head(h)


def build_model() -> nn.Module:
    return CharGRU()


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randint(0, 96, (batch_size, 128))
