"""What two jobs sharing one GPU would do, from their cards: Horus's question (seed 004 §3.2, §4.1) asked of
perfpredict's own interference model, without running either job.

Each job brings its solo GPU utilisation, iteration time and device memory, predicted (``Predictor.predict``)
or measured (``perfpredict profile`` on CUDA). The device type's interference model (refitted by
``perfpredict train`` from perfpredict's co-located pairs, ``interference.json``) gives the slowdown
``T_deg`` at their cumulative utilisation; each job then takes ``(1 + T_deg)`` times its solo step, and the
pair does ``2 / (1 + T_deg)`` solo jobs' worth of work (above 1: sharing gains over running them one after
the other). Horus's T_deg is an absolute relative change, so a job that ran slightly faster next to a
partner counts as slowed as much; the model's answer is read as a slowdown. The slowdown's error on a job
the model never saw (leave one job out, ``interference.json``)
travels with the answer, since it is large on the data there is: read it before trusting the sign of a gain.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from perfpredict.errors import UsageError

if TYPE_CHECKING:
    from perfpredict.card import PerformanceCard
    from perfpredict.predictor import ModelSet


class JobOnDevice(BaseModel):
    """One job of the pair, as its card gives it."""

    name: str
    batch_size: int
    source: str = Field(description="predicted or measured: where the three numbers below come from")
    gpu_utilization: float = Field(description="solo NVML utilisation, 0..1")
    iter_time_s: float = Field(description="solo seconds per iteration")
    iter_time_colocated_s: float = Field(description="iter_time_s × (1 + slowdown)")
    device_memory_bytes: float | None = Field(None, description="predicted: the q90 of NVML process memory "
                                              "(what a placement reserves); measured: NVML process memory")


class PairPrediction(BaseModel):
    """Two jobs on one GPU: the slowdown each sees and whether they fit its memory."""

    device_type: str = Field(description="the model set whose interference model answered")
    device_name: str
    jobs: tuple[JobOnDevice, JobOnDevice]
    cumulative_utilization: float
    slowdown: float = Field(description="Horus's T_deg at the cumulative utilisation (the same for both jobs)")
    slowdown_rmse_unseen_job: float | None = Field(
        None, description="the model's slowdown RMSE on a job left out of its fit (leave one job out); "
                          "None when the set has too few jobs to say")
    slowdown_rmse_mean_baseline: float | None = Field(
        None, description="the same for the training pairs' mean slowdown: the bar the model has to clear")
    aggregate_throughput: float = Field(description="2 / (1 + slowdown): solo jobs' worth of work per unit time")
    device_memory_bytes: float | None = Field(None, description="the two jobs' device memory together")
    device_capacity_bytes: int | None = None
    fits_in_memory: bool | None = Field(None, description="None when either memory or the capacity is unknown")
    notes: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class SoloJob:
    """One job's solo numbers on its GPU, read off its card; ``card_device`` is the GPU the card was measured on
    or predicted for (name, memory bytes), which decides the memory the pair must fit."""

    name: str
    batch_size: int
    source: str
    gpu_utilization: float
    iter_time_s: float
    device_memory_bytes: float | None
    card_device: tuple[str | None, int | None]


def job_on_device(card: PerformanceCard, batch_size: int | None) -> SoloJob:
    """The solo numbers of ``card`` at ``batch_size`` (default: its first), predicted or measured."""
    if card.device.kind != "cuda":
        raise UsageError(f"{card.model.name}: a {card.device.kind} card; co-location on a GPU needs a CUDA card "
                         "(predict with device_type='cuda', or profile on a GPU)", step="colocation")
    if card.prediction is not None:
        pts = {p.batch_size: p for p in card.prediction.points}
        b = batch_size if batch_size is not None else card.prediction.points[0].batch_size
        if b not in pts:
            raise UsageError(f"{card.model.name}: no predicted point at batch {b} (the card has "
                             f"{sorted(pts)})", step="colocation")
        p = pts[b]
        if p.gpu_utilization is None:
            raise UsageError(f"{card.model.name}: the card predicts no GPU utilisation", step="colocation")
        return SoloJob(card.model.name, b, "predicted", p.gpu_utilization, p.iter_time_s, p.device_memory_safe_bytes,
                       (card.device.name, card.device.memory_bytes))
    util = {e.batch_size: e.gpu_utilization for e in (card.energy.points if card.energy else [])
            if e.gpu_utilization is not None}
    times = {t.batch_size: t.iter_time_s for t in card.throughput if t.ok}
    both = sorted(set(util) & set(times))
    b = batch_size if batch_size is not None else (both[0] if both else None)
    if b is None or b not in both:
        raise UsageError(f"{card.model.name}: no measured point with both an iteration time and a GPU utilisation"
                         f"{'' if b is None else f' at batch {b}'} (measured: {both or 'none'})", step="colocation")
    mem = next((m.nvml_process_bytes for m in card.memory if m.batch_size == b), None)
    return SoloJob(card.model.name, b, "measured", util[b], times[b], None if mem is None else float(mem),
                   (card.device.name, card.device.memory_bytes))


def predict_pair(ms: ModelSet, a: SoloJob, b: SoloJob) -> PairPrediction:
    """The pair prediction from two :func:`job_on_device` jobs and the model set whose interference model
    answers (see the module docstring)."""
    if ms.interference is None:
        raise UsageError(f"model set {ms.name} has no interference model (collect co-location pairs with "
                         "profilers/collect_colocation.py and run `perfpredict train`)", step="colocation")
    devices = [j.card_device for j in (a, b)]
    u = float(a.gpu_utilization) + float(b.gpu_utilization)
    t = float(ms.interference.predict(u))
    jobs = tuple(JobOnDevice(**{k: v for k, v in asdict(j).items() if k != "card_device"},
                             iter_time_colocated_s=float(j.iter_time_s) * (1.0 + t)) for j in (a, b))
    lojo = ms.interference_holdout or {}
    mems = [j.device_memory_bytes for j in (a, b)]
    total = None if any(m is None for m in mems) else float(sum(mems))
    # The GPU the cards were measured on or predicted for; the model set's own only when they do not say.
    caps = [m for _, m in devices if m]
    cap = min(caps) if caps else ms.device_memory_bytes
    notes = [f"slowdown from {ms.name}'s interference model: Horus's T_deg(cumulative utilisation), refitted on "
             f"{ms.interference.n_linear + ms.interference.n_quadratic} measured points"]
    others = sorted({n for n, _ in devices if n and n != ms.device_name})
    if others:
        notes.append(f"a card comes from {', '.join(others)}, the interference model from {ms.device_name}: the "
                     "slowdown is that GPU's")
    if u > 1.0:
        notes.append(f"cumulative utilisation {u:.0%} over-commits the GPU: the quadratic branch answers")
    if lojo.get("rmse") is not None and lojo["rmse"] >= t:
        notes.append(f"the slowdown's error on a job the model has not seen (RMSE {lojo['rmse']:.2f}) is as large "
                     "as the slowdown itself")
    return PairPrediction(
        device_type=ms.name, device_name=ms.device_name, jobs=jobs, cumulative_utilization=u, slowdown=t,
        slowdown_rmse_unseen_job=lojo.get("rmse"), slowdown_rmse_mean_baseline=lojo.get("rmse_mean_slowdown"),
        aggregate_throughput=2.0 / (1.0 + t), device_memory_bytes=total, device_capacity_bytes=cap,
        fits_in_memory=None if total is None or cap is None else total <= cap, notes=notes)
