"""Process memory measurement: peak RSS on CPU (Linux high-water mark), torch/NVML memory on CUDA."""

from __future__ import annotations

import os
import resource
import sys

from perfpredict.errors import full_exception_text


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def current_rss_bytes() -> int:
    kb = _status_kb("VmRSS")
    if kb is not None:
        return kb * 1024
    import psutil

    return int(psutil.Process().memory_info().rss)


def file_backed_rss_bytes() -> int | None:
    """Resident pages of mapped files (``RssFile``: shared libraries' code and data), None where unknown."""
    kb = _status_kb("RssFile")
    return kb * 1024 if kb is not None else None


def reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark for this process (Linux ``clear_refs`` = 5).

    Returns False where the kernel does not allow it; :func:`peak_rss_bytes` then reports the lifetime peak
    (still correct for the measuring subprocess, whose earlier life is only interpreter start-up).
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    kb = _status_kb("VmHWM")
    if kb is not None:
        return kb * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def data_segment_bytes() -> int | None:
    kb = _status_kb("VmData")
    return kb * 1024 if kb is not None else None


def limit_data_memory(extra_bytes: int) -> int | None:
    """Cap this process's private data memory at its current size + ``extra_bytes`` (RLIMIT_DATA).

    An allocation beyond the cap then fails inside torch with a catchable "can't allocate memory" error, so
    an oversized batch is recorded as out-of-memory instead of summoning the kernel's OOM killer. Only for
    CPU runs: CUDA maps large private regions that the cap would count. Returns the cap, or None if unset.
    """
    base = data_segment_bytes()
    if base is None or extra_bytes <= 0:
        return None
    cap = base + int(extra_bytes)
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    except (ValueError, OSError, OverflowError):  # OverflowError: a cap past what the kernel can hold (no cap)
        return None
    return cap


def prefer_oom_kill() -> None:
    """Make the kernel's OOM killer pick this (measuring) process first, never the user's session."""
    try:
        with open(f"/proc/{os.getpid()}/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def available_memory_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def is_oom_error(exc: BaseException) -> bool:
    """True for CUDA and CPU allocation failures (torch raises several different types), also when wrapped:
    torch.compile reports running out of memory while compiling as ``InternalTorchDynamoError: MemoryError:
    std::bad_alloc`` or a ``BackendCompilerFailed`` whose cause is the allocation failure."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if _is_oom_itself(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def _is_oom_itself(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            return True
    except (ImportError, AttributeError):  # pragma: no cover
        pass
    text = full_exception_text(exc)
    return any(s in text for s in ("out of memory", "can't allocate memory", "Cannot allocate memory",
                                   "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "std::bad_alloc",
                                   "MemoryError"))
