"""Performance models built from what the seed papers *state*, for simulating their experiments.

The seed papers publish a few numbers about their jobs, not the full curves. This module turns those
statements into :class:`~perfpredict.sched.perf.PerfModel` s (``source="paper"``) and, through
:func:`paper_card`, into :class:`~perfpredict.card.PerformanceCard` s, so the simulator reads a paper's jobs
the same way it reads profiled ones. Every number below is either a statement of a paper (quoted with its
section) or an assumption, and the difference is kept visible: each model carries ``source`` and
``assumptions`` text, and its card repeats them in ``notes``.

Synergy (seed 001): ten models (Table 4)
    A per-GPU sensitivity grid ``W[c, m]`` over ``c`` = 1..24 CPUs per GPU and ``m`` = 31.25..500 GB per GPU
    (a server has 24 CPUs, 500 GB and 8 GPUs, so the GPU-proportional share is 3 CPUs and 62.5 GB, §5.1 —
    the reference allocation that trace durations refer to). Built like Synergy's optimistic profiling
    (§3.1): a CPU curve at full memory (dataset fully cached, which is how §2.1 measured Fig. 2a), then
    the memory columns, which cap that curve where a model's memory share is too small.

    *CPU curve.* Throughput relative to 3 CPUs, through the anchor points a paper statement gives,
    piecewise linear between them, flat after the last (more CPUs than the job needs do not help) and
    proportional to the CPUs below 3 (a sensitive job is CPU-bound there: that is what its gain above 3
    says). The anchors are concave, so the curve is too.

    *Memory.* ``W[c, m] = min(T_cpu(c), cap(m))``: memory per GPU caps the throughput a model can reach
    (storage delivers what the cache misses, §3.1), with ``cap`` read from the authors' own evaluation
    models. The paper gives no memory numbers for Table 4's jobs: its one memory statement, ResNet18 "from
    62GB (GPU-proportional allocation) to 500GB (max) ... speeds up training by almost 2×" (§2.1), was
    measured on *OpenImages*, while the trace's ResNet18 trains on ImageNet (Table 4). Transferring it to
    every image and speech model (one storage rate, as an earlier version of this module did) caps them
    all at 1.15× their reference speed at 62.5 GB per GPU whatever their CPUs, which contradicts §5.5: on
    servers with 4, 5 or 6 CPUs per GPU and the same 500 GB (62.5 GB per GPU), "the baseline
    GPU-proportional scheduler gets more CPU cores per GPU, thereby reducing data stalls in the baseline".
    The released simulator (msr-fiddle/synergy ``simulator/models/<model>_1.py``, the ``tput`` tables its
    ``ModelZoo`` loads through ``use_scores_from_tput``; columns 20.83, 62.5, 125, 187.5, 250 GB per GPU)
    agrees with §5.5: at 62.5 GB ResNet18, ResNet50 and MobileNetv2 reach their full CPU curves; AlexNet
    and ShuffleNet stop at 2.0× and need 125 GB for the rest; M5 stops at 1.5× (62.5 GB) and 2.0× (125 GB)
    and reaches 2.5× at 187.5 GB; DeepSpeech's tables (``deepspeech_2``/``_4``; its ``_1`` file is not in the
    stored snapshot) have no memory dependence at or above 62.5 GB. Those
    caps are :attr:`SynergySpec.mem_caps`, in throughput relative to the reference (the tables' unit too:
    3 CPUs at 62.5 GB is 1.0 in both), constant from one table column to the next and none after a model's
    last one. Below the share the tables' first column (20.83 GB, a third of the share) is 0.1 for every
    sensitive model, a job whose cache cannot hold its working set: the 31.25 GB column here is that table
    interpolated linearly between 20.83 and 62.5 GB (``0.75 · 0.1 + 0.25 · W[c, 62.5]``). Language models
    are "GPU compute bound" and insensitive to memory (§2.1: GNMT's
    throughput is unaffected down to 20 GB, its process memory), so their columns are flat.

Moldable/malleable scheduling (seed 002): speedup curves ``S(p)``, ``p`` in [1/4, 4]
    Fig. 1 of seed 002 plots OpenNMT (data parallel, p ≥ 1) and MCNN (``p = 1/n``: n tasks share a GPU),
    but its values are not in the text; the text states only the shape — non-decreasing and sublinear,
    ``S(1/n) > 1/n`` (§II) — and the cause: a task leaves the GPU idle while it runs host code and copies
    data (§II-B). Amdahl's law with parallel fraction ``f`` is exactly that model (a share ``1 - f`` of a
    task's solo time does not need the GPU, so co-located tasks fill each other's gaps and extra GPUs only
    speed up the ``f`` part), and it is concave, so the paper's own algorithms' premise holds. ``f`` is
    an assumption (see :data:`MOLDABLE_PARALLEL_FRACTION`). The curve is stored as a
    :class:`~perfpredict.fit.speedup.SpeedupCurve` with knots at p = 1/4, 1/3, 1/2, 1, 2, 3, 4 (Amdahl's
    values there) and Amdahl's tail above 4, so it round-trips through a card exactly. Device memory is
    stated: MCNN tasks use "around 20% of a GPU's device memory" and OpenNMT "more than 90%" of a 12 GB
    M40 (§II-B, §V-A/B), so OpenNMT cannot share a GPU. ``linear`` is §VI's assumption for HPC2N.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from perfpredict.card import (
    DeviceInfo,
    MemoryPoint,
    ModelInfo,
    PerformanceCard,
    ProfileRun,
    SensitivityCard,
    SensitivityDemand,
    SpeedupCurveCard,
    SpeedupPointCard,
    utc_now,
)
from perfpredict.fit.cache_model import demand_vector
from perfpredict.fit.speedup import AMDAHL, SpeedupCurve, SpeedupPoint, Tail, point_kind
from perfpredict.sched.perf import PerfModel

__all__ = [
    "CPU_VALUES", "MEM_VALUES_GB", "MOLDABLE_MODELS", "MOLDABLE_PARALLEL_FRACTION", "REF_CPUS_PER_GPU",
    "REF_MEM_PER_GPU", "SYNERGY_MODELS", "SYNERGY_TASK_MODELS", "SynergySpec", "moldable_model",
    "moldable_models", "moldable_speedup", "paper_card", "paper_model", "synergy_models", "synergy_spec",
]

# ---------------------------------------------------------------------------------------------------------
# Synergy (seed 001)
# ---------------------------------------------------------------------------------------------------------
#: CPUs per GPU on the grid: 1 .. 24 (a single-GPU job on a 24-CPU server can be given all of them).
CPU_VALUES: tuple[int, ...] = tuple(range(1, 25))
#: Memory per GPU on the grid (GB): half the proportional share, the share (62.5), then steps of 62.5 to 500.
MEM_VALUES_GB: tuple[float, ...] = (31.25, 62.5, 125.0, 187.5, 250.0, 312.5, 375.0, 437.5, 500.0)
#: The GPU-proportional share on Synergy's servers (24 CPUs, 500 GB, 8 GPUs; §5.1): trace durations refer to it.
REF_CPUS_PER_GPU = 3.0
REF_MEM_PER_GPU = 62.5

#: The released simulator's lowest memory column (GB per GPU) and the throughput every sensitive model has there.
_TABLE_STARVED_GB = 62.5 / 3
_TABLE_STARVED_W = 0.1
#: The demand vector's tolerance (Synergy §3.2: the least CPU and memory within 10% of the best throughput).
_DEMAND_THRESHOLD = 0.1


@dataclass(frozen=True)
class SynergySpec:
    """What is known about one Table 4 model: its task, the CPU anchors, and where each number came from.

    ``cpu_anchors`` are ``(cpus_per_gpu, throughput relative to 3 CPUs)`` at full memory; the curve is
    ``c / 3`` below 3 for a sensitive model (CPU-bound) and flat at the one anchor for an insensitive one.
    ``mem_caps`` are ``(GB per GPU, highest throughput relative to the reference reachable with that much
    memory)`` from the authors' released tables, at and above the proportional 62.5 GB; a cap holds up to
    the next entry and none is left after the last (empty: the full CPU curve is reachable at 62.5 GB).
    """

    name: str
    task: str
    dataset: str
    cpu_anchors: tuple[tuple[float, float], ...]
    memory_sensitive: bool
    source: str
    assumptions: str
    #: the job's own memory (GB) when known; memory-insensitive models only
    process_gb: float | None = None
    mem_caps: tuple[tuple[float, float], ...] = ()

    @property
    def cpu_sensitive(self) -> bool:
        return any(abs(v - 1.0) > 1e-12 for _, v in self.cpu_anchors)


_SYNERGY_SPECS: tuple[SynergySpec, ...] = (
    # -- image (ImageNet, Table 4) -------------------------------------------------------------------------
    SynergySpec(
        "resnet18", "image", "ImageNet", ((3, 1.0), (9, 2.3)), True,
        source="§2.1: 'increasing [the CPU:GPU ratio from 3] to 9 results in 2.3x faster training for ResNet18'; "
               "'ShuffleNet and ResNet18 require 9-24 CPU cores per GPU'.",
        assumptions="saturates at 9 CPUs (the low end of '9-24', where the stated gain is); memory: the full "
                    "CPU curve at 62.5 GB per GPU (released res18_1 table; §2.1's 'almost 2x' from 62 to 500 GB "
                    "was measured on OpenImages, Table 4's ResNet18 trains on ImageNet, and is not applied)."),
    SynergySpec(
        "alexnet", "image", "ImageNet", ((3, 1.0), (12, 3.1)), True,
        source="§2.1: 'Increasing the CPU:GPU ratio from 3 to 12 results in 3.1x faster training for AlexNet'.",
        assumptions="saturates at 12 CPUs; memory: at most 2.0x at 62.5 GB per GPU, the rest from 125 GB "
                    "(released alexnet_1 table).", mem_caps=((62.5, 2.0), (125.0, math.inf))),
    SynergySpec(
        "shufflenetv2", "image", "ImageNet", ((3, 1.0), (24, 3.0)), True,
        source="§2.1: 'ShuffleNet and ResNet18 require 9-24 CPU cores per GPU'; §1: some image models 'achieve "
               "up to 3x speedup' above their GPU-proportional CPU share.",
        assumptions="saturates at 24 CPUs (the high end of '9-24') with the 'up to 3x' gain; memory: at most "
                    "2.0x at 62.5 GB per GPU, the rest from 125 GB (released shufflenet_1 table).",
        mem_caps=((62.5, 2.0), (125.0, math.inf))),
    SynergySpec(
        "mobilenetv2", "image", "ImageNet", ((3, 1.0), (6, 1.55)), True,
        source="§2.1: 'most image and speech models are sensitive to CPU allocations' (no number for MobileNetv2).",
        assumptions="1.55x at 6 CPUs, the value in the authors' released simulator model table "
                    "(msr-fiddle/synergy simulator/jobs/model.py); memory: the full CPU curve at 62.5 GB per GPU "
                    "(released mobilenet_1 table)."),
    SynergySpec(
        "resnet50", "image", "ImageNet", ((3, 1.0), (4, 1.15)), True,
        source="§2.1: 'most image and speech models are sensitive to CPU allocations' (no number for ResNet50).",
        assumptions="1.15x at 4 CPUs (a larger, more GPU-bound CNN; the authors' released simulator table); "
                    "memory: the full CPU curve at 62.5 GB per GPU (released res50_1 table)."),
    # -- language (Table 4: GNMT/WMT16, LSTM/Wikitext-2, Transformer-XL/Wikitext-103) ----------------------
    SynergySpec(
        "gnmt", "language", "WMT16", ((1, 1.0),), False,
        source="§1: 'models like GNMT are unaffected when the CPUs assigned are less than GPU-proportional "
               "share'; §2.1: 'GNMT is insensitive to memory allocation; even if only 20GB memory is allocated "
               "(which is the required process memory for training), the training throughput is unaffected'.",
        assumptions="1 CPU per GPU suffices.", process_gb=20.0),
    SynergySpec(
        "lstm", "language", "Wikitext-2", ((1, 1.0),), False,
        source="§2.1: 'most language models are insensitive to CPU allocations'; 'language models like GNMT, "
               "and transformers are GPU compute bound'.",
        assumptions="as GNMT (1 CPU per GPU, 20 GB process memory).", process_gb=20.0),
    SynergySpec(
        "transformer-xl", "language", "Wikitext-103", ((1, 1.0),), False,
        source="§2.1: 'Transformer models ... do not perform several unique data augmentation operations'; "
               "'language models like GNMT, and transformers are GPU compute bound'.",
        assumptions="as GNMT (1 CPU per GPU, 20 GB process memory).", process_gb=20.0),
    # -- speech (Table 4: M5/Free Music, DeepSpeech/LibriSpeech) -------------------------------------------
    SynergySpec(
        "m5", "speech", "Free Music", ((3, 1.0), (6, 2.0)), True,
        source="§2.1: 'most image and speech models are sensitive to CPU allocations'; 'image and speech models "
               "benefit from larger DRAM caches' (no number for M5).",
        assumptions="2x at 6 CPUs (a small model behind audio decoding; the authors' released simulator's "
                    "approximate table); memory: at most 1.5x at 62.5 GB, 2.0x at 125 GB, 2.5x at 187.5 GB per "
                    "GPU (released m5_1 table).",
        mem_caps=((62.5, 1.5), (125.0, 2.0), (187.5, math.inf))),
    SynergySpec(
        "deepspeech", "speech", "LibriSpeech", ((3, 1.0), (6, 1.5)), True,
        source="§2.1: as M5 (no number for DeepSpeech).",
        assumptions="1.5x at 6 CPUs (a large recurrent model: less CPU-bound than M5; the authors' released "
                    "simulator's approximate table); memory: the full CPU curve at 62.5 GB per GPU (released "
                    "deepspeech_2/_4 tables; no deepspeech_1 in the stored snapshot)."),
)

#: Table 4's models by task: what :func:`perfpredict.sim.traces.synergy_trace` draws from.
SYNERGY_TASK_MODELS: dict[str, list[str]] = {
    task: [s.name for s in _SYNERGY_SPECS if s.task == task] for task in ("image", "language", "speech")
}
SYNERGY_MODELS: tuple[str, ...] = tuple(s.name for s in _SYNERGY_SPECS)


def synergy_spec(name: str) -> SynergySpec:
    """The statements and assumptions behind one Synergy model (name as in :data:`SYNERGY_MODELS`)."""
    for s in _SYNERGY_SPECS:
        if s.name == name.lower():
            return s
    raise KeyError(f"no Synergy model {name!r}; Table 4 has {', '.join(SYNERGY_MODELS)}")


def _cpu_curve(spec: SynergySpec, cpus: Sequence[float]) -> np.ndarray:
    """Throughput at full memory, relative to 3 CPUs, at each of ``cpus``."""
    c = np.asarray(cpus, dtype=float)
    if not spec.cpu_sensitive:
        return np.full_like(c, spec.cpu_anchors[0][1])
    xs = [0.0] + [a for a, _ in spec.cpu_anchors]
    ys = [0.0] + [b for _, b in spec.cpu_anchors]
    return np.interp(c, xs, ys)  # linear through the origin below 3, flat above the last anchor


def _mem_cap(spec: SynergySpec, mem_gb: float) -> float:
    """Highest throughput (relative to the reference) ``spec`` reaches with ``mem_gb`` per GPU, at or above the
    proportional share: the cap of the last :attr:`SynergySpec.mem_caps` entry at or below ``mem_gb``."""
    cap = math.inf
    for m, c in spec.mem_caps:
        if mem_gb + 1e-9 >= m:
            cap = c
    return cap


def _grid(spec: SynergySpec) -> np.ndarray:
    """``W[c, m]`` on (:data:`CPU_VALUES`, :data:`MEM_VALUES_GB`), relative to the full-memory 3-CPU throughput
    (which is also the reference's, 3 CPUs at 62.5 GB: no cap binds at 3 CPUs)."""
    curve = _cpu_curve(spec, CPU_VALUES)
    if not spec.memory_sensitive:
        return np.repeat(curve[:, None], len(MEM_VALUES_GB), axis=1)
    at_share = np.minimum(curve, _mem_cap(spec, REF_MEM_PER_GPU))
    cols = []
    for m in MEM_VALUES_GB:
        if m >= REF_MEM_PER_GPU - 1e-9:
            cols.append(np.minimum(curve, _mem_cap(spec, m)))
        else:  # the released table between its starved first column and the share, linearly
            t = max(0.0, (m - _TABLE_STARVED_GB) / (REF_MEM_PER_GPU - _TABLE_STARVED_GB))
            cols.append(_TABLE_STARVED_W + t * (at_share - _TABLE_STARVED_W))
    return np.stack(cols, axis=1)


def _synergy_model(spec: SynergySpec) -> PerfModel:
    w = _grid(spec)
    return PerfModel(name=spec.name, cpus_per_gpu=tuple(float(c) for c in CPU_VALUES), mem_per_gpu=MEM_VALUES_GB,
                     matrix=tuple(tuple(float(v) for v in row) for row in w), ref_cpus_per_gpu=REF_CPUS_PER_GPU,
                     ref_mem_per_gpu=REF_MEM_PER_GPU, source="paper")


@lru_cache(maxsize=1)
def _synergy_models() -> tuple[tuple[str, PerfModel], ...]:
    return tuple((s.name, _synergy_model(s)) for s in _SYNERGY_SPECS)


def synergy_models() -> dict[str, PerfModel]:
    """Table 4's models, keyed by the names :func:`~perfpredict.sim.traces.synergy_trace` puts in ``Job.model``."""
    return dict(_synergy_models())


# ---------------------------------------------------------------------------------------------------------
# Moldable / malleable (seed 002)
# ---------------------------------------------------------------------------------------------------------
#: Amdahl parallel fraction f per application. Assumptions (Fig. 1's values are not in the text): MCNN leaves
#: 20% of its solo time to host code and transfers (enough for the co-location gains §V reports: 4 tasks on a
#: GPU do 1.18x the work of one); OpenNMT scales worse ("the scalability of NNs with more parameters such as
#: for language processing is limited", §II-A): f = 0.7 gives S(4) = 2.1 against MCNN's 2.5. ``linear``:
#: §VI's HPC2N assumption ("We assume a linear speedup").
MOLDABLE_PARALLEL_FRACTION: dict[str, float] = {"mcnn": 0.8, "opennmt": 0.7, "linear": 1.0}
#: Device memory per task as a fraction of the GPU's (§II-B: MCNN "around 20%"; §V-B: OpenNMT "more than 90%").
_MOLDABLE_DEVICE_MEM_FRACTION: dict[str, float] = {"mcnn": 0.2, "opennmt": 0.9, "linear": 0.0}
MOLDABLE_MODELS: tuple[str, ...] = tuple(MOLDABLE_PARALLEL_FRACTION)
#: The allocations the curve is pinned at: seed 002's (p_min, p_max) = (1/4, 4) and the unit fractions between.
_MOLDABLE_KNOTS: tuple[float, ...] = (0.25, 1 / 3, 0.5, 1.0, 2.0, 3.0, 4.0)
#: Seed 002's GPUs: Tesla M40 with 12 GB device memory (§V-A).
_M40_MEM_GB = 12.0
#: The curve's relative uncertainty: unknown (no values published), so the speedup module's "unknown" level.
_PAPER_REL_UNCERTAINTY = 0.5


def _amdahl(p: float, f: float) -> float:
    return 1.0 / ((1.0 - f) + f / p)


@cache
def _moldable_curve(kind: str, share_fraction: float | None = None) -> SpeedupCurve:
    key = kind.lower()
    if key not in MOLDABLE_PARALLEL_FRACTION:
        raise KeyError(f"no moldable speedup curve {kind!r}; choose from {', '.join(MOLDABLE_MODELS)}")
    f = MOLDABLE_PARALLEL_FRACTION[key]
    fs = f if share_fraction is None else float(share_fraction)
    if not 0.0 <= fs <= 1.0:
        raise ValueError(f"share fraction must be in [0, 1], got {fs}")
    values = [_amdahl(p, fs if p < 1 else f) for p in _MOLDABLE_KNOTS]
    pts = tuple(SpeedupPoint(p, s, point_kind(p)) for p, s in zip(_MOLDABLE_KNOTS, values, strict=True))
    # Amdahl scaled through its own value at p = 4 is Amdahl itself, and its slope there is below the last
    # chord's (concave), so the speedup module's concavity cap never binds.
    tail = Tail(kind=AMDAHL, anchor_p=_MOLDABLE_KNOTS[-1], anchor_speedup=values[-1], used=f, fitted=f)
    return SpeedupCurve(knots_p=(0.0, *_MOLDABLE_KNOTS), knots_speedup=(0.0, *values), tail=tail, points=pts,
                        rel_uncertainty=_PAPER_REL_UNCERTAINTY, loo_rel_error=None,
                        notes=f"paper-derived (seed 002 Fig. 1 shape): Amdahl f = {f:g} at the knots, assumed"
                        + ("" if share_fraction is None else f"; below one GPU f = {fs:g}"))


def moldable_speedup(kind: str = "mcnn") -> Callable[[float], float]:
    """``S(p)`` relative to one whole GPU for ``mcnn``, ``opennmt`` or ``linear`` (p = 1/n: n tasks share one).

    Exactly Amdahl's law at p = 1/4, 1/3, 1/2, 1, 2, 3, 4 and above 4; linear between those points.
    The callable is picklable (a bound method of a frozen dataclass).
    """
    return _moldable_curve(kind).speedup  # type: ignore[return-value]


def moldable_model(name: str = "mcnn", *, gpu_mem_gb: float = _M40_MEM_GB,
                   share_fraction: float | None = None) -> PerfModel:
    """A seed-002 application as a :class:`PerfModel`: its speedup curve and its device-memory footprint
    (the stated fraction of a ``gpu_mem_gb`` device; 12 GB M40s in the paper). No CPU/memory grid: seed 002
    leaves host resources out of scope (§IV-A).

    ``share_fraction`` replaces the Amdahl fraction below one GPU only, i.e. how much n tasks sharing a GPU
    slow each other: S(1/n) = 1 / ((1 - f) + f·n), so n sharers together do n·S(1/n) of one task's work
    (f = 0.8, the default for MCNN: 1.18× for four; f = 0.2: 2.5×). Fig. 1's values are not published, and
    how much sharing gains is what the moldable schedules live on, so experiments can vary it."""
    key = name.lower()
    curve = _moldable_curve(key, share_fraction)
    return PerfModel(name=key, speedup=curve.speedup, device_mem_gb=_MOLDABLE_DEVICE_MEM_FRACTION[key] * gpu_mem_gb,
                     source="paper")


def moldable_models(*, gpu_mem_gb: float = _M40_MEM_GB,
                    share_fraction: Mapping[str, float] | None = None) -> dict[str, PerfModel]:
    """Seed 002's applications (``mcnn``, ``opennmt``, ``linear``) keyed by name, as :func:`moldable_model`
    (``share_fraction``: per application, its Amdahl fraction below one GPU)."""
    share = dict(share_fraction or {})
    unknown = set(share) - set(MOLDABLE_MODELS)
    if unknown:
        raise KeyError(f"no moldable application {', '.join(sorted(unknown))}; choose from {', '.join(MOLDABLE_MODELS)}")
    return {name: moldable_model(name, gpu_mem_gb=gpu_mem_gb, share_fraction=share.get(name))
            for name in MOLDABLE_MODELS}


def paper_model(name: str) -> PerfModel:
    """Any paper model by name: a Synergy Table 4 model or a seed-002 application."""
    key = name.lower()
    if key in MOLDABLE_PARALLEL_FRACTION:
        return moldable_model(key)
    return synergy_models()[synergy_spec(key).name]


# ---------------------------------------------------------------------------------------------------------
# cards
# ---------------------------------------------------------------------------------------------------------
def paper_card(name: str) -> PerformanceCard:
    """A :class:`PerformanceCard` holding a paper model, every section marked ``source="paper"``.

    Synergy models fill ``sensitivity`` (the grid, in throughput relative to 3 CPUs at full memory); seed-002
    applications fill ``speedup_curve`` and, for the device-memory footprint, one ``memory`` point.
    ``PerfModel.from_card(card)`` gives back the same rates — for a Synergy card pass the reference,
    ``ref_cpus_per_gpu=3, ref_mem_per_gpu=62.5``: ``from_card`` otherwise takes the card's *demand* as the
    reference, while Synergy's trace durations are at the GPU-proportional share.
    """
    from perfpredict import __version__

    key = name.lower()
    run = ProfileRun(mode="train", batch_sizes=[], started_at=utc_now(), perfpredict_version=__version__,
                     command=f"perfpredict.sched.paper_cards.paper_card({key!r})",
                     settings={"source": "paper"})
    if key in MOLDABLE_PARALLEL_FRACTION:
        return _moldable_card(key, run)
    return _synergy_card(synergy_spec(key), run)


def _model_info(name: str, source: str, family: str, config: dict) -> ModelInfo:
    # Parameter counts are not stated by the papers and no module was built: 0 means unknown here.
    return ModelInfo(name=name, source=source, parameters=0, trainable_parameters=0, param_bytes=0,
                     family=family, config=config)


def _synergy_card(spec: SynergySpec, run: ProfileRun) -> PerformanceCard:
    w = _grid(spec)
    cpus, mem = demand_vector(CPU_VALUES, MEM_VALUES_GB, w, _DEMAND_THRESHOLD)
    anchors = [a for a, _ in spec.cpu_anchors]
    caps = ", ".join(f"{c:g}x from {m:g} GB" if math.isfinite(c) else f"none from {m:g} GB" for m, c in spec.mem_caps)
    sens = SensitivityCard(
        cpu_values=list(CPU_VALUES), mem_values_gb=list(MEM_VALUES_GB), matrix=w.tolist(),
        profiled_cpu_values=[int(a) for a in anchors],
        probed_throughput=[float(v) for v in _cpu_curve(spec, anchors)],
        demand=SensitivityDemand(cpus=cpus, mem_gb=mem), threshold=_DEMAND_THRESHOLD,
        process_gb=spec.process_gb,
        note=("per GPU of a 1-GPU job; throughput relative to 3 CPUs at full memory; 'profiled' CPU values are "
              "the paper's anchor points. " + (("Memory caps the CPU curve as the authors' released simulator "
              "tables do: " + (caps if caps else "no cap at or above 62.5 GB") + "; below 62.5 GB per GPU the "
              "tables' starved 20.83 GB column (0.1), interpolated.") if spec.memory_sensitive
              else "Memory-insensitive.")),
        source="paper", device="cuda")
    return PerformanceCard(
        status="partial",
        model=_model_info(spec.name, "paper:seed001-synergy Table 4", spec.task,
                          {"task": spec.task, "dataset": spec.dataset}),
        device=DeviceInfo(kind="cuda", name="V100 (paper-derived)"),
        run=run, sensitivity=sens,
        notes=[f"source: {spec.source}", f"assumed: {spec.assumptions}",
               "reference allocation (trace durations): 3 CPUs and 62.5 GB per GPU (Synergy §5.1)",
               "model.parameters = 0: not stated by the paper (no module was built)"])


def _moldable_card(key: str, run: ProfileRun) -> PerformanceCard:
    curve = _moldable_curve(key)
    frac = _MOLDABLE_DEVICE_MEM_FRACTION[key]
    memory = ([MemoryPoint(batch_size=0, peak_bytes=round(frac * _M40_MEM_GB * 1e9), kind="cuda_peak_allocated",
                           source="paper", device="cuda")] if frac > 0 else [])
    return PerformanceCard(
        status="partial",
        model=_model_info(key, "paper:seed002-moldable Fig. 1", "moldable",
                          {"amdahl_parallel_fraction": MOLDABLE_PARALLEL_FRACTION[key],
                           "device_mem_fraction": frac}),
        device=DeviceInfo(kind="cuda", name="Tesla M40 12GB (paper-derived)", memory_bytes=int(_M40_MEM_GB * 1e9)),
        run=run, memory=memory,
        speedup_curve=SpeedupCurveCard(points=[SpeedupPointCard(p=q.p, speedup=q.speedup, kind=q.kind)  # type: ignore[arg-type]
                                               for q in curve.points],
                                       fit=curve.to_dict(), source="paper", device="cuda"),
        notes=[("source: seed 002 §II (sublinear, non-decreasing S; S(1/n) > 1/n; host code idles the GPU), "
                "§II-B/§V-B (device memory: MCNN ~20%, OpenNMT >90% of a 12 GB M40), §VI (HPC2N: linear)"),
               (f"assumed: Amdahl parallel fraction f = {MOLDABLE_PARALLEL_FRACTION[key]:g} (Fig. 1 values are not "
                "in the text)"),
               "memory[0].batch_size = 0: the batch size is not stated"])
