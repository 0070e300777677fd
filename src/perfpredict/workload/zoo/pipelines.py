"""Input pipelines for the zoo: raw items as storage would return them, and the per-sample CPU work.

Synergy profiles a job's sensitivity to CPUs through its *input pipeline*; the zoo's families get one each,
of the kind their task has in practice:

* image: items are encoded uint8 images (stored ~15% larger than the training crop); ``preprocess`` decodes,
  takes a random resized crop, flips, jitters brightness and normalises (the ImageNet recipe, in torch). CPU
  cost grows with the image size, as in the paper's image models.
* image segmentation (dense prediction): items are an encoded uint8 image plus a uint8 class map of the same
  size; ``preprocess`` takes the same random resized crop (bilinear for the image, nearest for the map), flips
  both, jitters and normalises the image (:func:`segmentation_pipeline`, used by families that ask for it).
* language: items are UTF-8 text; ``preprocess`` tokenises (hashing bytes of whitespace-split words into the
  vocabulary), truncates and pads. Light, as the paper finds for language models.
* tabular: items are float32 rows as bytes; ``preprocess`` parses and standardises them.

Items are generated deterministically per index (seeded by the index), so a dataset costs no memory until a
cache keeps its items, and every run sees the same data.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

DATASET_ITEMS = 1024
_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class EncodedImages(torch.utils.data.Dataset):
    """``n`` uint8 HWC images of side ``stored`` as raw bytes, with a class label."""

    def __init__(self, stored: int, num_classes: int, n: int = DATASET_ITEMS) -> None:
        self.stored, self.num_classes, self.n = stored, num_classes, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[bytes, int]:
        rng = np.random.default_rng(i)
        img = rng.integers(0, 256, size=(self.stored, self.stored, 3), dtype=np.uint8)
        return img.tobytes(), int(rng.integers(0, self.num_classes))


def _decode_image(raw: bytes, stored: int) -> torch.Tensor:
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(stored, stored, 3).permute(2, 0, 1).float() / 255.0


def _random_crop_box(stored: int) -> tuple[int, int, int]:
    """(top, left, side) of a random square crop covering 60-100 % of the stored side."""
    side = max(1, int(stored * np.random.uniform(0.6, 1.0)))
    top, left = np.random.randint(0, stored - side + 1, size=2)
    return int(top), int(left), side


def _resize(x: torch.Tensor, size: int, mode: str) -> torch.Tensor:
    """``x`` [C, h, w] resized to [C, size, size]."""
    kw = {"align_corners": False} if mode == "bilinear" else {}
    return F.interpolate(x.unsqueeze(0), size=(size, size), mode=mode, **kw).squeeze(0)


def _jitter_and_normalise(x: torch.Tensor) -> torch.Tensor:
    x = x * np.random.uniform(0.8, 1.2)
    return ((x - _MEAN) / _STD).contiguous()


def image_preprocess(item: tuple[bytes, int], stored: int, size: int) -> tuple[torch.Tensor, int]:
    raw, label = item
    top, left, side = _random_crop_box(stored)
    x = _resize(_decode_image(raw, stored)[:, top:top + side, left:left + side], size, "bilinear")
    if np.random.rand() < 0.5:
        x = x.flip(-1)
    return _jitter_and_normalise(x), label


class EncodedSegmentation(EncodedImages):
    """``n`` uint8 HWC images of side ``stored`` as raw bytes, each with a uint8 class map as raw bytes."""

    def __getitem__(self, i: int) -> tuple[bytes, bytes]:
        rng = np.random.default_rng(i)
        img = rng.integers(0, 256, size=(self.stored, self.stored, 3), dtype=np.uint8)
        mask = rng.integers(0, self.num_classes, size=(self.stored, self.stored), dtype=np.uint8)
        return img.tobytes(), mask.tobytes()


def segmentation_preprocess(item: tuple[bytes, bytes], stored: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The image's crop, resize and flip of :func:`image_preprocess`, applied to the class map alike (nearest)."""
    raw, raw_mask = item
    m = torch.frombuffer(bytearray(raw_mask), dtype=torch.uint8).view(1, stored, stored).float()
    top, left, side = _random_crop_box(stored)
    x = _resize(_decode_image(raw, stored)[:, top:top + side, left:left + side], size, "bilinear")
    m = _resize(m[:, top:top + side, left:left + side], size, "nearest").view(size, size)
    if np.random.rand() < 0.5:
        x, m = x.flip(-1), m.flip(-1)
    return _jitter_and_normalise(x), m.long().contiguous()


def segmentation_pipeline(cfg: dict[str, Any]) -> tuple[Any, Any]:
    """``(make_dataset, preprocess)`` for a dense-prediction image configuration (``image_size``, ``num_classes``)."""
    size = cfg["image_size"]
    stored = int(round(size * 1.15))
    return (lambda: EncodedSegmentation(stored, cfg["num_classes"]),
            lambda item: segmentation_preprocess(item, stored, size))


_WORDS = [w.encode() for w in ["the", "of", "and", "to", "in", "is", "was", "for", "on", "as", "with", "by", "he", "at", "from", "his", "an", "were", "are", "which", "this", "be", "or", "has", "had", "first", "one", "their", "its", "new", "after", "who", "they", "have", "her", "she", "two", "been", "other", "when", "there", "all", "during", "into", "school", "time", "may", "years", "more", "most", "only", "over", "city", "some", "world", "would", "where", "later", "up", "such", "used", "many", "can", "state", "about", "national", "out", "known", "university", "united", "then", "made"]]


class TextItems(torch.utils.data.Dataset):
    """``n`` UTF-8 sentences of about ``words`` words, with a label (class id, or per-token ids for LMs)."""

    def __init__(self, words: int, n: int = DATASET_ITEMS) -> None:
        self.words, self.n = words, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> bytes:
        rng = np.random.default_rng(i)
        return b" ".join(_WORDS[j] for j in rng.integers(0, len(_WORDS), size=self.words))


def tokenize(text: bytes, vocab: int, seq_len: int) -> torch.Tensor:
    ids = [zlib.crc32(w) % (vocab - 1) + 1 for w in text.split()][:seq_len]
    ids += [0] * (seq_len - len(ids))
    return torch.tensor(ids, dtype=torch.long)


class TabularRows(torch.utils.data.Dataset):
    def __init__(self, dim: int, num_classes: int, n: int = DATASET_ITEMS) -> None:
        self.dim, self.num_classes, self.n = dim, num_classes, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[bytes, int]:
        rng = np.random.default_rng(i)
        return rng.standard_normal(self.dim).astype(np.float32).tobytes(), int(rng.integers(0, self.num_classes))


def tabular_preprocess(item: tuple[bytes, int]) -> tuple[torch.Tensor, int]:
    raw, label = item
    x = torch.frombuffer(bytearray(raw), dtype=torch.float32)
    return (x - x.mean()) / (x.std() + 1e-6), label


def pipeline_for(task: str, cfg: dict[str, Any]) -> tuple[Any, Any] | None:
    """``(make_dataset, preprocess)`` for a zoo configuration of ``task``, or None."""
    if task == "image":
        size = cfg["image_size"]
        stored = int(round(size * 1.15))
        return (lambda: EncodedImages(stored, cfg["num_classes"]),
                lambda item: image_preprocess(item, stored, size))
    if task == "language":
        seq = cfg["seq_len"]
        per_token = cfg.get("num_classes") is None  # a language model predicts every next token

        def prep(text: bytes):
            ids = tokenize(text, cfg["vocab"], seq + 1 if per_token else seq)
            if per_token:
                return ids[:-1], ids[1:]
            return ids, int(ids.sum()) % cfg["num_classes"]

        return (lambda: TextItems(seq), prep)
    if task == "tabular":
        return (lambda: TabularRows(cfg["input_dim"], cfg["num_classes"]), tabular_preprocess)
    return None
