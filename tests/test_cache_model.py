"""MinIO cache: the arithmetic of the memory dimension, and the real cache / capped storage it models.

The cache and reader tests are real: files in tmp_path, real reads, real DataLoader worker processes,
wall-clock time.
"""

from __future__ import annotations

import multiprocessing
import time

import numpy as np
import pytest
import torch

from perfpredict.data import (
    BandwidthLimitedReader,
    DecodeAugment,
    FileDataset,
    MinIOCache,
    Preprocessed,
    write_synthetic_files,
)
from perfpredict.fit.cache_model import (
    cached_throughput,
    demand_vector,
    hit_fraction,
    sensitivity_matrix,
)

MB = 1e6

# ----------------------------------------------------------------------------------------------- arithmetic


def test_hit_fraction():
    assert hit_fraction(0, 1000) == 0.0
    assert hit_fraction(250, 1000) == 0.25
    assert hit_fraction(1000, 1000) == 1.0
    assert hit_fraction(5000, 1000) == 1.0  # a cache bigger than the dataset cannot hit more than all
    assert hit_fraction(10, 0) == 1.0  # nothing to read
    np.testing.assert_allclose(hit_fraction([0, 500, 2000], 1000), [0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="dataset_bytes"):
        hit_fraction(1, -1)
    with pytest.raises(ValueError, match="cache_bytes"):
        hit_fraction(-1, 10)


def test_cpu_bound_regime_ignores_the_cache():
    # Storage could deliver 1e9 / 1e4 = 100k samples/s even with no cache: the CPU side is the limit.
    for m in (0, 0.3e6, 1e6):
        assert cached_throughput(200.0, m, 1e6, 1e9, 1e4) == 200.0


def test_storage_bound_regime_scales_with_one_over_the_miss_fraction():
    cpu, dataset, bw, item = 1e6, 100 * MB, 1 * MB, 10_000.0
    no_cache = cached_throughput(cpu, 0, dataset, bw, item)
    assert no_cache == pytest.approx(bw / item)  # 100 samples/s: every item from storage
    for frac in (0.25, 0.5, 0.75, 0.9):
        got = cached_throughput(cpu, frac * dataset, dataset, bw, item)
        assert got == pytest.approx(no_cache / (1 - frac))
    assert cached_throughput(cpu, dataset, dataset, bw, item) == cpu  # all hits: back to the CPU rate


def test_serial_form_adds_the_times_and_is_never_above_the_overlapped_form():
    cpu, dataset, bw, item = 400.0, 1000.0, 1e6, 1e4
    got = cached_throughput(cpu, 500.0, dataset, bw, item, overlap=False)
    assert got == pytest.approx(1 / (1 / cpu + 0.5 * item / bw))
    m = np.linspace(0, 1200, 13)
    serial = cached_throughput(cpu, m, dataset, bw, item, overlap=False)
    overlapped = cached_throughput(cpu, m, dataset, bw, item)
    assert np.all(serial <= overlapped + 1e-9)
    assert serial[-1] == pytest.approx(cpu) and overlapped[-1] == pytest.approx(cpu)
    assert cached_throughput(0.0, 0.0, dataset, bw, item, overlap=False) == 0.0


def test_worker_limited_overlap_lies_between_serial_and_min():
    cpu, dataset, bw, item = 400.0, 1000.0, 1e6, 1e4
    m = np.linspace(0, 1000, 11)
    serial = cached_throughput(cpu, m, dataset, bw, item, overlap=False)
    plain = cached_throughput(cpu, m, dataset, bw, item)
    np.testing.assert_allclose(cached_throughput(cpu, m, dataset, bw, item, workers=1), serial)
    np.testing.assert_allclose(cached_throughput(cpu, m, dataset, bw, item, workers=10**9), plain, rtol=1e-6)
    w4 = cached_throughput(cpu, m, dataset, bw, item, workers=4)
    assert np.all(serial <= w4 + 1e-9) and np.all(w4 <= plain + 1e-9)
    # Half cached: 5 ms of storage per sample on average, 2.5 ms of CPU: min() says 200/s; four workers
    # overlap at most 4 ways: 1 / (2.5 ms + 5 ms / 4) = 266.7/s > 200/s, so storage still decides.
    assert cached_throughput(cpu, 500.0, dataset, bw, item, workers=4) == pytest.approx(200.0)
    # 90% cached: 1 ms storage per sample; min() says 400/s (CPU), 2 workers give 1 / (2.5 + 0.5) ms.
    assert cached_throughput(cpu, 900.0, dataset, bw, item, workers=2) == pytest.approx(1 / 3e-3)
    with pytest.raises(ValueError, match="workers"):
        cached_throughput(cpu, 0.0, dataset, bw, item, workers=0)
    with pytest.raises(ValueError, match="overlapped form only"):
        cached_throughput(cpu, 0.0, dataset, bw, item, overlap=False, workers=2)


def test_throughput_validation():
    with pytest.raises(ValueError, match="storage_bytes_per_s"):
        cached_throughput(1.0, 0, 10, 0, 1)
    with pytest.raises(ValueError, match="cpu_throughput"):
        cached_throughput(float("nan"), 0, 10, 1, 1)
    with pytest.raises(ValueError, match="mean_item_bytes"):
        cached_throughput(1.0, 0, 10, 1, -1)


def _example_matrix():
    cpus = [1, 2, 4, 8]
    curve = [100.0, 200.0, 400.0, 420.0]
    dataset = 1000 * MB
    mems = [0.0, 0.25 * dataset, 0.5 * dataset, 0.75 * dataset, dataset]
    # Storage: 1 MB/s of 10 kB items = 100 samples/s with no cache.
    return cpus, curve, mems, sensitivity_matrix(cpus, curve, mems, dataset, 1 * MB, 10_000.0)


def test_matrix_shape_monotone_in_memory_and_full_cache_column_is_the_cpu_curve():
    cpus, curve, mems, w = _example_matrix()
    assert w.shape == (4, 5)
    assert np.all(np.diff(w, axis=1) >= 0)
    np.testing.assert_allclose(w[:, -1], curve)
    np.testing.assert_allclose(w[:, 0], [100.0] * 4)  # storage-bound at every CPU count
    np.testing.assert_allclose(w[3], [100.0, 400 / 3, 200.0, 400.0, 420.0])
    with pytest.raises(ValueError, match="one value per CPU count"):
        sensitivity_matrix(cpus, curve[:3], mems, 1e9, 1e6, 1e4)


def test_matrix_with_one_worker_per_cpu():
    cpus, curve, mems, plain = _example_matrix()
    w = sensitivity_matrix(cpus, curve, mems, 1000 * MB, 1 * MB, 10_000.0, workers=cpus)
    for i, c in enumerate(cpus):
        np.testing.assert_allclose(w[i], cached_throughput(curve[i], np.asarray(mems), 1000 * MB, 1 * MB, 10_000.0,
                                                           workers=c))
    assert np.all(w <= plain + 1e-9)
    np.testing.assert_allclose(w[:, -1], curve)  # full cache: no storage, no difference
    np.testing.assert_allclose(w[0], sensitivity_matrix(cpus, curve, mems, 1000 * MB, 1 * MB, 10_000.0,
                                                        overlap=False)[0])  # 1 worker = serial
    with pytest.raises(ValueError, match="one per CPU count"):
        sensitivity_matrix(cpus, curve, mems, 1e9, 1e6, 1e4, workers=[1, 2])


def test_demand_vector_fewest_cpus_then_least_memory():
    cpus, _, mems, w = _example_matrix()
    # Best 420; within 10% means >= 378: reachable at 4 CPUs with 75% cached (400), not at 2 CPUs (<= 200).
    assert demand_vector(cpus, mems, w, 0.1) == (4, mems[3])
    # Within 60% (>= 168): 2 CPUs with 50% cached (200) suffice.
    assert demand_vector(cpus, mems, w, 0.6) == (2, mems[2])
    # Exact best only.
    assert demand_vector(cpus, mems, w, 0.0) == (8, mems[4])


def test_demand_vector_uses_values_not_positions_and_validates():
    w = np.array([[5.0, 10.0], [9.5, 10.0]])
    # Row 1 is 2 CPUs, column 1 is memory 1.0: the smallest *values* win, wherever they sit.
    assert demand_vector([4, 2], [2.0, 1.0], w, 0.1) == (2, 1.0)
    assert demand_vector([4, 2], [2.0, 1.0], w, 0.0) == (2, 1.0)  # ties at the max: least memory
    with pytest.raises(ValueError, match="shape"):
        demand_vector([1, 2], [1.0], w)
    with pytest.raises(ValueError, match="threshold"):
        demand_vector([1, 2], [1.0, 2.0], w, 1.0)


# ------------------------------------------------------------------------------------- real files and cache

N_FILES, FILE_BYTES = 40, 4096


@pytest.fixture
def files(tmp_path):
    paths = write_synthetic_files(tmp_path / "data", N_FILES, FILE_BYTES, seed=3)
    return tmp_path / "data", [p.read_bytes() for p in paths]


def _as_list(batch):
    return batch


def _loader(ds, workers: int, seed: int) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True, num_workers=workers,
                                       collate_fn=_as_list, generator=torch.Generator().manual_seed(seed))


def test_synthetic_files_and_file_dataset(files, tmp_path):
    root, contents = files
    ds = FileDataset(root)
    assert len(ds) == N_FILES and ds.dataset_bytes == N_FILES * FILE_BYTES and ds.mean_item_bytes == FILE_BYTES
    assert ds.storage_bytes_per_s is None
    assert [ds[i] for i in range(N_FILES)] == contents
    again = write_synthetic_files(tmp_path / "again", N_FILES, FILE_BYTES, seed=3)
    assert [p.read_bytes() for p in again] == contents  # deterministic per seed
    assert len(set(contents)) == N_FILES
    with pytest.raises(ValueError, match="no files"):
        FileDataset(tmp_path / "data", pattern="*.jpg")


def test_cache_holds_a_fixed_quarter_and_never_evicts(files):
    root, contents = files
    cache = MinIOCache(FileDataset(root), capacity_bytes=N_FILES * FILE_BYTES // 4)
    loader = _loader(cache, 0, seed=1)
    first = [x for b in loader for x in b]
    assert sorted(first) == sorted(contents)
    s = cache.stats()
    assert (s.items_cached, s.bytes_cached, s.hits, s.misses) == (10, 10 * FILE_BYTES, 0, N_FILES)
    cached = cache.cached_indices()
    for epoch in range(2):
        cache.reset_stats()
        items = [x for b in loader for x in b]
        assert sorted(items) == sorted(contents)  # hits return the right bytes
        s = cache.stats()
        assert (s.hits, s.misses) == (10, 30)
        assert s.hit_rate == pytest.approx(hit_fraction(cache.capacity_bytes, N_FILES * FILE_BYTES))
        assert cache.cached_indices() == cached  # nothing evicted, nothing new admitted
    assert all(cache[i] == contents[i] for i in range(N_FILES))


def test_cache_is_shared_by_dataloader_workers(files):
    root, contents = files
    cache = MinIOCache(FileDataset(root), capacity_bytes=N_FILES * FILE_BYTES // 4)
    loader = _loader(cache, 2, seed=2)  # a fresh pair of worker processes each epoch
    assert sorted(x for b in loader for x in b) == sorted(contents)
    s = cache.stats()  # counted by the workers, visible in the main process
    assert (s.items_cached, s.hits, s.misses) == (10, 0, N_FILES)
    cached = cache.cached_indices()
    cache.reset_stats()
    assert sorted(x for b in loader for x in b) == sorted(contents)
    s = cache.stats()
    # Per-worker caches would give about half of this, in varying amounts.
    assert (s.hits, s.misses) == (10, 30)
    assert cache.cached_indices() == cached


def test_warm_caches_a_deterministic_prefix_used_by_workers(files):
    root, contents = files
    cache = MinIOCache(FileDataset(root), capacity_bytes=N_FILES * FILE_BYTES // 4 + 100)
    assert cache.warm() == 10
    assert cache.cached_indices() == list(range(10))
    cache.reset_stats()
    items = [x for b in _loader(cache, 2, seed=5) for x in b]
    assert sorted(items) == sorted(contents)
    assert (cache.stats().hits, cache.stats().misses) == (10, 30)
    assert cache.cached_indices() == list(range(10))


def test_cache_with_spawned_workers(files):
    root, contents = files
    cache = MinIOCache(FileDataset(root), capacity_bytes=N_FILES * FILE_BYTES // 2)
    cache.warm()
    loader = torch.utils.data.DataLoader(cache, batch_size=8, num_workers=1, collate_fn=_as_list,
                                         multiprocessing_context="spawn")
    assert [x for b in loader for x in b] == contents
    assert (cache.stats().hits, cache.stats().items_cached) == (20, 20)


def test_cache_edge_cases():
    zero = MinIOCache([b"abc", b"de"], capacity_bytes=0)
    assert zero[0] == b"abc" and zero[-1] == b"de"
    assert (zero.stats().items_cached, zero.stats().misses) == (0, 2)
    objs = MinIOCache([(b"raw", 1), {"k": np.arange(3)}], capacity_bytes=10_000)  # non-bytes items: pickled
    objs.warm()
    assert objs[0] == (b"raw", 1) and np.array_equal(objs[1]["k"], np.arange(3))
    assert objs.stats().hits == 2
    with pytest.raises(IndexError):
        objs[2]
    with pytest.raises(ValueError, match="capacity_bytes"):
        MinIOCache([b"x"], capacity_bytes=-1)


def test_preprocess_runs_on_cached_raw_items(files):
    root, _ = files
    ds = Preprocessed(MinIOCache(FileDataset(root), capacity_bytes=10**6), DecodeAugment(side=16, out=8, passes=1))
    x = ds[0]
    assert x.shape == (3, 8, 8) and x.dtype == torch.float32 and torch.isfinite(x).all()
    assert torch.equal(ds[0], x)  # the second read is a hit; the transform is deterministic
    assert DecodeAugment(side=8, out=4)(b"\x01\x02").shape == (3, 4, 4)  # short items are tiled


# ---------------------------------------------------------------------------------------- bandwidth cap

READ_FILES, READ_BYTES = 16, 16_384  # 256 KiB in all


@pytest.fixture
def read_files(tmp_path):
    write_synthetic_files(tmp_path / "r", READ_FILES, READ_BYTES, seed=0)
    return tmp_path / "r"


def test_reader_caps_bandwidth_in_one_process(read_files):
    bw = READ_FILES * READ_BYTES / 0.3  # the whole set should take 0.3 s
    ds = FileDataset(read_files, reader=BandwidthLimitedReader(bw))
    assert ds.storage_bytes_per_s == bw
    t0 = time.perf_counter()
    n = sum(len(ds[i]) for i in range(len(ds)))
    elapsed = time.perf_counter() - t0
    assert n == READ_FILES * READ_BYTES
    assert elapsed >= 0.9 * n / bw
    assert elapsed < 3 * n / bw  # and it is a cap, not a stall


def _read_half(ds: FileDataset, part: int, barrier) -> None:
    barrier.wait()
    for i in range(part, len(ds), 2):
        ds[i]


def test_reader_cap_is_shared_by_processes(read_files):
    n = READ_FILES * READ_BYTES
    bw = n / 0.4
    ds = FileDataset(read_files, reader=BandwidthLimitedReader(bw))
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(3)
    procs = [ctx.Process(target=_read_half, args=(ds, k, barrier)) for k in range(2)]
    for p in procs:
        p.start()
    barrier.wait()  # time from when both readers are up, excluding process start-up
    t0 = time.perf_counter()
    for p in procs:
        p.join(10)
    elapsed = time.perf_counter() - t0
    assert all(p.exitcode == 0 for p in procs)
    # Each process alone would be allowed bw, i.e. 0.2 s for its half; together they share it: >= 0.36 s.
    assert elapsed >= 0.9 * n / bw


def test_reader_cap_holds_with_dataloader_workers(read_files):
    n = READ_FILES * READ_BYTES
    bw = n / 0.4
    ds = FileDataset(read_files, reader=BandwidthLimitedReader(bw))
    loader = _loader(ds, 2, seed=0)
    t0 = time.perf_counter()
    got = sum(len(x) for b in loader for x in b)
    elapsed = time.perf_counter() - t0
    assert got == n
    assert elapsed >= 0.9 * n / bw


def test_reader_validation():
    with pytest.raises(ValueError, match="bytes_per_s"):
        BandwidthLimitedReader(0)
    with pytest.raises(ValueError, match="nbytes"):
        BandwidthLimitedReader(1e6).throttle(-1)
