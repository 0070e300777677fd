"""Is the new version of a job faster than the old one? Paired, interleaved measurement with a confidence interval.

Two profiles taken one after the other differ by more than most changes people want to judge: on the shared VMs
and the H100 behind perfpredict's datasets, the same point measured twice in fresh processes differs by a median
5-12 % and a 95th percentile of 22-36 % (the ``*_repeat.csv`` datasets), while one run's own spread suggests
1-3 %. The host's load drifts between runs, and a single pair of runs cannot tell that from the change.

So the two jobs are measured in rounds, each round one measurement of each in fresh processes, in ABBA order
(base first in even rounds, new first in odd ones), so drift falls on both. The rounds give paired log ratios
r = log(t_base / t_new); their mean and its Student-t 95 % interval give the speed-up and how sure it is. The
verdict is "faster" or "slower" only when the whole interval is on one side of 1.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from perfpredict.errors import PerfPredictError, UsageError
from perfpredict.profile.timing import TimingConfig

if TYPE_CHECKING:
    from perfpredict.workload.spec import Workload

#: A shorter window than a profile's: the rounds, not one long window, carry the statistics.
AB_TIMING = TimingConfig(min_time_s=1.0, max_time_s=5.0)
Verdict = Literal["faster", "slower", "no detectable difference", "too few rounds"]


class ABSide(BaseModel):
    label: str
    model: str
    target: str = Field(description="the model file, or zoo:<family>[params]")
    precision: str
    compiled: bool


class ABRound(BaseModel):
    round: int
    order: Literal["base first", "new first"]
    base_iter_time_s: float
    new_iter_time_s: float
    base_peak_bytes: int | None = None
    new_peak_bytes: int | None = None
    log_ratio: float = Field(description="log(base time / new time): above 0 when the new job is faster")
    #: torch intra-op threads each side's steps ran on (a torch.set_num_threads() in the model file wins over
    #: --threads); None in files written before they were recorded
    base_threads: int | None = None
    new_threads: int | None = None


class ABResult(BaseModel):
    base: ABSide
    new: ABSide
    batch_size: int
    mode: str
    device: str
    device_name: str | None = None
    rounds: list[ABRound]
    speedup: float | None = Field(None, description="geometric mean of base time / new time over the rounds")
    ci_low: float | None = Field(None, description="95 % interval of the speed-up (Student t over the rounds)")
    ci_high: float | None = None
    verdict: Verdict
    peak_ratio: float | None = Field(None, description="median new / base peak memory over the rounds")
    stopped_because: str = "all rounds ran"
    interrupted: bool = False
    wall_s: float
    notes: list[str] = Field(default_factory=list)
    #: the settings each measurement ran with, so a run can be repeated as it was
    threads: int | None = Field(None, description="torch intra-op threads per measurement (None: all cores)")
    min_time_s: float | None = None
    max_time_s: float | None = None


def summarize(log_ratios: list[float]) -> tuple[float | None, float | None, float | None, Verdict]:
    """(speed-up, 95 % low, 95 % high, verdict) from paired log ratios; an interval needs at least 2 rounds."""
    n = len(log_ratios)
    if n == 0:
        return None, None, None, "too few rounds"
    mean = sum(log_ratios) / n
    if n < 2:
        return math.exp(mean), None, None, "too few rounds"
    from scipy.stats import t

    sd = math.sqrt(sum((x - mean) ** 2 for x in log_ratios) / (n - 1))
    half = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    low, high = math.exp(mean - half), math.exp(mean + half)
    verdict: Verdict = "faster" if low > 1 else "slower" if high < 1 else "no detectable difference"
    return math.exp(mean), low, high, verdict


def busy_host_note(measured: list[tuple[float | None, int | None]], threads: int | None, cpus: int) -> str | None:
    """The note for measurements timed while other processes competed for the CPUs, or None. ``measured``: per
    measurement, the CPUs other processes kept busy while it was timed and the threads its steps ran on (None:
    not recorded, taken as ``threads``, or all ``cpus`` without it)."""
    from perfpredict.profile.host_load import competed

    busy = [(o, ran or threads or cpus) for o, ran in measured if competed(o, ran or threads or cpus, cpus)]
    if not busy:
        return None
    # two OpenMP threads stall when another process holds a CPU: a step can take 100x longer, so a
    # paired ratio from such rounds can say faster or slower with confidence, either way
    return (f"the host was busy: other processes kept up to {max(o for o, _ in busy):.2f} of its {cpus} CPUs busy "
            f"during {len(busy)} of {len(measured)} measurements, so the verdict may be the load's, not "
            "the change's; repeat on an idle machine"
            + (" (or with --threads 1)" if any(ran > 1 for _, ran in busy) else ""))


def _side(label: str, w: Workload) -> ABSide:
    return ABSide(label=label, model=w.name, target=w.ref.describe(), precision=w.precision, compiled=w.compile)


def compare_jobs(base: Workload, new: Workload, batch_size: int, *, rounds: int = 5, device: str = "auto",
                 mode: str = "train", timing: TimingConfig = AB_TIMING, threads: int | None = None,
                 timeout_s: float = 600.0, on_round: Callable[[ABRound, int], None] | None = None,
                 on_start: Callable[[str, int], None] | None = None, return_on_interrupt: bool = False) -> ABResult:
    """Measure ``base`` and ``new`` at ``batch_size`` in ``rounds`` interleaved rounds (ABBA) on ``device`` and
    return the paired comparison. The first round failing is an error naming the side; a later failure ends
    the rounds and keeps those finished. A Ctrl-C raises KeyboardInterrupt, or with ``return_on_interrupt``
    ends the rounds and keeps those finished (``interrupted`` set; the CLI writes them)."""
    from perfpredict.profile import runner
    from perfpredict.profile.device import resolve_device
    from perfpredict.profile.main_guard import check_main_guard
    from perfpredict.profile.request import PointRequest, check_run_args

    check_main_guard("compare_jobs()")  # the measuring processes import the caller's script again
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 2:
        raise UsageError(f"rounds must be a whole number >= 2 (an interval needs two), got {rounds!r}",
                         step="arguments")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"batch_size must be a whole number >= 1, got {batch_size!r}", step="arguments")
    if mode not in ("train", "infer"):
        raise UsageError(f"mode must be 'train' or 'infer', got {mode!r}", step="arguments")
    check_run_args(timeout_s, threads)
    if not isinstance(timing, TimingConfig):
        raise UsageError(f"timing must be a TimingConfig, got {type(timing).__name__}", step="arguments")
    if not isinstance(device, str):
        raise UsageError(f"device must be 'auto', 'cpu' or 'cuda[:i]', got {device!r}", step="arguments")
    import scipy.stats  # noqa: F401 - imported now (~0.5 s): not after the rounds, where a Ctrl-C would lose them
    t0 = time.perf_counter()
    dev = resolve_device(device)
    runner.warm_up()
    sides = {"base": base, "new": new}
    done: list[ABRound] = []
    # per measurement: CPUs other processes kept busy while it was timed, and the threads its steps ran on
    others: list[tuple[float | None, int | None]] = []
    info: dict = {}
    reason, interrupted = "all rounds ran", False

    def measure(which: str, k: int) -> dict:
        if on_start is not None:
            on_start(which, k)
        req = PointRequest(ref=sides[which].ref, batch_size=batch_size, mode=mode, device=dev, timing=timing,
                           threads=threads, measure_energy=False, check_denormals=False)
        res = runner.run_in_subprocess(req, timeout_s)
        if res.get("device_info") and not info:
            info.update(res["device_info"])
        return res

    try:
        for k in range(rounds):
            order = ("base", "new") if k % 2 == 0 else ("new", "base")
            got = {}
            for which in order:
                res = measure(which, k)
                if res.get("status") != "ok":
                    what = f"{which} ({sides[which].name}) at batch {batch_size}: {res.get('status')}: {res.get('error')}"
                    if k == 0:
                        raise PerfPredictError(f"the first round failed for {what}", source=sides[which].ref.describe(),
                                               step=res.get("phase") or "ab")
                    reason = f"round {k + 1} failed for {what}"
                    break
                got[which] = res
            if len(got) < 2:
                break
            # the thread count as the steps ran (described after them), not as set before the model file ran
            ran = {s: (got[s].get("device_info") or {}).get("threads") or got[s].get("threads") for s in got}
            others.extend((got[s]["timing"].get("other_cpus"), ran[s]) for s in ("base", "new"))
            tb, tn = (got[s]["timing"]["median_s"] for s in ("base", "new"))
            rnd = ABRound(round=k + 1, order="base first" if k % 2 == 0 else "new first", base_iter_time_s=tb,
                          new_iter_time_s=tn, base_peak_bytes=got["base"]["memory"].get("peak_bytes"),
                          new_peak_bytes=got["new"]["memory"].get("peak_bytes"), log_ratio=math.log(tb / tn),
                          base_threads=ran["base"], new_threads=ran["new"])
            done.append(rnd)
            if on_round is not None:
                on_round(rnd, rounds)
    except KeyboardInterrupt:
        if not return_on_interrupt:
            raise
        interrupted = True
        reason = "interrupted by the user" if done else "interrupted by the user before the first round finished"
    speedup, low, high, verdict = summarize([r.log_ratio for r in done])
    peaks = [r.new_peak_bytes / r.base_peak_bytes for r in done if r.base_peak_bytes and r.new_peak_bytes]
    notes = []
    if base.ref == new.ref:
        notes.append("base and new are the same job: this measures the noise (an interval around 1 is expected)")
    if 2 <= len(done) < rounds:
        notes.append(f"{len(done)} of {rounds} rounds finished: the interval is wider than a full run's")
    elif len(done) < 2:
        notes.append(f"{len(done)} of {rounds} rounds finished: an interval needs two")
    if dev == "cpu":
        note = busy_host_note(others, threads, info.get("cpu_count") or os.cpu_count() or 1)
        if note:
            notes.append(note)
    return ABResult(base=_side("base", base), new=_side("new", new), batch_size=batch_size, mode=mode, device=dev,
                    device_name=info.get("name"), rounds=done, speedup=speedup, ci_low=low, ci_high=high,
                    verdict=verdict, peak_ratio=statistics.median(peaks) if peaks else None, stopped_because=reason,
                    interrupted=interrupted, wall_s=time.perf_counter() - t0, notes=notes, threads=threads,
                    min_time_s=timing.min_time_s, max_time_s=timing.max_time_s)
