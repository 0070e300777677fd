"""An example CPU-bound per-sample transform, in pure torch, whose cost is a knob.

Sensitivity profiling needs input pipelines whose CPU cost is real (it runs in the DataLoader workers and
scales with the CPUs they get) and adjustable (to make a job CPU-bound or storage-bound at will).
:class:`DecodeAugment` stands in for "decode a JPEG, resize, augment, normalise": it turns the raw bytes of
one item into a ``3 × out × out`` float tensor via a bilinear resize and ``passes`` 3×3 blur convolutions.
The work per sample grows linearly with ``passes`` (and with ``side``²), and it is deterministic (no random
augmentation), so repeated measurements see the same cost.

Any bytes are accepted: they are tiled or truncated to ``3 × side × side`` pixels, so the transform works
on the synthetic files of :func:`perfpredict.data.file_dataset.write_synthetic_files` of any size. It is a
module-level class (picklable), so it works with spawned DataLoader workers too.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["DecodeAugment", "Preprocessed"]


class DecodeAugment:
    """``raw bytes → float tensor [3, out, out]``: "decode", resize, blur ``passes`` times, normalise."""

    def __init__(self, side: int = 64, out: int = 32, passes: int = 2) -> None:
        if side <= 0 or out <= 0 or passes < 0:
            raise ValueError(f"need side > 0, out > 0, passes >= 0; got side={side}, out={out}, passes={passes}")
        self.side, self.out, self.passes = side, out, passes
        self._kernel = torch.full((3, 1, 3, 3), 1.0 / 9.0)

    def __call__(self, raw: bytes | bytearray | memoryview) -> torch.Tensor:
        n = 3 * self.side * self.side
        x = torch.frombuffer(bytearray(raw), dtype=torch.uint8)  # bytearray: a writable copy, no warning
        if x.numel() == 0:
            raise ValueError("cannot decode an empty item")
        if x.numel() < n:
            x = x.repeat((n + x.numel() - 1) // x.numel())
        img = x[:n].view(1, 3, self.side, self.side).float().div_(255.0)
        img = F.interpolate(img, size=(self.out, self.out), mode="bilinear", align_corners=False)
        for _ in range(self.passes):
            img = F.conv2d(img, self._kernel, padding=1, groups=3)
        return img.squeeze(0).sub_(0.5).div_(0.25)

    def __repr__(self) -> str:
        return f"DecodeAugment(side={self.side}, out={self.out}, passes={self.passes})"


class Preprocessed(torch.utils.data.Dataset):
    """``transform(dataset[i])``: a dataset of raw items with the per-sample CPU work applied on read.

    ``transform=None`` passes items through unchanged (a workload without a ``preprocess`` hook).

    Put it *outside* a :class:`~perfpredict.data.minio_cache.MinIOCache` (cache the raw bytes, redo the
    CPU work every epoch), as a real pipeline does.
    """

    def __init__(self, dataset: Any, transform: Any) -> None:
        self.dataset, self.transform = dataset, transform

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        item = self.dataset[index]
        return self.transform(item) if self.transform is not None else item
