"""A small transformer encoder (4 layers, d=128, sequence 64), the plain one of docs/estimators.md's
"Activation checkpointing" pair; encoder_checkpointed.py checkpoints its layers in training (non-reentrant)."""
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Encoder(nn.Module):
    def __init__(self, checkpointed: bool = False, d: int = 128, layers: int = 4) -> None:
        super().__init__()
        self.checkpointed = checkpointed
        self.embed = nn.Linear(32, d)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
                                    for _ in range(layers))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False) if self.checkpointed and self.training else layer(x)
        return self.head(x.mean(dim=1))


def build_model() -> nn.Module:
    return Encoder()


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 64, 32)
