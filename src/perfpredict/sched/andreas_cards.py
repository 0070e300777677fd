"""ANDREAS (seed 000): the paper's applications, GPU types and energy prices as cards and performance models.

The paper publishes the *setting* of its experiments, not the profiles its Job Profiler measured. What it
states, and what this module takes from it:

* the applications (§V, Table V): multi-layer LSTM in two sizes ("LSTM-big", "LSTM-small"), EfficientNet and a
  simple convolutional network ("ConvNet"), trained with TensorFlow 2, a weights snapshot every epoch; batch
  sizes 4096 (EfficientNet) and 8192 (the others); 60, 80 or 160 epochs;
* the GPU types (Table II): Tesla V100-PCIE-32GB and Tesla T4, in nodes of 1-2 GPUs (ARMIDA), 2 V100 / 1 T4
  and 4 V100 / 2 T4 in the simulations (§V-B);
* energy prices (§V-A): 0.172 EUR/kWh inflated by a PUE of 1.33; "execution costs increase linearly with the
  number of GPUs" and "the speedup of the processing time is sublinear in the number of GPUs" (§IV-B);
* every Table V job met its due date on armida-05/06/07 (§V-C) — used to size the epoch times below.

What is *assumed* (the paper gives no number), each stated next to its value below:

* per-epoch times on one V100 (:data:`ANDREAS_APPS`), chosen so that every Table V job can meet its due date
  on the three validation nodes (the paper reports that they all did) without being trivially early;
* T4 throughput relative to a V100 per application: 0.33-0.40, the range of public fp32 training benchmarks
  and of the two boards' memory bandwidths (320 vs 900 GB/s);
* multi-GPU data-parallel speedup within a node: Amdahl's law with a parallel fraction of 0.85-0.95
  (sublinear, as §IV-B states);
* GPU power: the boards' nominal power (V100-PCIe 250 W, T4 70 W), so ``c_ng = g × P × price × PUE`` — linear
  in g as §IV-B states. Host power is not attributed to jobs (it is paid whether or not a job runs).

The models are built the way profiled ones are: :func:`andreas_card` gives one
:class:`~perfpredict.card.PerformanceCard` per (application, GPU type) — a throughput point at the Table V
batch size and the speedup curve — and :func:`andreas_model` reads them back with
:meth:`~perfpredict.sched.perf.PerfModel.from_cards`, so t_jng = work / (S(g) × speed(type)) comes from cards.
A job's ``work`` is its run time on one V100 (the reference allocation: ``gpus = 1``, type V100).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from perfpredict.card import (
    DeviceInfo,
    ModelInfo,
    PerformanceCard,
    ProfileRun,
    SpeedupCurveCard,
    SpeedupPointCard,
    ThroughputPoint,
    utc_now,
)
from perfpredict.fit.speedup import AMDAHL, SpeedupCurve, SpeedupPoint, Tail, point_kind
from perfpredict.sched.perf import PerfModel

__all__ = [
    "ANDREAS_APPS", "ANDREAS_GPU_TYPES", "AndreasApp", "GpuType", "PRICE_EUR_PER_KWH", "PUE", "andreas_card",
    "andreas_model", "andreas_models", "gpu_hour_cost",
]

#: §V-A: "the base cost of 0.172 EUR/KWh", "a PUE ... equal to 1.33".
PRICE_EUR_PER_KWH = 0.172
PUE = 1.33


@dataclass(frozen=True)
class GpuType:
    name: str
    board: str
    power_w: float
    mem_gb: float
    source: str


#: Table II's GPU types. Power: the boards' nominal (maximum) power from their datasheets (assumed drawn while
#: a job holds the GPU; the paper measured nodes with ExaMon but does not publish the values).
ANDREAS_GPU_TYPES: dict[str, GpuType] = {
    "V100": GpuType("V100", "Nvidia Tesla V100-PCIE 32GB", 250.0, 32.0, "Table II; 250 W board power (datasheet)"),
    "T4": GpuType("T4", "Nvidia Tesla T4 (Turing)", 70.0, 16.0, "Table II; 70 W board power (datasheet)"),
}


def gpu_hour_cost(gpu_type: str, *, price_eur_per_kwh: float = PRICE_EUR_PER_KWH, pue: float = PUE) -> float:
    """EUR per GPU-hour on ``gpu_type``: power × price × PUE (c_ng = g × this, per hour)."""
    return ANDREAS_GPU_TYPES[gpu_type].power_w / 1000.0 * price_eur_per_kwh * pue


@dataclass(frozen=True)
class AndreasApp:
    """One §V application: Table V's batch size, and the assumed epoch time, T4 speed and parallel fraction."""

    name: str
    family: str
    batch_size: int
    #: seconds per epoch on one V100 (assumed, see the module docstring)
    epoch_s_v100: float
    #: throughput per GPU on a T4 relative to a V100 (assumed)
    t4_speed: float
    #: Amdahl parallel fraction of data-parallel training inside one node (assumed)
    parallel_fraction: float
    assumptions: str


ANDREAS_APPS: dict[str, AndreasApp] = {a.name: a for a in (
    AndreasApp("convnet", "ConvolutionNet", 8192, 8.0, 0.40, 0.90,
               "8 s/epoch on a V100: J9 (160 epochs, due 2600 s after submission) then needs a V100 (1280 s) "
               "and cannot make it on a T4 (3200 s); a small CNN is the least compute-bound, hence the highest "
               "T4 ratio; f = 0.90."),
    AndreasApp("efficientnet", "EfficientNet", 4096, 40.0, 0.33, 0.95,
               "40 s/epoch: J6 (80 epochs, due 3600 s) fits one V100 (3200 s) with little slack; compute-bound, "
               "T4 ratio 0.33 (fp32 FLOPS 8.1 vs 15.7 TFLOPS, less at the large batch); f = 0.95."),
    AndreasApp("lstm-small", "LSTM", 8192, 25.0, 0.36, 0.85,
               "25 s/epoch: J8 (160 epochs, due 7600 s) fits a V100 (4000 s), not a T4 (11100 s); memory-bound, "
               "T4 ratio = the memory-bandwidth ratio 320/900; the smaller model scales worse, f = 0.85."),
    AndreasApp("lstm-big", "LSTM", 8192, 60.0, 0.36, 0.90,
               "60 s/epoch: J1 (60 epochs, due 5600 s) fits a V100 (3600 s) and J7 (160 epochs, due 17600 s) "
               "too (9600 s); T4 ratio 320/900; f = 0.90."),
)}

#: Allocations the speedup curve is pinned at (Amdahl's values there, Amdahl's tail above).
_KNOTS: tuple[float, ...] = (1.0, 2.0, 3.0, 4.0)
#: Notional samples per epoch: only throughput *ratios* between GPU types are used, so the value is immaterial.
_SAMPLES_PER_EPOCH = 50_000


def _amdahl(p: float, f: float) -> float:
    return 1.0 / ((1.0 - f) + f / p)


@cache
def _curve(app: str) -> SpeedupCurve:
    f = ANDREAS_APPS[app].parallel_fraction
    values = [_amdahl(p, f) for p in _KNOTS]
    pts = tuple(SpeedupPoint(p, s, point_kind(p)) for p, s in zip(_KNOTS, values, strict=True))
    tail = Tail(kind=AMDAHL, anchor_p=_KNOTS[-1], anchor_speedup=values[-1], used=f, fitted=f)
    return SpeedupCurve(knots_p=(0.0, *_KNOTS), knots_speedup=(0.0, *values), tail=tail, points=pts,
                        rel_uncertainty=0.5, loo_rel_error=None,
                        notes=f"paper-derived (ANDREAS §IV-B: sublinear): Amdahl f = {f:g}, assumed")


def andreas_card(app: str, gpu_type: str) -> PerformanceCard:
    """A card for ``app`` on ``gpu_type``: one throughput point at the Table V batch size and the speedup curve,
    every section ``source="paper"``; ``notes`` say what is stated and what assumed."""
    from perfpredict import __version__

    a = ANDREAS_APPS[app]
    gt = ANDREAS_GPU_TYPES[gpu_type]
    speed = 1.0 if gpu_type == "V100" else a.t4_speed
    sps = _SAMPLES_PER_EPOCH / a.epoch_s_v100 * speed
    curve = _curve(app)
    run = ProfileRun(mode="train", batch_sizes=[a.batch_size], started_at=utc_now(), perfpredict_version=__version__,
                     command=f"perfpredict.sched.andreas_cards.andreas_card({app!r}, {gpu_type!r})",
                     settings={"source": "paper"})
    return PerformanceCard(
        status="partial",
        model=ModelInfo(name=app, source="paper:seed000-andreas Table V", parameters=0, trainable_parameters=0,
                        param_bytes=0, family=a.family, config={"batch_size": a.batch_size}),
        device=DeviceInfo(kind="cuda", name=f"{gt.board} (paper-derived)", memory_bytes=int(gt.mem_gb * 1e9)),
        run=run,
        throughput=[ThroughputPoint(batch_size=a.batch_size, status="ok", samples_per_s=sps,
                                    iter_time_s=a.batch_size / sps, source="paper", device="cuda")],
        speedup_curve=SpeedupCurveCard(points=[SpeedupPointCard(p=q.p, speedup=q.speedup, kind=q.kind)  # type: ignore[arg-type]
                                               for q in curve.points],
                                       fit=curve.to_dict(), source="paper", device="cuda"),
        notes=["source: ANDREAS §V and Table V (applications, batch sizes), Table II (GPU types), §IV-B (sublinear "
               "speedup)", f"assumed: {a.assumptions}",
               f"throughput = {_SAMPLES_PER_EPOCH} notional samples per epoch / epoch time (only the ratio between "
               "GPU types is used)", "model.parameters = 0: not stated by the paper"])


@cache
def andreas_model(app: str) -> PerfModel:
    """``app``'s :class:`PerfModel` read from its V100 and T4 cards (reference: one V100)."""
    key = app.lower()
    if key not in ANDREAS_APPS:
        raise KeyError(f"no ANDREAS application {app!r}; choose from {', '.join(ANDREAS_APPS)}")
    cards = {t: andreas_card(key, t) for t in ANDREAS_GPU_TYPES}
    model = PerfModel.from_cards(cards, ref_gpu_type="V100", batch_size=ANDREAS_APPS[key].batch_size, name=key)
    return model


def andreas_models() -> dict[str, PerfModel]:
    """The four §V applications keyed by name (``convnet``, ``efficientnet``, ``lstm-small``, ``lstm-big``)."""
    return {name: andreas_model(name) for name in ANDREAS_APPS}
