"""A WaveNet-like temporal convolutional network (not in the zoo): 8 dilated causal Conv1d layers (kernel 2,
dilation 1..128, left padding by hand), gated tanh x sigmoid units, 1x1 residual and skip convolutions (the
last layer has no residual one: its output would be unused, and the ONNX export drops dead nodes); 32 channels, 1-channel input of 1024 samples, a 256-way output per sample."""
import torch
import torch.nn.functional as F
from torch import nn

CHANNELS, SKIP, LAYERS, LENGTH, CLASSES = 32, 64, 8, 1024, 256


class GatedLayer(nn.Module):
    def __init__(self, dilation: int, last: bool):
        super().__init__()
        self.dilation = dilation
        self.conv = nn.Conv1d(CHANNELS, 2 * CHANNELS, 2, dilation=dilation)
        self.res = None if last else nn.Conv1d(CHANNELS, CHANNELS, 1)
        self.skip = nn.Conv1d(CHANNELS, SKIP, 1)

    def forward(self, x):
        h = self.conv(F.pad(x, (self.dilation, 0)))
        f, g = h.chunk(2, dim=1)
        z = torch.tanh(f) * torch.sigmoid(g)
        return (x if self.res is None else x + self.res(z)), self.skip(z)


class WaveNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Conv1d(1, CHANNELS, 1)
        self.layers = nn.ModuleList(GatedLayer(2 ** i, i == LAYERS - 1) for i in range(LAYERS))
        self.out = nn.Sequential(nn.ReLU(), nn.Conv1d(SKIP, SKIP, 1), nn.ReLU(), nn.Conv1d(SKIP, CLASSES, 1))

    def forward(self, x):
        x = self.inp(x)
        skips = 0
        for layer in self.layers:
            x, s = layer(x)
            skips = skips + s
        return self.out(skips)


def build_model() -> nn.Module:
    return WaveNet()


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 1, LENGTH)


def example_targets(batch_size: int) -> torch.Tensor:
    return torch.randint(0, CLASSES, (batch_size, LENGTH))


def loss_fn(outputs, targets):
    return F.cross_entropy(outputs, targets)
