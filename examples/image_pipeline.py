"""A small image classifier with a real CPU-side input pipeline (for `--sensitivity`).

`make_dataset()` returns raw "encoded" images (bytes, as a file read from storage would give them);
`preprocess(item)` is the per-sample CPU work a training job does in its DataLoader workers: decode, random
crop, flip, blur and normalise. Its cost grows with `DECODE_WORK`, so the job can be made CPU-bound.
"""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

IMAGE = 48  # stored side length
CROP = 32  # training crop
N_ITEMS = 512
DECODE_WORK = 3  # blur passes per sample
BATCH_SIZES = [16, 32, 64]


class EncodedImages(torch.utils.data.Dataset):
    """Raw uint8 HWC images as bytes objects, deterministic per index."""

    def __init__(self, n: int = N_ITEMS, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.items = [rng.integers(0, 256, size=(IMAGE, IMAGE, 3), dtype=np.uint8).tobytes() for _ in range(n)]
        self.labels = rng.integers(0, 10, size=n)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.items[i], int(self.labels[i])


_BLUR = torch.full((3, 1, 3, 3), 1.0 / 9.0)


def make_dataset() -> torch.utils.data.Dataset:
    return EncodedImages()


def preprocess(item):
    raw, label = item
    x = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(IMAGE, IMAGE, 3).permute(2, 0, 1).float() / 255.0
    top, left = np.random.randint(0, IMAGE - CROP + 1, size=2)
    x = x[:, top:top + CROP, left:left + CROP]
    if np.random.rand() < 0.5:
        x = x.flip(-1)
    for _ in range(DECODE_WORK):
        x = F.conv2d(x.unsqueeze(0), _BLUR, padding=1, groups=3).squeeze(0)
    x = (x - 0.5) / 0.25
    return x, label


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10))


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 3, CROP, CROP)


def example_targets(batch_size: int) -> torch.Tensor:
    return torch.randint(0, 10, (batch_size,))


def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, targets)
