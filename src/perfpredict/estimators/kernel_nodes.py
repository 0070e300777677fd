"""The kernels a graph runs, one descriptor per ONNX node: what a per-kernel cost model needs.

An eager PyTorch step runs roughly one kernel per ONNX node, and how long a kernel takes depends on its kind
far more than its MACs alone say: a depthwise convolution does a few MACs per byte it moves, so it runs
at memory speed, where a dense one of the same MACs runs at the GEMM's; a tiny element-wise op costs its
dispatch overhead whatever its size. So each node is described by its **kernel class**
(:func:`kernel_class`), MACs, activation bytes in and out, weight bytes and recurrent time steps
(:class:`KernelNode`), and the cost table measured on the CPU (:mod:`perfpredict.estimators.kernel_time`)
prices each class.

Exporter artefacts cost nothing in PyTorch and are left out: shape arithmetic (nodes with no floating-point
output: ``Shape``, ``Gather`` on a shape, ``Cast`` to int, ``Equal``, ``Mod``...) and views (``Reshape``,
``Flatten``, ``Squeeze``...). This module does not import torch or onnx at import time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: ONNX ops that are views or no-ops in an eager PyTorch step (no kernel runs). A control-flow op (``Loop``,
#: ``Scan``, ``If``) runs no kernel of its own: the kernels are its body's (``count`` times for a loop).
FREE_OPS = frozenset({"Constant", "ConstantOfShape", "Shape", "Size", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                      "Identity", "Dropout", "Loop", "Scan", "If"})
#: Kernel classes by ONNX op type; Conv and MatMul are refined by :func:`kernel_class`.
OP_CLASS: dict[str, str] = {
    "Conv": "conv", "ConvTranspose": "conv_transpose", "Gemm": "gemm", "MatMul": "gemm", "Einsum": "matmul",
    "LSTM": "lstm", "GRU": "gru", "RNN": "rnn", "Attention": "matmul",
    "ConvInteger": "conv", "QLinearConv": "conv", "MatMulInteger": "gemm", "QLinearMatMul": "gemm",
    "FusedMatMul": "gemm", "QGemm": "gemm",
    "BatchNormalization": "norm", "LayerNormalization": "norm", "InstanceNormalization": "norm",
    "GroupNormalization": "norm",
    "MaxPool": "maxpool", "GlobalMaxPool": "maxpool", "AveragePool": "pool", "GlobalAveragePool": "pool",
    "ReduceMean": "pool", "ReduceSum": "pool", "ReduceMax": "pool",
    "Softmax": "softmax", "LogSoftmax": "softmax",
    "Transpose": "copy", "Concat": "copy", "Slice": "copy", "Split": "copy", "Gather": "copy", "Expand": "copy",
    "Pad": "copy", "Resize": "copy", "Upsample": "copy", "Tile": "copy", "Where": "copy", "Cast": "copy",
}
#: Every class a node can have; anything else (Relu, Add, Erf, Clip, ...) is ``pointwise``.
KERNEL_CLASSES: tuple[str, ...] = ("conv", "conv_grouped", "conv_transpose", "gemm", "matmul", "lstm", "gru", "rnn",
                                   "norm", "maxpool", "pool", "softmax", "gather", "copy", "pointwise")


@dataclass(frozen=True)
class KernelNode:
    """One kernel of one pass at a fixed batch size."""

    cls: str
    macs: int
    #: activation bytes read and written (inputs that are not weights, and outputs)
    io_bytes: int
    weight_bytes: int
    #: recurrent time steps (sequence length x directions), 0 for other kernels
    steps: int = 0
    #: how many times it runs in the pass: a loop body's kernel once per iteration
    count: int = 1


def kernel_class(op_type: str, group: int = 1, weight_inputs: int = 0, data_is_weight: bool = False) -> str:
    """The kernel class of a node: ``conv_grouped`` for a convolution with groups > 1 (depthwise), ``matmul``
    for a MatMul of two activations (attention's batched products) and ``gemm`` for one with a weight,
    ``gather`` for a lookup into a weight (an embedding table: it reads the rows it looks up, where an
    optimizer step touches the whole table) and ``copy`` for one into an activation."""
    if op_type == "Conv" and group > 1:
        return "conv_grouped"
    if op_type == "MatMul" and weight_inputs == 0:
        return "matmul"
    if op_type == "Gather" and data_is_weight:
        return "gather"
    return OP_CLASS.get(op_type, "pointwise")


# ---------------------------------------------------------------------------------------------------------
# Per-sample / fixed split (the same two-export trick as the other graph features)
# ---------------------------------------------------------------------------------------------------------
#: A node of an architecture, batch-independent: ``[cls, count, macs per sample, macs fixed, io bytes per
#: sample, io bytes fixed, weight bytes, steps]``. Identical nodes are merged (``count``).
NodeRow = list


def split_nodes(at1: Sequence[KernelNode], at2: Sequence[KernelNode], b1: int = 1, b2: int = 2) -> list[NodeRow]:
    """Per-node (per-sample, fixed) descriptors from the same graph analysed at batch sizes ``b1`` and ``b2``
    (node lists in graph order), identical nodes merged with a count; ``[]`` when the two graphs' kernels
    differ (a batch-dependent graph), since a split would then be wrong. The fixed parts are held at 0 or more:
    a node that grows faster than the batch (a batch x batch similarity matrix, as in a contrastive loss) splits
    into a negative intercept, which the feature schema refuses (a card carrying it could not be predicted from
    again)."""
    if len(at1) != len(at2) or any(a.cls != b.cls or a.count != b.count for a, b in zip(at1, at2)):
        return []
    keys = []
    for a, b in zip(at1, at2):
        m_per = (b.macs - a.macs) // (b2 - b1)
        io_per = (b.io_bytes - a.io_bytes) // (b2 - b1)
        keys.append(((a.cls, int(m_per), int(max(a.macs - b1 * m_per, 0)), int(io_per),
                      int(max(a.io_bytes - b1 * io_per, 0)), int(a.weight_bytes), int(a.steps)), a.count))
    return _merged(keys)


def nodes_at_batch(rows: Iterable[NodeRow], batch: int) -> list[tuple[KernelNode, int]]:
    """``(node at batch, count)`` for each descriptor row (negative extrapolations clipped at 0)."""
    out = []
    for cls, count, m_per, m_fix, io_per, io_fix, w, steps in rows:
        out.append((KernelNode(cls, max(int(m_per) * batch + int(m_fix), 0), max(int(io_per) * batch + int(io_fix), 0),
                               int(w), int(steps)), int(count)))
    return out


def rows_at_fixed_batch(nodes: Sequence[KernelNode], batch: int) -> list[NodeRow]:
    """Rows from a graph whose batch is fixed at ``batch``: every batch-proportional quantity becomes per sample
    (fixed parts unknown, taken as 0), as the other features of such a graph are split."""
    return _merged(((k.cls, k.macs // batch, 0, k.io_bytes // batch, 0, k.weight_bytes, k.steps), k.count)
                   for k in nodes)


def _merged(keys: Iterable[tuple[tuple, int]]) -> list[NodeRow]:
    """Rows ``[cls, count, *rest]`` from per-node ``(key, times run)`` with keys ``(cls, *rest)``, the times of
    identical keys summed."""
    counts: Counter = Counter()
    for k, n in keys:
        counts[k] += int(n)
    return [[k[0], n, *k[1:]] for k, n in sorted(counts.items())]


def approximate_rows(op_counts: dict[str, int], macs_by_op: dict[str, float], act_bytes_by_op: dict[str, float],
                     param_bytes: float, lookup_param_bytes: float = 0.0,
                     recurrent_steps_by_op: dict[str, int] | None = None) -> list[NodeRow]:
    """Stand-in rows for a graph known only by its per-op-type totals (a bare feature vector): one row per op
    type with its count, per-sample MACs and output bytes split evenly over its nodes (reads taken equal to
    writes), the weights on the first MAC op and embedding tables on a gather. Coarser than a walk: convolutions
    are all taken as dense, and views and shape arithmetic cannot be told from kernels, so only
    :data:`FREE_OPS` are dropped."""
    rows: list[NodeRow] = []
    steps = recurrent_steps_by_op or {}
    weights_placed = False
    for op, n in sorted(op_counts.items()):
        if op in FREE_OPS or n <= 0:
            continue
        cls = kernel_class(op, weight_inputs=1, data_is_weight=(op == "Gather" and lookup_param_bytes > 0))
        macs = float(macs_by_op.get(op, 0)) / n
        io = 2.0 * float(act_bytes_by_op.get(op, 0)) / n
        w = 0
        if cls == "gather":
            w = int(lookup_param_bytes)
        elif op in macs_by_op and not weights_placed:
            w, weights_placed = int(max(param_bytes - lookup_param_bytes, 0)), True
        rows.append([cls, int(n), int(macs), 0, int(io), 0, w // int(n), int(steps.get(op, 0)) // int(n)])
    return rows
