"""GENIE (seed 003): the six model types of Table 3 as performance cards, and the task models read from them.

Table 3 names four CNNs (AlexNet, GoogleNet, ResNet-50, Inception-v3) and two RNNs (Regularized LSTM, Seq2seq);
the paper measured them on Tesla K80s and publishes no profile. perfpredict's own measurements
(``datasets/cuda_h100.csv``: training iterations of zoo architectures at batch 8-128 on an H100) give
each type a **measured** single-GPU rate curve:

* ``resnet50`` — exact: ``resnet-depth50-width64-image_size224-num_classes1000`` (torchvision ResNet-50,
  25.56 M parameters);
* ``regularized_lstm`` — exact: ``lstm-embed650-hidden650-layers2-seq_len35-vocab10000`` (Zaremba et al.'s
  "medium" regularised PTB LSTM: 650 units, 2 layers, 35 steps, 10k words);
* ``inception_v3`` — stand-in: ``resnet-depth34-width64-image_size224-num_classes1000``, the zoo CNN nearest to
  Inception-v3's 5.7 GMACs / 23.8 M parameters (log distance) other than ResNet-50 itself;
* ``googlenet`` — stand-in: ``resnet-depth18-width64-image_size224-num_classes1000``, the nearest to GoogleNet's
  1.5 GMACs / 6.6 M parameters;
* ``alexnet`` — stand-in: ``vgg-depth16-width32-batch_norm1-image_size224-hidden1024-num_classes1000``, a plain
  conv + fully-connected net like AlexNet (0.72 GMACs / 61 M); the zoo has no AlexNet-sized net;
* ``seq2seq`` — stand-in: ``lstm-embed512-hidden1024-layers2-seq_len64-vocab32000``, a 2-layer 1024-unit LSTM
  with a 32k vocabulary: the size of TF-NMT's encoder (no decoder, no attention).

(MACs/parameters of the paper's models are the published ones; the zoo's come from ``datasets/zoo_features.csv``.)
The measured points are copied below (:data:`MEASURED`) with the dataset they come from; a test checks them
against ``datasets/cuda_h100.csv``. Each card's rate model is :func:`perfpredict.fit.rate.fit_rate_model` on
them (eq. 7; the quadratic or the linear-time form, by leave-one-out error), its ν the median measured
first-iteration overhead (load/build times are not in the dataset).

What is **not measured** (no multi-GPU or inference data exist in perfpredict yet), and where it comes from:

* **Comm (eq. 8), γ and λ per type — analytic.** GENIE's lightweight profiling (§5.1.5) runs ``G``
  placements ``⟨1,g⟩`` and ``N`` placements ``⟨d,1⟩`` at one global batch and regresses γ, λ. We run the same
  regression (:func:`perfpredict.fit.comm.fit_comm_penalty`) on *analytic* rates of those placements on a
  4-node × 4-GPU platform with Table 1's topology (PCIe inside a node, no NVLink; InfiniBand between nodes) at
  the link generations of the GPU that was measured (:data:`LINKS`: PCIe 5.0 x16, 63 GB/s; 400 Gb/s NDR
  InfiniBand, 50 GB/s): each iteration computes the local batch at the measured H100 speed, then ring-all-
  reduces the gradients (the zoo architecture's parameter bytes, ``2(n−1)/n·P / bandwidth`` over the
  placement's slowest link). Table 1's own links (PCIe 3.0 x16, 15.75 GB/s; 56 Gb/s FDR, 7 GB/s;
  :data:`TABLE1_LINKS`) under H100 compute make communication dominate, and eq. 8's bounded penalty then fits
  the placements badly (relative residuals up to 100% against up to 28% here, the card's ``residuals``).
* **Inference** — analytic: a forward pass is taken as 1/3 of a training iteration's compute (backward ≈ 2×
  forward), so ``sPR_infer(b) = 3·sPR_train(b)`` (:data:`INFER_FACTOR`); Comm is 0 (eq. 8's remark).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from perfpredict.card import (
    CommModelCard,
    DeviceInfo,
    LatencyModel,
    ModelInfo,
    PerformanceCard,
    PlacementPoint,
    ProfileRun,
    ThroughputPoint,
    utc_now,
)
from perfpredict.fit.comm import fit_comm_penalty
from perfpredict.fit.rate import RateModel, fit_rate_model
from perfpredict.sched.genie import GeniePerfModel, Placement, Platform, genie_model_key

__all__ = [
    "DEFAULT_BATCHES", "GENIE_TYPES", "INFER_FACTOR", "LINKS", "MEASURED", "TABLE1_LINKS", "GenieType",
    "analytic_placement_rate", "genie_card", "genie_model", "genie_models", "genie_nu_s",
]

#: H100 the rates were measured on (``datasets/cuda_h100.meta.json``)
DEVICE = "NVIDIA H100 80GB HBM3"
#: links in GB/s: Table 1's topology (PCIe inside a node, no NVLink; InfiniBand between nodes) at the H100's
#: generation: PCIe 5.0 x16 and 400 Gb/s NDR InfiniBand
LINKS = {"intra_GBps": 63.0, "inter_GBps": 400.0 / 8.0}
#: Table 1's own links: PCIe 3.0 x16 and 56 Gb/s FDR InfiniBand
TABLE1_LINKS = {"intra_GBps": 15.75, "inter_GBps": 56.0 / 8.0}
#: the platform the lightweight profiling runs on (Table 1: 4 nodes x 4 GPUs)
PROFILE_PLATFORM = Platform(4, 4)
#: global batch of the profiling runs (§5.1.5: "N + G runs for a fixed global batch size")
PROFILE_BATCH = 64
#: inference samples/s over training samples/s at the same batch (forward ≈ 1/3 of forward + backward)
INFER_FACTOR = 3.0
#: Table 3's batch sizes are "generated with uniform distribution"; these are the measured ones
DEFAULT_BATCHES = (8, 16, 32, 64, 128)


@dataclass(frozen=True)
class GenieType:
    name: str
    paper_model: str
    family: str  # cnn | rnn
    zoo_config: str
    relation: str  # exact | stand-in
    paper_gmacs: float
    paper_params_m: float
    why: str


GENIE_TYPES: dict[str, GenieType] = {t.name: t for t in (
    GenieType("alexnet", "AlexNet", "cnn",
              "vgg-depth16-width32-batch_norm1-image_size224-hidden1024-num_classes1000", "stand-in", 0.72, 61.1,
              "a plain conv + fully-connected net (VGG-16 at width 32); the zoo has no AlexNet-sized net"),
    GenieType("googlenet", "GoogleNet", "cnn", "resnet-depth18-width64-image_size224-num_classes1000", "stand-in",
              1.5, 6.6, "the nearest zoo CNN to GoogleNet's MACs and parameters (log distance 0.60)"),
    GenieType("resnet50", "ResNet50", "cnn", "resnet-depth50-width64-image_size224-num_classes1000", "exact",
              4.1, 25.6, "torchvision ResNet-50 itself"),
    GenieType("inception_v3", "Inception-v3", "cnn", "resnet-depth34-width64-image_size224-num_classes1000",
              "stand-in", 5.7, 23.8, "the nearest zoo CNN other than ResNet-50 itself (log distance 0.45)"),
    GenieType("regularized_lstm", "Regularized LSTM", "rnn", "lstm-embed650-hidden650-layers2-seq_len35-vocab10000",
              "exact", 0.46, 19.8, "Zaremba et al.'s medium regularised PTB LSTM (650 units, 2 layers, 35 steps)"),
    GenieType("seq2seq", "Seq2seq", "rnn", "lstm-embed512-hidden1024-layers2-seq_len64-vocab32000", "stand-in",
              float("nan"), float("nan"), "a 2-layer 1024-unit LSTM with a 32k vocabulary: TF-NMT's encoder size"),
)}


@dataclass(frozen=True)
class _Measured:
    params: int
    param_bytes: int
    macs: float
    #: (batch size, median iteration time s, first-iteration extra s), training, fp32, one H100
    points: tuple[tuple[int, float, float], ...]


#: Copied from ``datasets/cuda_h100.csv`` (``iter_time_s``, ``first_iter_extra_s``) and
#: ``datasets/zoo_features.csv`` (``param_count``, ``param_bytes``, ``forward_macs_per_sample``);
#: ``tests/test_genie.py`` checks them against the files.
MEASURED: dict[str, _Measured] = {
    "vgg-depth16-width32-batch_norm1-image_size224-hidden1024-num_classes1000": _Measured(
        params=18605064, param_bytes=74437152, macs=3.87325e+09,
        points=((8, 0.010292931999970278, 0.5880781210000805), (16, 0.014429862000042704, 0.05016803900002742),
                (32, 0.02416170999993028, 0.04283702300006098), (64, 0.044402104000027975, 0.033889657999907286),
                (128, 0.08331011799998578, 0.01245008199998665))),
    "resnet-depth18-width64-image_size224-num_classes1000": _Measured(
        params=11689512, param_bytes=46796448, macs=1.81407e+09,
        points=((8, 0.01083535899999788, 0.6329511389999425), (16, 0.011399854000046616, 0.09765017399990938),
                (32, 0.012481505999971887, 0.06711450000000241), (64, 0.01635498500002086, 0.07404915500001152),
                (128, 0.02895686499994099, 0.049385410000127195))),
    "resnet-depth34-width64-image_size224-num_classes1000": _Measured(
        params=21797672, param_bytes=87258784, macs=3.66376e+09,
        points=((8, 0.01631374800001595, 0.4580933490000234), (16, 0.01687267450000718, 0.0994055904999982),
                (32, 0.018878300999972453, 0.07338872000002539), (64, 0.026563153499978398, 0.07846718650000639),
                (128, 0.0440327910000633, 0.03633699399995294))),
    "resnet-depth50-width64-image_size224-num_classes1000": _Measured(
        params=25557032, param_bytes=102440608, macs=4.08918e+09,
        points=((8, 0.0253533329999982, 1.1048268309999685), (16, 0.02511599799998976, 0.1731539310000585),
                (32, 0.027050142000007327, 0.14264010700003382), (64, 0.03961097500007327, 0.15894541299985576),
                (128, 0.073122785999999, 0.1091723990000446))),
    "lstm-embed650-hidden650-layers2-seq_len35-vocab10000": _Measured(
        params=19780400, param_bytes=79121600, macs=4.641e+08,
        points=((8, 0.006925947000013366, 0.2693834949999996), (16, 0.0067406134999714595, 0.0027994535000175347),
                (32, 0.007418088000008538, 0.0030570480000164935), (64, 0.007681327999989662, 0.0031705509999824244),
                (128, 0.010961565999991763, 0.018409479000013107))),
    "lstm-embed512-hidden1024-layers2-seq_len64-vocab32000": _Measured(
        params=63880448, param_bytes=255521792, macs=3.03668e+09,
        points=((8, 0.01006142199992155, 0.2543569390001039), (16, 0.012282451499970648, 0.003396259499993448),
                (32, 0.017471352499967452, 0.0019109835000676867), (64, 0.02602982600001269, 0.022233727000070758),
                (128, 0.04518914200002655, 0.0015727850000075705))),
}


def _type(task_type: str) -> GenieType:
    try:
        return GENIE_TYPES[task_type]
    except KeyError:
        raise ValueError(f"unknown GENIE model type {task_type!r}; Table 3's are {', '.join(GENIE_TYPES)}") from None


@cache
def _rate_model(task_type: str) -> RateModel:
    m = MEASURED[_type(task_type).zoo_config]
    b = [p[0] for p in m.points]
    return fit_rate_model(b, [bs / t for bs, t, _ in m.points])


def analytic_placement_rate(task_type: str, s: Placement, global_batch: float,
                            links: dict[str, float] | None = None) -> float:
    """Training samples/s of ``s`` from first principles: the local batch at the measured H100 speed, then a ring
    all-reduce of the gradients (``2(n−1)/n`` of the parameter bytes) over the placement's slowest link."""
    lk = links or LINKS
    rm = _rate_model(task_type)
    n = s.n
    t_comp = float(rm.iter_time(global_batch / n))
    if n == 1:
        return global_batch / t_comp
    bw = (lk["inter_GBps"] if s.d_node > 1 else lk["intra_GBps"]) * 1e9
    t_comm = 2.0 * (n - 1) / n * MEASURED[_type(task_type).zoo_config].param_bytes / bw
    return global_batch / (t_comp + t_comm)


@cache
def genie_card(task_type: str) -> PerformanceCard:
    """The type's card: measured throughput points and rate model (eq. 7), ν, and eq. 8 fitted by GENIE's
    lightweight profiling on the analytic placement rates (see the module docstring)."""
    from perfpredict import __version__

    gt = _type(task_type)
    m = MEASURED[gt.zoo_config]
    rm = _rate_model(task_type)
    pts = [ThroughputPoint(batch_size=b, status="ok", samples_per_s=b / t, iter_time_s=t, source="measured",
                           device="cuda:0") for b, t, _ in m.points]
    nu = float(np.median([x for _, _, x in m.points]))
    plat = PROFILE_PLATFORM
    profile = ([Placement(1, g) for g in range(1, plat.gpus_per_node + 1)]
               + [Placement(d, 1) for d in range(2, plat.n_nodes + 1)])
    rates = [analytic_placement_rate(task_type, s, PROFILE_BATCH) for s in profile]
    spr = lambda b: float(rm.throughput(b))  # noqa: E731
    cm = fit_comm_penalty([(s.d_node, s.d_gn) for s in profile], rates, spr, PROFILE_BATCH)
    fitted = cm.fitted_rates
    comm_card = CommModelCard(
        gamma=cm.gamma, lambda_=cm.lam, residuals=[float(v) for v in cm.relative_residuals],
        identifiable=cm.identifiable,
        placements=[PlacementPoint(d_node=q.d_node, d_gn=q.d_gn, global_batch=PROFILE_BATCH,
                                   samples_per_s=q.samples_per_s, predicted_samples_per_s=float(f),
                                   comm_observed=q.comm_observed)
                    for q, f in zip(cm.points, fitted, strict=True)],
        link=(f"analytic: ring all-reduce of {m.param_bytes / 1e6:.1f} MB at {LINKS['intra_GBps']:g} GB/s in a "
              f"node (PCIe, no NVLink) and {LINKS['inter_GBps']:g} GB/s between nodes (InfiniBand)"),
        spr_source="rate_model (measured H100 training iterations)", source="analytic", device="cuda")
    run = ProfileRun(mode="train", batch_sizes=[p[0] for p in m.points], started_at=utc_now(),
                     perfpredict_version=__version__,
                     command=f"perfpredict.sched.genie_cards.genie_card({task_type!r})",
                     settings={"data": "datasets/cuda_h100.csv", "zoo_config": gt.zoo_config})
    return PerformanceCard(
        status="partial",
        model=ModelInfo(name=f"genie/{task_type}", source=f"zoo:{gt.zoo_config}", parameters=m.params,
                        trainable_parameters=m.params, param_bytes=m.param_bytes, family=gt.family,
                        config={"paper_model": gt.paper_model, "relation": gt.relation, "why": gt.why}),
        device=DeviceInfo(kind="cuda", name=DEVICE, memory_bytes=80 * 10**9),
        run=run, throughput=pts, rate_model=rm.to_card(device="cuda"),
        latency=LatencyModel(nu_s=nu, source="measured", device="cuda",
                             nu_excludes="load/build/setup times (not in datasets/cuda_h100.csv): first-iteration "
                                         "extra time only"),
        comm_model=comm_card,
        notes=[f"{gt.paper_model} ({gt.relation}: {gt.zoo_config})",
               "comm_model: analytic placement rates (no multi-GPU measurements), regressed as GENIE §5.1.5"])


def genie_nu_s() -> float:
    """The platform's ν (eq. 4: "degenerated to a constant value"): the median of the six cards' ν."""
    return float(np.median([genie_card(t).latency.nu_s for t in GENIE_TYPES]))  # type: ignore[union-attr]


class _SPR:
    """sPR(b) from a card's rate model, times a factor (picklable)."""

    def __init__(self, model: RateModel, factor: float) -> None:
        self.model, self.factor = model, factor

    def __call__(self, b: float) -> float:
        return self.factor * float(self.model.throughput(b))


@cache
def genie_model(task_type: str, training: bool, batch: float) -> GeniePerfModel:
    """The task model of (type, training/inference, global batch), read from :func:`genie_card`."""
    card = genie_card(task_type)
    cm = card.comm_model
    assert cm is not None and cm.gamma is not None and cm.lambda_ is not None
    factor = 1.0 if training else INFER_FACTOR
    return GeniePerfModel(
        name=genie_model_key(task_type, training, batch), source="measured" if training else "analytic",
        task_type=task_type, training=training, batch=float(batch),
        spr=_SPR(card.rate(), factor), gamma=float(cm.gamma), lam=float(cm.lambda_), nu_s=genie_nu_s(),
        spr_source=("measured H100 rate model" if training else f"measured H100 rate model x {INFER_FACTOR:g} "
                    "(inference, analytic)"))


@cache
def genie_models(batches: tuple[int, ...] | None = None) -> dict[str, GeniePerfModel]:
    """Every (type, mode, batch) model: ``batches`` default to powers of two from 1 to 1024 (the trace
    generator's :data:`DEFAULT_BATCHES` among them), so CSV traces with such batches find their model."""
    bs = batches if batches is not None else tuple(2 ** k for k in range(11))
    return {genie_model_key(t, tr, b): genie_model(t, tr, float(b)) for t in GENIE_TYPES for tr in (True, False)
            for b in bs}
