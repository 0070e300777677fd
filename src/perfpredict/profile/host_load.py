"""How busy the rest of the host was while a point was timed.

A CPU measurement is only as good as the machine was idle: on the 2-vCPU VM, a tiny MLP timed while another
process kept one CPU busy ran at 1 013 samples/s against 20 539 idle. The measuring process cannot stop other
processes, but it can say they were there: the host's busy CPU time (``/proc/stat``, hypervisor steal
included) minus its own over the timed window is the CPU time other processes took, and divided by the
window's wall time it is how many CPUs they kept busy on average. The card records it per point
(``TimingStats.other_cpus``) and the profiler adds a note when it is high enough to distort the times.
"""

from __future__ import annotations

import os
import time

#: /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice. Busy = everything
#: but idle and iowait; guest time is already counted in user.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def _host_busy_s() -> float | None:
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    try:
        ticks = [int(x) for x in fields[1:]]
        return sum(ticks[i] for i in _BUSY_FIELDS if i < len(ticks)) / os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return None


def _own_cpu_s() -> float:
    t = os.times()  # this process, every thread
    return t.user + t.system


class OtherLoad:
    """``start()`` before the timed window, ``stop()`` after: the average number of CPUs other processes kept
    busy in between (None where ``/proc/stat`` is not available, e.g. macOS, or the window was too short to
    tell at the kernel's tick resolution)."""

    #: shorter windows are a few clock ticks: the estimate would be mostly rounding
    MIN_WINDOW_S = 0.2

    def __init__(self) -> None:
        self._start: tuple[float, float, float] | None = None

    def start(self) -> None:
        busy = _host_busy_s()
        self._start = None if busy is None else (busy, _own_cpu_s(), time.perf_counter())

    def stop(self) -> float | None:
        if self._start is None:
            return None
        busy = _host_busy_s()
        if busy is None:
            return None
        busy0, own0, wall0 = self._start
        wall = time.perf_counter() - wall0
        if wall < self.MIN_WINDOW_S:
            return None
        others = (busy - busy0) - (_own_cpu_s() - own0)
        return max(0.0, others / wall)
