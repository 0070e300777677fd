"""A small classifier whose input really comes from files on a bandwidth-capped "disk" (for `--sensitivity`).

`make_dataset()` writes (once) a directory of random-byte item files and returns a
`perfpredict.data.FileDataset` that reads every item from its file through a `BandwidthLimitedReader`:
the reads are real `open`/`read` calls, held to `STORAGE_MB_PER_S` in aggregate across DataLoader workers,
like one shared disk. The dataset reports `dataset_bytes` and `storage_bytes_per_s`, so
`perfpredict profile examples/file_pipeline.py --sensitivity` fills the memory dimension of the sensitivity
matrix with the MinIO cache model (no `--storage-bandwidth` needed). `preprocess` decodes the bytes into
an image tensor with `perfpredict.data.DecodeAugment` (CPU work that grows with `DECODE_PASSES`).

Set `PERFPREDICT_FILE_PIPELINE_DIR` to choose where the item files go (default: a directory under the
system temp dir, keyed by the item count and size).
"""

import os
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from perfpredict.data import (
    BandwidthLimitedReader,
    DecodeAugment,
    FileDataset,
    write_synthetic_files,
)

N_ITEMS = 256
ITEM_BYTES = 12 * 1024
STORAGE_MB_PER_S = 4.0  # a slow disk, so storage matters next to 2 cores of preprocessing
DECODE_PASSES = 2
OUT = 32
BATCH_SIZES = [16, 32]

_decode = DecodeAugment(side=64, out=OUT, passes=DECODE_PASSES)


def _data_dir() -> Path:
    default = Path(tempfile.gettempdir()) / f"perfpredict-file-pipeline-{N_ITEMS}x{ITEM_BYTES}"
    return Path(os.environ.get("PERFPREDICT_FILE_PIPELINE_DIR", default))


def make_dataset() -> FileDataset:
    root = _data_dir()
    if len(list(root.glob("item_*.bin"))) != N_ITEMS:
        write_synthetic_files(root, N_ITEMS, ITEM_BYTES)
    return FileDataset(root, reader=BandwidthLimitedReader(STORAGE_MB_PER_S * 1e6), pattern="item_*.bin")


def preprocess(raw: bytes):
    x = _decode(raw)
    return x, raw[0] % 10  # a label derived from the content, so it is the same every epoch


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * (OUT // 4) ** 2, 10))


def example_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 3, OUT, OUT)


def example_targets(batch_size: int) -> torch.Tensor:
    return torch.randint(0, 10, (batch_size,))


def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, targets)
