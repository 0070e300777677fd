"""Choosing the device to measure on, and describing it for the card."""

from __future__ import annotations

import os
import platform
import socket

from perfpredict.errors import UsageError
from perfpredict.hostinfo import cpu_id, cpu_model_name


def resolve_device(requested: str) -> str:
    """``auto`` → ``cuda`` when a CUDA device is usable, else ``cpu``. ``cuda`` without one is an error.

    Returns ``cpu`` or ``cuda:<index>``.
    """
    import torch

    req = (requested or "auto").strip().lower()
    if req == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if req == "cpu":
        return "cpu"
    if req.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError("--device cuda was asked for but no CUDA device is available "
                             f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}); "
                             "use --device cpu or auto", step="device")
        idx = 0
        if ":" in req:
            try:
                idx = int(req.split(":", 1)[1])
            except ValueError:
                raise UsageError(f"bad device {requested!r}; expected cuda or cuda:<index>", step="device") from None
        if idx >= torch.cuda.device_count():
            raise UsageError(f"CUDA device {idx} does not exist ({torch.cuda.device_count()} visible)", step="device")
        return f"cuda:{idx}"
    raise UsageError(f"bad device {requested!r}; expected auto, cpu or cuda[:index]", step="device")


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def describe_device(device: str, threads: int | None = None) -> dict:
    """A dict matching :class:`perfpredict.card.DeviceInfo` for ``device`` (``cpu`` or ``cuda:<i>``)."""
    import psutil
    import torch

    info: dict = {
        "hostname": socket.gethostname(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": usable_cpus(),
        "threads": threads,
        "cpu_id": cpu_id(),
    }
    if device == "cpu":
        info.update(kind="cpu", name=cpu_model_name(), memory_bytes=int(psutil.virtual_memory().total))
        return info
    idx = int(device.split(":")[1]) if ":" in device else 0
    props = torch.cuda.get_device_properties(idx)
    info.update(kind="cuda", name=props.name, index=idx, memory_bytes=int(props.total_memory),
                compute_capability=f"{props.major}.{props.minor}", cuda_version=torch.version.cuda,
                uuid=str(getattr(props, "uuid", "")) or None)
    try:
        import pynvml

        pynvml.nvmlInit()
        drv = pynvml.nvmlSystemGetDriverVersion()
        info["driver_version"] = drv.decode() if isinstance(drv, bytes) else drv
    except Exception:  # noqa: BLE001 - NVML absent or unusable: driver version stays unknown
        pass
    return info
