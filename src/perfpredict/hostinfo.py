"""What this machine is, read without importing torch (the Predictor and the service stay torch-free)."""

from __future__ import annotations

import contextlib
import platform
from functools import cache


@cache
def cpu_model_name() -> str:
    """The CPU model as /proc/cpuinfo names it (what a CPU measurement records as its device name). Read once per
    process, like :func:`cpu_id`: the Predictor asks for both on every CPU card (~80 us a read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: The vector ISA extensions that change which CPU kernels torch runs (oneDNN and ATen dispatch on them).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
             "amx_int8")


@cache
def cpu_id() -> str | None:
    """The CPU beyond its model name: vendor, family/model/stepping and the vector ISA torch dispatches on, e.g.
    ``AuthenticAMD family 25 model 17 stepping 1; avx2 fma avx512f avx512_vnni avx512_bf16``.

    Why: a VM's model name can be masked. Two development VMs both named "AMD EPYC" ran the same training
    steps a median 0.75x apart (0.30x to 0.95x by family), so the name alone does not say whose time model
    applies. None where /proc/cpuinfo is not readable (not Linux)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
    except OSError:
        return None
    if not fields:
        return None
    flags = set(fields.get("flags", "").split())
    isa = " ".join(f for f in ISA_FLAGS if f in flags) or "no AVX2"
    return (f"{fields.get('vendor_id', 'unknown vendor')} family {fields.get('cpu family', '?')} model "
            f"{fields.get('model', '?')} stepping {fields.get('stepping', '?')}; {isa}")


@cache
def gpu_names() -> tuple[str, ...]:
    """The NVIDIA GPUs NVML sees on this machine, by name (``NVIDIA H200``: what a CUDA measurement records as
    its device name, except on a MIG slice, whose name torch gives as the board's and then the slice's,
    ``NVIDIA A100-SXM4-40GB MIG 3g.20gb``, where NVML names the board); empty without a GPU, a driver or ``pynvml``. Read once per process through NVML, not
    torch, so the Predictor can prefer the model set measured on this GPU model without importing torch."""
    try:
        import pynvml
    except ImportError:
        return ()
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError):  # no NVML library or driver: no GPU here
        return ()
    try:
        names = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        return tuple(names)
    except pynvml.NVMLError:
        return ()
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
