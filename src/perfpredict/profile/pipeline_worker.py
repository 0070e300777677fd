"""Measure a job *with its input pipeline* on c CPUs (Synergy's profiling unit). Child side.

The process is pinned to ``cpus`` (affinity, inherited by the DataLoader workers), uses ``len(cpus)`` intra-op
threads and ``len(cpus)`` DataLoader workers, reads the workload's ``make_dataset()`` through ``preprocess`` in
a real :class:`torch.utils.data.DataLoader`, and trains on the batches it delivers. Throughput is samples
consumed by the training step per second over a wall-clock window, after a warm-up that starts the workers
and (for a cached dataset) fills the cache, i.e. memory at its maximum, as optimistic profiling assumes.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from perfpredict.data.preprocess import Preprocessed
from perfpredict.errors import ModelLoadError, exception_text
from perfpredict.profile import memory as mem
from perfpredict.profile.failure import failure_report
from perfpredict.profile.host_load import OtherLoad
from perfpredict.profile.worker import check_finite_loss
from perfpredict.workload.forward_args import KeywordInputs, call_forward, has_tensor
from perfpredict.workload.spec import WorkloadRef, to_device


@dataclass(frozen=True)
class PipelineRequest:
    ref: WorkloadRef
    batch_size: int
    cpus: tuple[int, ...]
    device: str = "cpu"
    window_s: float = 3.0
    warmup_batches: int = 3
    #: DataLoader workers; None → one per CPU.
    num_workers: int | None = None
    seed: int = 0


def prepare_dataset(workload, full_cache: bool = True):
    """The workload's dataset, wrapped in a MinIO cache sized to hold all of it when it reads from storage."""
    if workload.make_dataset is None:
        raise ModelLoadError("defines no make_dataset() hook, so it has no input pipeline to profile",
                             step="make_dataset")
    ds = workload.make_dataset()
    if full_cache and getattr(ds, "dataset_bytes", None):
        import math

        from perfpredict.data.minio_cache import MinIOCache, stored_bytes
        from perfpredict.profile.sensitivity_profile import raw_item_bytes

        # Slack: items that are not bytes are stored pickled, on top of the dataset_bytes the dataset reports
        # (tens of bytes for plain objects, ~400 for a torch tensor), and "memory at maximum" must really cache
        # every item. Bytes are stored verbatim (no slack needed beyond the 256 per item); for other items the
        # slack covers 1.25x the pickling overhead of item 0 (its stored size over its tensors'/arrays' bytes).
        n = len(ds)
        slack = 256
        first = ds[0] if n else b""
        if not isinstance(first, (bytes, bytearray, memoryview)):
            raw = raw_item_bytes(first)
            overhead = stored_bytes(first) - (raw if raw > 0 else ds.dataset_bytes / n)
            slack = max(slack, math.ceil(1.25 * overhead) + 64)
        ds = MinIOCache(ds, capacity_bytes=int(ds.dataset_bytes * 1.02) + slack * n)
    return ds


def run_pipeline(req: PipelineRequest, conn) -> None:
    try:
        result = measure_pipeline(req)
    except BaseException as e:  # noqa: BLE001 - last line of defence; the parent must get an answer
        result = {"status": "error", "phase": "worker", "error": f"{type(e).__name__}: {exception_text(e)}",
                  "traceback": traceback.format_exc()}
    try:
        conn.send(result)
    finally:
        conn.close()


def _split(batch: Any) -> tuple[Any, Any]:
    """A collated batch → (forward input, target or None): preprocess returns x or (x, target)."""
    if isinstance(batch, (list, tuple)) and len(batch) == 2:
        return batch[0], batch[1]
    return batch, None


def forward_args(x: Any, multi: bool, keyword: bool = False,
                 constants: Mapping[str, Any] | None = None) -> tuple[Any, ...]:
    """A collated forward input → the model's arguments (a tuple, or :class:`KeywordInputs`).

    ``preprocess`` returns several forward arguments as a tuple, which the DataLoader's default collation turns
    into a list: a list is the argument list when the workload's ``example_inputs`` are a tuple (``multi``),
    and one argument otherwise (a model that takes a list). A dict (collated from per-sample dicts) is the
    keyword arguments when ``example_inputs`` returns a dict (``keyword``), and one argument otherwise; the
    non-tensor values of that dict (``constants``, e.g. ``use_cache=False``) are the call's fixed arguments and
    win over the batch's, since collation turns a per-sample flag into a tensor of flags.
    """
    if keyword and isinstance(x, Mapping):
        return KeywordInputs({**x, **(constants or {})})
    if isinstance(x, tuple) or (multi and isinstance(x, list)):
        return tuple(x)
    return (x,)


def measure_pipeline(req: PipelineRequest) -> dict[str, Any]:
    state = {"phase": "setup"}
    out: dict[str, Any] = {"cpus": list(req.cpus), "batch_size": req.batch_size, "device": req.device}
    try:
        os.sched_setaffinity(0, set(req.cpus))
        torch.set_num_threads(len(req.cpus))
        mem.prefer_oom_kill()
        device = torch.device(req.device)
        is_cuda = device.type == "cuda"
        state["phase"] = "load"
        workload = req.ref.load()
        state["phase"] = "make_dataset"
        ds = Preprocessed(prepare_dataset(workload), workload.preprocess)
        if len(ds) < req.batch_size:
            raise ModelLoadError(f"make_dataset() has {len(ds)} items, fewer than one batch of {req.batch_size}",
                                 step="make_dataset")
        workers = len(req.cpus) if req.num_workers is None else req.num_workers
        loader = torch.utils.data.DataLoader(ds, batch_size=req.batch_size, shuffle=True, drop_last=True,
                                             num_workers=workers, persistent_workers=workers > 0,
                                             generator=torch.Generator().manual_seed(req.seed),
                                             # fork: workers inherit the loaded model module and the affinity
                                             multiprocessing_context="fork" if workers > 0 else None)
        state["phase"] = "build_model"
        torch.manual_seed(req.seed)
        model = workload.prepared(workload.build_model().to(device).train())
        opt = workload.optimizer(model.parameters())
        scaler = workload.grad_scaler(device)
        example = workload.example_inputs(req.batch_size)  # its fixed values may depend on the batch size
        multi, keyword = isinstance(example, tuple), isinstance(example, Mapping)
        constants = {k: v for k, v in example.items() if not has_tensor(v)} if keyword else {}
        sync = (lambda: torch.cuda.synchronize(device)) if is_cuda else (lambda: None)

        def batches():
            while True:
                yield from loader

        def train(batch) -> None:
            x, y = _split(batch)
            x = to_device(x, device)
            if workload.train_step is not None:
                # the model file's own step takes the batch shaped as example_inputs returns it
                args = forward_args(x, multi, keyword, constants)
                batch_in = args.as_dict() if isinstance(args, KeywordInputs) else \
                    (args if isinstance(example, tuple) else x)
                with workload.autocast(device):
                    loss = workload.train_step(model, batch_in, None if y is None else to_device(y, device), opt)
                check_finite_loss(loss)
                return
            with workload.autocast(device):
                outputs = call_forward(model, forward_args(x, multi, keyword, constants))
                loss = workload.loss(outputs, to_device(y, device)) if workload.example_targets is not None \
                    else workload.loss(outputs)
            check_finite_loss(loss)
            opt.zero_grad()  # set_to_none is torch's default; a wrapper may not take it
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()

        it = batches()
        state["phase"] = "warm-up"
        # One full epoch first when the data is cached: the cache is filled (memory at its maximum).
        cache = ds.dataset if getattr(ds.dataset, "capacity_bytes", None) else None
        warm = max(req.warmup_batches, len(loader) if cache is not None else 0)
        for _ in range(warm):
            train(next(it))
        if cache is not None:
            # With drop_last, an epoch of len(loader) batches skips the last len(ds) % batch_size items of its
            # shuffle; read those now, or the "full memory" window would fetch them from storage.
            cache.warm()
        sync()
        state["phase"] = "timed"
        others = OtherLoad(with_children=True)  # the DataLoader workers are the job's own CPU time
        others.start()
        n, start = 0, time.perf_counter()
        while True:
            train(next(it))
            n += 1
            if time.perf_counter() - start >= req.window_s and n >= 3:
                sync()
                break
        elapsed = time.perf_counter() - start
        out.update(status="ok", samples_per_s=n * req.batch_size / elapsed, batches=n, window_s=elapsed,
                   num_workers=workers, threads=torch.get_num_threads(), other_cpus=others.stop())
        return out
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        out.update(failure_report(e, state["phase"]))
        return out
