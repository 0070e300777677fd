"""An MLP-Mixer (not in the zoo): 32x32 images in 4x4 patches (64 tokens), width 128, token-mixing MLP 64,
channel-mixing MLP 256, 4 layers, 10 classes."""
import torch
from torch import nn

IMAGE, PATCH, WIDTH, TOKEN_HIDDEN, CHANNEL_HIDDEN, DEPTH, CLASSES = 32, 4, 128, 64, 256, 4, 10
TOKENS = (IMAGE // PATCH) ** 2


class MixerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.token = nn.Sequential(nn.Linear(TOKENS, TOKEN_HIDDEN), nn.GELU(), nn.Linear(TOKEN_HIDDEN, TOKENS))
        self.channel = nn.Sequential(nn.Linear(WIDTH, CHANNEL_HIDDEN), nn.GELU(), nn.Linear(CHANNEL_HIDDEN, WIDTH))

    def forward(self, x):  # [B, tokens, width]
        x = x + self.token(self.ln1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel(self.ln2(x))


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, WIDTH, PATCH, stride=PATCH)
        self.blocks = nn.Sequential(*(MixerBlock() for _ in range(DEPTH)))
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        return self.head(self.ln(self.blocks(x)).mean(dim=1))


def build_model() -> nn.Module:
    return Mixer()


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 3, IMAGE, IMAGE)


def example_targets(batch_size: int) -> torch.Tensor:
    return torch.randint(0, CLASSES, (batch_size,))


def loss_fn(outputs, targets):
    return nn.functional.cross_entropy(outputs, targets)
