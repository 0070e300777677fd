"""The profiles beyond the batch sweep: co-location, data-parallel scaling, GENIE's comm model, sensitivity.

``perfpredict profile model.py --all`` runs them after the batch sweep, on one reference batch size, and puts
each on the card as soon as it is measured (the card is rewritten after every section, so nothing measured is
lost when a later section fails). A section that fails is recorded in ``card.errors``; a section that this
machine cannot run (no virtual nodes, no input pipeline) is explained in ``card.notes``.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from perfpredict.card import (
    CardError,
    PerformanceCard,
    SpeedupCurveCard,
    SpeedupPointCard,
)
from perfpredict.errors import PerfPredictError
from perfpredict.profile.group_request import GroupTiming
from perfpredict.workload.spec import Workload, WorkloadRef


@dataclass
class ExtendedSettings:
    scaling: bool = False
    colocation: bool = False
    sensitivity: bool = False
    #: Fit GENIE's Comm(s) across virtual network nodes (with ``scaling``, when the machine supports them).
    comm_model: bool = True
    batch_size: int | None = None  # None → chosen from the batch sweep
    workers: tuple[int, ...] | None = None
    copies: tuple[int, ...] = (1, 2, 3, 4)
    partner: str | None = "zoo:mlp"
    window_s: float = 3.0
    link_mbit: float = 1000.0
    storage_bytes_per_s: float | None = None
    sensitivity_threshold: float = 0.1
    timeout_s: float = 600.0
    mode: str = "train"
    device: str = "cpu"
    extra: dict = field(default_factory=dict)

    @property
    def any(self) -> bool:
        return self.scaling or self.colocation or self.sensitivity


def reference_batch(card: PerformanceCard, workers: int | Sequence[int] = 1) -> int | None:
    """A batch the job is known to run at: the largest measured one up to 64, rounded down to a multiple of every
    rank count in ``workers`` (the data-parallel ranks the scaling section runs) so it splits over each of them;
    where their common multiple is above that batch, to a multiple of the largest."""
    ok = sorted(p.batch_size for p in card.measured_points())
    if not ok:
        return None
    small = [b for b in ok if b <= 64] or ok[:1]
    b = small[-1]
    ks = [workers] if isinstance(workers, int) else [int(k) for k in workers] or [1]
    unit = math.lcm(*ks)
    if unit > b:
        unit = max(ks)
    return max(unit, (b // unit) * unit)


#: data-parallel speedup above this multiple of the rank count is not the job's (measurement noise on a shared
#: host: a stalled one-rank run); real super-linear speedups from caches are far smaller on the machines here
SUPERLINEAR = 1.25


def run_extended(card: PerformanceCard, workload: Workload, settings: ExtendedSettings,
                 save: Callable[[], None], stage: Callable[[str], None] = lambda s: None) -> None:
    from perfpredict.profile.scaling import default_workers, max_workers

    ref = workload.ref
    device = settings.device
    timing = GroupTiming(window_s=settings.window_s)
    limit = max_workers(device)
    # the batch splits over every rank count the scaling section runs on this machine (those above its devices
    # are left out with a note): not over the core count, which the default powers of two need not divide
    ranks = [k for k in (settings.workers or default_workers(limit)) if 1 <= k <= limit] if settings.scaling else []
    batch = settings.batch_size or reference_batch(card, ranks or [1])
    if batch is None:
        card.errors.append(CardError(step="extended profiles", message="no batch size ran in the sweep, so "
                                     "scaling/co-location/sensitivity were not measured"))
        save()
        return

    def guarded(name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except PerfPredictError as e:
            card.errors.append(CardError(step=name, message=e.message))
        save()

    try:
        if settings.colocation:
            guarded("colocation", lambda: _colocation(card, ref, batch, settings, timing, stage))
        if settings.scaling:
            guarded("scaling", lambda: _scaling(card, ref, batch, settings, timing, stage))
            if settings.comm_model:
                guarded("comm_model", lambda: _comm(card, ref, batch, settings, timing, stage))
    except KeyboardInterrupt:
        # a Ctrl-C in scaling kept the co-location's points but no curve through them
        if card.colocation is not None and card.speedup_curve is None:
            with contextlib.suppress(Exception):
                _speedup(card)
                save()
        raise
    if card.colocation is not None or card.scaling is not None:
        guarded("speedup_curve", lambda: _speedup(card))
    if settings.sensitivity:
        guarded("sensitivity", lambda: _sensitivity(card, workload, batch, settings, stage))


def _colocation(card, ref: WorkloadRef, batch: int, s: ExtendedSettings, timing, stage) -> None:
    from perfpredict.profile.colocation import BUSY_NOTE, busy_host_note, measure_colocation, measure_pair
    from perfpredict.workload import parse_params, resolve_workload

    stage(f"co-location: {', '.join(str(n) for n in s.copies)} copies at batch {batch}")
    info = measure_colocation(ref, batch, s.copies, device=s.device, mode=s.mode, timing=timing,
                              timeout_s=s.timeout_s)
    card.colocation = info
    if s.partner:
        stage(f"co-location with {s.partner}")
        partner = resolve_workload(s.partner, parse_params(None))
        pb = min(partner.batch_sizes, key=lambda b: abs(b - batch))
        info.pairs.append(measure_pair(ref, batch, partner.ref, pb, device=s.device, mode=s.mode, timing=timing,
                                       timeout_s=s.timeout_s))
    suspect = _implausible_colocation(card, info, batch)
    if suspect:
        card.notes.append(suspect)
    # as the sweep's busy-host note does for its points: the co-location runs other processes competed with
    card.notes[:] = [n for n in card.notes if not n.startswith(BUSY_NOTE)]
    note = busy_host_note(info, card.device.cpu_count or os.cpu_count() or 1)
    if note:
        card.notes.append(note)


#: a measured speedup further than this share from the fitted curve is named in the curve's notes
OFF_CURVE = 0.25

#: the start of the note that co-location numbers cannot be the job's (the speedup curve repeats it)
SUSPECT_COLOCATION = "co-location: the solo run was slowed"


def _implausible_colocation(card, info, batch: int) -> str | None:
    """A note when the co-location numbers cannot be the job's: copies sharing a device each faster than one
    alone by more than :data:`SUPERLINEAR`, or the group harness's solo run under half the sweep's throughput at
    the same batch size (a 2-vCPU host with other jobs on it gave 47.9x per copy, and a solo run of 69 samples/s
    beside the sweep's 4785). Both mean the solo baseline was stalled, and every relative number rests on it."""
    ok = [p for p in info.points if p.status == "ok" and p.aggregate_samples_per_s]
    why = []
    fast = [p for p in ok if p.copies > 1 and (p.per_copy_relative or 0) > SUPERLINEAR]
    if fast:
        worst = max(fast, key=lambda p: p.per_copy_relative)
        why.append(f"{worst.copies} copies sharing the device each ran {worst.per_copy_relative:.2f}x as fast as one "
                   "alone, more than sharing can give")
    solo = next((p for p in ok if p.copies == 1), None)
    sweep = next((t for t in card.throughput if t.ok and t.batch_size == batch and t.samples_per_s), None)
    if solo is not None and sweep is not None and 2 * solo.aggregate_samples_per_s < sweep.samples_per_s:
        why.append(f"alone it ran {solo.aggregate_samples_per_s:.3g} samples/s, under half the "
                   f"{sweep.samples_per_s:.3g} the sweep measured at batch {batch}")
    if not why:
        return None
    return (f"{SUSPECT_COLOCATION} ({'; '.join(why)}), most likely by another process on its CPUs, so the "
            "co-location's relative throughputs and the speedup curve are suspect; measure again on an idle machine")


def _scaling(card, ref: WorkloadRef, batch: int, s: ExtendedSettings, timing, stage) -> None:
    from perfpredict.profile.scaling import measure_scaling

    stage(f"data-parallel scaling at global batch {batch}")
    card.scaling = measure_scaling(ref, batch, s.workers, device=s.device, mode=s.mode, timing=timing,
                                   timeout_s=s.timeout_s)
    skipped = [part for part in (card.scaling.note or "").split("; ") if "not measured" in part]
    card.notes.extend(f"scaling: {part}" for part in skipped)  # what this machine cannot run (see docs/profiling.md)
    for p in card.scaling.points:  # a rank count that failed is a failure of the section, kept with its cause
        if p.status != "ok":
            card.errors.append(CardError(step="scaling", message=f"DDP k={p.workers}: {p.status}: {p.error}"))
    fast = [p for p in card.scaling.points if p.status == "ok" and p.speedup and p.speedup > SUPERLINEAR * p.workers]
    if fast:
        worst = max(fast, key=lambda p: p.speedup / p.workers)
        card.notes.append(f"scaling: S({worst.workers}) = {worst.speedup:.2f} is more than {worst.workers} ranks can "
                          "give: the one-rank run was slowed (another process on its CPUs stalls torch's threads), "
                          "so these speedups and the speedup curve are suspect; measure again on an idle machine")


def _comm(card, ref: WorkloadRef, batch: int, s: ExtendedSettings, timing, stage) -> None:
    from perfpredict.profile.comm_profile import measure_comm_model
    from perfpredict.profile.netns import VirtualNodes, netns_support

    if s.mode == "infer":  # minutes of placements fitted to contention alone
        card.notes.append("comm_model: not fitted in inference mode: data-parallel inference ranks exchange no "
                          "gradients, so there is no communication for GENIE's Comm(s) to model (the scaling "
                          "points hold the replicas' throughput)")
        return
    ok, why = netns_support()
    if not ok:
        card.notes.append(f"comm_model: multi-node placements need virtual network nodes, unavailable here ({why}); "
                          "fitted from single-node placements only where they identify it")
        nodes_cm = None
    else:
        nodes_cm = VirtualNodes(2, rate_mbit=s.link_mbit)
    stage("GENIE placements ⟨d_node, d_g/n⟩")
    if nodes_cm is None:
        card.comm_model = measure_comm_model(ref, [batch, 2 * batch], device=s.device, mode=s.mode, timing=timing,
                                             timeout_s=s.timeout_s, on_point=stage)
    else:
        with nodes_cm as nodes:
            card.comm_model = measure_comm_model(ref, [batch, 2 * batch], device=s.device, mode=s.mode,
                                                 timing=timing, nodes=nodes, timeout_s=s.timeout_s, on_point=stage)
    if card.comm_model.note:  # a failed placement is a failure of the section, kept with its cause
        card.errors.append(CardError(step="comm_model", message=card.comm_model.note))


def speedup_points(card: PerformanceCard) -> list[SpeedupPointCard]:
    pts: list[SpeedupPointCard] = []
    if card.colocation is not None:
        for p in card.colocation.points:
            if p.status == "ok" and p.per_copy_relative is not None and p.copies > 1:
                pts.append(SpeedupPointCard(p=1.0 / p.copies, speedup=p.per_copy_relative, kind="colocated"))
    if card.scaling is not None:
        for p in card.scaling.points:
            if p.status == "ok" and p.speedup is not None and p.workers > 1:
                pts.append(SpeedupPointCard(p=float(p.workers), speedup=p.speedup, kind="data_parallel"))
    pts.append(SpeedupPointCard(p=1.0, speedup=1.0, kind="solo"))
    return sorted(pts, key=lambda q: q.p)


def _speedup(card: PerformanceCard) -> None:
    from perfpredict.fit.speedup import fit_speedup_curve

    pts = speedup_points(card)
    if len(pts) < 2:
        return
    curve = fit_speedup_curve([q.p for q in pts], [q.speedup for q in pts])
    doubts = [curve.notes]
    if any(n.startswith(SUSPECT_COLOCATION) for n in card.notes) and any(q.p < 1 for q in pts):
        doubts.append("its fractional points rest on a co-location the card calls suspect (see the card's notes)")
    if any(n.startswith("scaling: S(") and "suspect" in n for n in card.notes) and any(q.p > 1 for q in pts):
        doubts.append("its points above one device rest on a scaling run the card calls suspect (see the card's "
                      "notes)")
    # the curve is concave and non-decreasing by construction: a measured point it cannot follow (two ranks
    # slower than one) is projected away, and a scheduler reading the curve would never know
    off = [(q, f) for q, f in zip(curve.points, curve.fitted) if q.speedup and abs(f - q.speedup) > OFF_CURVE * q.speedup]
    if off:
        doubts.append("measured " + ", ".join(f"S({q.p:g}) = {q.speedup:.2f}" for q, _ in off) + " lie off the "
                      "curve (" + ", ".join(f"{f:.2f}" for _, f in off) + "), which never falls with more devices: "
                      "read the measured points, not the curve, there")
    curve = replace(curve, notes="; ".join(filter(None, doubts)))
    device = (card.colocation or card.scaling).device
    card.speedup_curve = SpeedupCurveCard(points=pts, fit=curve.to_dict(), device=device)


def _sensitivity(card, workload: Workload, batch: int, s: ExtendedSettings, stage) -> None:
    from perfpredict.profile.sensitivity_profile import BUSY_NOTE, busy_host_note, profile_sensitivity

    if workload.make_dataset is None:
        card.notes.append("sensitivity: the model file defines no make_dataset() hook, so there is no input "
                          "pipeline to profile (the hooks make_dataset and preprocess are in docs/profiling.md)")
        return
    # The job's memory without any cache: its measured peak at this batch (CPU RSS or CUDA allocated).
    mems = [m for m in card.memory if m.peak_bytes is not None]
    near = min(mems, key=lambda m: abs(m.batch_size - batch)) if mems else None
    process = (near.peak_bytes + (near.baseline_bytes or 0)) if near is not None else 0

    def probe(c: int, res: dict) -> None:
        got = f"{res['samples_per_s']:.1f} samples/s" if res.get("status") == "ok" else res.get("status")
        stage(f"sensitivity: {c} CPU(s): {got}")

    stage("sensitivity: optimistic CPU search")
    card.sensitivity = profile_sensitivity(workload.ref, batch, device=s.device, process_bytes=process,
                                           storage_bytes_per_s=s.storage_bytes_per_s,
                                           threshold=s.sensitivity_threshold, window_s=s.window_s,
                                           timeout_s=s.timeout_s, on_probe=probe)
    card.notes[:] = [n for n in card.notes if not n.startswith(BUSY_NOTE)]
    note = busy_host_note(card.sensitivity, card.device.cpu_count or os.cpu_count() or 1)
    if note:
        card.notes.append(note)
