"""Energy and GPU-utilisation counters: NVML on CUDA, RAPL on CPU where the kernel exposes it.

Nothing here ever invents a value: when a counter is missing or unreadable the reader says so, and the card
records energy as unavailable with the reason.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from dataclasses import dataclass, field

RAPL_ROOT = "/sys/class/powercap"


# ---------------------------------------------------------------------------------------------------------
# RAPL (CPU package energy)
# ---------------------------------------------------------------------------------------------------------
@dataclass
class RaplReader:
    """Sums the package-level RAPL energy counters (µJ), handling counter wrap-around."""

    domains: list[tuple[str, int]] = field(default_factory=list)  # (energy_uj path, max_energy_range_uj)

    @classmethod
    def probe(cls) -> tuple[RaplReader | None, str | None]:
        """A reader, or (None, reason) when RAPL is absent or unreadable."""
        paths = sorted(glob.glob(os.path.join(RAPL_ROOT, "intel-rapl:*")))
        pkgs = [p for p in paths if p.count(":") == 1]  # top-level package domains, not sub-zones
        if not pkgs:
            return None, f"no RAPL package domains under {RAPL_ROOT} (kernel or VM does not expose them)"
        domains = []
        for p in pkgs:
            try:
                with open(os.path.join(p, "energy_uj")) as f:
                    int(f.read())
                with open(os.path.join(p, "max_energy_range_uj")) as f:
                    rng = int(f.read())
            except (OSError, ValueError) as e:
                return None, f"RAPL counter {p}/energy_uj not readable ({e.__class__.__name__}; needs root on " \
                             "recent kernels)"
            domains.append((os.path.join(p, "energy_uj"), rng))
        return cls(domains), None

    def read(self) -> list[int]:
        out = []
        for path, _ in self.domains:
            with open(path) as f:
                out.append(int(f.read()))
        return out

    def joules_between(self, before: list[int], after: list[int]) -> float:
        total = 0
        for (_, rng), a, b in zip(self.domains, before, after):
            d = b - a
            if d < 0:
                d += rng
            total += d
        return total / 1e6


# ---------------------------------------------------------------------------------------------------------
# NVML (GPU utilisation, power, energy, per-process memory)
# ---------------------------------------------------------------------------------------------------------
def nvml_handle_for_torch_device(index: int):
    """The NVML handle of torch's CUDA device ``index`` (matched by UUID: NVML ignores CUDA_VISIBLE_DEVICES)."""
    import pynvml
    import torch

    pynvml.nvmlInit()
    props = torch.cuda.get_device_properties(index)
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            u = pynvml.nvmlDeviceGetUUID(h)
            u = u.decode() if isinstance(u, bytes) else u
            if u.replace("GPU-", "") == uuid.replace("GPU-", ""):
                return h
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def nvml_process_memory(handle, pid: int | None = None) -> int | None:
    """GPU memory NVML attributes to ``pid`` (this process by default), or None if NVML cannot say."""
    import pynvml

    pid = os.getpid() if pid is None else pid
    try:
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except pynvml.NVMLError:
        return None
    for p in procs:
        if p.pid == pid and p.usedGpuMemory is not None:
            return int(p.usedGpuMemory)
    return None


class GpuSampler:
    """Samples NVML utilisation and power in a background thread over a timed window.

    Utilisation follows Horus: NVML's ``utilization.gpu`` is the percentage of the last sample period in
    which at least one kernel ran; its mean over the window is the fraction of time the GPU was busy.
    Energy comes from the driver's cumulative energy counter (Volta and newer) when present, else from
    integrating sampled power.
    """

    def __init__(self, handle, period_s: float = 0.02) -> None:
        self.handle = handle
        self.period_s = period_s
        self.util: list[float] = []
        self.power_w: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._energy0: int | None = None
        self._energy1: int | None = None
        self._t0 = self._t1 = 0.0

    def _total_energy_mj(self) -> int | None:
        import pynvml

        try:
            return int(pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except pynvml.NVMLError:
            return None

    def _run(self) -> None:
        import pynvml

        while not self._stop.is_set():
            try:
                self.util.append(float(pynvml.nvmlDeviceGetUtilizationRates(self.handle).gpu))
                self.power_w.append((time.perf_counter(), pynvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0))
            except pynvml.NVMLError:
                pass
            self._stop.wait(self.period_s)

    def start(self) -> None:
        self._energy0 = self._total_energy_mj()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="perfpredict-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._t1 = time.perf_counter()
        self._energy1 = self._total_energy_mj()

    def result(self, iterations: int) -> dict:
        out: dict = {"utilization_samples": len(self.util)}
        if self.util:
            out["gpu_utilization"] = sum(self.util) / len(self.util) / 100.0
        if self.power_w:
            out["mean_power_w"] = sum(p for _, p in self.power_w) / len(self.power_w)
        joules = None
        if self._energy0 is not None and self._energy1 is not None and self._energy1 > self._energy0:
            joules = (self._energy1 - self._energy0) / 1000.0
            out["energy_method"] = "nvml_total_energy"
        elif len(self.power_w) >= 2:
            joules = sum((t1 - t0) * p0 for (t0, p0), (t1, _) in zip(self.power_w, self.power_w[1:]))
            out["energy_method"] = "nvml_power_integral"
        if joules is not None and iterations > 0:
            out["energy_per_iter_j"] = joules / iterations
        return out
