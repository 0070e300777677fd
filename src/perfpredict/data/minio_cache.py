"""MinIO: an application-level cache of raw dataset items that never evicts (Mohan et al., VLDB'21; Synergy).

Why not just let the page cache (or an LRU) do it? A training epoch reads every item exactly once in a
random order, so with a cache smaller than the dataset an LRU evicts each item before its next use and the
hit rate tends to zero, while the cache thrashes. MinIO instead keeps whatever it admitted first and never
evicts: a cache of ``m`` bytes holds a *fixed* subset of ``≈ m/D`` of the dataset, and every later epoch hits
exactly that subset. That is both the best hit rate achievable for random-order epochs and a predictable
one, which is what lets Synergy fill the memory dimension of its sensitivity matrix analytically
(:mod:`perfpredict.fit.cache_model`) instead of measuring it.

What is cached is the raw item as read from storage (before ``preprocess``), because caching saves the
storage read, not the CPU work: preprocessing (random augmentation) is redone on every epoch.

Workers. A plain per-object cache (a dict) does not work with a multi-process DataLoader: each worker has
its own copy, fills it with the items *it* happened to read, and in the next epoch the sampler sends items
to whichever worker — so with ``k`` workers only ~``1/k`` of the cached items hit, and memory is used ``k``
times. This cache is therefore *shared across processes* from the start:

- the payload lives in one pre-allocated arena of ``capacity_bytes`` in shared memory (a torch uint8 tensor
  moved to shared memory, so it is inherited by forked workers and passed by handle, not copied, to spawned
  ones), with a shared per-item table (offset, length, kind) and shared hit/miss counters;
- a worker that misses reads the item from the wrapped dataset *outside* any lock (storage reads stay
  parallel), then under a process-shared lock admits it if it is not cached yet and fits in the remaining
  space, bump-allocating its bytes. Entries are written once and never move, so hits copy out without
  holding the lock.

Determinism. Admission is "first read, while space remains". With equal-sized items the number cached
after one epoch is exactly ``floor(capacity / item_bytes)`` (or all of them) whatever the read order, and
every later epoch hits exactly those items. Which items those are depends on the first epoch's order; call
:meth:`MinIOCache.warm` in the main process before training to cache a fixed prefix by index order instead.
With unequal sizes the count depends on the order too (a later, smaller item may still fit).

Accounting. An item occupies its *stored* size: a ``bytes``-like item is stored verbatim (size = its
length, so the cache's byte count matches the dataset's), anything else is pickled (a few tens of bytes
of overhead per item; a tensor that is a view of a larger one, ``data[i]``, is copied out first, or its
pickle would hold the whole of ``data``). The arena is exactly ``capacity_bytes``, so the cache's memory is what was asked
for; it is allocated (and its pages touched) at construction, so ``/dev/shm`` must have room for it.

The lock is a ``spawn``-context lock (inherited by forked workers, picklable to spawned ones), and like any
multiprocessing primitive the cache can be sent to child processes only as they start (as DataLoader does),
not pickled otherwise.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["CacheStats", "MinIOCache", "stored_bytes"]

_RAW = 0  # stored verbatim: bytes / bytearray / memoryview (returned as bytes)
_PICKLED = 1

# Indices into the shared counter tensor.
_CURSOR, _HITS, _MISSES, _BYTES_HIT, _BYTES_MISSED = range(5)


@dataclass(frozen=True)
class CacheStats:
    """Counters of a :class:`MinIOCache`, summed over every process that used it."""

    capacity_bytes: int
    items_cached: int
    bytes_cached: int
    hits: int
    misses: int
    bytes_hit: int
    bytes_missed: int

    @property
    def hit_rate(self) -> float:
        """Hits over reads since the counters were last reset (0 when nothing was read)."""
        n = self.hits + self.misses
        return self.hits / n if n else 0.0


def _compact(item: Any) -> Any:
    """``item`` with every tensor that is a view of a larger storage copied out: pickling a tensor writes its
    whole storage, so ``data[i]`` of an in-memory dataset would be stored as all of ``data``."""
    if isinstance(item, torch.Tensor):
        if item.layout == torch.strided and item.device.type != "meta" \
                and item.untyped_storage().nbytes() > item.numel() * item.element_size():
            return item.clone(memory_format=torch.contiguous_format)
        return item
    if type(item) in (tuple, list):
        return type(item)(_compact(x) for x in item)
    if type(item) is dict:
        return {k: _compact(v) for k, v in item.items()}
    return item


def _encode(item: Any) -> tuple[bytes | memoryview, int]:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return memoryview(item).cast("B"), _RAW
    return pickle.dumps(_compact(item), protocol=pickle.HIGHEST_PROTOCOL), _PICKLED


def stored_bytes(item: Any) -> int:
    """The bytes ``item`` occupies in a :class:`MinIOCache` (its length if bytes-like, else its pickle's)."""
    return len(_encode(item)[0])


def _decode(payload: bytes, kind: int) -> Any:
    return payload if kind == _RAW else pickle.loads(payload)


def _shared(t: torch.Tensor) -> torch.Tensor:
    return t.share_memory_()


class MinIOCache(torch.utils.data.Dataset):
    """``dataset`` behind a MinIO cache of ``capacity_bytes``, shared by all DataLoader workers.

    ``cache[i]`` returns the same item as ``dataset[i]`` (a ``bytes``-like item comes back as ``bytes``).
    See the module docstring for the design and its guarantees.
    """

    def __init__(self, dataset: Any, capacity_bytes: int) -> None:
        if isinstance(capacity_bytes, bool) or int(capacity_bytes) != capacity_bytes or capacity_bytes < 0:
            raise ValueError(f"capacity_bytes must be a non-negative integer, got {capacity_bytes!r}")
        self.dataset = dataset
        self.capacity_bytes = int(capacity_bytes)
        n = len(dataset)
        self._arena = _shared(torch.empty(self.capacity_bytes, dtype=torch.uint8))
        self._offset = _shared(torch.zeros(n, dtype=torch.int64))
        self._length = _shared(torch.full((n,), -1, dtype=torch.int64))
        self._kind = _shared(torch.zeros(n, dtype=torch.int8))
        self._counters = _shared(torch.zeros(5, dtype=torch.int64))
        self._lock = multiprocessing.get_context("spawn").Lock()

    # Attributes profiling reads off a dataset, passed through from the wrapped one.
    @property
    def dataset_bytes(self) -> int | None:
        return getattr(self.dataset, "dataset_bytes", None)

    @property
    def storage_bytes_per_s(self) -> float | None:
        return getattr(self.dataset, "storage_bytes_per_s", None)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        i = int(index)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} items")
        with self._lock:
            length = int(self._length[i])
            if length >= 0:
                offset = int(self._offset[i])
                self._counters[_HITS] += 1
                self._counters[_BYTES_HIT] += length
        if length >= 0:
            # Published entries are immutable: copy out without the lock.
            payload = self._arena[offset:offset + length].numpy().tobytes()
            return _decode(payload, int(self._kind[i]))
        item = self.dataset[i]  # the storage read, outside the lock
        self._admit(i, item, count_miss=True)
        return item

    def _admit(self, i: int, item: Any, count_miss: bool) -> bool:
        """Store ``item`` as entry ``i`` if it is not cached yet and fits; returns whether it is cached now."""
        payload, kind = _encode(item)
        size = len(payload)
        with self._lock:
            if count_miss:
                self._counters[_MISSES] += 1
                self._counters[_BYTES_MISSED] += size
            if int(self._length[i]) >= 0:
                return True
            cursor = int(self._counters[_CURSOR])
            if cursor + size > self.capacity_bytes:
                return False
            if size:
                self._arena[cursor:cursor + size].numpy()[:] = np.frombuffer(payload, dtype=np.uint8)
            self._offset[i] = cursor
            self._kind[i] = kind
            self._length[i] = size  # published last: a reader that sees a length finds the bytes in place
            self._counters[_CURSOR] = cursor + size
            return True

    def warm(self, indices: Iterable[int] | None = None) -> int:
        """Fill the cache in the calling process, reading ``indices`` (default: 0, 1, 2, ...) in order.

        Stops at the first item that does not fit, so the cached set is a deterministic prefix of
        ``indices``; the reads count as misses (they come from storage). Call it before creating the
        DataLoader's workers (or at any time: the arena is shared). Returns the number of items cached.
        """
        for i in (range(len(self)) if indices is None else indices):
            if int(self._length[int(i)]) >= 0:
                continue
            item = self.dataset[int(i)]
            if not self._admit(int(i), item, count_miss=True):
                break
        return self.stats().items_cached

    def is_cached(self, index: int) -> bool:
        return int(self._length[int(index)]) >= 0

    def cached_indices(self) -> list[int]:
        """Indices of the cached items, ascending."""
        return [int(i) for i in torch.nonzero(self._length >= 0).flatten()]

    def stats(self) -> CacheStats:
        """Current counters (all processes)."""
        with self._lock:
            c = [int(v) for v in self._counters]
            cached = int((self._length >= 0).sum())
        return CacheStats(capacity_bytes=self.capacity_bytes, items_cached=cached, bytes_cached=c[_CURSOR],
                          hits=c[_HITS], misses=c[_MISSES], bytes_hit=c[_BYTES_HIT], bytes_missed=c[_BYTES_MISSED])

    def reset_stats(self) -> None:
        """Zero the hit/miss counters (e.g. after a warm-up epoch); the cached items stay."""
        with self._lock:
            self._counters[_HITS:] = 0

    def __repr__(self) -> str:
        s = self.stats()
        return (f"MinIOCache({type(self.dataset).__name__}, capacity_bytes={self.capacity_bytes}, "
                f"items_cached={s.items_cached}/{len(self)})")
