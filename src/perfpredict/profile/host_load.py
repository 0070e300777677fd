"""How busy the rest of the host was while a point was timed.

A CPU measurement is only as good as the machine was idle: on the 2-vCPU VM, a tiny MLP timed while another
process kept one CPU busy ran at 1 013 samples/s against 20 539 idle. The measuring process cannot stop other
processes, but it can say they were there: the host's busy CPU time (``/proc/stat``, hypervisor steal
included) minus its own over the timed window is the CPU time other processes took, and divided by the
window's wall time it is how many CPUs they kept busy on average. The card records it per point
(``TimingStats.other_cpus``) and the profiler adds a note when it is high enough to distort the times.

A co-located group (:mod:`perfpredict.profile.colocation`) is several measuring processes at once, each of them
"another process" to the rest, so a member's own view would count its co-runners as outside load. The group's
number (:func:`group_other_cpus`) is the host's busy CPU time minus *every member's* CPU time, over the span in
which all members were timed: the load from outside the group, the same quantity as a single job's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

#: Other processes keeping at least this many CPUs busy while a CPU measurement was timed, when they and the
#: measuring threads together want more CPUs than the host has, get a note on the card (idle VM: 0.00-0.05).
BUSY_HOST_CPUS = 0.25

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


def _own_cpu_s(with_children: bool = False) -> float:
    """This process's CPU seconds (every thread); ``with_children``: plus its live child processes' (a
    DataLoader's workers, which ``os.times()`` counts only once they have exited)."""
    t = os.times()
    own = t.user + t.system
    if with_children:
        import psutil

        try:
            for child in psutil.Process().children(recursive=True):
                try:
                    ct = child.cpu_times()
                    own += ct.user + ct.system
                except psutil.Error:  # it exited in between: its time is the kernel's to add to ours
                    pass
        except psutil.Error:
            pass
    return own


class OtherLoad:
    """``start()`` before the timed window, ``stop()`` after: the average number of CPUs other processes kept
    busy in between (None where ``/proc/stat`` is not available, e.g. macOS, or the window was too short to
    tell at the kernel's tick resolution)."""

    #: shorter windows are a few clock ticks: the estimate would be mostly rounding
    MIN_WINDOW_S = 0.2

    def __init__(self, with_children: bool = False) -> None:
        self._start: tuple[float, float, float] | None = None
        #: count the live child processes as ours (a pipeline's DataLoader workers are the measurement's own)
        self.with_children = with_children

    def start(self) -> None:
        busy = _host_busy_s()
        self._start = None if busy is None else (busy, _own_cpu_s(self.with_children), time.perf_counter())

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
        others = (busy - busy0) - (_own_cpu_s(self.with_children) - own0)
        return max(0.0, others / wall)


def busy_now(seconds: float = 1.0) -> float | None:
    """How many CPUs other processes keep busy right now: the host's busy CPU time over ``seconds`` of this
    process sleeping (None without ``/proc/stat``). A check before a measurement that a busy host would skew."""
    load = OtherLoad()
    load.start()
    time.sleep(seconds)
    return load.stop()


def competed(other_cpus: float | None, threads: int, cpus: int) -> bool:
    """Whether other processes keeping ``other_cpus`` CPUs busy competed with ``threads`` measuring threads for the
    ``cpus`` CPUs: at least :data:`BUSY_HOST_CPUS` of them, and together more than there are (below that, the
    others ran on CPUs the measurement left idle)."""
    return other_cpus is not None and other_cpus >= BUSY_HOST_CPUS and other_cpus + threads > cpus + 1e-9


#: (``time.monotonic()``, the host's busy CPU seconds, this process's CPU seconds) at one instant
Reading = tuple[float, float, float]


def reading() -> Reading | None:
    """A :data:`Reading` now; None where ``/proc/stat`` is not available. ``time.monotonic()`` is one clock for
    every process on the host (CLOCK_MONOTONIC on Linux), so readings taken by different processes compare."""
    busy = _host_busy_s()
    return None if busy is None else (time.monotonic(), busy, _own_cpu_s())


def group_other_cpus(windows: Sequence[tuple[Reading, Reading] | None]) -> float | None:
    """The average number of CPUs processes *outside* a group kept busy while every member of it was timed.

    ``windows``: each member's readings at the start and end of its own timed window. Members start together
    (a barrier) but end up to an iteration apart, so the span used is the one in which all were timed, from the
    latest start to the earliest end: the host's busy CPU time over it comes from the readings of the members
    that opened and closed it, and each member's own CPU time in it is its window's pro-rated to the span (a
    timed training loop uses the CPUs at a steady rate). What remains is the others'. None if a member has no
    readings, or the span is too short to tell at the kernel's tick resolution (:attr:`OtherLoad.MIN_WINDOW_S`).
    """
    read = [w for w in windows if w is not None]
    if not read or len(read) < len(windows):
        return None
    t0, busy0 = max((start[0], start[1]) for start, _ in read)
    t1, busy1 = min((end[0], end[1]) for _, end in read)
    span = t1 - t0
    if span < OtherLoad.MIN_WINDOW_S:
        return None
    own = 0.0
    for (ts, _, cpu0), (te, _, cpu1) in read:
        own += (cpu1 - cpu0) * span / (te - ts)  # every window holds the span: te - ts >= span > 0
    return max(0.0, (busy1 - busy0 - own) / span)
