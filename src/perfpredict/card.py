"""The PerformanceCard: everything perfpredict knows about one job, as versioned JSON.

Profilers fill it from measurements, the Predictor (later) fills it from estimators, and schedulers read
only this. Each section says where its numbers came from (``source``: measured / fitted / analytic /
predicted) and on which device (``device``: ``cpu``, ``cuda:0``, ... or ``None`` for device-independent
graph analysis), so a scheduler can always tell a measured number from a derived one, and a CPU number from
a GPU number.

Compatibility: ``schema_version`` is ``MAJOR.MINOR``. Minor bumps only add optional fields, so a card from a
newer minor version loads here with the fields this version does not know dropped; unknown fields in a card
of this or an older minor version are an error (a typo in a hand-written card must not pass silently).
Loading a card whose major version differs from :data:`SCHEMA_VERSION` raises a clear error.
"""

from __future__ import annotations

import json
import math
import operator
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError, model_validator

from perfpredict.errors import PerfPredictError

SCHEMA_VERSION = "1.30"  # 1.1: scaling, colocation, speedup_curve, comm_model, sensitivity; 1.2: prediction,
#                                             features.activation_bytes_by_op; 1.3: features.lookup_param_bytes;
#                                             1.4: features.recurrent_steps_by_op;
#                                             1.5: features.saved_cpu_bytes_per_sample;
#                                             1.6: features.peak_live_bytes_per_sample/_fixed,
#                                                  features.graph_saved_bytes_per_sample/_fixed;
#                                             1.7: memory[].file_backed_bytes; 1.8: features.kernel_nodes;
#                                             1.9: throughput[].denormal_speedup, denormal_flushed_iter_time_s;
#                                             1.10: prediction.points[].iter_time_baseline_shares;
#                                             1.11: colocation.points[].other_cpus, colocation.pairs[].other_cpus,
#                                                   job_solo_other_cpus, partner_solo_other_cpus;
#                                             1.12: run.precision, run.compiled, memory[].load_bytes;
#                                             1.13: device.cpu_id; 1.14: prediction.calibration;
#                                             1.15: prediction.calibration.speed_noise;
#                                             1.16: features.input_bytes_per_sample, saved_bytes_fixed,
#                                                   saved_cpu_bytes_fixed (a predicted card's features then
#                                                   predict again as they are: Predictor.predict(features=card));
#                                             1.17: status "failed" (no batch size measured; was "partial")
#                                             1.18: features.notes (a forward pass that traced two graphs)
#                                             1.19: sensitivity.probed_other_cpus
#                                             1.20: comm_model.note (failed measurements left out)
#                                             1.21: model.frozen_param_bytes (a card carries its frozen
#                                                   parameters to Predictor.predict(features=card))
#                                             1.22: features.frozen_step_work_ratio (a predicted card of a
#                                                   frozen model gives its training-step time back)
#                                             1.23: run.precision "fp64" (a float64 model's measured run;
#                                                   fp16/bf16 likewise for a model.half()/.bfloat16() one)
#                                             1.24: features.optimizer_state_copies (a predicted card says the
#                                                   optimizer state it charged, a measured training card its
#                                                   probed optimizer's, and features=card predicts with it)
#                                             1.25: features.recompute_step_work_ratio (a predicted card of a
#                                                   model that checkpoints activations gives its training-step
#                                                   time back)
#                                             1.26: features.optimizer_step_bytes (the temporaries the
#                                                   optimizer's step holds, per device kind, charged with it)
#                                             1.27: features.recompute_saved_bytes_per_sample/_fixed and
#                                                   recompute_saved_cpu_bytes_per_sample/_fixed (a predicted card
#                                                   of a checkpointing model gives its training memory back)
#                                             1.28: features.unused_param_bytes, unused_frozen_param_bytes (the
#                                                   parameters a training step never uses, charged their weight)
#                                             1.29: prediction.asked_precision (a job whose precision had no set
#                                                   on its device: predicting from its card asks for it again)
#                                             1.30: features.buffer_bytes (a BatchNormalization's running
#                                                   statistics: held, never trained, charged their weight alone)

Source = Literal["measured", "fitted", "analytic", "predicted", "paper"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())


def _whole_number(value: Any) -> Any:
    """``8.0`` and a numpy integer as the int 8; anything else as it came, for the strict int check to refuse
    (``true``, ``"8"``, ``8.5``, a numpy bool)."""
    if isinstance(value, (bool, str, bytes)) or type(value).__name__ == "bool_":
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**53 else value  # 1e300 is no batch size
    try:
        return operator.index(value)
    except TypeError:
        return value


#: a batch size as a card holds it: a whole number from 1. ``8.0`` (another tool's JSON) and a numpy integer are
#: taken as 8; ``true``, ``"8"`` and ``8.5`` are refused (pydantic's lax int took ``true`` as 1 and ``"1_000"``)
BatchSize = Annotated[int, BeforeValidator(_whole_number), Strict(), Field(ge=1)]
#: a memory point's batch size: a :data:`BatchSize`, or 0 where a paper gives a footprint without stating its batch
#: size (the moldable cards of sched/paper_cards.py); MemoryPoint allows 0 for ``source="paper"`` only
MemoryBatchSize = Annotated[int, BeforeValidator(_whole_number), Strict(), Field(ge=0)]
#: a measured or predicted time or rate: positive when present
Positive = Annotated[float, Field(gt=0)]
#: a GPU utilisation: the fraction of time a kernel ran
Fraction = Annotated[float, Field(ge=0, le=1)]


class DeviceInfo(_Section):
    """The hardware and software the measurements came from."""

    kind: Literal["cpu", "cuda"]
    name: str = Field(description="CPU model name or GPU product name")
    cpu_id: str | None = Field(None, description="the host CPU beyond its model name (vendor, family/model/stepping, "
                                                 "vector ISA): a VM may mask the name")
    index: int | None = Field(None, description="CUDA device index used (None on CPU)")
    uuid: str | None = None
    threads: int | None = Field(None, description="torch intra-op threads used by the measuring process")
    cpu_count: int | None = Field(None, description="logical CPUs available to the measuring process")
    memory_bytes: int | None = Field(None, description="GPU memory (cuda) or system RAM (cpu)")
    compute_capability: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    hostname: str | None = None
    torch_version: str | None = None
    python_version: str | None = None
    platform: str | None = None


class ModelInfo(_Section):
    name: str
    source: str = Field(description="the model file path or zoo:<family>[params] that was profiled")
    parameters: int = Field(description="total parameter count (exact, from the built module)")
    trainable_parameters: int
    param_bytes: int
    frozen_param_bytes: int | None = Field(
        None, description="bytes of the parameters that get no gradient (requires_grad=False; part of param_bytes): "
                          "they need no gradient nor optimizer state. None on cards written before it was recorded")
    buffer_bytes: int = 0
    family: str | None = None
    config: dict[str, Any] | None = None
    file_sha256: str | None = Field(None, description="hash of the model file, for provenance")


class TimingStats(_Section):
    """Per-iteration wall times of the timed window (seconds)."""

    median_s: float
    p10_s: float
    p90_s: float
    mean_s: float
    std_s: float
    cv: float = Field(description="coefficient of variation, std/mean")
    iterations: int
    timed_s: float = Field(description="sum of timed iteration times")
    warmup_iterations: int
    warmup_s: float
    stop_reason: Literal["stable", "max_iters", "time_cap"]
    other_cpus: float | None = Field(None, description="CPUs that other processes on the host (and the hypervisor) "
                                                       "kept busy, on average, during the timed window; None "
                                                       "where it could not be read")


class StartupTimes(_Section):
    """Where a fresh process spends time before steady state; their sum is the latency model's ν."""

    load_s: float = Field(description="loading the model file / zoo entry")
    build_s: float = Field(description="build_model() and moving it to the device")
    setup_s: float = Field(description="optimizer creation and example inputs")
    first_iter_extra_s: float = Field(description="first iteration time minus the steady-state median")

    @property
    def total_s(self) -> float:
        return self.load_s + self.build_s + self.setup_s + max(self.first_iter_extra_s, 0.0)


class ThroughputPoint(_Section):
    batch_size: BatchSize
    status: Literal["ok", "oom", "error", "nonfinite", "timeout"]
    samples_per_s: Positive | None = None
    iter_time_s: Positive | None = Field(None, description="median iteration time")
    p10_s: float | None = None
    p90_s: float | None = None
    cv: float | None = None
    iterations: int | None = None
    timing: TimingStats | None = None
    startup: StartupTimes | None = None
    denormal_flushed_iter_time_s: float | None = Field(
        None, description="cpu: median of a few more iterations timed with denormal floats flushed to zero "
                          "(torch.set_flush_denormal(True)); iter_time_s stays the default's")
    denormal_speedup: float | None = Field(
        None, description="cpu: iter_time_s / denormal_flushed_iter_time_s. Well above 1, the job's values decay "
                          "into denormals (slow on x86) and flushing them would speed it up")
    error: str | None = None
    source: Source = "measured"
    device: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class HorusMemoryEstimate(_Section):
    """Horus eq. 2: GMem = (B·A + P) + B·G + δ, with the terms perfpredict used (bytes)."""

    batch_size: int
    activations: int = Field(description="B·A: forward activation bytes")
    parameters: int = Field(description="P: parameter bytes (+ parameter gradients and optimizer state in train mode)")
    gradients: int = Field(description="B·G: activation-gradient bytes of the backward pass (0 in infer mode)")
    overhead: int = Field(description="δ: initialisation overhead (CUDA context when measured; 0 on CPU)")
    total: int


class MemoryPoint(_Section):
    batch_size: MemoryBatchSize
    peak_bytes: int | None = Field(None, description="cuda: torch peak allocated; cpu: peak RSS increase of the "
                                                     "measuring subprocess over its pre-model baseline")
    kind: Literal["cpu_rss_increase", "cuda_peak_allocated"]
    cuda_reserved_bytes: int | None = None
    nvml_process_bytes: int | None = None
    baseline_bytes: int | None = Field(None, description="RSS (cpu) or NVML process memory (cuda) before the model")
    load_bytes: int | None = Field(None, description="cpu: of the RSS increase, what importing the model file took "
                                                     "(its own libraries, e.g. transformers) before the model was built")
    file_backed_bytes: int | None = Field(None, description="cpu: of the RSS increase, the pages of mapped files "
                                                            "(torch's library code) the run faulted in")
    analytic: HorusMemoryEstimate | None = None
    source: Source = "measured"
    device: str | None = None

    @model_validator(mode="after")
    def _batch_size_stated_unless_paper(self) -> MemoryPoint:
        if self.batch_size == 0 and self.source != "paper":
            raise ValueError(f"batch_size 0 marks a paper's footprint whose batch size is not stated; a {self.source} "
                             "memory point has a batch size of at least 1")
        return self


class EnergyPoint(_Section):
    batch_size: BatchSize
    gpu_utilization: Fraction | None = Field(None, description="mean fraction of NVML samples with a kernel running, 0..1")
    utilization_samples: int | None = None
    mean_power_w: float | None = None
    energy_per_iter_j: float | None = None
    energy_method: str | None = Field(None, description="nvml_total_energy | nvml_power_integral | rapl_package")
    source: Source = "measured"
    device: str | None = None


class EnergyInfo(_Section):
    available: bool
    reason: str | None = Field(None, description="why energy/utilisation was not measured, when it was not")
    scope: str | None = Field(None, description="what the counter covers, e.g. 'whole GPU' or 'CPU package(s)'")
    points: list[EnergyPoint] = Field(default_factory=list)


class RateCandidateCard(_Section):
    kind: Literal["quadratic_rate", "linear_time", "constant_rate"]
    coefficients: dict[str, float]
    r2: float | None = Field(None, description="R² on the candidate's own target")
    target: Literal["samples_per_s", "iter_time_s"]
    loo_rel_error: float | None = Field(None, description="mean |relative error| of iteration time, leave-one-out")


class RateModelCard(_Section):
    """The selected throughput model and every candidate that was considered."""

    kind: Literal["quadratic_rate", "linear_time", "constant_rate"]
    coefficients: dict[str, float]
    r2: float | None = None
    loo_rel_error: float | None = None
    selection: str = Field(description="how the kind was chosen")
    batch_range: tuple[int, int]
    fit_points: int
    rel_uncertainty: float = Field(description="relative 1-sigma uncertainty inside the measured range")
    extrapolation: str = Field(description="how predictions outside batch_range are formed")
    candidates: list[RateCandidateCard]
    source: Source = "fitted"
    device: str | None = None


class LatencyModel(_Section):
    """GENIE eq. 4 on one device: Lat(iterations, batch) = iterations · T(batch) + ν."""

    nu_s: float = Field(description="ν, measured start-up time (median over the measured batch sizes)")
    formula: str = "Lat(n, b) = n * T(b) + nu"
    nu_excludes: str = "interpreter start and `import torch` (paid by any launcher, environment-dependent)"
    source: Source = "measured"
    device: str | None = None


class GraphFeatures(_Section):
    """Compute-graph features from the ONNX export (Horus Table 3), with an fvcore cross-check."""

    available: bool
    error: str | None = None
    exporter: str | None = None
    opset: int | None = None
    onnx_file: str | None = None
    export_batch_size: int | None = None
    forward_macs_per_sample: int | None = None
    forward_macs_fixed: int | None = Field(None, description="batch-independent part of the forward MACs")
    macs_by_op: dict[str, int] = Field(default_factory=dict)
    fvcore_macs_per_sample: int | None = Field(None, description="fvcore count over the same op classes")
    fvcore_flops_per_sample: int | None = Field(None, description="fvcore total incl. norms/pools (its own convention)")
    fvcore_by_operator: dict[str, int] = Field(default_factory=dict)
    fvcore_unsupported: dict[str, int] = Field(default_factory=dict)
    fvcore_error: str | None = None
    macs_rel_diff: float | None = Field(None, description="|onnx - fvcore| / onnx for the per-sample MACs")
    param_bytes: int | None = None
    lookup_param_bytes: int | None = Field(None, description="bytes of weights only indexed (Gather's data: "
                                                             "embedding tables); a forward pass reads just the "
                                                             "rows it looks up")
    buffer_bytes: int | None = Field(None, ge=0, description="bytes of the graph's weights that are buffers (a "
                                     "BatchNormalization's running mean and variance; part of param_bytes): held "
                                     "in memory but never trained, so training memory charges them no gradient "
                                     "nor optimizer state; null on cards written before it was recorded")
    recurrent_steps_by_op: dict[str, int] = Field(default_factory=dict, description="time steps of the recurrent "
                                                  "ops per pass (sequence length × directions, summed per op type: "
                                                  "LSTM, GRU, RNN); independent of the batch size")
    activation_bytes_per_sample: int | None = None
    activation_bytes_fixed: int | None = None
    activation_bytes_by_op: dict[str, int] = Field(default_factory=dict, description="per-sample activation bytes "
                                                   "by the op type that produced them (graph inputs: 'input')")
    peak_live_bytes_per_sample: int | None = Field(None, description="the most activation bytes alive at once in "
                                                   "one forward pass, per sample (perfpredict.features.graph."
                                                   "peak_live_activation_bytes): what an inference pass holds")
    peak_live_bytes_fixed: int | None = None
    graph_saved_bytes_per_sample: int | None = Field(None, description="activation bytes a training step would "
                                                     "keep for backward per sample, read off the graph by per-op "
                                                     "rules (perfpredict.features.graph.saved_for_backward_bytes)")
    graph_saved_bytes_fixed: int | None = None
    op_counts: dict[str, int] = Field(default_factory=dict)
    num_nodes: int | None = None
    kernel_nodes: list[list[Any]] = Field(default_factory=list, description="the kernels one pass runs, identical "
                                          "ones merged: [class, count, MACs per sample, MACs fixed, activation "
                                          "bytes per sample, fixed, weight bytes, recurrent steps] "
                                          "(perfpredict.estimators.kernel_nodes)")
    saved_bytes_per_sample: int | None = Field(None, description="bytes autograd saves for backward per sample, "
                                                                 "as CUDA's kernels keep them (perfpredict."
                                                                 "features.saved), counted on the model's "
                                                                 "training-mode forward (a predicted card's, a "
                                                                 "measured training card's); null where nobody "
                                                                 "counted (features=card then estimates it)")
    saved_cpu_bytes_per_sample: int | None = Field(None, description="the same as the CPU's own kernels keep them "
                                                                     "(unfused attention, float dropout noise)")
    saved_bytes_fixed: int | None = Field(None, description="the batch-independent part of the saved bytes")
    saved_cpu_bytes_fixed: int | None = None
    input_bytes_per_sample: int | None = Field(None, description="bytes of one sample's forward inputs")
    frozen_step_work_ratio: float | None = Field(None, ge=0, le=1, description="a training step's MAC-weighted "
                                                 "work with the model's frozen weights over the same training "
                                                 "every weight (perfpredict.estimators.arch.frozen_step_ratio), "
                                                 "read off its graph; what a predicted card's step time was "
                                                 "multiplied by, and features=card multiplies by (a measured "
                                                 "training card's too); null where nothing is frozen or nobody "
                                                 "walked the graph for it")
    recompute_step_work_ratio: float | None = Field(None, ge=1, allow_inf_nan=False, description="a training "
                                                    "step's FLOPs with the forward work its backward runs again "
                                                    "for activation checkpointing (torch.utils.checkpoint) over "
                                                    "the same without (perfpredict.features.recompute), counted "
                                                    "on one step of the model; what a predicted card's step time "
                                                    "was multiplied by, and features=card multiplies by (a "
                                                    "measured training card's too); null where nothing is "
                                                    "recomputed or nobody ran a step for it")
    recompute_saved_bytes_per_sample: int | None = Field(None, ge=0, description="the most bytes the "
                                                         "recomputation of activation checkpointing saves for the "
                                                         "backward at once, per sample, as CUDA's kernels save "
                                                         "them (a segment's activations, alive beside the saved "
                                                         "bytes until its gradient is done; perfpredict.features."
                                                         "saved); what a predicted card's training memory charges "
                                                         "on top of the saved bytes, and features=card charges; "
                                                         "null where nothing is recomputed or nobody counted")
    recompute_saved_bytes_fixed: int | None = Field(None, ge=0)
    recompute_saved_cpu_bytes_per_sample: int | None = Field(None, ge=0, description="the same as the CPU's "
                                                             "own kernels save them")
    recompute_saved_cpu_bytes_fixed: int | None = Field(None, ge=0)
    unused_param_bytes: int | None = Field(None, ge=0, description="bytes of the parameters a training step never "
                                           "uses (no op of its forward takes them: a replaced head kept as an "
                                           "attribute), frozen ones included, counted on one step of the model: "
                                           "the exported graph leaves them out, so they are not part of "
                                           "param_bytes (model.param_bytes holds them); they get no gradient nor "
                                           "optimizer state, so a predicted card's memory charges their weight "
                                           "alone, and features=card does; null where none is or nobody counted")
    unused_frozen_param_bytes: int | None = Field(None, ge=0, description="the frozen ones' among them (part of "
                                                  "model.frozen_param_bytes too)")
    optimizer_state_copies: float | None = Field(None, ge=0, allow_inf_nan=False, description="copies of each "
                                                 "trained weight the training job's optimizer keeps as state "
                                                 "(SGD with momentum 1, plain SGD 0, Adam/AdamW 2) that a "
                                                 "predicted card's training memory was charged (a predicted "
                                                 "inference card: what a training prediction from it charges), "
                                                 "or a measured training card's make_optimizer keeps (probed); "
                                                 "null where nobody said (cards before schema 1.24, measured "
                                                 "inference cards, an optimizer no probe could tell): 1, as the "
                                                 "training data's SGD with momentum")
    optimizer_step_bytes: dict[str, float] | None = Field(None, description="the most bytes of temporaries the "
                                                           "training job's optimizer step holds at once, by device "
                                                           "kind (cpu, cuda) as torch runs it there "
                                                           "(perfpredict.workload.spec.optimizer_step_bytes: Adam "
                                                           "one tensor at a time about 2-3 x the largest trained "
                                                           "tensor, foreach 1 x every trained byte), probed from a "
                                                           "model file's make_optimizer and charged on top of the "
                                                           "training memory with optimizer_state_copies; null where "
                                                           "nobody probed (none charged, as the training data's SGD "
                                                           "with momentum)")
    notes: list[str] = Field(default_factory=list, description="what makes these counts less than exact (a "
                             "forward pass that takes a different path on each call)")
    source: Source = "analytic"
    device: str | None = None


class ScalingPoint(_Section):
    """Data-parallel training at a fixed global batch with ``workers`` ranks (DDP)."""

    workers: int = Field(description="k, the number of data-parallel ranks (CPU: core groups; CUDA: GPUs)")
    nodes: int = Field(1, description="d_node: separate network endpoints the ranks are spread over")
    workers_per_node: int = Field(description="d_g/n")
    global_batch: int
    local_batch: int
    status: Literal["ok", "oom", "error", "nonfinite", "timeout"]
    samples_per_s: float | None = Field(None, description="global batch / slowest rank's median iteration time")
    iter_time_s: float | None = None
    speedup: float | None = Field(None, description="samples_per_s / samples_per_s at k = 1 (same global batch)")
    cv: float | None = None
    iterations: int | None = None
    threads_per_worker: int | None = None
    backend: str | None = None
    link: str | None = Field(None, description="what connects the nodes, e.g. 'loopback' or 'veth, tbf 1gbit'")
    error: str | None = None
    source: Source = "measured"
    device: str | None = None


class ScalingInfo(_Section):
    global_batch: int
    backend: str
    points: list[ScalingPoint] = Field(default_factory=list)
    note: str | None = None
    source: Source = "measured"
    device: str | None = None


class ColocationPoint(_Section):
    """n copies of the job running at once on one device (the fractional allocation p = 1/n)."""

    copies: int
    batch_size: int
    status: Literal["ok", "oom", "error", "nonfinite", "timeout"]
    per_copy_samples_per_s: list[float] = Field(default_factory=list)
    per_copy_relative: float | None = Field(None, description="mean per-copy speed / solo speed (p = 1/n point)")
    aggregate_samples_per_s: float | None = None
    aggregate_relative: float | None = Field(None, description="sum over copies / solo")
    threads_per_copy: int | None = None
    gpu_utilization: Fraction | None = Field(None, description="CUDA: whole-GPU NVML utilisation during the run")
    other_cpus: float | None = Field(None, description="CPUs that processes outside the group (and the hypervisor) "
                                                       "kept busy, on average, while all n copies were timed: the "
                                                       "host's busy CPU time minus the copies' own (they load each "
                                                       "other by design); None where it could not be read or in "
                                                       "cards older than schema 1.11")
    error: str | None = None
    source: Source = "measured"
    device: str | None = None


class PairColocation(_Section):
    """The job co-located with a different (reference) job: Horus slowdown T_deg per job."""

    partner: str
    job_solo_samples_per_s: float | None = None
    partner_solo_samples_per_s: float | None = None
    job_colocated_samples_per_s: float | None = None
    partner_colocated_samples_per_s: float | None = None
    job_slowdown: float | None = Field(None, description="T_deg = |T_colo - T_solo| / T_solo for the job")
    partner_slowdown: float | None = None
    job_solo_gpu_utilization: Fraction | None = None
    partner_solo_gpu_utilization: Fraction | None = None
    cumulative_gpu_utilization: float | None = Field(None, description="sum of the two solo utilisations (CUDA)")
    other_cpus: float | None = Field(None, description="CPUs that processes outside the pair (and the hypervisor) "
                                                       "kept busy, on average, while the two were timed together: "
                                                       "the host's busy CPU time minus the pair's own; None where "
                                                       "it could not be read or in cards older than schema 1.11")
    job_solo_other_cpus: float | None = Field(None, description="other_cpus of the job's solo run")
    partner_solo_other_cpus: float | None = Field(None, description="other_cpus of the partner's solo run")
    status: Literal["ok", "oom", "error", "nonfinite", "timeout"] = "ok"
    error: str | None = None
    source: Source = "measured"
    device: str | None = None


class ColocationInfo(_Section):
    batch_size: int
    window_s: float
    points: list[ColocationPoint] = Field(default_factory=list)
    pairs: list[PairColocation] = Field(default_factory=list)
    source: Source = "measured"
    device: str | None = None


class SpeedupPointCard(_Section):
    p: float = Field(description="allocation in devices: 1/n for n co-located copies, k for k data-parallel ranks")
    speedup: float
    kind: Literal["colocated", "data_parallel", "solo"]


class SpeedupCurveCard(_Section):
    points: list[SpeedupPointCard]
    fit: dict[str, Any] = Field(description="the fitted monotone concave curve (SpeedupCurve.to_dict())")
    source: Source = "fitted"
    device: str | None = None


class PlacementPoint(_Section):
    d_node: int
    d_gn: int
    global_batch: int
    samples_per_s: float
    predicted_samples_per_s: float | None = None
    comm_observed: float | None = Field(None, description="n - PR / sPR(b/n), devices' worth of throughput lost")
    held_out: bool = False


class CommModelCard(_Section):
    """GENIE eq. 8 fitted to measured placements; PR(s) = (n - Comm(s)) * sPR(b / n) (eq. 5)."""

    gamma: float | None
    lambda_: float | None = Field(None, alias="lambda")
    residuals: list[float] = Field(default_factory=list, description="relative rate residuals per fitted placement")
    identifiable: dict[str, bool] = Field(default_factory=dict)
    placements: list[PlacementPoint] = Field(default_factory=list)
    holdout_rel_error: float | None = None
    link: str | None = None
    spr_source: str | None = Field(None, description="where sPR(b) came from (the card's rate model)")
    note: str | None = Field(None, description="the sPR runs and placements that failed (status and cause), "
                             "left out of the fit")
    source: Source = "fitted"
    device: str | None = None

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), populate_by_name=True,
                              serialize_by_alias=True)


class SensitivityDemand(_Section):
    cpus: int
    mem_gb: float


class SensitivityCard(_Section):
    """Synergy's resource-sensitivity matrix W[c, m] (samples/s) at the job's fixed device count."""

    cpu_values: list[int]
    mem_values_gb: list[float]
    matrix: list[list[float]]
    profiled_cpu_values: list[int]
    probed_throughput: list[float] = Field(default_factory=list)
    #: CPUs other processes kept busy while each probe (in ``profiled_cpu_values``' order) was timed; None
    #: where it could not be told
    probed_other_cpus: list[float | None] = Field(default_factory=list)
    exhaustive_probes: int | None = None
    demand: SensitivityDemand
    threshold: float
    #: Share of the dataset a MinIO cache holds in each memory column (memory = process_gb + fraction × dataset).
    cache_fractions: list[float] | None = None
    #: The job's own memory without any cache (its measured peak), in GB.
    process_gb: float | None = None
    dataset_bytes: int | None = None
    storage_bytes_per_s: float | None = None
    mean_item_bytes: float | None = None
    note: str | None = None
    source: Source = "fitted"
    device: str | None = None


class CardError(_Section):
    step: str
    message: str
    batch_size: int | None = None


class ProfileRun(_Section):
    mode: Literal["train", "infer"]
    precision: Literal["fp32", "bf16", "fp16", "fp64"] = Field(
        "fp32", description="fp32, or mixed precision: forward and loss under torch.autocast with bfloat16 or "
                            "float16 (fp16 with a gradient scaler); run without autocast, the dtype of a model whose "
                            "floating-point weights and buffers all share one (fp64 for model.double(), fp16 "
                            "for model.half(), bf16 for model.bfloat16())")
    compiled: bool = Field(False, description="the measured steps called torch.compile(model) (--compile, or a "
                                              "build_model that returns a compiled module), compiled at the "
                                              "first (warm-up) step of each measuring process")
    batch_sizes: list[int]
    started_at: str
    finished_at: str | None = None
    wall_s: float | None = None
    timed_s: float | None = Field(None, description="total time inside timed iterations")
    perfpredict_version: str
    library_versions: dict[str, str] = Field(default_factory=dict)
    command: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)


class PredictedPoint(_Section):
    """Estimator output at one batch size: the median and the 80% interval [q10, q90] of each target."""

    batch_size: BatchSize
    iter_time_s: Positive
    iter_time_interval_s: tuple[float, float]
    samples_per_s: Positive
    peak_memory_bytes: float
    peak_memory_interval_bytes: tuple[float, float]
    peak_memory_safe_bytes: float = Field(description="upper quantile of torch's peak allocated memory")
    device_memory_bytes: float | None = Field(None, description="CUDA: memory NVML attributes to the process "
                                              "(context + caching allocator's reserve)")
    device_memory_interval_bytes: tuple[float, float] | None = None
    device_memory_safe_bytes: float | None = Field(None, description="its upper quantile: what a placement on a "
                                                   "GPU should reserve")
    gpu_utilization: Fraction | None = None
    gpu_utilization_interval: tuple[Fraction, Fraction] | None = None
    gpu_utilization_safe: Fraction | None = None
    outside_trained_batches: bool = Field(
        False, description="below the model set's smallest trained batch size, or past the largest batch size the "
                           "nearest profiled architecture was measured at (prediction.nearest)")
    iter_time_baseline_shares: dict[str, float] | None = Field(
        None, description="how the physical time baseline (before the learned correction) splits the step: "
                          "share per term, e.g. a fixed cost per step, compute, memory traffic, kernel launches, "
                          "recurrent steps; a launch share near 1 means the step is bound by kernel launches")


class NearestProfiled(_Section):
    name: str
    family: str | None = None
    distance: float = Field(description="standardised graph-feature distance to the request")
    threshold: float = Field(description="largest nearest-neighbour distance among the training architectures")


class CalibrationInfo(_Section):
    """How a CPU set measured on one CPU was carried to the CPU a card predicts (``perfpredict calibrate``)."""

    source_set: str = Field(description="the model set whose estimators made the prediction")
    source_device_name: str = Field(description="the CPU the source set was measured on")
    source_cpu_id: str | None = None
    time_factor: float = Field(description="iteration times are the source's x this factor: the median of "
                                           "measured / predicted over the reference steps")
    interval_log_margin: float = Field(description="the time interval is widened by exp(this) on each side")
    reference_points: int
    calibrated_at: str
    speed_drift: float | None = Field(default=None, description="the suite's first steps timed again at its end, "
                                      "over their first timing: how far the machine's speed moved while it ran")
    speed_noise: float | None = Field(default=None, description="the spread of those end timings (slowest / fastest "
                                      "- 1): how much the same step varies between fresh processes, which a "
                                      "drift must pass to count")


class PredictionInfo(_Section):
    """How a predicted card was made: which estimators, from which data, and whether it fell back."""

    method: Literal["estimator", "nearest_profiled"]
    model_set: str = Field(description="trained_models/<model_set>: the dataset the estimators were trained on")
    dataset_sha256: str
    device_type: str
    out_of_distribution: bool
    nearest: NearestProfiled | None = None
    points: list[PredictedPoint] = Field(default_factory=list)
    estimator_scores: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="grouped-CV scores of the estimators used (rmsle on percent for "
                                          "utilisation, milliseconds for iteration time, bytes for memory)")
    notes: list[str] = Field(default_factory=list)
    source: Source = "predicted"
    calibration: CalibrationInfo | None = Field(default=None, description="set when a CPU set measured on another "
                                                "CPU was calibrated to this one")
    asked_precision: Literal["bf16", "fp16"] | None = Field(
        default=None, description="the autocast precision the job asks for (its model file's PRECISION, or the card "
                                  "it was predicted from) where no set of it was trained for this device, so "
                                  "run.precision is the set's it fell back to; features=card asks for it again")

    @model_validator(mode="after")
    def _one_point_per_batch(self) -> PredictionInfo:
        sizes = [p.batch_size for p in self.points]
        twice = sorted({b for b in sizes if sizes.count(b) > 1})
        if twice:
            raise ValueError(f"points: batch size {twice[0]} is predicted twice (which one would a scheduler use?)")
        return self


class PerformanceCard(_Section):
    schema_version: str = SCHEMA_VERSION
    #: complete: every batch size measured; partial: some; failed: none (the errors say why)
    status: Literal["complete", "partial", "failed"] = "complete"
    model: ModelInfo
    device: DeviceInfo
    run: ProfileRun
    throughput: list[ThroughputPoint] = Field(default_factory=list)
    rate_model: RateModelCard | None = None
    latency: LatencyModel | None = None
    memory: list[MemoryPoint] = Field(default_factory=list)
    features: GraphFeatures | None = None
    energy: EnergyInfo | None = None
    scaling: ScalingInfo | None = None
    colocation: ColocationInfo | None = None
    speedup_curve: SpeedupCurveCard | None = None
    comm_model: CommModelCard | None = None
    sensitivity: SensitivityCard | None = None
    prediction: PredictionInfo | None = None
    errors: list[CardError] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="what was not measured here and why")

    # -- serialisation --------------------------------------------------------------------------------
    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(indent=indent)

    @classmethod
    def from_json(cls, text: str, *, source: str | None = None) -> PerformanceCard:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise PerfPredictError(f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})", source=source,
                                   step="read card") from None
        except (ValueError, RecursionError) as e:  # an integer of thousands of digits, nesting too deep
            raise PerfPredictError(f"not a readable card ({type(e).__name__}: {str(e)[:120]})", source=source,
                                   step="read card") from None
        if not isinstance(raw, dict) or "schema_version" not in raw:
            what = ""
            if isinstance(raw, dict) and "largest_ok" in raw and "probes" in raw:
                what = ": it is a max-batch result (perfpredict max-batch printed its table; the JSON holds every probe)"
            elif isinstance(raw, dict) and "verdict" in raw and "rounds" in raw:
                what = ": it is an ab result (perfpredict ab printed its verdict; the JSON holds every round)"
            raise PerfPredictError(f"not a perfpredict card (no schema_version){what}", source=source,
                                   step="read card")
        bad = _lone_surrogate(raw, "")
        if bad:  # JSON's \ud800 escape reads as a lone surrogate, which no UTF-8 file can hold: save() then failed
            where, char = bad
            raise PerfPredictError(f"invalid card: {where}: {char!r} is a lone surrogate, not a character "
                                   "(a card holding one could not be saved again); the file was edited or damaged",
                                   source=source, step="read card")
        version = str(raw["schema_version"]).split(".")
        ours = SCHEMA_VERSION.split(".")
        if version[0] != ours[0]:
            raise PerfPredictError(f"card schema {raw['schema_version']} is not readable by this perfpredict "
                                   f"(schema {SCHEMA_VERSION})", source=source, step="read card")
        if len(version) > 1 and version[1].isdigit() and int(version[1]) > int(ours[1]):
            # A newer minor version may only add optional fields: drop the ones this reader does not know.
            raw = _drop_unknown_fields(cls, raw)
        try:
            card = cls.model_validate(raw)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise PerfPredictError(f"invalid card: {loc}: {first['msg']} ({e.error_count()} problem(s))",
                                   source=source, step="read card") from None
        bad = list(_non_finite_numbers(card, ""))
        if bad:  # perfpredict writes no NaN or Infinity (they become null); Python's json reads them
            where, value = bad[0]
            raise PerfPredictError(f"invalid card: {where}: {value} is not a finite number ({len(bad)} problem(s)); "
                                   "the file was edited or damaged", source=source, step="read card")
        bad = list(_negative_numbers(card, ""))
        if bad:
            where, value = bad[0]
            raise PerfPredictError(f"invalid card: {where}: {value:g} is negative, and no time, size, count, rate "
                                   f"or utilisation can be ({len(bad)} problem(s)); the file was edited or damaged",
                                   source=source, step="read card")
        if card.prediction is not None and not card.prediction.points:
            raise PerfPredictError("invalid card: prediction.points is empty: a predicted card has one point per "
                                   "batch size", source=source, step="read card")
        fit = card.speedup_curve.fit if card.speedup_curve is not None else {}
        if fit:  # what show, the simulator and PerfModel rebuild the curve from (an empty one: no fit)
            from perfpredict.fit.speedup import curve_problem

            problem = curve_problem(fit)
            if problem:
                raise PerfPredictError(f"invalid card: speedup_curve.fit: {problem}; the file was edited or damaged",
                                       source=source, step="read card")
        return card

    def save(self, path: str | Path) -> Path:
        """Write the card to ``path`` atomically (a temporary file beside it, then a rename)."""
        p = Path(path)
        if p.is_dir():
            raise PerfPredictError(f"{p} is a directory; give the card's file name, e.g. {p / 'card.json'}",
                                   source=str(p), step="save card")
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(p)
        return p

    @classmethod
    def load(cls, path: str | Path) -> PerformanceCard:
        from perfpredict.input_files import CARD_LIMIT_BYTES, InputTooLarge, read_bounded

        p = Path(path)
        try:
            text = read_bounded(p, CARD_LIMIT_BYTES, "a card").decode("utf-8")
        except InputTooLarge as e:
            raise PerfPredictError(str(e), source=str(path), step="read card") from None
        except UnicodeDecodeError:
            raise PerfPredictError("not a UTF-8 text file, so not a card", source=str(path),
                                   step="read card") from None
        except OSError as e:
            raise PerfPredictError(f"cannot read: {e.strerror}", source=str(path), step="read card") from None
        return cls.from_json(text, source=str(path))

    # -- questions a scheduler asks ---------------------------------------------------------------------
    def measured_points(self) -> list[ThroughputPoint]:
        return [p for p in self.throughput if p.ok]

    def rate(self):
        """The fitted :class:`perfpredict.fit.RateModel` (raises when the card has none)."""
        from perfpredict.fit.rate import RateModel

        if self.rate_model is None:
            if self.prediction is not None:
                sizes = ", ".join(str(p.batch_size) for p in self.prediction.points)
                raise PerfPredictError(f"a predicted card has no rate model to interpolate: its iteration times "
                                       f"are per batch size ({sizes}) in prediction.points; predict the batch "
                                       "size you need with perfpredict predict -b", source=self.model.name,
                                       step="rate model")
            ok = self.measured_points()
            why = (f"its {len(ok)} measured batch size(s) were not fitted (perfpredict profile fits one; a card "
                   "written or edited elsewhere may lack it)" if ok else "no batch size was measured successfully")
            raise PerfPredictError(f"card has no rate model: {why}", source=self.model.name, step="rate model")
        return RateModel.from_card(self.rate_model)

    def iter_time(self, batch_size: float) -> float:
        """Seconds per iteration at ``batch_size``: the rate model's, or at a predicted card's own batch size
        that point's (as :meth:`latency_s` and ``perfpredict latency``)."""
        point = self.predicted_point(batch_size)
        return float(point.iter_time_s) if point is not None else float(self.rate().iter_time(batch_size))

    def throughput_at(self, batch_size: float) -> float:
        """Samples per second at ``batch_size`` (``batch_size / iter_time``)."""
        point = self.predicted_point(batch_size)
        return float(batch_size / point.iter_time_s) if point is not None else float(self.rate().throughput(batch_size))

    def latency_s(self, iterations: float, batch_size: float) -> float:
        """GENIE's Lat(iterations, batch) = iterations · T(batch) + ν, in seconds. At a predicted card's own
        batch size T is that point's iteration time (the rate model only smooths between the points), as
        ``perfpredict latency`` answers."""
        nu = self.latency.nu_s if self.latency else 0.0
        if not (math.isfinite(nu) and nu >= 0):
            raise PerfPredictError(f"the card's start-up overhead latency.nu_s is {nu}, not a non-negative number",
                                   source=self.model.name, step="latency")
        point = self.predicted_point(batch_size)
        if point is not None:
            if not (math.isfinite(iterations) and iterations >= 0):  # the words of RateModel.latency
                raise ValueError(f"iterations must be a finite number >= 0, got {iterations!r}")
            return iterations * self.iter_time(batch_size) + nu
        return self.rate().latency(iterations, batch_size, nu_s=nu)

    def predicted_point(self, batch_size: float):
        """A predicted card's point at ``batch_size`` (:class:`PredictedPoint`), or None (a measured card, or a
        batch size it was not predicted at)."""
        if self.prediction is None:
            return None
        return next((p for p in self.prediction.points if p.batch_size == batch_size), None)

    def max_feasible_batch(self) -> int | None:
        ok = [p.batch_size for p in self.throughput if p.ok]
        return max(ok) if ok else None


#: fields whose numbers may be below zero: fitted coefficients and residuals, R² (and the estimators' scores,
#: which include it), a comm penalty observed below the fit, a first iteration faster than the steady median,
#: and untyped settings
NEGATIVE_OK = frozenset({"coefficients", "residuals", "r2", "estimator_scores", "gamma", "lambda_", "comm_observed",
                         "first_iter_extra_s", "fit", "settings", "kernel_nodes"})


def _numbers(value: Any, path: str, skip: frozenset[str] | set[str]):
    """(path, number) for each number in a loaded card (booleans aside), leaving out the fields named in
    ``skip`` at any depth."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            if name not in skip:
                yield from _numbers(getattr(value, name), f"{path}.{name}" if path else name, skip)
    elif isinstance(value, bool):
        return
    elif isinstance(value, (int, float)):
        yield path, value
    elif isinstance(value, (list, tuple)):
        for i, x in enumerate(value):
            yield from _numbers(x, f"{path}.{i}", skip)
    elif isinstance(value, dict):
        for k, x in value.items():
            yield from _numbers(x, f"{path}.{k}", skip)


def _negative_numbers(value: Any, path: str):
    """(path, number) for each number below zero in a loaded card, outside :data:`NEGATIVE_OK`.

    Checked where a card is read, not where it is built: a hand-edited or damaged card would otherwise be shown
    and handed to a scheduler with a negative iteration time or memory, which every consumer reads as valid."""
    return ((p, v) for p, v in _numbers(value, path, NEGATIVE_OK) if v < 0)


def _non_finite_numbers(value: Any, path: str):
    """(path, number) for each NaN or infinite number in a loaded card (untyped settings aside)."""
    return ((p, v) for p, v in _numbers(value, path, {"settings", "kernel_nodes"})
            if isinstance(v, float) and not math.isfinite(v))


_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(raw: Any, path: str) -> tuple[str, str] | None:
    """(path, character) of a lone surrogate in a key or a string of parsed card JSON, or None. Walked
    with a stack, not recursion: JSON nested nearly as deep as json.loads reads would overflow Python's."""
    stack = [(path, raw)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            found = _SURROGATE.search(value)
            if found:
                return where, found.group()
            continue
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        children = []
        for k, v in items:
            bad_key = _SURROGATE.search(k) if isinstance(k, str) else None
            name = ascii(k) if bad_key else str(k)
            at = f"{where}.{name}" if where else name
            if bad_key:
                return at, bad_key.group()
            children.append((at, v))
        stack.extend(reversed(children))
    return None


def _drop_unknown_fields(model: type[BaseModel], data: Any) -> Any:
    """``data`` without the keys ``model`` (recursively, through nested sections and lists) does not define."""
    import typing

    if not isinstance(data, dict):
        return data
    # a field is known by its name and by its JSON alias (comm_model's ``lambda_`` is written ``lambda``)
    fields = {**{f.alias: f for f in model.model_fields.values() if f.alias}, **model.model_fields}
    out = {}
    for name, value in data.items():
        field = fields.get(name)
        if field is None:
            continue
        sub = _section_type(field.annotation, typing)
        if sub is not None and isinstance(value, dict):
            value = _drop_unknown_fields(sub, value)
        elif sub is not None and isinstance(value, list):
            value = [_drop_unknown_fields(sub, v) for v in value]
        out[name] = value
    return out


def _section_type(annotation: Any, typing) -> type[BaseModel] | None:
    """The card section class inside ``annotation`` (``X``, ``X | None``, ``list[X]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _section_type(arg, typing)
        if found is not None:
            return found
    return None


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
