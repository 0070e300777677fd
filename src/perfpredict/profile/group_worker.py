"""One member of a concurrently measured group (data-parallel rank or co-located copy). Child side.

Runs inside a process forked from the runner's fork server (torch already imported). Never raises for model
errors: like :mod:`perfpredict.profile.worker`, it always answers with a result dict.
"""

from __future__ import annotations

import ctypes
import os
import time
import traceback
from datetime import timedelta
from typing import Any

import numpy as np
import torch

from perfpredict.errors import ModelLoadError, exception_text
from perfpredict.profile import host_load
from perfpredict.profile import memory as mem
from perfpredict.profile.device import describe_device
from perfpredict.profile.energy import GpuSampler, nvml_handle_for_torch_device
from perfpredict.profile.failure import failure_report
from perfpredict.profile.group_request import GroupMember, GroupTiming
from perfpredict.profile.timing import TimingResult
from perfpredict.profile.worker import _infer_step, _train_step

_CLONE_NEWNET = 0x40000000


def enter_netns(name: str) -> None:
    """Move this process into the network namespace ``/var/run/netns/<name>`` (needs CAP_SYS_ADMIN)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {name!r} failed: {os.strerror(err)}")
    finally:
        os.close(fd)


def run_member(member: GroupMember, timing: GroupTiming, barrier, conn) -> None:
    """Subprocess entry point: measure and send the result dict through ``conn``."""
    try:
        result = measure_member(member, timing, barrier)
    except BaseException as e:  # noqa: BLE001 - last line of defence; the parent must get an answer
        result = {"status": "error", "label": member.label, "phase": "worker",
                  "error": f"{type(e).__name__}: {exception_text(e)}", "traceback": traceback.format_exc()}
    try:
        conn.send(result)
    finally:
        conn.close()


def measure_member(member: GroupMember, timing: GroupTiming, barrier) -> dict[str, Any]:
    state = {"phase": "setup"}
    out: dict[str, Any] = {"label": member.label, "batch_size": member.batch_size, "device": member.device,
                           "mode": member.mode}
    dist = member.dist
    is_cuda = member.device.startswith("cuda")
    pg_started = False
    try:
        if member.netns:
            state["phase"] = "netns"
            enter_netns(member.netns)
        if member.cpus:
            os.sched_setaffinity(0, set(member.cpus))
        if member.threads:
            torch.set_num_threads(member.threads)
        out["threads"] = torch.get_num_threads()
        out["cpus"] = sorted(os.sched_getaffinity(0))
        mem.prefer_oom_kill()
        device = torch.device(member.device)
        if is_cuda and device.index is None:  # plain "cuda": the first visible GPU, as torch means it
            device = torch.device("cuda", 0)
        if is_cuda:
            state["phase"] = "cuda init"
            torch.cuda.set_device(device)

        state["phase"] = "load"
        workload = member.ref.load()
        state["phase"] = "build_model"
        torch.manual_seed(member.seed)
        model = workload.build_model()
        if not isinstance(model, torch.nn.Module):
            raise ModelLoadError(f"build_model() returned {type(model).__name__}, expected a torch.nn.Module",
                                 step="build_model")
        model = model.to(device)
        model.train(member.mode == "train")

        if dist is not None:
            state["phase"] = "init_process_group"
            if dist.ifname:
                os.environ["GLOO_SOCKET_IFNAME"] = dist.ifname
            import torch.distributed as tdist
            from torch.nn.parallel import DistributedDataParallel

            tdist.init_process_group(dist.backend,
                                     init_method=dist.init_method or f"tcp://{dist.master_addr}:{dist.master_port}",
                                     rank=dist.rank, world_size=dist.world_size,
                                     timeout=timedelta(seconds=timing.barrier_timeout_s))
            pg_started = True
            model = DistributedDataParallel(model, device_ids=[device.index] if is_cuda else None)

        model = workload.prepared(model)  # after DDP: dynamo splits the graph at DDP's bucket boundaries
        state["phase"] = "example_inputs"
        inputs = workload.step_inputs(member.batch_size, device, member.mode)
        state["phase"] = "example_targets"
        targets = workload.targets(member.batch_size, device)
        opt = None
        if member.mode == "train":
            state["phase"] = "make_optimizer"
            opt = workload.optimizer(model.parameters())
        step = _train_step(model, workload, inputs, targets, opt, state, device) if member.mode == "train" \
            else _infer_step(model, inputs, state, workload, device)
        sync = (lambda: torch.cuda.synchronize(device)) if is_cuda else (lambda: None)
        clock = time.perf_counter

        warm: list[float] = []
        t0 = clock()
        # Ranks of a DDP group must run identical iteration counts (each iteration is a collective), so
        # their warm-up is a fixed count; a time-based condition could differ by one between ranks and hang.
        while len(warm) < timing.warmup_iters or (dist is None and clock() - t0 < timing.warmup_s):
            s = clock()
            step()
            sync()
            warm.append(clock() - s)

        state["phase"] = "start barrier"
        sampler = None
        if is_cuda:
            try:
                sampler = GpuSampler(nvml_handle_for_torch_device(device.index or 0))
            except Exception as e:  # noqa: BLE001 - NVML missing: utilisation unavailable, timing still valid
                out["nvml_error"] = f"{type(e).__name__}: {e}"
        if dist is not None:
            import torch.distributed as tdist

            n_iters = torch.tensor([_dp_iterations(warm, timing)], dtype=torch.int64, device=device)
            tdist.broadcast(n_iters, src=0)  # also acts as the start barrier
            target_iters = int(n_iters.item())
        else:
            barrier.wait(timing.barrier_timeout_s)
            target_iters = None

        state["phase"] = "timed"
        if sampler is not None:
            sampler.start()
        times: list[float] = []
        # host and own CPU time at both ends of the window: the parent works out the load from outside the group
        load_start = host_load.reading()
        start = clock()
        while True:
            s = clock()
            step()
            sync()
            times.append(clock() - s)
            if target_iters is not None:
                if len(times) >= target_iters:
                    break
            elif clock() - start >= timing.window_s and len(times) >= 3:
                break
        elapsed = clock() - start
        load_end = host_load.reading()
        if sampler is not None:
            sampler.stop()
        reason = "max_iters" if target_iters is not None else "time_cap"
        stats = TimingResult(times, warm, reason).stats()
        out.update(status="ok", timing=stats, window_s=elapsed, iterations=len(times),
                   samples_per_s=member.batch_size * len(times) / elapsed,
                   median_samples_per_s=member.batch_size / float(np.median(times)),
                   host_load=(load_start, load_end) if load_start is not None and load_end is not None else None)
        if sampler is not None:
            out["gpu"] = sampler.result(len(times))
        if dist is not None:
            # Equal on every rank iff DDP really kept the replicas in sync (tests check this).
            out["param_checksum"] = float(sum(p.detach().double().sum().item() for p in model.parameters()))
        out["device_info"] = describe_device(member.device, torch.get_num_threads())
        return out
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        out.update(failure_report(e, state["phase"]))
        if barrier is not None and dist is None:
            barrier.abort()  # release the others now instead of at their barrier timeout
        return out
    finally:
        if pg_started:
            import torch.distributed as tdist

            try:
                tdist.destroy_process_group()
            except Exception:  # noqa: BLE001, S110 - tearing down after a failure must not mask it
                pass


def _dp_iterations(warm: list[float], timing: GroupTiming) -> int:
    recent = warm[-max(1, len(warm) // 2):]
    per_iter = float(np.median(recent)) if recent else 1.0
    return int(min(timing.max_iters, max(timing.min_iters, round(timing.window_s / max(per_iter, 1e-6)))))
