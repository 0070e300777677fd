"""Benchmark: does the MinIO cache model predict real DataLoader throughput at memory sizes it never ran?

Optimistic profiling measures a job only with its dataset fully cached and fills in every smaller memory
size with :func:`perfpredict.fit.cache_model.cached_throughput`. This checks that prediction against a real
input pipeline:

1. Write an I/O dataset: ``--items`` files of ``--item-kb`` KiB of random bytes in a temporary directory.
2. Storage: every read is a real file read through a :class:`BandwidthLimitedReader` capped at
   ``--bandwidth-mb`` MB/s across all worker processes (the page cache would otherwise make local files
   free). Its bandwidth is *measured* by timing concurrent reads of items (or, with
   ``--bw-source configured``, taken from the cap).
3. CPU side: the same pipeline (``--workers`` DataLoader workers, :class:`DecodeAugment` preprocessing)
   with the whole dataset cached: its steady-state samples/s is what optimistic profiling measures.
4. For each cache size in ``--fractions`` (of the dataset): a fresh ``MinIOCache`` over the capped files,
   one warm-up epoch of raw reads in random order by the workers (which fills it, first come first
   cached), then the pipeline runs ``--epochs`` + 2 epochs back to back from one sampler (concatenated
   random permutations: each epoch still reads every item once): one to reach steady state, the timed
   ones, and a tail so the pipeline is still full when the window closes. The window is aligned to the
   timed epochs; the rate is the slope of samples delivered over batch arrival times in it.
5. Predicted samples/s = ``cached_throughput(cpu_rate, fraction·D, D, bandwidth, item_bytes)`` (overlapped
   form, the default) vs measured. Target: ≤ 10% error. For reference also the serial form (a lower
   bound) and the overlapped form limited to ``--workers`` readers (``workers=``, "W-limited").

Defaults run in about 30 s on 2 cores and are storage-bound at every cache size (the regime the cache
matters in). Small batches and more workers than cores keep the measurement honest: each worker builds a
whole batch, batches are delivered in order, and with few workers or big batches a batch with many misses
holds the others up, the storage idles and the pipeline runs below what the model (and a well-configured
loader) achieves — the "storage busy" column shows it. Batch-arrival timing also carries noise of the
order of (samples in flight) / (samples in the window), which small batches keep down. With heavier
preprocessing (``--passes``) the larger caches become CPU-bound; the overlapped model is an upper bound
that is least accurate near the knee, where the two rates are equal.

    python benchmarks/cache_model_accuracy.py [--bandwidth-mb 8] [--fractions 0.25,0.5,0.75] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from perfpredict.fit.cache_model import cached_throughput, hit_fraction
from perfpredict.script_args import (
    describe,
    float_list,
    measure_keeping_partial,
    nonneg_int,
    out_file,
    positive_float,
    positive_int,
    stop_requested,
)


class EpochsSampler:
    """``epochs`` random permutations of ``range(n)``, back to back: each epoch reads every item once. (A
    DataLoader takes any sized iterable of indices as its sampler; torch is imported when one is drawn, so a
    wrong flag is answered before the second torch takes to import.)"""

    def __init__(self, n: int, epochs: int, seed: int) -> None:
        self.n, self.epochs, self.seed = n, epochs, seed

    def __len__(self) -> int:
        return self.n * self.epochs

    def __iter__(self) -> Iterator[int]:
        import torch

        g = torch.Generator().manual_seed(self.seed)
        for _ in range(self.epochs):
            yield from torch.randperm(self.n, generator=g).tolist()


def _batch_len(batch) -> int:
    return len(batch) if isinstance(batch, list) else int(batch.shape[0])


def timed_throughput(ds, sampler: EpochsSampler, *, skip: int, timed: int, batch_size: int, workers: int,
                     prefetch: int = 2, collate=None, on_clock: Callable[[], None] | None = None) -> tuple[float, float]:
    """Samples/s of a DataLoader over ``ds`` in steady state: (samples/s, timed seconds).

    The window opens when the batch completing the first ``skip`` samples arrives and closes when the one
    completing the next ``timed`` arrives; the sampler must run on past it (the loader is then shut down)
    so the pipeline is full throughout, with no start-up or drain inside the window. The rate is the
    least-squares slope of samples delivered against arrival time over every batch in the window, not
    just (samples / window): with several workers each holding a partly built batch, how much work is in
    flight when the window opens and closes varies by up to a batch per worker, and the slope is far less
    sensitive to that than the two endpoints alone. ``on_clock()`` is called as the window opens and as it
    closes (e.g. to snapshot cache counters).
    """
    if skip < batch_size or skip % batch_size or timed % batch_size or timed < 2 * batch_size:
        raise ValueError("skip and timed must be positive multiples of the batch size (timed >= 2 batches)")
    if len(sampler) < skip + timed + batch_size * max(workers, 1):
        raise ValueError("the sampler must run at least one batch per worker past the timed window")
    import torch

    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, sampler=sampler, num_workers=workers,
                                         collate_fn=collate, drop_last=True,
                                         prefetch_factor=prefetch if workers else None)
    seen, times, counts = 0, [], []
    it = iter(loader)
    try:
        for batch in it:
            seen += _batch_len(batch)
            if seen >= skip:
                times.append(time.perf_counter())
                counts.append(seen)
                if seen == skip and on_clock is not None:
                    on_clock()
            if seen == skip + timed:
                if on_clock is not None:
                    on_clock()
                slope = float(np.polyfit(np.asarray(times) - times[0], np.asarray(counts, dtype=float), 1)[0])
                return slope, times[-1] - times[0]
    finally:
        del it  # shuts the workers down
    raise AssertionError("unreachable: the sampler is long enough")


def _as_list(batch):
    return batch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--items", type=positive_int, default=400)
    ap.add_argument("--item-kb", type=positive_int, default=64, help="item size in KiB")
    ap.add_argument("--bandwidth-mb", type=positive_float, default=8.0, help="storage cap, MB/s (1e6 bytes)")
    ap.add_argument("--bw-source", choices=("measured", "configured"), default="measured",
                    help="storage bandwidth the model uses [measured]")
    ap.add_argument("--fractions", default="0.25,0.5,0.75",
                    help="cache sizes, fractions of the dataset (each above 0 and below 1)")
    ap.add_argument("--epochs", type=positive_int, default=2, help="timed steady-state epochs per cache size")
    ap.add_argument("--workers", type=nonneg_int, default=6,
                    help="DataLoader workers (more than cores is fine: storage-bound workers mostly wait)")
    ap.add_argument("--batch-size", type=positive_int, default=8)
    ap.add_argument("--prefetch", type=positive_int, default=2, help="DataLoader prefetch_factor (batches per worker)")
    ap.add_argument("--side", type=positive_int, default=64, help="preprocess: decoded image side")
    ap.add_argument("--passes", type=nonneg_int, default=2, help="preprocess: blur passes (CPU cost per sample)")
    ap.add_argument("--seed", type=nonneg_int, default=0)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # more workers than cores: wanted

    # --fractions and --json stay strings in args (the JSON written at the end records them as typed)
    try:
        fractions = float_list(args.fractions)
    except argparse.ArgumentTypeError as e:
        ap.error(f"argument --fractions: {e}")
    if any(f >= 1 for f in fractions):
        ap.error(f"argument --fractions: {args.fractions!r}: each must be below 1 (a cache of the whole dataset "
                 "never reads storage; that is the CPU-side rate, measured anyway)")
    if args.json:
        try:
            out_file(args.json)
        except argparse.ArgumentTypeError as e:
            ap.error(f"argument --json: {e}")
    if args.items % args.batch_size:
        ap.error("--items must be a multiple of --batch-size (whole batches per epoch)")
    if args.items < args.batch_size * max(args.workers, 1):
        ap.error("--items must be at least --batch-size x --workers (the pipeline runs a batch per worker past "
                 "the timed window)")
    if args.items * args.epochs < 2 * args.batch_size:
        ap.error("--items x --epochs must be at least two batches (the timed window)")
    import torch

    from perfpredict.data import (
        BandwidthLimitedReader,
        DecodeAugment,
        FileDataset,
        MinIOCache,
        Preprocessed,
        write_synthetic_files,
    )

    item_bytes = args.item_kb * 1024
    bw_cap = args.bandwidth_mb * 1e6
    transform = DecodeAugment(side=args.side, out=32, passes=args.passes)
    t_start = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="cache_model_") as tmp:
        root = tmp
        write_synthetic_files(root, args.items, item_bytes, seed=args.seed)
        n = args.items
        plain = FileDataset(root)
        dataset_bytes = plain.dataset_bytes
        common = {"batch_size": args.batch_size, "workers": args.workers, "prefetch": args.prefetch}

        # Storage bandwidth: concurrent raw reads of uncached items through the capped reader, by as many
        # threads as there are workers, so the device always has a request queued, as it does under a
        # storage-bound DataLoader (a DataLoader's batch arrivals are too bursty to time a short raw-read
        # stream from; a single sequential reader would lose the scheduling latency between its reads).
        capped = FileDataset(root, reader=BandwidthLimitedReader(bw_cap))
        probe_n = min(n, max(8, int(0.5 * bw_cap / item_bytes)))  # about half a second
        with ThreadPoolExecutor(max(args.workers, 1)) as pool:
            t0 = time.perf_counter()
            read = sum(pool.map(lambda i: len(capped[i]), range(probe_n)))
            bw_measured = read / (time.perf_counter() - t0)
        bw = bw_measured if args.bw_source == "measured" else bw_cap

        # CPU side: everything cached (the cache is filled by an uncapped first epoch; at full cache the
        # steady state never reads storage, so the cap would only slow down the fill).
        full = MinIOCache(FileDataset(root), capacity_bytes=dataset_bytes)
        cpu_epochs = max(3, args.epochs)  # cheap (no storage): time a few epochs for a steadier rate
        cpu_rate, cpu_s = timed_throughput(Preprocessed(full, transform), EpochsSampler(n, cpu_epochs + 2, args.seed),
                                           skip=n, timed=n * cpu_epochs, **common)
        assert full.stats().items_cached == n
        del full

        rows: list[dict] = []

        def measure_all() -> None:
            for frac in fractions:
                if stop_requested():  # a Ctrl-C whose KeyboardInterrupt a DataLoader's clean-up swallowed
                    raise KeyboardInterrupt
                cache = MinIOCache(FileDataset(root, reader=BandwidthLimitedReader(bw_cap)),
                                   capacity_bytes=int(frac * dataset_bytes))
                # Warm-up: one epoch of raw reads by the workers fills the cache (first read, first cached).
                fill = torch.utils.data.DataLoader(cache, batch_size=args.batch_size, num_workers=args.workers,
                                                   sampler=EpochsSampler(n, 1, args.seed + 1), collate_fn=_as_list)
                for _ in fill:
                    pass
                del fill
                # Then the pipeline: one untimed epoch to reach its steady state, the timed epochs, and a tail epoch
                # the window never reaches (see timed_throughput). The window is epoch-aligned, so it reads each
                # item once per timed epoch: exactly the cached fraction hits.
                snaps = []
                measured, secs = timed_throughput(Preprocessed(cache, transform),
                                                  EpochsSampler(n, args.epochs + 2, args.seed + 2),
                                                  skip=n, timed=n * args.epochs, **common,
                                                  on_clock=lambda c=cache, s=snaps: s.append(c.stats()))
                st = cache.stats()
                # Hit rate of the reads the workers made while the clock ran (after the warm-up epoch filled the
                # cache, first read first cached, by the workers).
                hits, misses = snaps[1].hits - snaps[0].hits, snaps[1].misses - snaps[0].misses
                hit_rate_steady = hits / (hits + misses)
                # Fraction of the window the modelled device spent transferring: < 1 means it sat idle.
                storage_busy = (snaps[1].bytes_missed - snaps[0].bytes_missed) / bw_cap / secs
                pred = float(cached_throughput(cpu_rate, frac * dataset_bytes, dataset_bytes, bw, item_bytes))
                serial = float(cached_throughput(cpu_rate, frac * dataset_bytes, dataset_bytes, bw, item_bytes,
                                                 overlap=False))
                w_limited = float(cached_throughput(cpu_rate, frac * dataset_bytes, dataset_bytes, bw, item_bytes,
                                                    workers=max(args.workers, 1)))
                io_rate = bw / ((1 - hit_fraction(frac * dataset_bytes, dataset_bytes)) * item_bytes)
                rows.append({"fraction": frac, "cache_bytes": int(frac * dataset_bytes),
                             "items_cached": st.items_cached, "hit_rate": hit_rate_steady,
                             "model_hit_fraction": float(hit_fraction(frac * dataset_bytes, dataset_bytes)),
                             "bound": "storage" if io_rate < cpu_rate else "cpu",
                             "predicted": pred, "predicted_serial": serial, "predicted_workers": w_limited,
                             "rel_err_workers": abs(w_limited - measured) / measured, "measured": measured,
                             "timed_s": secs, "storage_busy": storage_busy, "rel_err": abs(pred - measured) / measured})
                print(f"cache {frac:.0%}: measured {measured:.1f} samples/s, predicted {pred:.1f} "
                      f"({rows[-1]['rel_err']:.1%} error)", flush=True)
                del cache

        # Ctrl-C: the cache sizes measured so far are reported and saved
        interrupted = measure_keeping_partial(measure_all, rows)

    wall = time.perf_counter() - t_start
    print(f"dataset: {n} items x {args.item_kb} KiB = {dataset_bytes / 1e6:.1f} MB; {args.workers} workers, "
          f"batch {args.batch_size}, {transform!r}, {args.epochs} timed epoch(s) per size")
    print(f"storage: cap {bw_cap / 1e6:.2f} MB/s, measured {bw_measured / 1e6:.2f} MB/s "
          f"({bw_measured / item_bytes:.1f} items/s); model uses {args.bw_source}")
    print(f"CPU side (full cache): {cpu_rate:.1f} samples/s over {cpu_s:.2f} s")
    print()
    head = (f"{'cache':>6} {'cached':>7} {'hit':>6} {'model hit':>9} {'bound':>7} {'predicted':>10} "
            f"{'measured':>9} {'error':>6} {'serial':>7} {'W-limited':>9} {'error':>6} {'storage busy':>12}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['fraction']:>6.0%} {r['items_cached']:>7d} {r['hit_rate']:>6.1%} {r['model_hit_fraction']:>9.1%} "
              f"{r['bound']:>7} {r['predicted']:>10.1f} {r['measured']:>9.1f} {r['rel_err']:>6.1%} "
              f"{r['predicted_serial']:>7.1f} {r['predicted_workers']:>9.1f} {r['rel_err_workers']:>6.1%} "
              f"{r['storage_busy']:>12.1%}")
    worst = max(r["rel_err"] for r in rows)
    print()
    print(f"max error {worst:.1%} (target <= 10%): {'PASS' if worst <= 0.10 else 'FAIL'}; wall {wall:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "storage_bytes_per_s": bw, "storage_bytes_per_s_measured": bw_measured,
                       "cpu_rate": cpu_rate, "rows": rows, "max_rel_err": worst, "wall_s": wall,
                       "interrupted": interrupted}, f, indent=2)
    if interrupted:
        raise KeyboardInterrupt
    return 0 if worst <= 0.10 else 1


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
