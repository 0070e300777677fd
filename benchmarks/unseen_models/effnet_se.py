"""An EfficientNet-like CNN (not in the zoo): MBConv blocks (1x1 expand, depthwise 3x3, squeeze-excitation,
1x1 project) with SiLU and batch norm, on 32x32 images, 10 classes."""
import torch
from torch import nn

#: (expansion, output channels, stride) per MBConv block, after a 3x3 stem to 16 channels
BLOCKS = ((1, 16, 1), (4, 24, 2), (4, 24, 1), (4, 40, 2), (4, 40, 1), (4, 80, 2))


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int):
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(nn.functional.silu(self.reduce(s))))


class MBConv(nn.Module):
    def __init__(self, cin: int, expansion: int, cout: int, stride: int):
        super().__init__()
        mid = cin * expansion
        layers = [] if expansion == 1 else [nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU()]
        layers += [nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), nn.SiLU(),
                   SqueezeExcite(mid, max(1, cin // 4)),
                   nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


class EffNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.SiLU())
        blocks, cin = [], 16
        for e, c, s in BLOCKS:
            blocks.append(MBConv(cin, e, c, s))
            cin = c
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.Conv2d(cin, 320, 1, bias=False), nn.BatchNorm2d(320), nn.SiLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(320, 10))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def build_model() -> nn.Module:
    return EffNet()


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 3, 32, 32)


def example_targets(batch_size: int) -> torch.Tensor:
    return torch.randint(0, 10, (batch_size,))


def loss_fn(outputs, targets):
    return nn.functional.cross_entropy(outputs, targets)
