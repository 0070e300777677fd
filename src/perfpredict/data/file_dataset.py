"""A dataset that really reads from files, behind a storage device of known, capped bandwidth.

Synergy's memory dimension only matters when a job's input comes from storage: a MinIO cache of ``m`` bytes
saves reading a fixed fraction of the items, so throughput depends on the storage bandwidth. To measure and
validate that on any machine, the storage must have a bandwidth we know. Local files alone do not give one:
after the first read the kernel's page cache serves them from RAM at memory speed, so "storage" would be
free and a cache would make no difference. :class:`BandwidthLimitedReader` therefore models the storage
device: every read is a real ``open``/``read`` of the file (the bytes, the syscalls and the per-item
overhead are real), and the reader then holds the caller until the bytes could have come off a device of
``bytes_per_s``. The cap is what the cache model's ``storage_bytes_per_s`` means.

The cap is shared by all processes that use the reader, DataLoader workers included, like one disk shared
by every reader: the reader keeps a *virtual clock* — the time at which the device next becomes free — in
shared memory. A read of ``n`` bytes reserves the interval ``[max(now, free), max(now, free) + n/B)`` under
a lock, advances the clock to its end, reads the file outside the lock and sleeps until the reserved end.
So concurrent readers queue, aggregate throughput never exceeds ``B``, and an idle device banks no credit
(no bursts above ``B``). Reads are not split into chunks: one item is one request, as for a file on disk.

The shared clock lives in a ``multiprocessing.Value`` made from the ``spawn`` context, whose lock can be
inherited by forked workers *and* pickled to spawned/forkserver ones (a lock from the ``fork`` context
cannot be sent to a spawned process). Like every multiprocessing primitive it can be passed to child
processes only when they are created (as DataLoader does with its dataset), not pickled at other times.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import numpy as np
import torch

__all__ = ["BandwidthLimitedReader", "FileDataset", "write_synthetic_files"]


class BandwidthLimitedReader:
    """Reads whole files, capping the aggregate read rate of all processes sharing it at ``bytes_per_s``."""

    def __init__(self, bytes_per_s: float) -> None:
        if not bytes_per_s > 0:
            raise ValueError(f"bytes_per_s must be > 0, got {bytes_per_s!r}")
        self.bytes_per_s = float(bytes_per_s)
        # Monotonic time (CLOCK_MONOTONIC: one clock for all processes on the machine) at which the modelled
        # device is next free.
        self._free_at = multiprocessing.get_context("spawn").Value("d", 0.0)

    def throttle(self, nbytes: int, started: float | None = None) -> float:
        """Reserve the device for ``nbytes`` and block until they are transferred; returns seconds waited.

        ``started`` (a ``time.monotonic()`` value) is when the request was issued, by default now. Time
        already spent since then (e.g. in the real read) counts towards the transfer.
        """
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        now = time.monotonic() if started is None else started
        duration = nbytes / self.bytes_per_s
        with self._free_at.get_lock():
            start = max(now, self._free_at.value)
            end = start + duration
            self._free_at.value = end
        wait = end - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        return max(wait, 0.0)

    def read(self, path: str | os.PathLike[str]) -> bytes:
        """The file's bytes, read for real and delivered no faster than the cap allows."""
        started = time.monotonic()
        with open(path, "rb") as f:
            data = f.read()
        self.throttle(len(data), started)
        return data

    def __repr__(self) -> str:
        return f"BandwidthLimitedReader(bytes_per_s={self.bytes_per_s:g})"


class FileDataset(torch.utils.data.Dataset):
    """One item per file in ``directory`` (sorted by name, matching ``pattern``); an item is the file's bytes.

    The items are the raw, pre-preprocessing bytes a training job reads from storage (an encoded image, a
    serialized record); decoding belongs in ``preprocess``. With a ``reader`` the reads go through its
    bandwidth cap and :attr:`storage_bytes_per_s` reports it, which is how profiling learns the storage
    bandwidth; without one, reads are plain file reads (probably page-cache hits).

    Attributes:
        paths: the item files.
        dataset_bytes: total bytes of all items (from ``stat``, at construction).
        mean_item_bytes: ``dataset_bytes / len(self)``.
    """

    def __init__(self, directory: str | os.PathLike[str], reader: BandwidthLimitedReader | None = None,
                 pattern: str = "*") -> None:
        root = Path(directory)
        if not root.is_dir():
            raise ValueError(f"{root} is not a directory")
        self.paths = [str(p) for p in sorted(root.glob(pattern)) if p.is_file()]
        if not self.paths:
            raise ValueError(f"no files matching {pattern!r} in {root}")
        self.reader = reader
        self.sizes = [os.stat(p).st_size for p in self.paths]
        self.dataset_bytes = int(sum(self.sizes))
        self.mean_item_bytes = self.dataset_bytes / len(self.paths)

    @property
    def storage_bytes_per_s(self) -> float | None:
        """The modelled storage bandwidth, or None for uncapped reads."""
        return self.reader.bytes_per_s if self.reader is not None else None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> bytes:
        path = self.paths[index]
        if self.reader is not None:
            return self.reader.read(path)
        with open(path, "rb") as f:
            return f.read()


def write_synthetic_files(directory: str | os.PathLike[str], n_items: int, item_bytes: int,
                          seed: int = 0) -> list[Path]:
    """Write ``n_items`` files of ``item_bytes`` random bytes each (``item_000000.bin``, ...); returns their paths.

    Random content is incompressible, so no filesystem or codec makes the "storage" cheaper than its size.
    Deterministic for a given ``seed``.
    """
    if n_items <= 0 or item_bytes <= 0:
        raise ValueError(f"n_items and item_bytes must be > 0, got {n_items} and {item_bytes}")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    width = max(6, len(str(n_items - 1)))
    paths = []
    for i in range(n_items):
        p = root / f"item_{i:0{width}d}.bin"
        p.write_bytes(rng.bytes(item_bytes))
        paths.append(p)
    return paths
