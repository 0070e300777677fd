"""A DenseNet-like CNN (not in the zoo): 3 dense blocks of 4 BN-ReLU-Conv3x3 layers (growth 12), each layer's
output concatenated to its input; transitions of 1x1 conv + 2x2 average pooling; 32x32 images, 10 classes."""
import torch
from torch import nn

GROWTH, LAYERS, BLOCKS, STEM = 12, 4, 3, 24


class DenseLayer(nn.Module):
    def __init__(self, cin: int):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, GROWTH, 3, padding=1, bias=False))

    def forward(self, x):
        return torch.cat([x, self.body(x)], dim=1)


class DenseNet(nn.Module):
    def __init__(self):
        super().__init__()
        layers, c = [nn.Conv2d(3, STEM, 3, padding=1, bias=False)], STEM
        for b in range(BLOCKS):
            for _ in range(LAYERS):
                layers.append(DenseLayer(c))
                c += GROWTH
            if b < BLOCKS - 1:
                layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2)]
                c //= 2
        layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def build_model() -> nn.Module:
    return DenseNet()


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 3, 32, 32)


def example_targets(batch_size: int) -> torch.Tensor:
    return torch.randint(0, 10, (batch_size,))


def loss_fn(outputs, targets):
    return nn.functional.cross_entropy(outputs, targets)
