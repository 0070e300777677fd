"""Co-location: n copies of a job (or the job and a different one) running at once on one device.

These measurements give the fractional points of the speedup curve (n copies sharing a device → each copy
holds p = 1/n of it; Moldable/Malleable scheduling, Fig. 1) and Horus's co-location slowdown
T_deg = |T_colo − T_solo| / T_solo.

CUDA: every copy runs on the same GPU (time-slicing, as co-located jobs do without MPS/MIG). CPU: the copies
share the process's cores, each with ``max(1, cores // n)`` intra-op threads and no pinning, so the copies
hold 1/n of the compute each and the operating system schedules them on the shared cores. Giving every copy
all cores' threads instead (as a job "owning" a GPU would) measures OpenMP's spin-waiting thrash, not sharing:
on the 2-core development VM two such LSTM copies reached 0.04× the solo aggregate throughput, a CPU artifact
GPU time-slicing does not have. ``threads=`` overrides the per-copy thread count.

Copies warm up, meet at a barrier, then each times iterations for the same wall-clock window, so every copy
is measured while all the others run; the solo run (n = 1) uses the same harness and window, so the ratios
compare like with like.

Each group run also records ``other_cpus``: how many CPUs processes *outside* the group kept busy, on average,
while all its members were timed (:func:`perfpredict.profile.host_load.group_other_cpus`: the host's busy CPU
time minus the members' own). The copies load each other by design, so counting them would say every group ran
on a busy host; what distorts the rates is load the group did not bring. On CPU, a run where that load competed
for the CPUs (the single-job rule, :func:`~perfpredict.profile.host_load.competed`, with the group's threads)
gets a note on the card (:func:`busy_host_note`).
"""

from __future__ import annotations

from collections.abc import Sequence

from perfpredict.card import ColocationInfo, ColocationPoint, PairColocation
from perfpredict.profile.group import run_group
from perfpredict.profile.group_request import GroupMember, GroupTiming
from perfpredict.profile.host_load import competed, group_other_cpus
from perfpredict.profile.scaling import available_cpus
from perfpredict.workload.spec import WorkloadRef


def _threads(device: str, n: int, threads: int | None) -> int | None:
    if device.startswith("cuda"):
        return None
    return threads or max(1, len(available_cpus()) // n)


def _run(refs: Sequence[tuple[WorkloadRef, int]], device: str, mode: str, timing: GroupTiming,
         timeout_s: float, threads: int | None = None) -> list[dict]:
    members = [GroupMember(ref=ref, batch_size=b, mode=mode, device=device, threads=_threads(device, len(refs), threads),
                           seed=i, label=f"copy{i}") for i, (ref, b) in enumerate(refs)]
    return run_group(members, timing, timeout_s)


def _gpu_util(r: dict) -> float | None:
    return (r.get("gpu") or {}).get("gpu_utilization")


def _other_cpus(results: list[dict]) -> float | None:
    """CPUs kept busy by processes outside the group while its members were timed (None: not readable)."""
    return group_other_cpus([r.get("host_load") for r in results])


def _failure(results: list[dict]) -> dict | None:
    """The root failure: not a copy that merely timed out or was released from the start barrier."""
    bad = [r for r in results if r.get("status") != "ok"]
    roots = [r for r in bad if r.get("status") != "timeout" and r.get("phase") != "start barrier"]
    return (roots or bad)[0] if bad else None


def measure_colocation(ref: WorkloadRef, batch_size: int, copies: Sequence[int] = (1, 2, 3, 4),
                       device: str = "cpu", mode: str = "train", timing: GroupTiming | None = None,
                       timeout_s: float = 600.0, threads: int | None = None, on_point=None) -> ColocationInfo:
    """Per-copy and aggregate throughput for each n in ``copies`` (n = 1, the solo baseline, always runs)."""
    timing = timing or GroupTiming()
    ns = sorted(set(int(n) for n in copies) | {1})
    info = ColocationInfo(batch_size=batch_size, window_s=timing.window_s, device=device)
    solo = None
    for n in ns:
        results = _run([(ref, batch_size)] * n, device, mode, timing, timeout_s, threads)
        bad = _failure(results)
        if bad is not None:
            pt = ColocationPoint(copies=n, batch_size=batch_size, status=bad.get("status", "error"),
                                 error=f"{bad.get('label')}: {bad.get('error')}", device=device,
                                 threads_per_copy=_threads(device, n, threads))
        else:
            rates = [r["samples_per_s"] for r in results]
            if n == 1:
                solo = rates[0]
            pt = ColocationPoint(
                copies=n, batch_size=batch_size, status="ok", per_copy_samples_per_s=rates,
                per_copy_relative=(sum(rates) / n / solo) if solo else None,
                aggregate_samples_per_s=sum(rates), aggregate_relative=(sum(rates) / solo) if solo else None,
                threads_per_copy=results[0].get("threads"), gpu_utilization=_gpu_util(results[0]),
                other_cpus=_other_cpus(results), device=device)
        info.points.append(pt)
        if on_point is not None:
            on_point(pt)
    return info


def measure_solo(ref: WorkloadRef, batch_size: int, device: str = "cpu", mode: str = "train",
                 timing: GroupTiming | None = None, timeout_s: float = 600.0) -> dict:
    """One job alone, in the same harness and window as the co-located runs (the ``solo`` of :func:`measure_pair`)."""
    return _run([(ref, batch_size)], device, mode, timing or GroupTiming(), timeout_s)[0]


def measure_pair(ref: WorkloadRef, batch_size: int, partner: WorkloadRef, partner_batch: int,
                 device: str = "cpu", mode: str = "train", timing: GroupTiming | None = None,
                 timeout_s: float = 600.0, solo: dict[str, dict] | None = None) -> PairColocation:
    """The job next to ``partner``: each one's slowdown against its own solo run (same harness and window).

    ``solo`` may carry already-measured solo results (``{"job": result, "partner": result}``) to skip those runs.
    """
    timing = timing or GroupTiming()
    solo = dict(solo or {})
    if "job" not in solo:
        solo["job"] = _run([(ref, batch_size)], device, mode, timing, timeout_s)[0]
    if "partner" not in solo:
        solo["partner"] = _run([(partner, partner_batch)], device, mode, timing, timeout_s)[0]
    name = partner.describe()
    bad = _failure([solo["job"], solo["partner"]])
    if bad is not None:
        return PairColocation(partner=name, status=bad.get("status", "error"), error=bad.get("error"),
                              device=device)
    both = _run([(ref, batch_size), (partner, partner_batch)], device, mode, timing, timeout_s)
    bad = _failure(both)
    if bad is not None:
        return PairColocation(partner=name, status=bad.get("status", "error"), error=bad.get("error"),
                              device=device)
    js, ps = solo["job"]["samples_per_s"], solo["partner"]["samples_per_s"]
    jc, pc = both[0]["samples_per_s"], both[1]["samples_per_s"]
    ju, pu = _gpu_util(solo["job"]), _gpu_util(solo["partner"])
    # T is time per iteration, i.e. batch / rate; T_deg = |T_colo − T_solo| / T_solo = |solo/colo − 1|.
    return PairColocation(
        partner=name, job_solo_samples_per_s=js, partner_solo_samples_per_s=ps, job_colocated_samples_per_s=jc,
        partner_colocated_samples_per_s=pc, job_slowdown=abs(js / jc - 1.0), partner_slowdown=abs(ps / pc - 1.0),
        job_solo_gpu_utilization=ju, partner_solo_gpu_utilization=pu,
        cumulative_gpu_utilization=(ju + pu) if ju is not None and pu is not None else None,
        other_cpus=_other_cpus(both), job_solo_other_cpus=_other_cpus([solo["job"]]),
        partner_solo_other_cpus=_other_cpus([solo["partner"]]), device=device)


#: the start of the co-location busy-host note (one per card, replaced when the co-location is measured again)
BUSY_NOTE = "co-location: the host was busy"


def busy_host_note(info: ColocationInfo, cpus: int) -> str | None:
    """A note naming the CPU co-location runs during which processes outside the group competed with it for the
    host's ``cpus`` CPUs (the single-job rule, with the group's threads), or None.

    The group's threads are those :func:`measure_colocation` and :func:`measure_pair` give it: ``n`` copies of
    ``threads_per_copy``; a solo run of the pair all cores' threads, the pair itself half the cores' each."""
    if not info.device or not info.device.startswith("cpu"):
        return None
    runs: list[tuple[str, float]] = []  # (what ran, other CPUs)
    for p in info.points:
        t = p.copies * (p.threads_per_copy or 1)
        if p.status == "ok" and competed(p.other_cpus, t, cpus):
            runs.append((f"{p.copies} cop{'y' if p.copies == 1 else 'ies'} ({t} thread(s))", p.other_cpus or 0.0))
    for pr in info.pairs:
        if pr.status != "ok":
            continue
        solo_t, pair_t = _threads(info.device, 1, None) or 1, 2 * (_threads(info.device, 2, None) or 1)
        for what, other, t in (("the job alone", pr.job_solo_other_cpus, solo_t),
                               (f"{pr.partner} alone", pr.partner_solo_other_cpus, solo_t),
                               (f"the job beside {pr.partner}", pr.other_cpus, pair_t)):
            if competed(other, t, cpus):
                runs.append((f"{what} ({t} thread(s))", other or 0.0))
    if not runs:
        return None
    worst = max(o for _, o in runs)
    return (f"{BUSY_NOTE}: processes outside the measured group kept up to {worst:.2f} of its {cpus} CPUs busy "
            f"while {', '.join(w for w, _ in runs)} were timed, so those rates are likely slower than on an idle "
            f"machine (see colocation.points[].other_cpus and colocation.pairs[].*other_cpus)")
