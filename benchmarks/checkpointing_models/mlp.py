"""A residual MLP (6 blocks, d=256), the plain one of docs/estimators.md's "Activation checkpointing" pair;
mlp_checkpointed.py checkpoints its blocks in training (non-reentrant)."""
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.LayerNorm(d))

    def forward(self, x):
        return x + self.net(x)


class Net(nn.Module):
    def __init__(self, checkpointed: bool = False, d: int = 256, depth: int = 6) -> None:
        super().__init__()
        self.checkpointed = checkpointed
        self.blocks = nn.ModuleList(Block(d) for _ in range(depth))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.checkpointed and self.training else b(x)
        return self.head(x)


def build_model() -> nn.Module:
    return Net()


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 256)
