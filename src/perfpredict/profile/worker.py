"""Measure one (workload, batch size) point. Runs inside a fresh subprocess started by the runner.

Everything that can go wrong is caught and turned into a result dict with a status (``ok``, ``oom``,
``nonfinite``, ``error``) and the phase that failed, so the parent always gets an answer it can put on
the card. This module imports torch at import time on purpose: the runner preloads it in a fork server, so
each measuring process starts with torch already imported.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Mapping
from typing import Any

import torch
import torch._dynamo  # optimizers import it lazily (~1.7 s); pay that once in the fork server

from perfpredict.errors import ModelLoadError, exception_text
from perfpredict.profile import memory as mem
from perfpredict.profile.device import describe_device
from perfpredict.profile.energy import (
    GpuSampler,
    RaplReader,
    nvml_handle_for_torch_device,
    nvml_process_memory,
)
from perfpredict.profile.failure import NonFiniteLoss, failure_report
from perfpredict.profile.request import PointRequest
from perfpredict.profile.timing import time_iterations
from perfpredict.workload.forward_args import call_forward, input_signature


def check_finite_loss(loss: Any) -> None:
    """Raise :class:`NonFiniteLoss` for a loss that is NaN or infinite: a tensor (any size: a ``train_step``
    hook may return per-sample losses) or a Python number (``loss.item()``); None passes."""
    if isinstance(loss, torch.Tensor):
        finite = torch.isfinite(loss.detach())
        if not bool(finite.all()):
            bad = loss.detach()[~finite].flatten()[0]
            raise NonFiniteLoss(f"loss is {float(bad)} (not finite)")
    elif isinstance(loss, (int, float)) and not math.isfinite(loss):
        raise NonFiniteLoss(f"loss is {loss} (not finite)")


def optimizer_state_bytes(opt: Any) -> int | None:
    """Bytes of tensors in ``opt.state`` (momentum, Adam moments); None for an optimizer-like object without a
    torch optimizer's ``state`` (a wrapper around two optimizers, as a GAN's ``make_optimizer`` may return)."""
    state = getattr(opt, "state", None)
    if not isinstance(state, Mapping):
        return None
    return sum(t.numel() * t.element_size() for st in state.values() if isinstance(st, Mapping)
               for t in st.values() if isinstance(t, torch.Tensor))


def run_point(req: PointRequest, conn) -> None:
    """Subprocess entry point: measure and send the result dict through ``conn``."""
    try:
        result = measure_point(req)
    except BaseException as e:  # noqa: BLE001 - last line of defence; the parent must get an answer
        result = {"status": "error", "batch_size": req.batch_size, "phase": "worker",
                  "error": f"{type(e).__name__}: {exception_text(e)}", "traceback": traceback.format_exc()}
    try:
        conn.send(result)
    finally:
        conn.close()


def measure_point(req: PointRequest) -> dict[str, Any]:
    """Measure one batch size for ``req`` in this process; never raises for model errors."""
    state = {"phase": "setup"}
    out: dict[str, Any] = {"batch_size": req.batch_size, "device": req.device, "mode": req.mode}
    is_cuda = req.device.startswith("cuda")
    try:
        t_start = time.perf_counter()
        if req.threads:
            torch.set_num_threads(req.threads)
        out["threads"] = torch.get_num_threads()
        mem.prefer_oom_kill()
        if not is_cuda and req.memory_limit_bytes:
            out["memory_limit_bytes"] = mem.limit_data_memory(req.memory_limit_bytes)
        device = torch.device(req.device)
        if is_cuda and device.index is None:  # plain "cuda": the first visible GPU, as torch means it
            device = torch.device("cuda", 0)
        handle = None
        cuda_context_bytes = None
        if is_cuda:
            state["phase"] = "cuda init"
            torch.cuda.set_device(device)
            if req.memory_limit_bytes:  # "what fits in N bytes" on a larger card: caps the caching allocator
                total = torch.cuda.get_device_properties(device).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, req.memory_limit_bytes / total), device)
            torch.zeros(1, device=device)
            torch.cuda.synchronize(device)
            try:
                handle = nvml_handle_for_torch_device(device.index or 0)
                cuda_context_bytes = nvml_process_memory(handle)
            except Exception as e:  # noqa: BLE001 - NVML missing: memory/energy fall back or are unavailable
                out["nvml_error"] = f"{type(e).__name__}: {e}"
            torch.cuda.reset_peak_memory_stats(device)
        mem.reset_peak_rss()
        rss0 = mem.current_rss_bytes()
        file0 = mem.file_backed_rss_bytes()

        state["phase"] = "load"
        t0 = time.perf_counter()
        workload = req.ref.load()
        t_load = time.perf_counter() - t0
        # Of the peak to come, what importing the model file took (its own libraries: `import transformers` is
        # ~90-150 MiB). It stays in the peak, as in every dataset collected so far, and is recorded beside it.
        load_bytes = max(0, mem.current_rss_bytes() - rss0) if not is_cuda else None

        state["phase"] = "build_model"
        t0 = time.perf_counter()
        torch.manual_seed(req.seed)
        model = workload.build_model()
        if not isinstance(model, torch.nn.Module):
            raise ModelLoadError(f"build_model() returned {type(model).__name__}, expected a torch.nn.Module",
                                 step="build_model")
        model = model.to(device)
        model.train(req.mode == "train")
        model = workload.prepared(model)
        t_build = time.perf_counter() - t0

        t0 = time.perf_counter()
        state["phase"] = "example_inputs"
        inputs = workload.step_inputs(req.batch_size, device, req.mode)
        out["input_signature"] = input_signature(inputs)
        state["phase"] = "example_targets"
        targets = workload.targets(req.batch_size, device)
        opt = None
        if req.mode == "train":
            state["phase"] = "make_optimizer"
            opt = workload.optimizer(model.parameters())
        t_setup = time.perf_counter() - t0

        step = _train_step(model, workload, inputs, targets, opt, state, device) if req.mode == "train" \
            else _infer_step(model, inputs, state, workload, device)
        sync = (lambda: torch.cuda.synchronize(device)) if is_cuda else (lambda: None)

        energy = _EnergyProbe(req, handle)
        timing = time_iterations(step, sync, req.timing, before_timed=energy.start)
        energy.stop()
        stats = timing.stats()
        state["phase"] = "collect"

        out["status"] = "ok"
        out["timing"] = stats
        out["startup"] = {"load_s": t_load, "build_s": t_build, "setup_s": t_setup,
                          "first_iter_extra_s": timing.first_iter_s - stats["median_s"]}
        out["worker_wall_s"] = time.perf_counter() - t_start
        if is_cuda:
            out["memory"] = {
                "kind": "cuda_peak_allocated",
                "peak_bytes": int(torch.cuda.max_memory_allocated(device)),
                "cuda_reserved_bytes": int(torch.cuda.max_memory_reserved(device)),
                "nvml_process_bytes": nvml_process_memory(handle) if handle is not None else None,
                "baseline_bytes": cuda_context_bytes,
            }
        else:
            file1 = mem.file_backed_rss_bytes()
            # of the increase, the library code (and data) pages the run faulted in: see profile.code_pages
            out["memory"] = {"kind": "cpu_rss_increase", "peak_bytes": max(0, mem.peak_rss_bytes() - rss0),
                             "baseline_bytes": rss0, "load_bytes": load_bytes,
                             "file_backed_bytes": None if file0 is None or file1 is None else max(0, file1 - file0)}
        if not is_cuda and req.check_denormals:
            state["phase"] = "denormal_check"
            out["denormal_check"] = _denormal_check(step, stats["median_s"])
            state["phase"] = "collect"  # the checked steps set their own phase
        out["energy"] = energy.result(stats["iterations"])
        if opt is not None:
            out["optimizer_state_bytes"] = optimizer_state_bytes(opt)
        # Described here, not in the parent, so the parent never creates a CUDA context of its own.
        out["device_info"] = describe_device(req.device, torch.get_num_threads())
        return out
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        out.update(failure_report(e, state["phase"]))
        return out


#: Pairs of steps timed, one with PyTorch's default and one with denormals flushed to zero, after one untimed
#: flushed step: at least the first, as many as fit in the second's seconds (short steps are noisy), at most the
#: third.
DENORMAL_CHECK_STEPS = (3, 0.05, 50)


def _denormal_check(step, median_s: float) -> dict | None:
    """Time steps with denormal floats flushed to zero against steps with the default, interleaved, then
    restore the default.

    On x86, arithmetic on denormals (|x| < 1.2e-38 in fp32) is tens of times slower; a model whose values or
    gradients decay into that range (a ReLU RNN's backward pass through time) runs its steps several times
    slower than its kernels' sizes say, and nothing in its graph shows it. The measured step stands as
    measured (it is what PyTorch's defaults give); this says how much ``torch.set_flush_denormal(True)``
    would change it. None where the CPU cannot flush denormals.

    The two settings alternate step by step (and which goes first alternates too), so a change in the host's
    load lands on both: timing the flushed steps after the measurement window and dividing the window's median
    by theirs credited flushing with whatever load had ended in between (up to 125x for a plain MLP on a busy
    host)."""
    import statistics

    import torch

    lo, seconds, hi = DENORMAL_CHECK_STEPS
    n = max(lo, min(hi, int(seconds / max(median_s, 1e-9))))
    if not torch.set_flush_denormal(True):
        return None
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        step()  # untimed: the first step after a change of mode
        for i in range(n):
            for flush in ((False, True) if i % 2 == 0 else (True, False)):
                torch.set_flush_denormal(flush)
                t0 = time.perf_counter()
                step()
                times[flush].append(time.perf_counter() - t0)
    finally:
        torch.set_flush_denormal(False)
    default, flushed = statistics.median(times[False]), statistics.median(times[True])
    return {"flushed_median_s": flushed, "default_median_s": default,
            "speedup": default / flushed if flushed > 0 else None, "steps": n}


def _train_step(model, workload, inputs, targets, opt, state, device):
    """One training step as the workload's precision runs it: forward and loss under autocast for bf16/fp16,
    and for fp16 the loss scaled before backward and the step taken through the scaler (which skips a step
    whose gradients overflowed, as mixed-precision training does)."""
    if workload.train_step is not None:
        return _hook_step(model, workload, inputs, targets, opt, state, device)
    scaler = workload.grad_scaler(device)

    def step() -> None:
        state["phase"] = "zero_grad"
        opt.zero_grad()  # set_to_none is torch's default; a wrapper may not take it
        with workload.autocast(device):
            state["phase"] = "forward"
            outputs = call_forward(model, inputs)
            state["phase"] = "loss"
            loss = workload.loss(outputs, targets)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise TypeError(f"loss_fn must return a scalar tensor, got "
                            f"{tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__}")
        check_finite_loss(loss)
        state["phase"] = "backward"
        (loss if scaler is None else scaler.scale(loss)).backward()
        state["phase"] = "optimizer_step"
        if scaler is None:
            opt.step()
        else:
            scaler.step(opt)
            scaler.update()

    return step


def _hook_step(model, workload, inputs, targets, opt, state, device):
    """The model file's own ``train_step(model, inputs, targets, optimizer)``, under the precision's autocast
    (an fp16 step scales its own loss); a scalar tensor it returns is checked like the default step's loss."""
    hook = workload.train_step

    def step() -> None:
        state["phase"] = "train_step"
        with workload.autocast(device):
            loss = hook(model, inputs, targets, opt)
        check_finite_loss(loss)

    return step


def _infer_step(model, inputs, state, workload, device):
    def step() -> None:
        state["phase"] = "forward"
        with torch.inference_mode(), workload.autocast(device):
            call_forward(model, inputs)

    return step


class _EnergyProbe:
    """Starts the right counter at the beginning of the timed window and reads it at the end."""

    def __init__(self, req: PointRequest, handle) -> None:
        self.enabled = req.measure_energy
        self.cuda = req.device.startswith("cuda")
        self.handle = handle
        self.sampler: GpuSampler | None = None
        self.rapl: RaplReader | None = None
        self.reason: str | None = None
        self._r0: list[int] | None = None
        self._t0 = 0.0
        self._joules: float | None = None
        if not self.enabled:
            self.reason = "energy measurement disabled"
        elif self.cuda:
            if handle is None:
                self.reason = "NVML unavailable in the measuring process"
        else:
            self.rapl, self.reason = RaplReader.probe()

    def start(self) -> None:
        if self.cuda and self.handle is not None and self.enabled:
            self.sampler = GpuSampler(self.handle)
            self.sampler.start()
        elif self.rapl is not None:
            self._r0 = self.rapl.read()
            self._t0 = time.perf_counter()

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        elif self.rapl is not None and self._r0 is not None:
            r1 = self.rapl.read()
            self._joules = self.rapl.joules_between(self._r0, r1)
            self._dt = time.perf_counter() - self._t0

    def result(self, iterations: int) -> dict:
        if self.sampler is not None:
            return {"available": True, "scope": "whole GPU (NVML)", **self.sampler.result(iterations)}
        if self._joules is not None:
            return {"available": True, "scope": "CPU package(s), whole socket (RAPL)",
                    "energy_per_iter_j": self._joules / max(iterations, 1),
                    "mean_power_w": self._joules / self._dt if self._dt > 0 else None,
                    "energy_method": "rapl_package"}
        return {"available": False, "reason": self.reason or "no energy counter"}

