"""Fold an ONNX graph's shape arithmetic so shape inference can follow it, without running the graph.

Exporters compute some shapes at run time: ``torch.onnx``'s export of ``nn.MultiheadAttention`` with a dynamic
batch builds its head reshapes from ``Shape -> Gather -> Concat -> Reshape`` and slices with computed bounds.
ONNX's shape inference (even with ``data_prop``) stops at some of these ops, so the attention MatMuls' shapes
stay unknown and their MACs and activations go uncounted (a transformer block: 50.3 M MACs per sample
against 52.4 M, half its activation bytes). A model file's graph is run once in onnxruntime to resolve them
(:func:`perfpredict.features.graph._runtime_shapes`); an uploaded file is not run at all.

What this module does instead is evaluate, with numpy, only the small integer tensors that shapes are made of:
the outputs of ``Shape``/``Size`` of a tensor whose shape is known, and of a fixed list of index and arithmetic
ops (Gather, Slice, Concat, Unsqueeze, Squeeze, Reshape, Cast, Add, Sub, Mul, Div, ...) whose inputs are all
such tensors or integer constants. Nothing else is evaluated: no float data, no tensor of more than
:data:`MAX_ELEMENTS` elements, no op outside the list. The folded values are handed to shape inference as
constants, repeatedly, until nothing new folds. The result is used for shapes only; the graph that is counted
(op counts, nodes) is the original.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: the largest integer tensor folded (a shape or an index vector is a handful of elements)
MAX_ELEMENTS = 4096
#: rounds of (fold, re-infer): each round lets shapes found by the last one feed new Shape ops
MAX_ROUNDS = 8

_INT_TYPES = {6: np.int32, 7: np.int64, 9: np.bool_}  # TensorProto.INT32, INT64, BOOL


def folded_value_infos(model_proto: Any, inferred: Any = None) -> list[Any]:
    """The value infos ONNX shape inference gives ``model_proto`` once its shape arithmetic is folded
    (:mod:`module docstring <perfpredict.features.shape_folding>`); an empty list where nothing folds or
    inference fails. ``inferred``: ``model_proto`` as shape inference (``data_prop=True``) already gave it, so
    the first round does not infer it again."""
    from onnx import shape_inference

    from perfpredict.features.weightless import without_bulk_data

    # what is folded reads integer values and the initializers' dimensions, never a bulk weight's data
    m, _ = without_bulk_data(model_proto)
    folded: dict[str, np.ndarray] = {}
    for _ in range(MAX_ROUNDS):
        if inferred is None:
            try:
                inferred = shape_inference.infer_shapes(m, data_prop=True)
            except Exception:  # noqa: BLE001 - best effort: the caller keeps the shapes it had
                return []
        new = _fold(inferred.graph, folded)
        if not new:
            break
        folded.update(new)
        _as_constants(m.graph, folded)
        inferred = None  # the folded graph is inferred anew
    if inferred is None or not folded:
        return []
    g = inferred.graph
    return list(g.value_info) + list(g.output)


def _known_shapes(graph) -> dict[str, list[int]]:
    from perfpredict.features.graph import _static_dims

    out = {vi.name: dims for vi in list(graph.input) + list(graph.value_info) + list(graph.output)
           if (dims := _static_dims(vi.type.tensor_type)) is not None}
    for init in graph.initializer:
        out[init.name] = list(init.dims)
    return out


def _small_int(tensor) -> np.ndarray | None:
    from onnx import numpy_helper

    if tensor.data_type not in _INT_TYPES or int(np.prod(tensor.dims)) > MAX_ELEMENTS:
        return None
    if tensor.data_location == 1:  # TensorProto.EXTERNAL: never read here
        return None
    try:
        return numpy_helper.to_array(tensor)
    except Exception:  # noqa: BLE001
        return None


def _fold(graph, folded: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The integer values of the top-level graph's outputs that can be computed now and were not before."""
    shapes = _known_shapes(graph)
    values: dict[str, np.ndarray] = dict(folded)
    for init in graph.initializer:
        v = _small_int(init)
        if v is not None:
            values.setdefault(init.name, v)
    new: dict[str, np.ndarray] = {}
    for node in graph.node:
        outs = [o for o in node.output if o]
        if not outs or all(o in values for o in outs):
            continue
        try:
            result = _evaluate(node, values, shapes)
        except Exception:  # noqa: BLE001 - an op this cannot follow is left to shape inference
            result = None
        if result is None:
            continue
        arr = np.asarray(result)
        if arr.dtype.kind not in "iub" or arr.size > MAX_ELEMENTS:
            continue
        if arr.dtype not in (np.int32, np.int64, np.bool_):
            arr = arr.astype(np.int64)
        # (an int32 value stays int32: the Constant that replaces its node keeps the graph's types)
        values[outs[0]] = arr
        if node.op_type != "Constant":  # a Constant needs no folding; shape inference already reads it
            new[outs[0]] = arr
    return new


def _attr(node, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _evaluate(node, values: dict[str, np.ndarray], shapes: dict[str, list[int]]) -> np.ndarray | None:
    """One node's (single) output from integer inputs already known, or None."""
    op, ins = node.op_type, list(node.input)
    if len(node.output) != 1:
        return None
    if op == "Constant":
        t = _attr(node, "value")
        if t is not None:
            return _small_int(t)
        for key in ("value_int", "value_ints"):
            v = _attr(node, key)
            if v is not None:
                return np.asarray(v, np.int64)
        return None
    if op in ("Shape", "Size"):
        dims = shapes.get(ins[0])
        if dims is None:
            return None
        if op == "Size":
            return np.asarray(int(np.prod(dims)), np.int64)
        start, end = _attr(node, "start", 0), _attr(node, "end", None)
        return np.asarray(dims[start:end], np.int64)
    args = [values.get(i) if i else None for i in ins]
    given = [a for i, a in zip(ins, args) if i]
    if any(a is None for a in given):
        return None
    if op == "Identity":
        return args[0]
    if op == "Cast":
        to = _attr(node, "to")
        return args[0].astype(_INT_TYPES[to]) if to in _INT_TYPES else None
    if op == "Gather":
        return np.take(args[0], args[1], axis=_attr(node, "axis", 0))
    if op == "Unsqueeze":
        axes = args[1] if len(ins) > 1 and ins[1] else _attr(node, "axes")
        out = args[0]
        for a in sorted(int(x) % (out.ndim + len(axes)) for x in axes):
            out = np.expand_dims(out, a)
        return out
    if op == "Squeeze":
        axes = args[1] if len(ins) > 1 and ins[1] else _attr(node, "axes")
        return np.squeeze(args[0], axis=None if axes is None else tuple(int(a) for a in axes))
    if op == "Concat":
        return np.concatenate([np.atleast_1d(a) for a in given], axis=_attr(node, "axis", 0))
    if op == "Slice":
        data, starts, ends = args[0], args[1], args[2]
        axes = args[3] if len(args) > 3 and args[3] is not None else range(len(starts))
        steps = args[4] if len(args) > 4 and args[4] is not None else [1] * len(starts)
        index = [slice(None)] * data.ndim
        for s, e, a, st in zip(starts, ends, axes, steps):
            index[int(a)] = slice(int(s), int(e), int(st))
        return data[tuple(index)]
    if op == "Reshape":
        target = [int(d) for d in args[1]]
        if not _attr(node, "allowzero", 0):  # allowzero=1: a 0 is a dimension of size 0, not "copy"
            target = [args[0].shape[i] if d == 0 else d for i, d in enumerate(target)]
        return args[0].reshape(target)
    if op in ("Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Equal", "Less", "Greater", "Where", "Not",
              "Neg", "Abs"):
        return _arithmetic(op, given, node)
    if op == "Range":
        start, limit, delta = (int(a) for a in given)
        if delta == 0 or max(0, -(-(limit - start) // delta)) > MAX_ELEMENTS:
            return None
        return np.arange(start, limit, delta, dtype=given[0].dtype)
    if op == "ConstantOfShape":
        shape = [int(d) for d in args[0]]
        if int(np.prod(shape)) > MAX_ELEMENTS:
            return None
        fill = _attr(node, "value")
        if fill is None:  # the default value is a float 0.0: not an integer tensor
            return None
        v = _small_int(fill)
        return None if v is None else np.full(shape, v.reshape(-1)[0], dtype=v.dtype)
    if op == "Expand":
        out_shape = np.broadcast_shapes(args[0].shape, tuple(int(d) for d in args[1]))
        if int(np.prod(out_shape)) > MAX_ELEMENTS:
            return None
        return np.broadcast_to(args[0], out_shape).copy()
    return None


def _arithmetic(op: str, a: list[np.ndarray], node) -> np.ndarray | None:
    if op == "Div":  # ONNX integer division truncates toward zero
        if np.any(a[1] == 0):
            return None
        q = np.abs(a[0]) // np.abs(a[1])
        return np.where((a[0] < 0) ^ (a[1] < 0), -q, q)
    if op == "Mod":
        if np.any(a[1] == 0):
            return None
        return np.fmod(a[0], a[1]) if _attr(node, "fmod", 0) else np.mod(a[0], a[1])
    unary = {"Not": np.logical_not, "Neg": np.negative, "Abs": np.abs}
    if op in unary:
        return unary[op](a[0])
    if op == "Where":
        return np.where(a[0], a[1], a[2])
    binary = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.maximum, "Min": np.minimum,
              "Equal": np.equal, "Less": np.less, "Greater": np.greater}
    if op in ("Max", "Min"):
        out = a[0]
        for x in a[1:]:
            out = binary[op](out, x)
        return out
    return binary[op](a[0], a[1])


def _as_constants(graph, folded: dict[str, np.ndarray]) -> None:
    """Replace each node whose output was folded by a Constant of that value (in place, same output name)."""
    from onnx import helper, numpy_helper

    for i, node in enumerate(graph.node):
        if len(node.output) == 1 and node.output[0] in folded and node.op_type != "Constant":
            value = numpy_helper.from_array(folded[node.output[0]], name=node.output[0] + "__folded")
            graph.node[i].CopyFrom(helper.make_node("Constant", [], [node.output[0]], value=value,
                                                    name=node.name or node.output[0]))
