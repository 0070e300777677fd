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
* speech: items are 16 kHz int16 PCM waveforms (synthetic voiced sounds: harmonics, formant-like partials,
  a syllable-rate envelope and noise) plus a character transcript; ``preprocess`` decodes, applies a random
  gain and pre-emphasis, computes a log-mel spectrogram (``torch.stft`` and a mel filterbank matrix, no
  torchaudio), normalises it, applies SpecAugment-style frequency and time masks, and maps the transcript to
  CTC labels. CPU cost grows with the audio length, as in the paper's speech models.
* recommendation: items are click-log rows in Criteo's TSV layout (a label, integer counts, hashed categorical
  ids); ``preprocess`` parses them, takes ``log(1 + x)`` of the counts and each hash modulo its embedding
  table's rows (DLRM's Criteo preprocessing). Light: text parsing, no tensor work.

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
    """``n`` uint8 HWC images of side ``stored`` as raw bytes, each with a class map as raw bytes (uint8, or wider
    beyond 256 classes: :func:`mask_dtype`)."""

    def __getitem__(self, i: int) -> tuple[bytes, bytes]:
        rng = np.random.default_rng(i)
        img = rng.integers(0, 256, size=(self.stored, self.stored, 3), dtype=np.uint8)
        mask = rng.integers(0, self.num_classes, size=(self.stored, self.stored), dtype=mask_dtype(self.num_classes))
        return img.tobytes(), mask.tobytes()


def mask_dtype(num_classes: int) -> np.dtype:
    """The class map's storage type: uint8 up to 256 classes (numpy refused more: "high is out of bounds"),
    then little-endian uint16, then uint32."""
    return np.dtype(np.uint8 if num_classes <= 1 << 8 else "<u2" if num_classes <= 1 << 16 else "<u4")


def segmentation_preprocess(item: tuple[bytes, bytes], stored: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The image's crop, resize and flip of :func:`image_preprocess`, applied to the class map alike (nearest)."""
    raw, raw_mask = item
    width = len(raw_mask) // (stored * stored)  # bytes a pixel: 1, or 2 or 4 beyond 256 classes (mask_dtype)
    dtype = np.dtype(f"<u{width}")  # mask_dtype's type, told by its width
    # float64 above 2**16 classes: the nearest-neighbour resize goes through floats, which must hold every id
    m = torch.from_numpy(np.frombuffer(raw_mask, dtype=dtype).astype(np.float32 if width < 4 else np.float64))
    m = m.view(1, stored, stored)
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
    # a single feature (input_dim 1) has no sample std (NaN), which made every input NaN: it standardises to 0
    std = x.std() if x.numel() > 1 else x.new_zeros(())
    return (x - x.mean()) / (std + 1e-6), label


SAMPLE_RATE = 16_000
#: STFT of the speech pipeline: 25 ms Hann windows every 10 ms, zero-padded to a 512-point FFT.
HOP_LENGTH, WIN_LENGTH, N_FFT = 160, 400, 512
#: Transcript characters; label = position + 1 (0 is the CTC blank): DeepSpeech2's English alphabet.
SPEECH_ALPHABET = "'abcdefghijklmnopqrstuvwxyz "


class SyntheticUtterances(torch.utils.data.Dataset):
    """``n`` utterances of ``frames`` × 10 ms at 16 kHz as int16 PCM bytes, each with a UTF-8 transcript of at
    least ``min_chars`` characters."""

    def __init__(self, frames: int, min_chars: int, n: int = DATASET_ITEMS) -> None:
        self.frames, self.min_chars, self.n = frames, min_chars, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[bytes, bytes]:
        rng = np.random.default_rng(i)
        t = np.arange(self.frames * HOP_LENGTH, dtype=np.float32) / SAMPLE_RATE
        f0 = rng.uniform(90.0, 250.0)
        wave = np.zeros_like(t)
        for k in range(1, int(rng.integers(3, 7)) + 1):  # a voiced sound: harmonics of f0
            wave += np.sin(2 * np.pi * f0 * k * t + rng.uniform(0, 2 * np.pi)).astype(np.float32) / k
        for f in rng.uniform(300.0, 3500.0, size=2):  # formant-like partials
            wave += 0.3 * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi)).astype(np.float32)
        rate = rng.uniform(2.0, 6.0)  # syllables per second
        wave *= 0.5 * (1.0 + np.sin(2 * np.pi * rate * t + rng.uniform(0, 2 * np.pi))).astype(np.float32)
        wave += 0.02 * rng.standard_normal(t.size).astype(np.float32)
        wave *= 0.5 / max(float(np.abs(wave).max()), 1e-6)
        pcm = np.round(wave * 32767).astype("<i2")
        words = []
        while sum(len(w) + 1 for w in words) <= self.min_chars:  # each word is followed by a space
            words.append(_WORDS[int(rng.integers(0, len(_WORDS)))])
        return pcm.tobytes(), b" ".join(words)


def mel_filterbank(n_mels: int, n_fft: int = N_FFT, sample_rate: int = SAMPLE_RATE, f_min: float = 0.0,
                   f_max: float | None = None) -> torch.Tensor:
    """Triangular filters ``[n_mels, n_fft // 2 + 1]`` evenly spaced on the HTK mel scale (no area
    normalisation); a band narrower than the FFT's bin spacing may be all zeros."""
    f_max = sample_rate / 2 if f_max is None else f_max

    def mel(f: torch.Tensor) -> torch.Tensor:
        return 2595.0 * torch.log10(1.0 + f / 700.0)

    edges_mel = torch.linspace(float(mel(torch.tensor(f_min))), float(mel(torch.tensor(f_max))), n_mels + 2,
                               dtype=torch.float64)
    edges = 700.0 * (10.0 ** (edges_mel / 2595.0) - 1.0)                  # [n_mels + 2] Hz
    bins = torch.linspace(0.0, sample_rate / 2, n_fft // 2 + 1, dtype=torch.float64)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (bins - lo) / (mid - lo)
    down = (hi - bins) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0).float()


class SpeechPreprocess:
    """``(pcm bytes, transcript) → (log-mel [1, n_mels, frames] float32, labels [target_len] int64)``."""

    def __init__(self, n_mels: int, frames: int, num_classes: int, target_len: int) -> None:
        self.n_mels, self.frames, self.num_classes, self.target_len = n_mels, frames, num_classes, target_len
        self.mel = mel_filterbank(n_mels)
        self.window = torch.hann_window(WIN_LENGTH)

    def labels(self, text: bytes) -> torch.Tensor:
        chars = text.decode()[:self.target_len]
        ids = [(SPEECH_ALPHABET.index(c) if c in SPEECH_ALPHABET else len(SPEECH_ALPHABET) - 1)
               % (self.num_classes - 1) + 1 for c in chars]
        return torch.tensor(ids, dtype=torch.long)

    def __call__(self, item: tuple[bytes, bytes]) -> tuple[torch.Tensor, torch.Tensor]:
        raw, text = item
        wave = torch.frombuffer(bytearray(raw), dtype=torch.int16).float() / 32768.0
        wave = wave * np.random.uniform(0.5, 1.5)                         # random gain
        wave = torch.cat([wave[:1], wave[1:] - 0.97 * wave[:-1]])         # pre-emphasis
        spec = torch.stft(wave, N_FFT, HOP_LENGTH, WIN_LENGTH, self.window, center=True, pad_mode="constant",
                          return_complex=True)[:, :self.frames]           # the centred STFT has frames + 1
        x = torch.log(self.mel @ spec.abs().square() + 1e-6)              # [n_mels, frames]
        x = (x - x.mean()) / (x.std() + 1e-5)
        for size, axis in ((self.n_mels, 0), (self.n_mels, 0), (self.frames, 1), (self.frames, 1)):
            width = np.random.randint(0, max(1, size // (8 if axis == 0 else 20)) + 1)  # SpecAugment masks
            start = np.random.randint(0, size - width + 1)
            x.narrow(axis, start, width).zero_()
        return x.unsqueeze(0).contiguous(), self.labels(text)


def speech_pipeline(cfg: dict[str, Any]) -> tuple[Any, Any]:
    """``(make_dataset, preprocess)`` for a speech configuration (``n_mels``, ``frames``, ``num_classes``,
    ``target_len``)."""
    frames, target_len = cfg["frames"], cfg["target_len"]
    prep = SpeechPreprocess(cfg["n_mels"], frames, cfg["num_classes"], target_len)
    return (lambda: SyntheticUtterances(frames, target_len), prep)


class ClickLogRows(torch.utils.data.Dataset):
    """``n`` click-log rows in the Criteo TSV layout, as raw bytes: a 0/1 label, ``num_dense`` integer counts
    (decimal, heavy-tailed, about 1 in 10 missing = empty), then ``num_tables`` categorical features as
    8-hex-digit 32-bit hashes (``lookups`` comma-separated hashes per feature when multi-hot; about 1 in 20
    missing). Categorical values are Zipf-distributed per feature before hashing, so popular ids repeat
    across rows as in real click logs."""

    def __init__(self, num_dense: int, num_tables: int, lookups: int, n: int = DATASET_ITEMS) -> None:
        self.num_dense, self.num_tables, self.lookups, self.n = num_dense, num_tables, lookups, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> bytes:
        rng = np.random.default_rng(i)
        label = int(rng.random() < 0.25)  # Criteo's click-through rate is about 1 in 4
        counts = np.floor(rng.lognormal(1.0, 1.5, size=self.num_dense)).astype(np.int64)
        counts[rng.random(self.num_dense) < 0.05] = -1  # a few negative values, as in Criteo's I2
        dense = [b"" if miss else str(c).encode() for c, miss in zip(counts, rng.random(self.num_dense) < 0.1)]
        values = rng.zipf(1.2, size=(self.num_tables, self.lookups)) % (1 << 31)
        cats = [b"" if miss else b",".join(b"%08x" % zlib.crc32(b"%d:%d" % (t, v)) for v in values[t])
                for t, miss in enumerate(rng.random(self.num_tables) < 0.05)]
        return b"\t".join([str(label).encode(), *dense, *cats])


def click_log_preprocess(item: bytes, num_dense: int, num_tables: int, lookups: int,
                         rows: int) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
    """One TSV row → ((dense [num_dense] float32, sparse [num_tables] or [num_tables, lookups] int64), label [1]).

    DLRM's Criteo preprocessing: missing counts are 0, negatives are clamped to 0, then ``log(1 + x)``; each
    categorical hash is taken modulo the table's ``rows`` (a missing feature maps to index 0).
    """
    fields = item.split(b"\t")
    counts = np.array([int(v) if v else 0 for v in fields[1:1 + num_dense]], dtype=np.float32)
    dense = torch.from_numpy(np.log1p(np.maximum(counts, 0.0)))
    idx = np.zeros((num_tables, lookups), dtype=np.int64)
    for t, value in enumerate(fields[1 + num_dense:1 + num_dense + num_tables]):
        if value:
            idx[t] = [int(h, 16) % rows for h in value.split(b",")]
    sparse = torch.from_numpy(idx if lookups > 1 else np.ascontiguousarray(idx[:, 0]))
    return (dense, sparse), torch.tensor([float(fields[0])])


def recommendation_pipeline(cfg: dict[str, Any]) -> tuple[Any, Any]:
    """``(make_dataset, preprocess)`` for a click-through-rate configuration (``num_dense``, ``num_tables``,
    ``lookups``, ``rows_per_table``)."""
    d, t, k, rows = cfg["num_dense"], cfg["num_tables"], cfg["lookups"], cfg["rows_per_table"]
    return (lambda: ClickLogRows(d, t, k), lambda item: click_log_preprocess(item, d, t, k, rows))


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
    if task == "speech":
        return speech_pipeline(cfg)
    if task == "recommendation":
        return recommendation_pipeline(cfg)
    return None
