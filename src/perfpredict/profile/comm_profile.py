"""GENIE's lightweight placement profiling: measure a few placements, fit Comm(s) (eq. 8), predict the rest.

A "device" is a fixed unit: a GPU on CUDA, ``cores_per_device`` pinned cores on CPU (GENIE's sPR is the
rate of *one* device, so the unit must not change with the placement). For every global batch b we measure

* sPR at each local batch b / n the placements need (one device, alone), fitted with the card's rate model;
* every placement ⟨d_node, d_g/n⟩ the hardware allows, multi-node ones across :class:`VirtualNodes` when
  the machine supports them (else across real nodes is the torchrun launcher's job).

Comm is then fitted on all placements but one, which is predicted and compared with its measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from perfpredict.card import CommModelCard, PlacementPoint
from perfpredict.errors import PerfPredictError
from perfpredict.profile.group_request import GroupTiming
from perfpredict.profile.scaling import (
    Placement,
    available_cpus,
    max_workers,
    measure_placement,
)
from perfpredict.workload.spec import WorkloadRef


def default_placements(device: str, cores_per_device: int = 1, max_nodes: int = 2) -> list[Placement]:
    """Every ⟨d_node, d_g/n⟩ with d_g/n a power of two that fits the devices this machine has."""
    devices = max_workers(device) if device.startswith("cuda") else len(available_cpus()) // cores_per_device
    out = []
    for d_node in range(1, max_nodes + 1):
        g = 1
        while d_node * g <= devices:
            out.append(Placement(d_node, g))
            g *= 2
    return out


def measure_comm_model(ref: WorkloadRef, global_batches: Sequence[int], placements: Sequence[Placement] | None = None,
                       device: str = "cpu", mode: str = "train", cores_per_device: int = 1,
                       timing: GroupTiming | None = None, nodes=None, timeout_s: float = 600.0,
                       on_point: Callable[[str], None] | None = None) -> CommModelCard:
    """Measure, fit and validate GENIE's communication penalty for ``ref``; see the module docstring."""
    from perfpredict.fit.comm import fit_comm_penalty
    from perfpredict.fit.rate import fit_rate_model

    timing = timing or GroupTiming()
    placements = list(placements or default_placements(device, cores_per_device, 2 if nodes is not None else 1))
    if nodes is None:
        placements = [p for p in placements if p.d_node == 1]
    cpd = None if device.startswith("cuda") else cores_per_device

    # 1. sPR(local batch): one device alone, at every local batch the placements use.
    local = sorted({b // p.workers for b in global_batches for p in placements if b % p.workers == 0})
    spr_b, spr_rate = [], []
    failed: list[str] = []  # what was measured and not used, with its cause (on the card's note)
    for lb in local:
        pt = measure_placement(ref, Placement(1, 1), lb, device, mode, timing, None, timeout_s, cpd)
        if on_point:
            on_point(f"sPR(b={lb}): {pt.status}")
        if pt.status == "ok":
            spr_b.append(lb)
            spr_rate.append(pt.samples_per_s)
        else:
            failed.append(f"sPR at local batch {lb}: {pt.status}: {pt.error}")
    if not spr_b:
        raise PerfPredictError("could not measure the single-device rate sPR at any local batch",
                               source=ref.describe(), step="comm model")
    spr_model = fit_rate_model(spr_b, spr_rate)
    spr = spr_model.throughput

    # 2. the multi-device placements.
    measured: list[PlacementPoint] = []
    for b in global_batches:
        for p in placements:
            if p.workers == 1 or b % p.workers:
                continue
            pt = measure_placement(ref, p, b, device, mode, timing, nodes if p.d_node > 1 else None, timeout_s, cpd)
            if on_point:
                on_point(f"⟨{p.d_node},{p.d_gn}⟩ b={b}: {pt.status}")
            if pt.status != "ok":
                failed.append(f"⟨{p.d_node},{p.d_gn}⟩ at global batch {b}: {pt.status}: {pt.error}")
            else:
                measured.append(PlacementPoint(d_node=p.d_node, d_gn=p.d_gn, global_batch=b,
                                               samples_per_s=pt.samples_per_s,
                                               comm_observed=p.workers - pt.samples_per_s / float(spr(b / p.workers))))
    if len(measured) < 2:
        raise PerfPredictError(f"only {len(measured)} multi-device placement(s) could be measured; the "
                               "communication penalty needs at least 2", source=ref.describe(), step="comm model")

    # 3. fit on all but the held-out placement (the most spread-out one, largest batch), then refit on all.
    def fit(points: list[PlacementPoint]):
        return fit_comm_penalty([(q.d_node, q.d_gn) for q in points], [q.samples_per_s for q in points], spr,
                                [q.global_batch for q in points])

    hold = max(range(len(measured)), key=lambda i: (measured[i].d_node, measured[i].d_node * measured[i].d_gn,
                                                    measured[i].global_batch))
    holdout_err = None
    rest = [q for i, q in enumerate(measured) if i != hold]
    if len(rest) >= 2:
        try:
            partial = fit(rest)
            h = measured[hold]
            pred = float(partial.predict_rate(h.d_node, h.d_gn, h.global_batch, spr))
            holdout_err = abs(pred - h.samples_per_s) / h.samples_per_s
            measured[hold] = h.model_copy(update={"held_out": True, "predicted_samples_per_s": pred})
        except ValueError:
            holdout_err = None  # the remaining placements cannot identify the model; reported below
    model = fit(measured)
    for i, q in enumerate(measured):
        if not q.held_out:
            measured[i] = q.model_copy(update={
                "predicted_samples_per_s": float(model.predict_rate(q.d_node, q.d_gn, q.global_batch, spr))})
    links = {pt.d_node for pt in measured}
    return CommModelCard(
        gamma=model.gamma, **{"lambda": model.lam},
        residuals=[float(r) for r in model.relative_residuals], identifiable=dict(model.identifiable),
        placements=measured, holdout_rel_error=holdout_err,
        link=nodes.describe() if nodes is not None and max(links) > 1 else "loopback (one node)",
        spr_source=f"{spr_model.kind} fit to {len(spr_b)} single-device measurements at local batches {spr_b}",
        note=("left out, not measured: " + "; ".join(failed)) if failed else None, device=device)
