"""What this machine is, read without importing torch (the Predictor and the service stay torch-free)."""

from __future__ import annotations

import platform


def cpu_model_name() -> str:
    """The CPU model as /proc/cpuinfo names it (what a CPU measurement records as its device name)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
