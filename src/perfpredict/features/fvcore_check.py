"""An independent MAC count with fvcore's FlopCountAnalysis (JIT trace), to cross-check the ONNX count.

fvcore counts one fused multiply-add as one "flop", i.e. its numbers are MACs. It has no handles for
recurrent layers or ``scaled_dot_product_attention`` (used by ``nn.MultiheadAttention``), so this module
adds them; they read shapes from the traced graph, not from perfpredict's ONNX analysis.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from math import prod
from typing import Any

import torch

#: fvcore operator names that are multiply-accumulate work (the same op classes as the ONNX count).
MAC_OPERATORS = frozenset({"conv", "linear", "addmm", "matmul", "bmm", "baddbmm", "mm", "einsum",
                           "lstm", "gru", "rnn_tanh", "rnn_relu", "scaled_dot_product_attention"})


def _shape(val) -> list[int] | None:
    from fvcore.nn.jit_handles import get_shape

    try:
        s = get_shape(val)
    except Exception:  # noqa: BLE001
        return None
    return list(s) if s is not None else None


def _rnn_handle():
    """aten::lstm/gru/rnn_*(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first).

    The gate count is already inside the weight shapes (gates·H rows), so one handle serves all three.
    """

    def handle(inputs: list, outputs: list) -> int:
        x = _shape(inputs[0])
        if x is None or len(x) != 3:
            return 0
        batch_first = bool(inputs[8].toIValue()) if len(inputs) > 8 else False
        seq, batch = (x[1], x[0]) if batch_first else (x[0], x[1])
        has_biases = bool(inputs[3].toIValue())
        weights = [_shape(v) for v in inputs[2].node().inputs()]
        per_layer = 4 if has_biases else 2  # w_ih, w_hh, (b_ih, b_hh) per layer and direction
        total = 0
        for i in range(0, len(weights), per_layer):
            w_ih, w_hh = weights[i], weights[i + 1]
            if w_ih is None or w_hh is None:
                return 0
            total += w_ih[0] * w_ih[1] + w_hh[0] * w_hh[1]
        return seq * batch * total

    return handle


def _sdpa_handle(inputs: list, outputs: list) -> int:
    q, k, v = _shape(inputs[0]), _shape(inputs[1]), _shape(inputs[2])
    if q is None or k is None or v is None:
        return 0
    batch = prod(q[:-2])
    return batch * q[-2] * k[-2] * (q[-1] + v[-1])


def _baddbmm_handle(inputs: list, outputs: list) -> int:
    """aten::baddbmm(input, batch1 [b, n, m], batch2 [b, m, p], ...): b·n·m·p (fvcore has no handle)."""
    b1, b2 = _shape(inputs[1]), _shape(inputs[2])
    if b1 is None or b2 is None:
        return 0
    return b1[0] * b1[1] * b1[2] * b2[2]


def _matmul_handle(inputs: list, outputs: list) -> int:
    """aten::matmul(a, b): output elements x the contracted dimension, as the ONNX count has it. fvcore's own
    handle takes the batch from ``a`` alone (a [1, n, m] x [h, m, p] broadcast counted once, not h times) and
    fails on a 1-D ``b`` (``x @ v``), which made the whole cross-check fail."""
    a, y = _shape(inputs[0]), _shape(outputs[0])
    if a is None or y is None or not a:
        return 0
    return prod(y) * a[-1]


_EXTRA_HANDLES = {
    "aten::matmul": _matmul_handle,
    "aten::baddbmm": _baddbmm_handle,
    "aten::lstm": _rnn_handle(),
    "aten::gru": _rnn_handle(),
    "aten::rnn_tanh": _rnn_handle(),
    "aten::rnn_relu": _rnn_handle(),
    "aten::scaled_dot_product_attention": _sdpa_handle,
}


def fvcore_counts(model: torch.nn.Module, args: tuple) -> dict[str, Any]:
    """fvcore's count for ``model(*args)``: ``{"macs", "total", "by_operator", "unsupported"}``."""
    from perfpredict.features.onnx_export import EXPORT_LOCK

    with EXPORT_LOCK:  # JIT tracing, and the process's logging switch and stderr, as an export uses them
        return _count(model, args)


def _count(model: torch.nn.Module, args: tuple) -> dict[str, Any]:
    from fvcore.nn import FlopCountAnalysis

    from perfpredict.features.onnx_export import without_fused_attention

    was_training = model.training
    model.eval()
    prev = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        # Grad enabled and the fast path off on purpose (see onnx_export: either switches attention to a fused
        # kernel).
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), without_fused_attention():
            warnings.simplefilter("ignore")
            fa = FlopCountAnalysis(model, args)
            fa.set_op_handle(**_EXTRA_HANDLES)
            fa.unsupported_ops_warnings(False)
            fa.uncalled_modules_warnings(False)
            by_op = {k: int(v) for k, v in fa.by_operator().items()}
            unsupported = {k: int(v) for k, v in fa.unsupported_ops().items()}
    finally:
        logging.disable(prev)
        model.train(was_training)
    return {
        "macs": int(sum(v for k, v in by_op.items() if k in MAC_OPERATORS)),
        "total": int(sum(by_op.values())),
        "by_operator": dict(sorted(by_op.items())),
        "unsupported": dict(sorted(unsupported.items())),
    }
