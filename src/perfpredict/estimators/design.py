"""The feature vector the estimators see: graph features × batch size, on log scales.

Sizes span six orders of magnitude across the zoo (an MLP's 10⁵ MACs to BERT's 10¹⁰), so every size enters
as log10; op counts enter as log1p counts grouped by kind (Horus Table 3 counts convolutions, matmuls,
activations, normalisations, ...); the mix of MACs enters as shares. The per-iteration sizes (× batch) are
what the device actually processes, so they are features too, as is Horus eq. 2's analytic memory estimate
for training with SGD-momentum, which the memory estimator corrects rather than replaces (see
:mod:`perfpredict.estimators.targets`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from perfpredict.estimators.arch import ArchFeatures
from perfpredict.estimators.code_footprint import code_bytes
from perfpredict.estimators.kernel_nodes import approximate_rows
from perfpredict.estimators.kernel_time import kernel_seconds_by_mode

#: ONNX op types by kind. Anything else counts in ``ops_other``.
OP_GROUPS: dict[str, tuple[str, ...]] = {
    "conv": ("Conv", "ConvTranspose"),
    "matmul": ("MatMul", "Gemm", "Einsum"),
    "rnn": ("LSTM", "GRU", "RNN"),
    "norm": ("BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
             "ReduceMean", "Sqrt", "Pow"),
    "activation": ("Relu", "Clip", "Sigmoid", "Tanh", "Gelu", "Erf", "HardSigmoid", "HardSwish", "LeakyRelu",
                   "Softmax", "LogSoftmax"),
    "elementwise": ("Add", "Mul", "Sub", "Div", "Where", "Equal", "Not", "Cast"),
    "pool": ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"),
    "shape": ("Reshape", "Transpose", "Concat", "Slice", "Gather", "Squeeze", "Unsqueeze", "Expand", "Shape",
              "Flatten", "Split", "Constant", "ConstantOfShape", "Identity", "Dropout"),
}

#: Groups of activation bytes (by producing op) for the memory model: what autograd keeps for the backward
#: pass differs by kind (a convolution's input is saved, an in-place ReLU's output is not, fused attention
#: never materialises its softmax).
ACT_GROUPS: tuple[str, ...] = ("conv", "matmul", "rnn", "norm", "activation", "softmax", "elementwise", "pool",
                               "shape", "input", "other")
_ACT_LOOKUP = {op: g for g, ops in OP_GROUPS.items() for op in ops if g in ACT_GROUPS}
_ACT_LOOKUP.update({"Softmax": "softmax", "LogSoftmax": "softmax", "input": "input"})


def act_group(op: str) -> str:
    return _ACT_LOOKUP.get(op, "other")


def activation_bytes_by_group(arch: ArchFeatures) -> dict[str, float]:
    """Per-sample activation bytes by :data:`ACT_GROUPS` (all in ``other`` when the split is unknown)."""
    out = dict.fromkeys(ACT_GROUPS, 0.0)
    if not arch.activation_bytes_by_op:
        out["other"] = float(arch.activation_bytes_per_sample)
        return out
    for op, nb in arch.activation_bytes_by_op.items():
        out[act_group(op)] += float(nb)
    return out


#: The estimators' input columns, in order (saved in each model's metadata; prediction checks it).
FEATURE_NAMES: list[str] = [
    "log2_batch", "log_macs_per_sample", "log_macs_per_iter", "log_params", "log_param_bytes",
    "log_act_bytes_per_sample", "log_act_bytes_per_iter", "log_input_bytes_per_iter", "log_nodes",
    "log_intensity", "log_horus_memory", "log_macs_per_node_iter",
    "share_macs_conv", "share_macs_matmul", "share_macs_rnn",
    *[f"ops_{g}" for g in OP_GROUPS], "ops_other",
    *[f"log_act_{g}_iter" for g in ACT_GROUPS],
    "log_saved_bytes_iter",
    # weights a forward pass reads whole: all but the embedding tables, of which it reads only the rows it looks
    # up (those are in the Gather activations)
    "log_dense_param_bytes",
    # time steps of recurrent layers per iteration (each waits for the one before it, so each has a fixed cost
    # whatever the batch): all of them, and those of GRU and plain RNN only, which PyTorch runs step by step
    # in ATen ops on the CPU (its fused oneDNN kernel covers LSTM only), weighted by their gates
    "log_recurrent_steps", "log_stepwise_rnn_gate_steps",
    # saved-tensor bytes as the CPU's own kernels keep them (unfused attention with dropout keeps its L x L
    # scores, dropout its float noise): what a training step on the CPU holds, where log_saved_bytes_iter is
    # what CUDA's fused kernels hold
    "log_saved_cpu_bytes_iter",
    # how many ops PyTorch's CPU backend runs through oneDNN primitives (ONEDNN_OPS)
    "ops_onednn",
    # the most activation bytes alive at once in a forward pass (graph.peak_live_activation_bytes): what an
    # inference pass holds, where the sum of all activations overstates it by a factor that differs by family
    "log_peak_live_bytes_iter",
    # bytes of torch's machine code the graph's op types page into a fresh profiler process (the union of their
    # measured page sets, estimators.code_footprint), for an inference pass and for a training step: a third to a
    # half of a small model's CPU RSS increase, set by which kernels run, not by their sizes
    "log_code_bytes_infer", "log_code_bytes_train",
    # kernels an eager forward pass launches (the graph's nodes less views and shape arithmetic, the exporter's
    # erf GELU as one; estimators.kernel_nodes): each costs a launch whatever its size, which is what bounds a
    # small model's step on a big GPU (ONNX's node count, with its views, does not tell it)
    "log_kernel_calls",
    # nanoseconds of an inference pass / a training step as the sum of its kernels' costs measured on the CPU
    # (estimators.kernel_time: per kernel class a cost per call, per MAC, per byte and per recurrent step);
    # for a bare feature vector, of stand-in kernels made from its per-op-type totals
    "log_kernel_ns_infer", "log_kernel_ns_train",
]
#: Columns only a CPU model set sees, kept last in :data:`FEATURE_NAMES` so that every other column has the
#: same index in a CUDA set's shorter matrix: the kernel costs are measured on a CPU, and say little about
#: what a GPU's kernels cost (a CUDA set given them only had its trees' column sampling reshuffled: H100
#: utilisation RMSLE 0.217 -> 0.252 at one retrain, with nothing learned).
CPU_ONLY_FEATURES: tuple[str, ...] = ("log_kernel_ns_infer", "log_kernel_ns_train")
assert tuple(FEATURE_NAMES[-len(CPU_ONLY_FEATURES):]) == CPU_ONLY_FEATURES


def feature_names(device_kind: str) -> list[str]:
    """The columns a ``device_kind`` ("cpu" or "cuda") model set is trained on: every one on the CPU, all but
    :data:`CPU_ONLY_FEATURES` elsewhere (a prefix of :data:`FEATURE_NAMES`)."""
    return list(FEATURE_NAMES) if device_kind == "cpu" else FEATURE_NAMES[:-len(CPU_ONLY_FEATURES)]

#: ONNX ops that PyTorch's CPU backend runs through oneDNN (mkldnn) primitives: convolutions and the fused LSTM
#: kernel. The first such op a process runs pages in oneDNN's code and JIT-compiles its kernels, a fixed block
#: of resident memory whatever the model's size (measured with ``perfpredict profile`` on one-layer models on
#: the 2-vCPU EPYC: a Conv2d adds 9.9 MiB of peak RSS over a Linear model, an LSTM 11.2 MiB, both 15.4 MiB;
#: a GRU, which runs in ATen ops, 3.3 MiB). The CPU's memory baselines charge it (``any:ops_onednn``).
ONEDNN_OPS: tuple[str, ...] = ("Conv", "ConvTranspose", "LSTM")

#: Recurrent ONNX ops that PyTorch's CPU backend runs one time step at a time, with their number of gates: a
#: step's small ops (a GEMM, an activation and the element-wise updates per gate) scale with it, so a GRU step
#: counts 3 and a plain RNN step 1 in ``log_stepwise_rnn_gate_steps``.
STEPWISE_RNN_GATES = {"GRU": 3, "RNN": 1}


def _log10(x: float) -> float:
    return math.log10(max(float(x), 0.0) + 1.0)


def horus_train_memory(arch: ArchFeatures, batch_size: int, optimizer_state_copies: float = 1.0) -> float:
    """Horus eq. 2 for training, bytes: activations + activation gradients + weights, gradients, optimizer
    state (SGD-momentum: one copy, the datasets' optimizer). Gradients and optimizer state are charged for the
    trainable parameters only, as the card's eq. 2 (:func:`perfpredict.fit.memory.horus_memory_estimate`)
    charges them: a frozen parameter gets neither. The CUDA context (δ) is left out: the datasets' memory target
    is torch's peak allocated, which does not include it."""
    acts = batch_size * arch.activation_bytes_per_sample + arch.activation_bytes_fixed
    # the buffers (BatchNorm statistics) stay in: this is a feature of the shipped estimators, fitted on zoo
    # rows whose param_bytes hold them as trainable, and a feature must be computed as it was fitted
    trainable = arch.param_bytes - arch.frozen_param_bytes_in_graph
    return 2.0 * acts + (arch.param_bytes + (1.0 + optimizer_state_copies) * trainable)


def design_row(arch: ArchFeatures, batch_size: int, bare_stand_in: bool = False,
               columns: Sequence[str] = FEATURE_NAMES) -> dict[str, float]:
    """The feature vector (``columns``, by default :data:`FEATURE_NAMES`) for ``arch`` at ``batch_size``.
    ``bare_stand_in``: a graph known by neither kernels nor op types (a feature vector cut to the required fields)
    gets one stand-in kernel row per node, the forward MACs and activation bytes split evenly over them
    (:func:`bare_kernel_rows`)."""
    row = _row_at(arch, _arch_terms(arch, bare_stand_in, frozenset(columns)), batch_size)
    return {k: row[k] for k in columns}


#: The columns priced from the kernel rows at each batch size (the costliest to compute): a column list without
#: them (a CUDA set's) does not price them at all.
_KERNEL_NS_COLUMNS = frozenset(f"log_kernel_ns_{mode}" for mode in ("infer", "train"))
_CODE_BYTES_COLUMNS = frozenset(f"log_code_bytes_{mode}" for mode in ("infer", "train"))


@dataclass(frozen=True)
class _ArchTerms:
    """What a design row needs of an architecture whatever the batch size: made once per architecture of a
    design matrix, however many batch sizes it is asked at."""

    #: the columns that do not depend on the batch size (those asked for of the costly ones)
    fixed: dict[str, float]
    #: :func:`activation_bytes_by_group`
    act_groups: dict[str, float]
    #: the kernel rows to price at each batch size (:func:`priced_kernels`); None when no kernel time is asked for
    kernels: list | None


def _arch_terms(arch: ArchFeatures, bare_stand_in: bool, columns: frozenset[str]) -> _ArchTerms:
    """:class:`_ArchTerms` of ``arch`` for a design row of ``columns``: the kernel rows, the code bytes and the
    kernel times are made only where ``columns`` has a column that needs them."""
    total_macs = max(sum(arch.macs_by_op.values()), 1.0)
    fixed = {
        "log_macs_per_sample": _log10(arch.forward_macs_per_sample),
        "log_params": _log10(arch.param_count),
        "log_param_bytes": _log10(arch.param_bytes),
        "log_act_bytes_per_sample": _log10(arch.activation_bytes_per_sample),
        "log_nodes": _log10(arch.num_nodes),
        "share_macs_conv": sum(arch.macs_by_op.get(k, 0) for k in OP_GROUPS["conv"]) / total_macs,
        "share_macs_matmul": sum(arch.macs_by_op.get(k, 0) for k in OP_GROUPS["matmul"] + ("Attention",))
        / total_macs,
        "share_macs_rnn": sum(arch.macs_by_op.get(k, 0) for k in OP_GROUPS["rnn"]) / total_macs,
    }
    for g, n in _group_counts(arch.op_counts).items():
        fixed[f"ops_{g}"] = math.log1p(n)
    fixed["log_dense_param_bytes"] = _log10(arch.param_bytes - arch.lookup_param_bytes)
    steps = arch.recurrent_steps_by_op
    fixed["log_recurrent_steps"] = _log10(sum(steps.values()))
    fixed["log_stepwise_rnn_gate_steps"] = _log10(sum(g * steps.get(op, 0) for op, g in STEPWISE_RNN_GATES.items()))
    fixed["ops_onednn"] = math.log1p(sum(arch.op_counts.get(op, 0) for op in ONEDNN_OPS))
    if columns & _CODE_BYTES_COLUMNS:
        for mode in ("infer", "train"):
            fixed[f"log_code_bytes_{mode}"] = _log10(code_bytes(arch.op_counts, mode))
    kernels = None
    if "log_kernel_calls" in columns or columns & _KERNEL_NS_COLUMNS:
        kernels = priced_kernels(arch, bare_stand_in)
        fixed["log_kernel_calls"] = _log10(sum(int(r[1]) for r in kernels))
    return _ArchTerms(fixed, activation_bytes_by_group(arch),
                      kernels if columns & _KERNEL_NS_COLUMNS else None)


def _row_at(arch: ArchFeatures, terms: _ArchTerms, batch_size: int) -> dict[str, float]:
    """The design row of ``arch`` (whose batch-independent part is ``terms``) at ``batch_size``: the columns
    ``terms`` was made for, and the batch-dependent ones."""
    b = float(batch_size)
    macs_iter = arch.forward_macs_per_sample * b + arch.forward_macs_fixed
    act_iter = arch.activation_bytes_per_sample * b + arch.activation_bytes_fixed
    row = {
        **terms.fixed,
        "log2_batch": math.log2(max(b, 1.0)),
        "log_macs_per_iter": _log10(macs_iter),
        "log_act_bytes_per_iter": _log10(act_iter),
        "log_input_bytes_per_iter": _log10(arch.input_bytes_per_sample * b),
        # MACs per byte touched: compute-bound (high) vs memory/launch-bound (low) iterations
        "log_intensity": _log10(macs_iter / max(act_iter + arch.param_bytes, 1.0)),
        "log_horus_memory": _log10(horus_train_memory(arch, batch_size)),
        # work per kernel launch, roughly: small values mean launch-bound on a big GPU
        "log_macs_per_node_iter": _log10(macs_iter / max(arch.num_nodes, 1.0)),
    }
    for g, nb in terms.act_groups.items():
        row[f"log_act_{g}_iter"] = _log10(nb * b)
    row["log_saved_bytes_iter"] = (math.nan if arch.saved_bytes_per_sample is None
                                   else _log10(arch.saved_bytes_per_sample * b + arch.saved_bytes_fixed))
    row["log_saved_cpu_bytes_iter"] = (math.nan if arch.saved_cpu_bytes_per_sample is None
                                       else _log10(arch.saved_cpu_bytes_per_sample * b + arch.saved_cpu_bytes_fixed))
    row["log_peak_live_bytes_iter"] = (math.nan if arch.peak_live_bytes_per_sample is None else
                                       _log10(arch.peak_live_bytes_per_sample * b + arch.peak_live_bytes_fixed))
    if terms.kernels is not None:
        for mode, seconds in kernel_seconds_by_mode(terms.kernels, int(b)).items():
            row[f"log_kernel_ns_{mode}"] = _log10(1e9 * seconds)
    return row


def _group_counts(op_counts: Mapping[str, int]) -> dict[str, int]:
    out = {g: 0 for g in OP_GROUPS} | {"other": 0}
    lookup = {op: g for g, ops in OP_GROUPS.items() for op in ops}
    for op, n in op_counts.items():
        out[lookup.get(op, "other")] += int(n)
    return out


def priced_kernels(arch: ArchFeatures, bare_stand_in: bool = False) -> list:
    """The kernel rows a time baseline prices: ``kernel_nodes``, else stand-ins from the per-op-type totals
    (:func:`approximate_rows`); with ``bare_stand_in``, when the graph multiplies but none of those rows carries
    a MAC (no kernels nor op types given, op types without ``macs_by_op``), :func:`bare_kernel_rows`."""
    kernels = _given_kernels(arch)
    if bare_stand_in and _no_mac_rows(arch, kernels):
        return bare_kernel_rows(arch)
    return list(kernels)


def needs_bare_kernels(arch: ArchFeatures) -> bool:
    """Whether ``arch`` multiplies but no kernel row it gives carries a MAC: what a CPU set then prices are
    :func:`bare_kernel_rows`."""
    return _no_mac_rows(arch, _given_kernels(arch))


def _given_kernels(arch: ArchFeatures) -> Sequence:
    """``kernel_nodes``, else the stand-ins :func:`approximate_rows` makes from the per-op-type totals."""
    return arch.kernel_nodes or approximate_rows(
        dict(arch.op_counts), dict(arch.macs_by_op), dict(arch.activation_bytes_by_op), arch.param_bytes,
        arch.lookup_param_bytes, dict(arch.recurrent_steps_by_op))


def _no_mac_rows(arch: ArchFeatures, kernels: Iterable) -> bool:
    return arch.forward_macs_per_sample + arch.forward_macs_fixed > 0 and not any(int(r[2]) or int(r[3])
                                                                                    for r in kernels)


def bare_kernel_rows(arch: ArchFeatures) -> list:
    """Stand-in kernels for a graph given without ``kernel_nodes`` or ``op_counts`` (or with op types but no
    ``macs_by_op``, so that no kernel would carry a MAC): ``num_nodes`` dense matrix products sharing its forward
    MACs (per sample and fixed) and activation bytes. A CPU time baseline prices kernels only, so without any it
    answered a microsecond per step whatever the MACs; with these the training architectures' times come out a
    median 0.85-0.99x the measured, 51-64% MAPE (``python benchmarks/bare_feature_vectors.py``)."""
    n = max(1, int(arch.num_nodes))
    rows = approximate_rows({"MatMul": n}, {"MatMul": arch.forward_macs_per_sample},
                            {"MatMul": arch.activation_bytes_per_sample}, arch.param_bytes, arch.lookup_param_bytes)
    for r in rows:  # [class, count, MACs per sample, MACs fixed, ...]: the fixed MACs shared the same way
        r[3] = int(arch.forward_macs_fixed) // n
    return rows


def design_matrix(items: Iterable[tuple[ArchFeatures, int]], device_kind: str = "cpu",
                  columns: Sequence[str] | None = None):
    """A float ndarray (rows × ``columns``, by default :func:`feature_names` of ``device_kind``: a model set's own
    feature list) for (architecture, batch size) pairs. On the CPU a graph known by neither kernels nor op types
    gets stand-in kernels (:func:`bare_kernel_rows`); a GPU set's time baseline has a MAC term of its own, and did
    better without them. Only the asked-for columns' costly parts are computed (a CUDA set's rows price no kernel
    times), and an architecture's batch-independent part once however many of its batch sizes ``items`` holds."""
    import numpy as np

    names = feature_names(device_kind) if columns is None else list(columns)
    wanted = frozenset(names)
    # by identity, each architecture kept with its terms so that its id is not reused while the rows are made
    terms: dict[int, tuple[ArchFeatures, _ArchTerms]] = {}
    rows = []
    for a, b in items:
        got = terms.get(id(a))
        if got is None:
            got = terms[id(a)] = (a, _arch_terms(a, device_kind == "cpu", wanted))
        rows.append(_row_at(a, got[1], b))
    return np.array([[r[k] for k in names] for r in rows], dtype=float).reshape(len(rows), len(names))
