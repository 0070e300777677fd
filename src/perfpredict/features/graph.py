"""Static analysis of an ONNX graph: MACs, parameter and activation bytes, op counts (Horus Table 3).

MACs (multiply-accumulates) are counted for the ops that dominate DNN compute, from the shapes ONNX shape
inference gives:

- ``Conv``: output elements × (C_in / groups) × kernel elements
- ``ConvTranspose``: input elements × (C_out / groups) × kernel elements
- ``Gemm`` / ``MatMul``: output elements × the contracted dimension
- ``Einsum``: the product of the sizes of every index in the equation (those under ``...`` included)
- ``LSTM`` / ``GRU`` / ``RNN``: steps × batch × directions × (gates·H·I + gates·H·H)
- ``Attention`` (opset 23): batch × heads × L × S × (E_qk + E_v), S counting a past key's positions
- their integer and quantized forms as their float ones (``ConvInteger``, ``QLinearConv``, ``MatMulInteger``,
  ``QLinearMatMul``), and onnxruntime's ``com.microsoft`` ``FusedMatMul``, ``Attention`` and ``QGemm`` (the
  quantised Gemm its QOperator quantisation writes) (:data:`CUSTOM_MAC_OPS`); any other op outside ONNX's
  domains leaves a note that its MACs are not counted

A model's local functions are inlined first (each call is what its function's nodes do); a weight written as a
``Constant`` node is a weight as an initializer is (:func:`_constant_weights`).

The recurrent ops' time steps (sequence length × directions, summed per op type) are counted too: a step
depends on the one before it, so each costs a fixed latency however small the batch (``recurrent_steps_by_op``).

The peak of the activation bytes alive at once during one forward pass (``peak_live_activation_bytes``)
comes from walking the nodes in graph order (see :func:`peak_live_activation_bytes`): an inference pass holds
only what its next ops still need, which the sum of all activations overstates many times over.

Biases, normalisation, pooling, activations and element-wise ops are not MACs (they appear in
``op_counts``).

Control flow is counted as it runs (:data:`CONTROL_FLOW_OPS`), with the shapes shape inference gives the
subgraphs: a ``Loop`` whose trip count is a constant (an initializer, a ``Constant`` node, or shape arithmetic
on shapes shape inference knows: :func:`_folded_trip_counts`) and a ``Scan``
whose scanned input's length is known count their body that many times (MACs, activation bytes, op counts,
nodes, time steps, kernels), as the unrolled graph would; a ``Loop`` whose trip count is computed at run time,
or a ``Scan`` of unknown length, counts its body once; an ``If`` counts the branch with more MACs (only one
runs). Each of these, and a ``Loop`` whose condition may end it before its trip count, leaves a line in
``GraphStats.notes``. The control-flow node itself runs no kernel. A subgraph's weights (its initializers)
are in the parameter bytes once, however many times it runs. The peak-live and saved-for-backward walks
read the graph as it runs too (:class:`_Unrolled`): a Loop of constant trip count and a Scan of known length
unrolled into fresh tensors per iteration (a loop-carried value wired from one iteration to the next, a
scanned input sliced, a scan output stacked), an If as the branch counted; a Loop or Scan that cannot be
unrolled (its trip count computed at run time, or past :data:`MAX_UNROLLED_NODES` node copies) stays one node
there, its body's tensors left out, with a note. A sequence value (``SequenceInsert`` and the other
``Sequence*`` ops) holds its tensors as a list does, and its ``ConcatFromSequence`` is as large as they are
together (:func:`sequence_sizes`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from math import prod
from typing import Any, NamedTuple

from perfpredict.estimators.kernel_nodes import FREE_OPS, KernelNode, kernel_class

RECURRENT_OPS = ("LSTM", "GRU", "RNN")
#: The integer and quantized forms of the products (a quantized model's int8 MatMuls and convolutions)
INTEGER_MAC_OPS = ("MatMulInteger", "QLinearMatMul", "ConvInteger", "QLinearConv")
MAC_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", *RECURRENT_OPS, "Attention", *INTEGER_MAC_OPS)
#: Ops of other domains whose MACs are counted (onnxruntime's fused forms, as its optimizer writes them): any other
#: op of a domain besides ONNX's is not counted, with a note
CUSTOM_MAC_OPS = frozenset({("com.microsoft", "FusedMatMul"), ("com.microsoft", "Attention"),
                            ("com.microsoft", "QGemm")})
#: Ops whose subgraphs run in their place: a loop's body once per iteration, one branch of an If
CONTROL_FLOW_OPS = ("Loop", "Scan", "If")
#: The most node copies the peak-live and saved-for-backward walks unroll control flow into (a Loop's trip count
#: x its body's nodes, summed over the graph): past it a Loop or Scan stays one node in them, with a note. The
#: walks take about 60 us per copy, so an upload of a few hundred bytes holds the service for at most ~3 s.
MAX_UNROLLED_NODES = 50_000


@dataclass
class GraphStats:
    macs: int = 0
    macs_by_op: dict[str, int] = field(default_factory=dict)
    activation_bytes: int = 0
    #: ``activation_bytes`` split by the op type that produced each tensor (graph inputs under ``"input"``).
    activation_bytes_by_op: dict[str, int] = field(default_factory=dict)
    initializer_bytes: int = 0
    #: Bytes of the weights that are only ever indexed (the data input of Gather: embedding tables). A pass
    #: reads just the rows it looks up, which are already counted as the Gather's output activation, so a
    #: cost model of an inference pass must not charge these bytes as read in full (an optimizer step with
    #: dense gradients does touch every row).
    lookup_param_bytes: int = 0
    #: Bytes of the weights that are buffers (:func:`buffer_names`: a BatchNormalization's running statistics),
    #: part of ``initializer_bytes``: held, never trained.
    buffer_bytes: int = 0
    #: Time steps of the recurrent ops (``LSTM``/``GRU``/``RNN``), sequence length × directions summed per op
    #: type, for one pass of the graph (independent of the batch size). Runtimes that loop over steps pay a
    #: fixed cost per step: PyTorch on the CPU runs GRU and plain RNN step by step in ATen ops (only LSTM has a
    #: fused oneDNN kernel); cuDNN runs every recurrent op step by step on the GPU.
    recurrent_steps_by_op: dict[str, int] = field(default_factory=dict)
    op_counts: dict[str, int] = field(default_factory=dict)
    num_nodes: int = 0
    #: The most activation bytes alive at once in one pass of the graph, its control flow unrolled
    #: (:class:`_Unrolled`), as an eager runtime holds them (:func:`peak_live_activation_bytes`).
    peak_live_activation_bytes: int = 0
    #: The bytes a training step's backward pass would keep, read off the graph by per-op rules
    #: (:func:`saved_for_backward_bytes`): what an ONNX file alone can say about the saved tensors.
    graph_saved_bytes: int = 0
    unknown_shape_ops: dict[str, int] = field(default_factory=dict)
    #: The kernels of one pass, in graph order (:mod:`perfpredict.estimators.kernel_nodes`): every node but views
    #: and shape arithmetic, a loop body's with the loop's trip count as ``count``.
    kernel_nodes: list[KernelNode] = field(default_factory=list)
    #: What the counts could not settle without running the graph (a loop's trip count, an If's branch).
    notes: list[str] = field(default_factory=list)
    #: The main graph's nodes in graph order as a training step's backward pass reads them (:func:`step_work`):
    #: ``(op type, inputs, floating-point outputs, MACs, runs subgraphs)``; a control-flow node's MACs are its
    #: subgraphs' as counted in ``macs``.
    step_nodes: list[tuple[str, tuple[str, ...], tuple[str, ...], int, bool]] = field(default_factory=list)
    #: The main graph's floating-point initializers, and its weights written as ``Constant`` nodes
    #: (:func:`_constant_weights`, counted as parameters too): the weights a training step may train.
    float_initializers: frozenset[str] = frozenset()
    #: A recurrent op's share of its MACs that its hidden state's recurrence takes (H / (I + H)), by its index in
    #: ``step_nodes``: its backward runs that through time whenever any gradient is needed (:func:`step_work`).
    step_recurrent_shares: dict[int, float] = field(default_factory=dict)


def unknown_shapes_note(unknown_shape_ops: dict[str, int], how: str = "") -> str:
    """The one-line note for compute ops whose shapes stayed unknown (``how``: e.g. " without executing the
    graph"): what is then missing from the counts (MACs, and time steps for a recurrent op)."""
    missing = "MACs and time steps" if any(op in RECURRENT_OPS for op in unknown_shape_ops) else "MACs"
    return (f"shapes unknown for {sum(unknown_shape_ops.values())} compute op(s) "
            f"({', '.join(sorted(unknown_shape_ops))}){how}; their {missing} are not counted")


def _dtype_size(elem_type: int) -> int:
    from onnx import helper

    try:
        return helper.tensor_dtype_to_np_dtype(elem_type).itemsize
    except (KeyError, ValueError, TypeError):
        return 4


def tensor_nbytes(t) -> int:
    """The bytes of an ONNX tensor (an initializer) by its dims and element type."""
    return prod(t.dims) * _dtype_size(t.data_type)


class _Shapes:
    """name → (shape or None, element byte size) for every value in the graph."""

    def __init__(self) -> None:
        self.info: dict[str, tuple[list[int] | None, int]] = {}
        self.floats: set[str] = set()

    def add_value_info(self, vi) -> None:
        t = vi.type.tensor_type
        if not t.HasField("elem_type"):
            return
        self.info[vi.name] = (_static_dims(t), _dtype_size(t.elem_type))
        if t.elem_type in _FLOAT_TYPES:
            self.floats.add(vi.name)

    def add_initializer(self, init) -> None:
        self.info[init.name] = (list(init.dims), _dtype_size(init.data_type))
        if init.data_type in _FLOAT_TYPES:
            self.floats.add(init.name)

    def elem_float(self, name: str) -> bool:
        """Whether ``name`` is known to hold floating-point values."""
        return name in self.floats

    def shape(self, name: str) -> list[int] | None:
        v = self.info.get(name)
        return v[0] if v else None

    def nbytes(self, name: str) -> int | None:
        v = self.info.get(name)
        if not v or v[0] is None:
            return None
        return prod(v[0]) * v[1]


class _Tally:
    """What one pass of a graph counts: merged into the enclosing graph's once, a loop body's once per
    iteration."""

    def __init__(self) -> None:
        self.macs: Counter = Counter()
        self.ops: Counter = Counter()
        self.act_by_op: Counter = Counter()
        self.steps: Counter = Counter()
        self.kernels: list[KernelNode] = []

    def add(self, other: _Tally, times: int = 1) -> None:
        for mine, theirs in ((self.macs, other.macs), (self.ops, other.ops), (self.act_by_op, other.act_by_op),
                             (self.steps, other.steps)):
            for k, v in theirs.items():
                mine[k] += v * times
        if times:
            self.kernels.extend(replace(k, count=k.count * times) for k in other.kernels)


def _scalar_constants(graph) -> dict[str, int]:
    """name -> value of ``graph``'s one-element integer and boolean initializers and ``Constant`` nodes (a
    Loop's trip count and condition)."""
    from onnx import helper, numpy_helper

    out: dict[str, int] = {}
    tensors = [(t.name, t) for t in graph.initializer]
    for n in graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    tensors.append((n.output[0], a.t))
                elif a.name == "value_int":
                    out[n.output[0]] = int(helper.get_attribute_value(a))
    for name, t in tensors:
        if t.data_type in (6, 7, 9) and prod(t.dims) == 1:  # INT32, INT64, BOOL
            try:
                out[name] = int(numpy_helper.to_array(t).reshape(-1)[0])
            except Exception:  # noqa: BLE001 - no data (dropped or external): the value stays unknown
                pass
    return out


def all_initializers(graph) -> list:
    """``graph``'s initializers and those of every subgraph in it (a Loop's or Scan's body, an If's branches, at
    any depth): the model's weights. A body's weights are stored once and shared by its iterations, so each
    counts once whatever the trip count."""
    import onnx

    out = list(graph.initializer) + _constant_weights(graph)
    for node in graph.node:
        for a in node.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else \
                list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []
            for sub in subs:
                out.extend(all_initializers(sub))
    return out


def inline_functions(model_proto: Any) -> Any:
    """``model_proto`` with its model-local functions (onnxscript, export_modules_as_functions) inlined: their
    nodes are what runs, each call in place of its node, and a ``Constant`` weight inside one is a weight of the
    graph (:func:`all_initializers`); the proto itself where it has none, or where they cannot be inlined (an
    onnx without ``onnx.inliner``, a function the inliner refuses): their calls then count as unknown ops."""
    if not model_proto.functions:
        return model_proto
    try:
        from onnx.inliner import inline_local_functions

        return inline_local_functions(model_proto)
    except Exception:  # noqa: BLE001 - an older onnx, or a malformed function: count the graph as it is
        return model_proto


#: The input positions of ops that take a weight no training step updates: a BatchNormalization's running mean and
#: variance (torch's buffers, updated by the forward pass, never by the optimizer), a Resize's or Upsample's scales,
#: a Clip's bounds, a Pad's pads and value. InstanceNormalization, LayerNormalization and GroupNormalization have
#: none: their scale and bias are parameters.
BUFFER_INPUTS: dict[str, tuple[int, ...]] = {"BatchNormalization": (3, 4), "Resize": (1, 2, 3), "Upsample": (1,),
                                             "Clip": (1, 2), "Pad": (1, 2, 3)}


def _read_only_at(graph, weights: list, positions: Mapping[str, tuple[int, ...]]) -> frozenset[str]:
    """The names of the ``weights`` that every node taking one, in ``graph`` or any subgraph of it, takes at a
    position ``positions`` names for its op type (ONNX's own domain); a weight read anywhere else is not one."""
    import onnx

    names = {t.name for t in weights}
    kept, other = set(), set()

    def walk(g) -> None:
        for node in g.node:
            fixed = positions.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ()
            for i, x in enumerate(node.input):
                if x in names:
                    (kept if i in fixed else other).add(x)
            for a in node.attribute:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                            list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
                    walk(sub)

    walk(graph)
    return frozenset(kept - other)


def buffer_names(graph, weights: list) -> frozenset[str]:
    """The names of the ``weights`` (:func:`all_initializers` of ``graph``) that are buffers: every node that takes
    one, in ``graph`` or any subgraph of it, takes it at a position :data:`BUFFER_INPUTS` names (a BatchNormalization's
    running statistics). They are held in memory, as torch's ``model.buffers()`` are, but get no gradient nor
    optimizer state; a weight that feeds a trainable position anywhere (a tied one) is not a buffer."""
    return _read_only_at(graph, weights, BUFFER_INPUTS)


#: The input positions of a recurrent op's initial states (LSTM: initial_h, initial_c; GRU, RNN: initial_h)
RECURRENT_STATE_INPUTS: dict[str, tuple[int, ...]] = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}


def recurrent_initial_states(graph, weights: list) -> frozenset[str]:
    """The names of the ``weights`` that are only ever a recurrent op's initial state (:data:`RECURRENT_STATE_INPUTS`)
    and hold zeros: the zeros PyTorch makes on each call when no state is given, which the dynamo exporter
    constant-folds into an initializer of the export's batch size (``[layers, batch, hidden]``; the TorchScript
    exporter computes it from the input's shape). They are no parameters nor buffers of the model (its
    ``parameters()`` and ``buffers()`` have none), so neither ``param_count`` nor the parameter bytes count them.
    A state holding a nonzero value is a weight of the model, a learned initial state (``nn.Parameter`` h0, which
    both exporters write as an initializer read only there), and stays a parameter (a registered nonzero buffer
    looks the same, and is counted as one too); one whose values the proto does not hold (external, or dropped)
    is taken for the exporter's zeros, as is an all-zero learned state."""
    states = _read_only_at(graph, weights, RECURRENT_STATE_INPUTS)
    return frozenset(t.name for t in weights if t.name in states and not _holds_nonzero(t))


def _holds_nonzero(t) -> bool:
    """Whether the proto holds the tensor ``t``'s values and one of them is not zero (False where it holds none:
    external data, or values dropped for shape inference)."""
    import onnx
    from onnx import numpy_helper

    if t.data_location == onnx.TensorProto.EXTERNAL:
        return False
    try:
        return bool(numpy_helper.to_array(t).any())
    except Exception:  # noqa: BLE001 - no values held (their fields cleared): unknown, not nonzero
        return False


#: The inputs of the quantised ops that carry values (an activation, a weight, a bias, as the op's float form takes
#: them); every other input of theirs is a quantisation scale or zero point (onnxruntime's ContribOperators.md for
#: its ``com.microsoft`` ones: :func:`parameter_names`)
QUANTISED_VALUE_INPUTS: dict[str, tuple[int, ...]] = {
    "QuantizeLinear": (0,), "DequantizeLinear": (0,), "DynamicQuantizeLinear": (0,), "QLinearMatMul": (0, 3),
    "QLinearConv": (0, 3, 8), "QGemm": (0, 3, 6), "MatMulInteger": (0, 1), "ConvInteger": (0, 1),
    "DynamicQuantizeMatMul": (0, 1, 4), "QLinearAdd": (0, 3), "QLinearMul": (0, 3), "QLinearSigmoid": (0,),
    "QLinearLeakyRelu": (0,), "QLinearSoftmax": (0,), "QLinearAveragePool": (0,), "QLinearGlobalAveragePool": (0,),
    "QLinearReduceMean": (0,)}
#: TensorProto element types a parameter may have without a quantised op reading it as a value: floating point
#: (8- and 4-bit floats included) and integers of 8 bits or fewer (a quantised weight, an 8-bit embedding table)
_PARAMETER_TYPES = frozenset({1, 10, 11, 16, 17, 18, 19, 20, 23, 24, 2, 3, 21, 22, 25, 26})


def parameter_names(graph, weights: list, buffers: frozenset[str] = frozenset()) -> frozenset[str]:
    """The names of the ``weights`` (:func:`all_initializers` of ``graph``) that are the model's parameters: not
    ``buffers`` (:func:`buffer_names`), not a quantisation scale or zero point (read only at the inputs of the
    quantised ops that :data:`QUANTISED_VALUE_INPUTS` does not list), and either of a :data:`_PARAMETER_TYPES` type
    or read by a quantised op as a value (a quantised bias: int32). An int64 shape constant (a Reshape's target,
    an index) is none: the dynamo exporter's were counted as parameters (68,161 for a 68,160-parameter model), as
    were a quantised model's scales and zero points. A quantised model's parameters are its float model's: the
    8-bit weights and their biases."""
    import onnx

    names = {t.name for t in weights}
    quant_param, other, valued = set(), set(), set()

    def walk(g) -> None:
        for node in g.node:
            slots = QUANTISED_VALUE_INPUTS.get(node.op_type) \
                if node.domain in ("", "ai.onnx", "com.microsoft") else None
            for i, x in enumerate(node.input):
                if x in names:
                    (other if slots is None else valued if i in slots else quant_param).add(x)
            for a in node.attribute:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else
                            list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []):
                    walk(sub)

    walk(graph)
    left_out = buffers | (quant_param - other - valued)
    return frozenset(t.name for t in weights
                     if t.name not in left_out and (t.data_type in _PARAMETER_TYPES or t.name in valued))


#: Ops that read a weight: a ``Constant`` that reaches one of their inputs is a weight (:func:`_constant_weights`)
_WEIGHT_READERS = frozenset({*MAC_OPS, "BatchNormalization", "LayerNormalization", "InstanceNormalization",
                             "GroupNormalization", "Gather"})


def _constant_weights(graph) -> list:
    """The weights an exporter wrote as ``Constant`` nodes rather than initializers (tf2onnx, onnxscript, a graph
    built by hand), as data-less tensors named by the Constant's output: a floating-point Constant of more than one
    element (or an int8 one, quantized) that reaches an input of a product, a convolution, a normalisation or a
    lookup's table (:data:`_WEIGHT_READERS`), directly or through ops on constants alone (a Transpose, a
    DequantizeLinear). A Resize's scales, a scalar or a constant an activation is multiplied by are not weights,
    as PyTorch's exports of them show."""
    import onnx

    cands: dict[str, Any] = {}
    for n in graph.node:
        if n.op_type != "Constant" or n.domain not in ("", "ai.onnx") or not n.output or not n.output[0]:
            continue
        for a in n.attribute:
            if a.name == "value" and a.t.data_type in _FLOAT_TYPES | {2, 3} and prod(a.t.dims) > 1:  # int8 quantized
                cands[n.output[0]] = onnx.TensorProto(name=n.output[0], dims=list(a.t.dims), data_type=a.t.data_type)
            elif a.name == "value_floats" and len(a.floats) > 1:
                cands[n.output[0]] = onnx.TensorProto(name=n.output[0], dims=[len(a.floats)],
                                                      data_type=onnx.TensorProto.FLOAT)
    if not cands:
        return []
    inits = {t.name for t in graph.initializer}
    # a tensor of constants alone -> the candidates it comes from
    source: dict[str, set[str]] = {o: ({o} if o in cands else set()) for n in graph.node if n.op_type == "Constant"
                                   for o in n.output[:1] if o}
    used: set[str] = set()
    for n in graph.node:
        ins = [x for x in n.input if x]
        if n.op_type in _WEIGHT_READERS:
            for x in (n.input[:1] if n.op_type == "Gather" else ins):  # a Gather's indices are not weights
                used |= source.get(x, set())
        elif n.op_type != "Constant" and ins and all(x in source or x in inits for x in ins):
            came = set().union(*(source.get(x, set()) for x in ins))
            if came:
                for o in n.output:
                    if o:
                        source[o] = came
    return [t for k, t in cands.items() if k in used]


def _folded_trip_counts(graph) -> dict[str, int]:
    """name -> value of the trip counts of ``graph``'s Loops that its shape arithmetic computes from shapes
    shape inference knows (a scripted ``for t in range(x.shape[0])`` exports ``Shape -> Gather``), folded with
    numpy (:mod:`perfpredict.features.shape_folding`); {} where none is."""
    from perfpredict.features.shape_folding import _fold

    trips = {n.input[0] for n in graph.node if n.op_type == "Loop" and n.input and n.input[0]}
    trips -= set(_scalar_constants(graph))
    if not trips:
        return {}
    folded = _fold(graph, {})  # in graph order: each value from the ones before it
    return {k: int(v.reshape(-1)[0]) for k, v in folded.items() if k in trips and v.size == 1}


def _loop_trips(node, body, consts: dict[str, int]) -> tuple[int, str | None]:
    """(how many times a ``Loop`` runs its body, a note where that is not certain): its trip count when that
    is a constant (an upper bound when its condition is computed, with a note); else once, with a note.
    ``consts``: the scalar constants of the graphs walked so far, the body's included."""
    trips = consts.get(node.input[0]) if node.input and node.input[0] else None
    if trips is None:
        return 1, ("a Loop's trip count is computed at run time: its body is counted once, so the MACs, activation "
                   "bytes and kernels of its other iterations are missing")
    trips = max(int(trips), 0)
    # it runs exactly ``trips`` times when its condition starts true and the body passes it through unchanged
    cond_in = node.input[1] if len(node.input) > 1 else ""
    starts_true = not cond_in or consts.get(cond_in) == 1
    body_cond = body.output[0].name if body.output else ""
    passed = {body.input[1].name} if len(body.input) > 1 else set()
    for n in body.node:
        if n.op_type == "Identity" and n.input and n.input[0] in passed:
            passed.update(n.output)
    if starts_true and (body_cond in passed or consts.get(body_cond) == 1):
        return trips, None
    return trips, (f"a Loop's body is counted {trips} times, its trip count, but its condition may end it "
                   "sooner: the counts are an upper bound")


def _scan_trips(node, shapes: _Shapes, opset: int) -> tuple[int, str | None]:
    """(how many times a ``Scan`` runs its body: the length of its first scanned input along its scan axis, a
    note where that is unknown and the body is counted once)."""
    n_scan = int(_attr(node, "num_scan_inputs", 0) or 0)
    if opset >= 9 and 0 < n_scan <= len(node.input):
        axes = list(_attr(node, "scan_input_axes", None) or [0] * n_scan)
        shp = shapes.shape(node.input[len(node.input) - n_scan])
        if shp is not None and axes and -len(shp) <= axes[0] < len(shp):
            return int(shp[axes[0]]), None
    return 1, ("a Scan's sequence length is not known: its body is counted once, so the MACs, activation bytes "
               "and kernels of its other iterations are missing")


def _static_dims(t) -> list[int] | None:
    """The dimensions of a tensor type, or None when any is unknown or symbolic."""
    if not t.HasField("shape") or not all(d.HasField("dim_value") for d in t.shape.dim):
        return None
    return [int(d.dim_value) for d in t.shape.dim]


def _seed_loop_bodies(model_proto: Any, inferred: Any) -> Any | None:
    """A copy of ``model_proto`` whose main graph's ``Loop`` bodies declare their loop-carried inputs at the
    static shapes the Loop is given, or None where none needs it. ONNX's shape inference does not carry those
    shapes into the body (they may change from one iteration to the next), so the body's ops would keep the
    shapes it declares: none, or symbolic ones that the batch fixed on the graph's inputs does not reach. The
    shapes are then the first iteration's (a note says when the body changes them)."""
    if not any(n.op_type == "Loop" for n in model_proto.graph.node):
        return None
    from perfpredict.features.shape_folding import _known_shapes

    known = _known_shapes(inferred.graph)
    m = type(model_proto)()
    m.CopyFrom(model_proto)
    changed = False
    for node in m.graph.node:
        body = next((a.g for a in node.attribute if a.name == "body"), None) if node.op_type == "Loop" else None
        if body is None:
            continue
        seeded = False
        for outer, inner in zip(node.input[2:], body.input[2:]):
            t = inner.type.tensor_type
            if outer in known and t.HasField("elem_type") and _static_dims(t) is None:
                t.ClearField("shape")
                for size in known[outer]:
                    t.shape.dim.add().dim_value = size
                seeded = True
        if seeded:  # what the body declared from its old input shapes is inferred again
            del body.value_info[:]
            for vi in body.output:
                vi.type.tensor_type.ClearField("shape")
            changed = True
    return m if changed else None


def analyze_onnx(model_proto: Any, *, run_for_shapes: bool = True,
                 trained: Callable[[str], bool] | None = None,
                 initial_states: frozenset[str] | None = None) -> GraphStats:
    """Shape-infer ``model_proto`` and compute :class:`GraphStats` over the whole graph.

    ONNX shape inference loses dimensions that flow through computed shapes (e.g. the Reshapes of
    ``nn.MultiheadAttention``). With ``run_for_shapes`` the values it leaves unknown are resolved by executing
    the graph once in onnxruntime on zero-filled inputs of the declared (static) input shapes (exact, and what a
    model file's own export gets); without, by folding the graph's integer shape arithmetic
    (:mod:`perfpredict.features.shape_folding`, nothing executed: an uploaded file's path). ``trained``: which
    floating-point initializers train, by name (None: every one), for the saved-for-backward count
    (:func:`saved_for_backward_bytes`). ``initial_states``: the initializers that are a recurrent op's zero
    initial state, left out of the weights (None: :func:`recurrent_initial_states` of ``model_proto``, which
    needs their values: a caller that dropped them passes what it read before).
    """
    import onnx

    from perfpredict.features.weightless import infer_shapes

    model_proto = inline_functions(model_proto)
    try:
        inferred = infer_shapes(model_proto)
    except Exception:  # noqa: BLE001 - inference is best-effort; unknown shapes are reported, not fatal
        inferred = model_proto
    else:
        seeded = _seed_loop_bodies(model_proto, inferred)
        try:
            if seeded is not None:
                model_proto, inferred = seeded, infer_shapes(seeded)
        except Exception:  # noqa: BLE001 - as above: the bodies keep the shapes they declare
            pass
    model_proto, inferred = _with_qgemm_shapes(model_proto, inferred)
    g = inferred.graph
    shapes = _Shapes()
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        shapes.add_value_info(vi)
    unknown = [o for n in g.node for o in n.output if o and shapes.shape(o) is None]
    if unknown and run_for_shapes:
        for name, (dims, size, is_float) in _runtime_shapes(inferred, unknown).items():
            shapes.info[name] = (dims, size)
            if is_float:
                shapes.floats.add(name)
    elif unknown:
        # a graph that is not run (an upload): its shape arithmetic folded with numpy, small integer tensors only
        from perfpredict.features.shape_folding import folded_value_infos

        for vi in folded_value_infos(model_proto, inferred if inferred is not model_proto else None):
            if shapes.shape(vi.name) is None:
                shapes.add_value_info(vi)
    init_names = set()
    stats = GraphStats()
    for init in g.initializer:
        shapes.add_initializer(init)
        init_names.add(init.name)
    # the subgraphs' weights too (their shapes are added as the walk reaches them)
    weights_anywhere = all_initializers(g)
    # the main graph's weights a Gather may read (its Constant-node weights too), for ``lookup_param_bytes``
    main_weights = list(g.initializer) + _constant_weights(g)
    table_names = {t.name for t in main_weights}
    # a recurrent op's zero initial state, folded into an initializer by the dynamo exporter, is no weight
    states = recurrent_initial_states(g, weights_anywhere) if initial_states is None else initial_states
    stats.initializer_bytes = sum(tensor_nbytes(t) for t in weights_anywhere if t.name not in states)
    buffers = buffer_names(g, weights_anywhere)
    stats.buffer_bytes = sum(tensor_nbytes(t) for t in weights_anywhere if t.name in buffers)

    unknown: Counter = Counter()
    top = _Tally()
    # Graph inputs that are not weights are activations too (the batch itself).
    for vi in g.input:
        if vi.name not in init_names:
            top.act_by_op["input"] += shapes.nbytes(vi.name) or 0

    # Weights used only as Gather's data input (embedding tables) vs. used any other way (read whole)
    gathered: set[str] = set()
    read_whole: set[str] = set()
    consts: dict[str, int] = {}  # scalar integer and boolean constants: a Loop's trip count and condition
    opset = next((o.version for o in inferred.opset_import if o.domain in ("", "ai.onnx")), 0)
    notes: dict[str, None] = {}
    foreign: dict[str, None] = {}  # ops of other domains than ONNX's whose MACs are not counted
    # how each control-flow node runs, for :class:`_Unrolled`, by where it is (:func:`_where`): sibling subgraphs
    # may reuse a name, so a node's outputs do not say which one it is
    plan: dict[tuple, tuple[str, Any]] = {}
    attention_kept: dict[str, AttentionKept] = {}  # an Attention node's first output -> what it keeps

    def walk(graph, tally: _Tally, weights: set[str], main: bool = False, where: tuple = ()) -> None:
        if not main:  # a subgraph: its shapes (inferred in place), its own weights
            for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
                if shapes.shape(vi.name) is None:
                    shapes.add_value_info(vi)
            for init in graph.initializer:
                shapes.add_initializer(init)
            weights = weights | {i.name for i in graph.initializer}
        consts.update(_scalar_constants(graph))
        # weights and what the exporter computes from weights alone (sliced, transposed): no kernel at run time,
        # and read as weights by the kernels that use them
        weightish = _weight_derived([(n.op_type, list(n.input), list(n.output)) for n in graph.node], weights)
        absorbed, fused_io = _erf_gelus(graph.node, weightish, shapes)
        for idx, node in enumerate(graph.node):
            macs_before = sum(tally.macs.values()) if main else 0  # the main graph's node's start (step_nodes)
            tally.ops[node.op_type] += 1
            for i, name in enumerate(node.input):
                if name in table_names:
                    (gathered if node.op_type == "Gather" and i == 0 else read_whole).add(name)
            subgraphs = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
            if subgraphs:
                control_flow(node, subgraphs, tally, weightish, _where(where, idx))
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPHS:
                    for j, sub in enumerate(a.graphs):
                        walk(sub, tally, weightish, where=_where(where, idx, a.name, j))
            if main:  # floating-point outputs, or of unknown type: what a gradient can flow through
                floats = tuple(o for o in node.output if o and (shapes.elem_float(o) or o not in shapes.info))
                step_nodes.append((node.op_type, tuple(node.input), floats, bool(subgraphs) or any(
                    a.type == onnx.AttributeProto.GRAPHS for a in node.attribute), macs_before))
                if node.op_type in RECURRENT_OPS and len(node.input) > 2:  # W: [dirs, gates*H, I], R: [.., H]
                    w, r = shapes.shape(node.input[1]), shapes.shape(node.input[2])
                    if w and r and len(w) == 3 and len(r) == 3 and w[1] * w[2] + r[1] * r[2] > 0:
                        recurrent_shares[len(step_nodes) - 1] = r[1] * r[2] / (w[1] * w[2] + r[1] * r[2])
            if node.op_type == "Constant":
                continue
            for o in node.output:
                # the exporter's transposed or sliced weights are weights, not activations (as in the peak walk)
                if o and o not in weightish:
                    tally.act_by_op[node.op_type] += shapes.nbytes(o) or 0
            m = n_steps = None
            if node.domain not in ("", "ai.onnx") and (node.domain, node.op_type) not in CUSTOM_MAC_OPS:
                foreign[f"{node.domain}.{node.op_type}"] = None
            elif node.op_type in MAC_OPS or node.domain not in ("", "ai.onnx"):
                m = _node_macs(node, shapes)
                if m is None:
                    unknown[node.op_type] += 1
                else:
                    tally.macs[node.op_type] += m
            if node.op_type == "Attention" and node.domain in ("", "ai.onnx") and node.output and node.output[0]:
                att = _attention_kept(node, shapes)
                if att is not None:
                    attention_kept[node.output[0]] = att
            if node.op_type in RECURRENT_OPS:
                n_steps = _recurrent_steps(node, shapes)
                if n_steps is not None:
                    tally.steps[node.op_type] += n_steps
            if not (node.output and node.output[0] in absorbed):
                k = _kernel_node(node, shapes, weightish, m or 0, n_steps or 0)
                if k is not None:
                    if node.output and node.output[0] in fused_io:
                        k = KernelNode(k.cls, k.macs, fused_io[node.output[0]], k.weight_bytes, k.steps)
                    tally.kernels.append(k)

    def control_flow(node, subgraphs: dict, tally: _Tally, weights: set[str], at: tuple) -> None:
        """Count ``node``'s subgraphs as they run (:data:`CONTROL_FLOW_OPS`), or, for another op, each once."""
        if node.op_type in ("Loop", "Scan") and "body" in subgraphs:
            body = _Tally()
            walk(subgraphs["body"], body, weights, where=_where(at, "body"))
            trips, note = (_loop_trips(node, subgraphs["body"], consts) if node.op_type == "Loop"
                           else _scan_trips(node, shapes, opset))
            tally.add(body, trips)
            if node.op_type == "Loop" and any(
                    shapes.shape(i.name) not in (None, shapes.shape(o.name))
                    for i, o in zip(subgraphs["body"].input[2:], subgraphs["body"].output[1:])):
                notes["a Loop's loop-carried value changes shape from one iteration to the next: its body is "
                      "counted at the first iteration's shapes"] = None
            known = bool(node.input and node.input[0] in consts) if node.op_type == "Loop" else note is None
            if known and node.output:
                plan[at] = (node.op_type, trips)
            _loop_output_shapes(node, subgraphs["body"], trips if known else None, shapes)
        elif node.op_type == "If" and {"then_branch", "else_branch"} <= subgraphs.keys():
            branches = [_Tally(), _Tally()]
            walk(subgraphs["then_branch"], branches[0], weights, where=_where(at, "then_branch"))
            walk(subgraphs["else_branch"], branches[1], weights, where=_where(at, "else_branch"))
            chosen = max((0, 1), key=lambda i: (sum(branches[i].macs.values()), sum(branches[i].act_by_op.values())))
            tally.add(branches[chosen])
            if node.output:
                plan[at] = ("If", ("then_branch", "else_branch")[chosen])
            note = ("an If runs one of its two branches, chosen at run time: the counts take the branch with more "
                    "MACs and leave the other out")
        else:
            for sub in subgraphs.values():
                walk(sub, tally, weights)
            return
        if note:
            notes[note] = None

    consts.update(_folded_trip_counts(g))
    # the main graph's nodes with the MAC total at their start: a node's MACs (its subgraphs' with them) are the
    # step from there to the next node's start
    step_nodes: list[tuple] = []
    recurrent_shares: dict[int, float] = {}
    walk(g, top, init_names, main=True)
    ends = [r[-1] for r in step_nodes[1:]] + [sum(top.macs.values())]
    stats.step_nodes = [(op, ins, outs, int(end - start), sub) for (op, ins, outs, sub, start), end
                        in zip(step_nodes, ends)]
    stats.float_initializers = frozenset(t.name for t in main_weights
                                         if t.data_type in _FLOAT_TYPES and t.name not in states)
    stats.step_recurrent_shares = recurrent_shares
    lookup_only = gathered - read_whole  # a table tied to an output projection is read whole
    stats.lookup_param_bytes = int(sum(tensor_nbytes(t) for t in main_weights if t.name in lookup_only))
    stats.macs = int(sum(top.macs.values()))
    stats.macs_by_op = {k: int(v) for k, v in sorted(top.macs.items())}
    stats.activation_bytes = int(sum(top.act_by_op.values()))
    stats.activation_bytes_by_op = {k: int(v) for k, v in sorted(top.act_by_op.items()) if v}
    stats.recurrent_steps_by_op = {k: int(v) for k, v in sorted(top.steps.items())}
    stats.op_counts = {k: int(v) for k, v in sorted(top.ops.items()) if v}
    stats.num_nodes = int(sum(stats.op_counts.values()))
    stats.unknown_shape_ops = dict(unknown)
    stats.kernel_nodes = top.kernels
    # the peak-live and saved walks read the graph as it runs: its control flow unrolled
    unrolled = _Unrolled(plan)
    unrolled.add_main(g)
    for what in unrolled.left:
        notes[f"the peak-memory and saved-for-backward walks do not unroll {what}: the tensors inside it are not "
              "in them"] = None
    if foreign:
        notes[f"ops outside the ONNX standard ({', '.join(sorted(foreign)[:6])}"
              f"{', ...' if len(foreign) > 6 else ''}) are not counted: their MACs, if they do any, are missing"] = None
    stats.notes = list(notes)
    nodes = unrolled.nodes
    weights = {t.name for t in weights_anywhere} | unrolled.const
    orig = unrolled.orig

    def nbytes(name: str) -> int | None:  # an iteration's tensor has the shape of the subgraph's that it copies
        return shapes.nbytes(orig.get(name, name))

    seqs = _sequences(nodes)  # what both walks read of the graph's sequences
    nbytes = sequence_sizes(nodes, nbytes, seqs)

    stats.peak_live_activation_bytes = peak_live_activation_bytes(
        nodes, [vi.name for vi in g.input], [o.name for o in g.output], weights, nbytes, seqs)
    float_outputs = [o.name for o in g.output if o.type.tensor_type.elem_type in _FLOAT_TYPES]
    floats = {t.name for t in weights_anywhere if t.data_type in _FLOAT_TYPES}
    seeds = None if trained is None else {n for n in weights if orig.get(n, n) in floats and trained(orig.get(n, n))}
    stats.graph_saved_bytes = saved_for_backward_bytes(nodes, weights, nbytes, float_outputs, seeds,
                                                       lambda o: attention_kept.get(orig.get(o, o)))
    return stats


def _where(at: tuple, *steps) -> tuple:
    """Where a node or subgraph is in the model: ``at`` (the main graph: ``()``) and ``steps``, a node's index in
    its graph or a subgraph's attribute name. A plan's key (:class:`_Unrolled`): a subgraph may reuse a name its
    sibling uses (an If's two branches each with a node of output ``z``), so names do not say which node it is."""
    return (*at, *steps)


def _loop_output_shapes(node, body, trips: int | None, shapes: _Shapes) -> None:
    """Gives the outputs of a ``Loop`` or ``Scan`` of ``trips`` iterations (None: unknown) that shape inference
    left unknown (a Loop's, whose body declares a symbolic batch) the shapes its body gives them: a loop-carried
    value's last state, as its body outputs it (the first iteration's shape; the input's where it runs no
    iteration), a scan output's ``trips`` values stacked (where ``trips`` is known)."""
    b_in, b_out = [i.name for i in body.input], [o.name for o in body.output]
    if node.op_type == "Loop":
        n_state, first_in, first_out = len(b_in) - 2, 2, 1
        stack_axes: list[int] = []
    else:
        n_state = len(node.input) - int(_attr(node, "num_scan_inputs", 0) or 0)
        first_in, first_out = 0, 0
        stack_axes = list(_attr(node, "scan_output_axes", None) or [])
    for j, y in enumerate(node.output):
        if not y or shapes.shape(y) is not None:
            continue
        if j < n_state:
            src = (node.input[first_in + j] if trips == 0 and first_in + j < len(node.input)
                   else b_out[first_out + j] if first_out + j < len(b_out) else "")
            if not src or shapes.shape(src) is None:
                continue
            shapes.info[y] = shapes.info[src]
        else:
            src = b_out[first_out + j] if first_out + j < len(b_out) else ""
            per = shapes.shape(src) if src and trips is not None else None
            k = j - n_state
            axis = stack_axes[k] if k < len(stack_axes) else 0
            axis = axis + len(per) + 1 if per is not None and axis < 0 else axis
            if per is None or not 0 <= axis <= len(per):
                continue
            shapes.info[y] = ([*per[:axis], trips, *per[axis:]], shapes.info[src][1])
        if shapes.elem_float(src):
            shapes.floats.add(y)


class _Unrolled:
    """A graph's nodes ``(op type, inputs, outputs)`` as they run, for the peak-live and saved-for-backward walks:
    each ``Loop`` of constant trip count and ``Scan`` of known length (``plan``: the counting walk's
    ``(op, trips)`` by where the node is, :func:`_where`) unrolled into a copy of its body per iteration, an ``If``
    into the branch the counts took (``("If", "then_branch" or "else_branch")``), at any depth; what the explicitly
    unrolled graph would run:

    - each copy's tensors have fresh names (``orig``: fresh name -> the subgraph's name, whose shape it has);
      the tensors a subgraph reads from the graphs around it (weights, activations) are theirs, by name;
    - a loop-carried value is the previous iteration's output (the Loop's or Scan's input in the first); a
      Loop's iteration number and a Scan step's slice index are constants (``const``), its condition the
      previous iteration's (the Loop's, or a constant, in the first);
    - a Scan's iteration reads its scanned inputs' slices (a ``Gather`` of the step, as ``x[k]`` exports);
    - the node's outputs are an ``Identity`` of each loop-carried value's last state (of a branch's output)
      and a ``Concat`` of each scan output's per-iteration values (``torch.stack``).

    At most :data:`MAX_UNROLLED_NODES` node copies: a Loop or Scan past it, or not in ``plan`` (a trip count
    computed at run time, a Scan of unknown length), stays one node, its body's tensors not in the walks
    (``left``: what, for a note)."""

    def __init__(self, plan: dict[tuple, tuple[str, Any]]) -> None:
        self.plan = plan
        self.nodes: list[tuple[str, list[str], list[str]]] = []
        self.orig: dict[str, str] = {}
        self.const: set[str] = set()
        self.left: dict[str, None] = {}
        self._copies = 0
        self._n = 0

    @staticmethod
    def _subgraphs(node) -> dict[str, Any]:
        return {a.name: a.g for a in node.attribute if a.HasField("g")}

    def size(self, node, at: tuple) -> int | None:
        """How many nodes ``node`` (at ``at``: :func:`_where`) unrolls into, or None where it stays one."""
        how = self.plan.get(at) if node.op_type in CONTROL_FLOW_OPS and node.output else None
        if how is None:
            return None
        op, arg = how
        subs = self._subgraphs(node)
        if op == "If":
            return self._graph_size(subs[arg], _where(at, arg)) + len(node.output)
        per = self._graph_size(subs["body"], _where(at, "body")) + \
            (int(_attr(node, "num_scan_inputs", 0) or 0) if op == "Scan" else 0)
        return arg * per + len(node.output)

    def _graph_size(self, graph, at: tuple) -> int:
        return sum(self.size(n, _where(at, k)) or 1 for k, n in enumerate(graph.node))

    def add_main(self, graph) -> None:
        """Unrolls the main graph ``graph`` (its tensors keep their names)."""
        self._emit(graph.node, {}, None, within=False, at=())

    def _emit(self, nodes, scope, tag: str | None, within: bool, at: tuple) -> None:
        """Appends ``nodes``, their inputs named as in ``scope`` (a subgraph's name -> this copy's, the names of
        the graphs around it included), their outputs fresh names of copy ``tag`` added to it (None: kept). ``within``: inside an unrolled subgraph, whose size was
        counted already. ``at``: where ``nodes`` are (:func:`_where`)."""
        for k, node in enumerate(nodes):
            ins = [scope.get(x, x) if x else x for x in node.input]
            outs = [self._fresh(o, scope, tag) if o else o for o in node.output]
            if node.op_type not in CONTROL_FLOW_OPS:
                self.nodes.append((node.op_type, ins, outs))
                continue
            n = self.size(node, _where(at, k))
            if n is not None and (within or n <= MAX_UNROLLED_NODES - self._copies):
                self._copies += 0 if within else n
                self._unroll(node, ins, outs, scope, _where(at, k))
                continue
            self.nodes.append((node.op_type, ins, outs))
            if not self._subgraphs(node):
                continue
            if n is not None:
                self.left[f"{'an' if node.op_type == 'If' else 'a'} {node.op_type} of more than {MAX_UNROLLED_NODES} node copies"] = None
            elif node.op_type == "Loop":
                self.left["a Loop whose trip count is computed at run time"] = None
            elif node.op_type == "Scan":
                self.left["a Scan of unknown length"] = None
            else:
                self.left[f"an {node.op_type} without both its branches"] = None

    def _fresh(self, name: str, scope, tag: str | None) -> str:
        if tag is None:
            return name
        new = scope[name] = f"{name}@{tag}"
        self.orig[new] = self.orig.get(name, name)
        return new

    def _constant(self, name: str, scope, tag: str) -> str:
        new = self._fresh(name, scope, tag)
        self.const.add(new)
        return new

    def _unroll(self, node, ins: list[str], outs: list[str], scope, at: tuple) -> None:
        op, arg = self.plan[at]
        subs = self._subgraphs(node)
        if op == "If":
            self._n += 1
            inner = dict(scope)  # the names around the branch, and its own as it adds them
            branch = subs[arg]
            self._emit(branch.node, inner, str(self._n), within=True, at=_where(at, arg))
            for x, y in zip(branch.output, outs):
                self.nodes.append(("Identity", [inner.get(x.name, x.name)], [y]))
            return
        body = subs["body"]
        b_in, b_out = [i.name for i in body.input], [o.name for o in body.output]
        if op == "Loop":
            n_state, n_scanned = len(b_in) - 2, 0
            state, cond = ins[2:], ins[1] if len(ins) > 1 else ""
        else:
            n_scanned = int(_attr(node, "num_scan_inputs", 0) or 0)
            n_state = len(ins) - n_scanned
            state, cond = ins[:n_state], ""
        stacked: list[list[str]] = [[] for _ in outs[n_state:]]
        for k in range(arg):
            self._n += 1
            tag = str(self._n)
            inner = dict(scope)
            if op == "Loop":
                self._constant(b_in[0], inner, tag)
                inner[b_in[1]] = cond or self._constant(b_in[1], inner, tag)
                inner.update(zip(b_in[2:], state))
            else:
                inner.update(zip(b_in[:n_state], state))
                for x, b in zip(ins[n_state:], b_in[n_state:]):
                    step = self._constant(f"{b}#step", inner, tag)
                    self.nodes.append(("Gather", [x, step], [self._fresh(b, inner, tag)]))
            self._emit(body.node, inner, tag, within=True, at=_where(at, "body"))
            got = [inner.get(x, x) for x in b_out]
            if op == "Loop":
                cond, got = got[0] if got else "", got[1:]
            state = got[:n_state]
            for s, x in zip(stacked, got[n_state:]):
                s.append(x)
        for x, y in zip(state, outs):
            self.nodes.append(("Identity", [x], [y]))
        for s, y in zip(stacked, outs[n_state:]):
            self.nodes.append(("Concat", s, [y]))


#: ONNX element types of floating-point tensors (FLOAT, FLOAT16, DOUBLE, BFLOAT16).
_FLOAT_TYPES = frozenset({1, 10, 11, 16})
#: Ops whose output is a view of their first input in PyTorch (no new memory).
VIEW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"})
#: Ops that produce a bias-add's input in one fused call in PyTorch (``addmm``, a convolution's bias).
_BIAS_FUSED_PRODUCERS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})
#: Gates of a recurrent op: it holds gates x its output's bytes of pre-activations while it runs.
RECURRENT_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


#: What autograd keeps for the backward pass, by ONNX op (PyTorch's derivative formulas): the first
#: activation input (a convolution's or linear layer's input for the weight gradient, a normalisation's
#: input, GELU's input, a max-pool's input and its int64 indices, an average pool's input (its backward reads
#: it for the shape and padding; a global average pool is a mean, which keeps nothing), and the input of the piecewise
#: activations: ReLU6/Hardtanh (``Clip``), Hardswish and Hardsigmoid keep it even with ``inplace=True``,
#: LeakyReLU and ELU unless in-place, which a graph does not show) ...
_SAVES_FIRST_INPUT = frozenset({"Conv", "ConvTranspose", "Gemm", "BatchNormalization", "LayerNormalization",
                                "InstanceNormalization", "GroupNormalization", "Gelu", "MaxPool", "AveragePool", "Pow",
                                "Sqrt",
                                "Clip", "HardSwish", "HardSigmoid", "LeakyRelu", "Elu"})
#: ... the activation inputs of a product: each, when two activations meet (each is needed for the other's
#: gradient), or the one activation when the other factor is a weight (its gradient needs the activation);
#: times a constant scalar keeps nothing ...
_SAVES_ACTIVATION_INPUTS = frozenset({"MatMul", "Mul", "Div", "Einsum"})
#: ... or the output (functions whose derivative is written in their result).
_SAVES_OUTPUT = frozenset({"Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Exp"})
#: What a recurrent op keeps besides its input and its output, in units of its output's bytes (all steps,
#: every direction), as PyTorch 2.13's CPU autograd keeps it (measured, ``tests/test_graph_saved.py``; 48-128
#: hidden units, 16-64 steps, one or two layers): an LSTM's oneDNN workspace (gates, cell and hidden states of
#: every step) is 15.4-15.9x its output, 16x with the final states; a GRU, run as unrolled cells, keeps
#: 7.5-8x with its output (gates, reset products, every step's state), a tanh RNN 1.5-2x. These are the
#: kernels the exact count (:mod:`perfpredict.features.saved`) follows; cuDNN's reserve space is another size.
RECURRENT_SAVED_PER_OUTPUT = {"LSTM": 16.0, "GRU": 7.0, "RNN": 1.0}
#: oneDNN sizes an LSTM's workspace states by the wider of its input and its hidden state, so an LSTM whose
#: input is r > 1 times wider than its hidden state (every layer above the first of a bidirectional LSTM
#: reads 2 x hidden; a wide embedding) keeps this many more output-bytes per unit of r - 1 (measured: r = 2
#: keeps 22.5x, r = 4 36.8x its output instead of 16.5x). r is read off the weights: W is [D, 4H, I] and R
#: is [D, 4H, H], so bytes(W) / bytes(R) = I / H.
LSTM_WORKSPACE_PER_INPUT_RATIO = 6.5
#: Ops that are views in PyTorch when it comes to what a saved tensor shares storage with.
_STORAGE_VIEW_OPS = VIEW_OPS | {"Transpose", "Slice", "Split", "Expand"}


def _weight_derived(nodes: list[tuple[str, list[str], list[str]]], init_names: set[str]) -> set[str]:
    """The initializers and every tensor computed from weights and constants alone (the exporter's transposed
    or sliced weights: constant-folded, never activations), for nodes in graph order."""
    const = set(init_names)
    for op, ins, outs in nodes:
        if op == "Constant" or all(x in const for x in ins if x):
            const.update(o for o in outs if o)
    return const


def _operand_groups(op: str, ins: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The inputs of a MAC node whose gradients each cost about its forward MACs again: the two operands of a
    product or a convolution (a bias's gradient is a reduction), every operand of an Einsum, a recurrent op's
    input and its weights together, an Attention's inputs together."""
    if op in RECURRENT_OPS:
        return [ins[:1], ins[1:3]]
    if op == "Einsum":
        return [(x,) for x in ins]
    if op == "Attention":
        return [ins]
    return [ins[:1], ins[1:2]]


def step_work(stats: GraphStats, trained) -> float:
    """The MAC-weighted work of a training step of the graph analysed in ``stats`` when the main graph's
    floating-point initializers for which ``trained(name)`` holds are the weights that train: each MAC node costs
    its forward MACs F, and F again for each operand (:func:`_operand_groups`) that needs a gradient, a trained
    weight (or a tensor computed from one: a transposed weight) or an activation that a trained weight lies
    upstream of. Autograd computes no weight gradient for a frozen weight, and no input gradient where there is
    nothing upstream to send it to, so a frozen backbone under a trained head costs about F(backbone) + 3 F(head)
    where training every weight costs about 3 F. A recurrent op whose weights train but whose input needs no
    gradient costs its recurrence's share of F more (:attr:`GraphStats.step_recurrent_shares`): the gradient
    still runs back through its hidden state at every step, and only the input's own product is skipped. A node
    that runs subgraphs (a Loop, an If) is counted 3 F, and its outputs need a gradient wherever any weight
    trains (its bodies' weights are not followed)."""
    grad = {n for n in stats.float_initializers if trained(n)}
    anything_trains = bool(grad)
    work = 0
    for i, (op, ins, outs, macs, runs_subgraphs) in enumerate(stats.step_nodes):
        if runs_subgraphs:
            work += 3 * macs
            flows = anything_trains
        else:
            if macs:
                needs = [any(x in grad for x in g if x) for g in _operand_groups(op, ins)]
                work += macs * (1 + sum(needs))
                if op in RECURRENT_OPS and needs == [False, True]:  # the recurrence through time, still run
                    work += macs * stats.step_recurrent_shares.get(i, 0.0)
            flows = any(x in grad for x in ins if x)
        if flows:
            grad.update(outs)
    return work


class _Aliases(dict):
    """Tensor name -> the tensor whose storage it shares (a view, a fused result)."""

    def root(self, name: str) -> str:
        while name in self:
            name = self[name]
        return name


def _sequences(nodes: list[tuple[str, list[str], list[str]]]) -> dict[str, tuple[str | None, list[str], bool]]:
    """Each sequence value of nodes in graph order (their control flow unrolled, so a sequence a Loop appends to
    once per iteration is one value per iteration) as (the sequence it is made from or None, the tensors it adds,
    whether it holds exactly its source's tensors and those): ``SequenceEmpty`` adds none, ``SequenceConstruct``
    its inputs, ``SequenceInsert`` the tensor inserted (wherever it goes), ``SplitToSequence`` its input (the
    pieces are views of it, as ``torch.split`` gives them), an ``Identity`` none; ``SequenceErase`` holds its
    source's tensors but one (not exactly: which one is not known). A sequence another op makes (a Loop left
    rolled, ``SequenceMap``) is not known, nor one made from it. PyTorch holds a list's tensors by reference:
    a sequence's bytes are its tensors', alive as long as it is."""
    seqs: dict[str, tuple[str | None, list[str], bool]] = {}
    for op, ins, outs in nodes:
        out = outs[0] if outs and outs[0] else None
        src = ins[0] if ins and ins[0] in seqs else None
        if out is None:
            continue
        if op == "SequenceEmpty":
            seqs[out] = (None, [], True)
        elif op == "SequenceConstruct":
            seqs[out] = (None, [x for x in ins if x], True)
        elif op == "SplitToSequence" and ins and ins[0]:
            seqs[out] = (None, [ins[0]], True)
        elif op == "SequenceInsert" and src is not None:
            seqs[out] = (src, [x for x in ins[1:2] if x], seqs[src][2])
        elif op in ("Identity", "SequenceErase") and src is not None:
            seqs[out] = (src, [], seqs[src][2] and op == "Identity")
    return seqs


def sequence_sizes(nodes: list[tuple[str, list[str], list[str]]], nbytes, seqs: dict | None = None):
    """``nbytes`` (a tensor's size, or None) with the sizes static shapes leave out but the parts give: a
    ``ConcatFromSequence``'s output is as large as the tensors of its sequence (:func:`_sequences`) together,
    its new axis or not (shape inference cannot say how long a sequence grows), and a ``Concat``'s as its
    inputs together (a Scan output stacked from such values). ``seqs``: :func:`_sequences` of ``nodes``, where
    the caller has it."""
    if seqs is None:
        seqs = _sequences(nodes)
    held: dict[str, int | None] = {}  # a sequence's tensors' bytes
    found: dict[str, int] = {}
    for op, ins, outs in nodes:  # in graph order: a part's size is found before the whole's
        out = outs[0] if outs and outs[0] else None
        if out in seqs:
            src, added, exact = seqs[out]
            sizes = [held.get(src) if src else 0] + [found.get(x, nbytes(x)) for x in added]
            held[out] = sum(sizes) if exact and None not in sizes else None  # type: ignore[arg-type]
        if out is None or op not in ("Concat", "ConcatFromSequence") or nbytes(out) is not None:
            continue
        n = (held.get(ins[0]) if ins else None) if op == "ConcatFromSequence" else None
        if op == "Concat":
            sizes = [found.get(x, nbytes(x)) for x in ins if x]
            n = None if None in sizes else sum(sizes)  # type: ignore[arg-type]
        if n is not None:
            found[out] = n

    def size(name: str) -> int | None:
        n = nbytes(name)
        return found.get(name) if n is None else n

    return size


def saved_for_backward_bytes(nodes: list[tuple[str, list[str], list[str]]], init_names: set[str], nbytes,
                             loss_inputs: Sequence[str] = (), trained: set[str] | None = None,
                             attention_kept: Callable[[str], AttentionKept | None] | None = None) -> int:
    """The activation bytes a training step's backward pass would keep, read off a forward graph by per-op
    rules (:data:`_SAVES_FIRST_INPUT`, :data:`_SAVES_ACTIVATION_INPUTS`, :data:`_SAVES_OUTPUT`), each tensor
    counted once however many ops keep it, at the size of the storage it shares (a saved view keeps its
    whole base alive; an expanded tensor is its small source). A recurrent op keeps its input, its output and
    :data:`RECURRENT_SAVED_PER_OUTPUT` x its output (every step's gates and states; an LSTM reading a wider
    input than its hidden state more, :data:`LSTM_WORKSPACE_PER_INPUT_RATIO`); a max-pool keeps int64
    indices, twice its float output; a layer norm its per-row mean and 1/std; the exporter's GELU (``Erf``)
    and SiLU (``x * Sigmoid(x)``) keep only
    their input, as PyTorch's fused functions do. The loss is part of a training step's forward: for each of
    ``loss_inputs`` (the graph's floating-point outputs) it keeps a tensor of that size (cross-entropy its
    log-softmax, a squared error the difference), which a language model's logits make large. Weights are
    not counted (the parameter term has them).

    This is the count an ONNX file alone can give (the exact one, :mod:`perfpredict.features.saved`, runs the model).
    What the graph cannot show is left out: dropout masks (an eval-mode export has no Dropout), attention kernels that
    keep less than their unfused ops (``scaled_dot_product_attention`` fused on CUDA, and on the CPU without attention
    dropout: a GPT-style decoder's rule count is 1.3x autograd's), and whether an activation ran in place (LeakyReLU
    and ELU then keep their output instead of their input: one tensor fewer).

    An ONNX ``Attention`` node (opset 23; the dynamo exporter writes it for ``scaled_dot_product_attention`` at
    that opset) keeps what the rules give its decomposed form, where the other exporters' graphs have it: its
    query and key (scaled: tensors of their own), its value and the attention probabilities, as
    ``attention_kept(its first output)`` gives them (:func:`_attention_kept`: the key and value repeated to the
    query's heads and past positions; None: unknown, the probabilities not counted).

    ``trained``: the weights that train (None: every one). Autograd records no node, and so keeps nothing, for
    an op none of whose inputs needs a gradient (a trained weight, or a tensor a trained weight lies upstream
    of, as :func:`step_work` follows them): a frozen backbone under a trained head keeps only the head's
    tensors, and the loss keeps its tensor only when a gradient reaches it. An op that does record (a frozen
    layer above a trained one) is counted as when every weight trains.
    """
    const = _weight_derived(nodes, init_names)
    grad = None if trained is None else set(trained)
    alias = _Aliases()
    root = alias.root
    producer = {o: (op, ins) for op, ins, outs in nodes for o in outs if o}
    consumers: dict[str, list[tuple[str, list[str]]]] = {}
    for op, ins, _ in nodes:
        for x in {x for x in ins if x}:
            consumers.setdefault(x, []).append((op, ins))
    kept: dict[str, int] = {}
    #: tensors inside an exported GELU (erf(x / √2) + 1) or SiLU (sigmoid(x) in x * sigmoid(x)): PyTorch's
    #: fused functions keep only their input x
    inner: set[str] = set()

    def size(x: str) -> int:
        return nbytes(root(x)) or nbytes(x) or 0

    for op, ins, outs in nodes:
        real = [x for x in ins if x]
        records = grad is None or any(x in grad for x in real)
        if grad is not None and records:
            grad.update(o for o in outs if o)
        if op == "Constant" or all(x in const for x in real):
            continue
        acts = [x for x in real if x not in const]
        out = outs[0] if outs and outs[0] else None
        if op in _STORAGE_VIEW_OPS and out and ins[0] not in const:
            alias[out] = root(ins[0])
        if not records:
            continue
        if op == "Erf" and out:  # the exporter's GELU: x / √2 -> Erf -> + 1 -> × x -> × 0.5
            pop, pins = producer.get(acts[0], ("", [])) if acts else ("", [])
            gelu_in = next((x for x in pins if x and x not in const), None) if pop == "Div" else None
            if gelu_in is not None:
                kept[root(gelu_in)] = size(gelu_in)
            inner.add(out)
            continue
        if (op == "Sigmoid" and out and acts and consumers.get(out)
                and all(c == "Mul" and acts[0] in cins for c, cins in consumers[out])):
            inner.add(out)  # SiLU: the Mul keeps x
            continue
        if op in ("Add", "Sub") and out and any(x in inner for x in acts):
            inner.add(out)
            continue
        if op in _SAVES_FIRST_INPUT and acts:
            kept[root(acts[0])] = size(acts[0])
            if op == "MaxPool" and out:
                kept[f"{out}#indices"] = 2 * (nbytes(out) or 0)
            scale_bytes = nbytes(ins[1]) if op == "LayerNormalization" and len(ins) > 1 and ins[1] else None
            if scale_bytes and out:  # its mean and 1/std: two floats per normalised row (input / scale)
                kept[f"{out}#stats"] = 8 * (nbytes(acts[0]) or 0) // scale_bytes
        elif op in _SAVES_ACTIVATION_INPUTS:
            # a weight, or a tensor computed from weights (the exporter's transposed matrix); not a scalar
            weights = [x for x in real if x in const and (nbytes(x) or 0) > 16]
            if len(acts) >= 2 or weights:
                kept.update({root(x): size(x) for x in acts if x not in inner})
        elif op in _SAVES_OUTPUT and out:
            kept[root(out)] = size(out)
        elif op == "Attention" and out:
            # as its decomposed form: the scores' MatMul keeps Q and K scaled (fresh tensors, whatever they are
            # views of), the output's MatMul the softmax's probabilities and V (a view keeps its base)
            att = attention_kept(out) if attention_kept else None
            if ins[0] and ins[0] not in const:
                kept[f"{out}#q"] = nbytes(ins[0]) or 0
            if len(ins) > 1 and ins[1] and ins[1] not in const:
                kept[f"{out}#k"] = att.key if att else nbytes(ins[1]) or 0
            if att and att.value:  # repeated to the query's heads, or after its past: a tensor of its own
                kept[f"{out}#v"] = att.value
            elif len(ins) > 2 and ins[2] and ins[2] not in const:
                kept[root(ins[2])] = size(ins[2])
            kept[f"{out}#probs"] = att.probs if att else 0
        elif op in RECURRENT_SAVED_PER_OUTPUT and out:
            kept[root(acts[0])] = size(acts[0])
            kept[root(out)] = size(out)
            per_output = RECURRENT_SAVED_PER_OUTPUT[op]
            w_bytes = nbytes(ins[1]) if len(ins) > 1 and ins[1] else None  # [D, 4H, I]
            r_bytes = nbytes(ins[2]) if len(ins) > 2 and ins[2] else None  # [D, 4H, H]
            if op == "LSTM" and w_bytes and r_bytes:  # input width / hidden width = I / H
                per_output += LSTM_WORKSPACE_PER_INPUT_RATIO * max(w_bytes / r_bytes - 1.0, 0.0)
            kept[f"{out}#steps"] = int(per_output * (nbytes(out) or 0))
    for y in loss_inputs:
        if grad is None or y in grad:
            kept[f"{y}#loss"] = nbytes(y) or 0
    return int(sum(kept.values()))


def peak_live_activation_bytes(nodes: list[tuple[str, list[str], list[str]]], graph_inputs: list[str],
                               graph_outputs: list[str], init_names: set[str], nbytes, seqs: dict | None = None) -> int:
    """The most activation bytes alive at once when ``nodes`` (op type, inputs, outputs; in graph order) run
    one after another, each tensor freed after its last consumer, as an eager runtime (PyTorch under no_grad)
    holds them. ``nbytes(name)`` is a tensor's size (None: unknown, counted as 0); ``seqs``: :func:`_sequences`
    of ``nodes``, where the caller has it.

    What PyTorch does and the exported graph spells differently is read its way:

    - tensors computed from weights and constants alone (the exporter's transposed or sliced weights) are
      weights, constant-folded, not activations;
    - view ops (:data:`VIEW_OPS`) alias their input; the input then lives as long as the view;
    - a bias ``Add`` right after a MatMul/Gemm/Conv with a constant operand is part of that op (``addmm``),
      so it allocates nothing;
    - a recurrent op holds its gates' pre-activations while it runs: gates (:data:`RECURRENT_GATES`) × its
      output's bytes, freed when it finishes;
    - a sequence holds its tensors as a Python list does (:func:`_sequences`): they live until it, and every
      sequence made from it, ends;
    - graph inputs live until their last use and graph outputs to the end.
    """
    const = _weight_derived(nodes, init_names)
    alias = _Aliases()
    root = alias.root
    producer = {o: op for op, _, outs in nodes for o in outs if o}
    for op, ins, outs in nodes:
        real = [x for x in ins if x]
        if op == "Constant" or all(x in const for x in real):
            continue
        elif op in VIEW_OPS and ins and ins[0] not in const and outs and outs[0]:
            alias[outs[0]] = root(ins[0])
        elif (op == "Add" and len(real) == 2 and outs and outs[0] and any(x in const for x in real)
              and any(producer.get(x) in _BIAS_FUSED_PRODUCERS for x in real)):
            alias[outs[0]] = root(next(x for x in real if producer.get(x) in _BIAS_FUSED_PRODUCERS))
    last_use: dict[str, int] = {}
    for i, (_, ins, _) in enumerate(nodes):
        for x in ins:
            if x and x not in const:
                last_use[root(x)] = i
    keep = {root(o) for o in graph_outputs}
    # a sequence holds its tensors (a list's references): they live until it, and every sequence made from it,
    # has ended (a graph output's to the end)
    if seqs is None:
        seqs = _sequences(nodes)
    reach = {s: len(nodes) if root(s) in keep else last_use.get(root(s), -1) for s in seqs}
    for s in reversed(seqs):  # graph order: a sequence after the one it is made from
        src = seqs[s][0]
        if src is not None:
            reach[src] = max(reach[src], reach[s])
    held = {root(x) for _, added, _ in seqs.values() for x in added if x not in const}
    for s, (_, added, _) in seqs.items():
        for x in added:
            if x not in const:
                last_use[root(x)] = max(last_use.get(root(x), -1), reach[s])
    freed_at: dict[int, set[str]] = {}  # the tensors a sequence held, by the node after which they go
    for k in held:
        freed_at.setdefault(last_use[k], set()).add(k)
    alive = {x: nbytes(x) or 0 for x in graph_inputs if x not in const}
    live = peak = sum(alive.values())
    for i, (op, ins, outs) in enumerate(nodes):
        if all(o in const for o in outs if o):
            continue
        for o in outs:
            if o and o not in alias and o not in alive:
                alive[o] = nbytes(o) or 0
                live += alive[o]
        scratch = RECURRENT_GATES.get(op, 0) * (nbytes(outs[0]) or 0) if outs and outs[0] else 0
        peak = max(peak, live + scratch)
        for k in {root(x) for x in (*ins, *outs) if x} | freed_at.get(i, set()):
            if k in alive and last_use.get(k, -1) <= i and k not in keep:
                live -= alive.pop(k)
    return int(peak)


_ORT_INPUT_DTYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
                     "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(bool)": "bool",
                     "tensor(uint8)": "uint8", "tensor(int8)": "int8"}


def _runtime_shapes(model_proto: Any, names: list[str]) -> dict[str, tuple[list[int], int, bool]]:
    """(shape, element size, is floating point) of ``names`` observed by running the graph in onnxruntime; {}
    if it cannot run.

    Weights held as external-data references without their data (a model over 2 GiB, see
    :mod:`perfpredict.features.onnx_export`) are fed as zero-filled inputs instead: shapes do not depend on
    weight values, and zero pages cost no memory until written. The bulk weights the proto holds reach
    onnxruntime from memory, as the same constant initializers (:mod:`perfpredict.features.weightless`): the
    proto it is given, serialised, does not carry them.
    """
    try:
        import numpy as np
        import onnx
        import onnxruntime as ort
        from onnx import helper

        from perfpredict.features.weightless import without_bulk_data

        m, bulk = without_bulk_data(model_proto)
        given = {t.name for _, t in bulk}
        external = [t for t in m.graph.initializer
                    if t.data_location == onnx.TensorProto.EXTERNAL and t.name not in given]
        if external:
            kept = [t for t in m.graph.initializer
                    if t.data_location != onnx.TensorProto.EXTERNAL or t.name in given]
            del m.graph.initializer[:]
            m.graph.initializer.extend(kept)
            inputs = {i.name for i in m.graph.input}
            m.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                                 for t in external if t.name not in inputs)
        have = {o.name for o in m.graph.output}
        for n in names:
            if n not in have:
                m.graph.output.append(helper.make_empty_tensor_value_info(n))
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.log_severity_level = 3
        values = [_ort_value(t) for _, t in bulk]  # over numpy arrays, which live until the session has copied them
        if values:
            opts.add_external_initializers([t.name for _, t in bulk], values)
        sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        del m, opts, values
        feeds = {}
        for i in sess.get_inputs():
            if any(not isinstance(d, int) for d in i.shape):
                return {}
            feeds[i.name] = np.zeros(i.shape, dtype=_ORT_INPUT_DTYPES.get(i.type, "float32"))
        outs = sess.run(names, feeds)
    except Exception:  # noqa: BLE001 - best effort: those values stay unknown and are reported
        return {}
    return {n: (list(o.shape), o.dtype.itemsize, o.dtype.kind == "f") for n, o in zip(names, outs)
            if hasattr(o, "shape")}


def _ort_value(tensor: Any) -> Any:
    """``tensor``'s data as an onnxruntime value of its ONNX type (bfloat16, which numpy lacks, included)."""
    import onnxruntime as ort
    from onnx import numpy_helper

    arr = numpy_helper.to_array(tensor)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(arr.view(f"u{arr.itemsize}"), tensor.data_type)


def _erf_gelus(nodes, weightish: set[str], shapes: _Shapes) -> tuple[set[str], dict[str, int]]:
    """GELUs the exporter wrote as ``x * 0.5 * (1 + erf(x / sqrt 2))``, which PyTorch runs as one kernel:
    (first outputs of the Div, Add and Muls around each Erf, which run no kernel of their own; the Erf's
    first output -> the bytes the fused kernel reads and writes)."""
    producer = {o: n for n in nodes for o in n.output if o}
    consumers: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            if i:
                consumers.setdefault(i, []).append(n)

    def only(name: str, op: str):
        c = consumers.get(name, [])
        return c[0] if len(c) == 1 and c[0].op_type == op else None

    def other(node, name: str) -> list[str]:
        return [i for i in node.input if i and i != name]

    absorbed: set[str] = set()
    io: dict[str, int] = {}
    for e in nodes:
        if e.op_type != "Erf" or not e.input or not e.output:
            continue
        d = producer.get(e.input[0])
        if d is None or d.op_type not in ("Div", "Mul") or len(d.input) != 2 or d.input[1] not in weightish:
            continue
        x = d.input[0]
        a = only(e.output[0], "Add")
        m1 = a and only(a.output[0], "Mul")
        m2 = m1 and only(m1.output[0], "Mul")
        if not (a and m1 and m2) or not all(i in weightish for i in other(a, e.output[0])):
            continue
        # the 0.5 and the x factors in either order
        factors = set(other(m1, a.output[0])) | set(other(m2, m1.output[0]))
        if x not in factors or not all(f == x or f in weightish for f in factors):
            continue
        absorbed.update({d.output[0], a.output[0], m1.output[0], m2.output[0]})
        io[e.output[0]] = (shapes.nbytes(x) or 0) + (shapes.nbytes(m2.output[0]) or 0)
    return absorbed, io


def _kernel_node(node, shapes: _Shapes, weightish: set[str], macs: int, steps: int) -> KernelNode | None:
    """The kernel ``node`` runs, or None for a view, a no-op, shape arithmetic (no floating-point output, no MACs) or
    arithmetic on weights and constants alone (``weightish``: folded by the exporter or views in PyTorch)."""
    if node.op_type in FREE_OPS or all(i in weightish for i in node.input if i):
        return None
    outs = [o for o in node.output if o]
    if not macs and all(o in shapes.info for o in outs) and not any(shapes.elem_float(o) for o in outs):
        return None  # shape arithmetic; a quantized product's integer output is a kernel's
    weights = [i for i in node.input if i in weightish]
    io = sum(shapes.nbytes(i) or 0 for i in node.input if i and i not in weightish) \
        + sum(shapes.nbytes(o) or 0 for o in outs)
    w = sum(shapes.nbytes(i) or 0 for i in weights)
    cls = kernel_class(node.op_type, int(_attr(node, "group", 1) or 1), len(weights),
                       bool(node.input) and node.input[0] in weightish)
    return KernelNode(cls, int(macs), int(io), int(w), int(steps))


def _attr(node, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _rnn_shape(node, shapes: _Shapes) -> tuple[int, int, list[int]] | None:
    """(sequence length, batch, W's shape ``[dirs, gates*H, I]``) of an ``LSTM``/``GRU``/``RNN`` node, or None
    when X or W has no known shape."""
    x, w = shapes.shape(node.input[0]), shapes.shape(node.input[1]) if len(node.input) > 1 else None
    if x is None or w is None or len(x) < 2 or not w:
        return None
    seq, batch = (x[1], x[0]) if int(_attr(node, "layout", 0)) == 1 else (x[0], x[1])
    return int(seq), int(batch), w


def _recurrent_steps(node, shapes: _Shapes) -> int | None:
    """Sequence length × directions of an ``LSTM``/``GRU``/``RNN`` node (None when X or W has no known shape)."""
    s = _rnn_shape(node, shapes)
    return None if s is None else s[0] * s[2][0]


def _node_macs(node, shapes: _Shapes) -> int | None:
    op = node.op_type
    ins = list(node.input)
    if node.domain not in ("", "ai.onnx"):
        return _custom_macs(node, shapes) if (node.domain, op) in CUSTOM_MAC_OPS else None
    if op in ("Conv", "ConvInteger", "QLinearConv"):  # W: input 1, QLinearConv's input 3 (after x's scale, zero)
        w, y = shapes.shape(ins[3 if op == "QLinearConv" else 1]), shapes.shape(node.output[0])
        if w is None or y is None:
            return None
        return prod(y) * w[1] * prod(w[2:])
    if op == "ConvTranspose":
        x, w = shapes.shape(ins[0]), shapes.shape(ins[1])
        if w is None or x is None:
            return None
        return prod(x) * w[1] * prod(w[2:])  # W: [C_in, C_out/groups, k...]
    if op == "Gemm":
        a, y = shapes.shape(ins[0]), shapes.shape(node.output[0])
        if a is None or y is None:
            return None
        k = a[0] if _attr(node, "transA", 0) else a[1]
        return prod(y) * k
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        a, y = shapes.shape(ins[0]), shapes.shape(node.output[0])
        if a is None or y is None:
            return None
        return prod(y) * a[-1]
    if op == "Einsum":
        eq = _attr(node, "equation")
        eq = eq.decode() if isinstance(eq, bytes) else eq
        in_shapes = [shapes.shape(i) for i in ins]
        if eq is None or any(s is None for s in in_shapes):
            return None
        lhs = eq.replace(" ", "").split("->")[0].split(",")
        # an index's size is its size in any operand where it is not 1 (size-1 dimensions broadcast); the
        # dimensions under "..." are indices too, aligned from the right across operands
        sizes: dict[Any, int] = {}
        for term, shp in zip(lhs, in_shapes):
            pre, ellipsis, post = term.partition("...")
            n_ell = len(shp) - len(pre) - len(post) if ellipsis else 0
            labels = [*pre, *(("...", n_ell - i) for i in range(n_ell)), *post]
            if n_ell < 0 or len(labels) != len(shp):
                return None
            for label, dim in zip(labels, shp):
                if sizes.get(label, 1) == 1:
                    sizes[label] = dim
        return prod(sizes.values())
    if op in RECURRENT_OPS:
        s, r = _rnn_shape(node, shapes), shapes.shape(ins[2])
        if s is None or r is None:
            return None
        seq, batch, w = s
        # W: [dirs, gates*H, I], R: [dirs, gates*H, H]
        return seq * batch * w[0] * (w[1] * w[2] + r[1] * r[2])
    if op == "Attention":
        q, k, v = (shapes.shape(i) for i in ins[:3])
        if q is None or k is None or v is None:
            return None
        past = _attention_past_len(node, shapes)  # a past key and value: S of them attended to first
        if len(q) == 4:  # [B, H, L, E], [B, Hkv, S, E], [B, Hkv, S, Ev]
            b, h, l_, e = q
            return b * h * l_ * (k[2] + past) * (e + v[3])
        # 3-D: [B, L, H*E], [B, S, Hkv*E], [B, S, Hkv*Ev]; heads cancel: B·L·S·(q_hidden + v_hidden·H/Hkv)
        qh = int(_attr(node, "q_num_heads", 1) or 1)
        kvh = int(_attr(node, "kv_num_heads", qh) or qh)
        return q[0] * q[1] * (k[1] + past) * (q[2] + v[2] * qh // max(kvh, 1))
    return None


class AttentionKept(NamedTuple):
    """What an ONNX ``Attention`` node's decomposed form keeps for backward beyond its query (bytes): the
    attention probabilities (batch x heads x L x S), the scaled key, and the value where it is a tensor of its own
    (0: the value itself, at its base). With fewer key/value heads than query heads (grouped-query attention) the
    decomposed form repeats the key and value to the query's heads, and with a past key and value it concatenates
    them first: S counts the past's positions, and both are then fresh tensors of that size."""

    probs: int
    key: int
    value: int


def _attention_kept(node, shapes: _Shapes) -> AttentionKept | None:
    """:class:`AttentionKept` of an ONNX ``Attention`` node (opset 23: Q, K, V, attn_mask, past_key, past_value;
    4-D ``[B, H, L, E]``, ``[B, Hkv, S, E]``, ``[B, Hkv, S, Ev]``, or 3-D ``[B, L, H*E]``, ``[B, S, Hkv*E]``,
    ``[B, S, Hkv*Ev]`` with ``q_num_heads`` and ``kv_num_heads``; a past ``[B, Hkv, P, E]``) at its query's
    element size: its decomposed form (MatMul, Softmax, MatMul, as the TorchScript exporter and the dynamo
    exporter below opset 23 write it) has the probabilities as the Softmax's output. None where the shapes are
    unknown."""
    ins = list(node.input) + [""] * 6
    q, k, v = (shapes.shape(i) if i else None for i in ins[:3])
    q_bytes = shapes.nbytes(ins[0]) if ins[0] else None
    if q is None or k is None or v is None or not q_bytes or not prod(q) or len(q) != len(k) or len(k) != len(v):
        return None
    if len(q) == 4:
        b, heads, l_, kv_heads, s, e, ev = q[0], q[1], q[2], k[1], k[2], k[3], v[3]
    elif len(q) == 3:
        heads = int(_attr(node, "q_num_heads", 1) or 1)
        kv_heads = int(_attr(node, "kv_num_heads", heads) or heads)
        b, l_, s, e, ev = q[0], q[1], k[1], k[2] // max(kv_heads, 1), v[2] // max(kv_heads, 1)
    else:
        return None
    s += _attention_past_len(node, shapes)
    elem = q_bytes // prod(q)
    fresh_value = heads != kv_heads or s != (k[2] if len(k) == 4 else k[1])
    return AttentionKept(b * heads * l_ * s * elem, b * heads * s * e * elem,
                         b * heads * s * ev * elem if fresh_value else 0)


def _attention_past_len(node, shapes: _Shapes) -> int:
    """The positions of an ONNX ``Attention`` node's past key (``[B, Hkv, P, E]``, its fifth input), which it
    attends to before its key's: 0 where it has none or its shape is unknown."""
    past = shapes.shape(node.input[4]) if len(node.input) > 4 and node.input[4] else None
    return past[2] if past is not None and len(past) == 4 else 0


def _qgemm_mnk(node, shapes: _Shapes) -> tuple[int, int, int] | None:
    """(M, N, K) of an onnxruntime ``com.microsoft`` ``QGemm``: inputs A, a_scale, a_zero_point, B, b_scale,
    b_zero_point, C, y_scale, y_zero_point (onnxruntime's ContribOperators.md); A ``[M, K]`` (``[K, M]`` with
    transA), B ``[K, N]`` (``[N, K]`` with transB), Y ``[M, N]``."""
    ins = list(node.input)
    a, b = (shapes.shape(ins[i]) if len(ins) > i and ins[i] else None for i in (0, 3))
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    m, k = (a[1], a[0]) if _attr(node, "transA", 0) else (a[0], a[1])
    n = b[0] if _attr(node, "transB", 0) else b[1]
    return m, n, k


def _with_qgemm_shapes(model_proto: Any, inferred: Any) -> tuple[Any, Any]:
    """(``model_proto``, ``inferred``) with each ``com.microsoft`` ``QGemm``'s output shape declared, inferred
    again: ONNX's shape inference does not know onnxruntime's ops, so a QGemm's output, and every op after it (the
    next layer's QGemm), had no shape. Each round declares the QGemms whose inputs' shapes are known, as long as
    one is; a graph without QGemm is returned as it is."""
    import onnx
    from onnx import helper, shape_inference

    def qgemms(graph) -> list:
        return [n for n in graph.node if n.domain == "com.microsoft" and n.op_type == "QGemm" and n.output]

    if not qgemms(inferred.graph):
        return model_proto, inferred
    for _ in range(len(qgemms(inferred.graph))):
        shapes = _Shapes()
        for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
            shapes.add_value_info(vi)
        for init in inferred.graph.initializer:
            shapes.add_initializer(init)
        elem = {vi.name: vi.type.tensor_type.elem_type for vi in inferred.graph.value_info}
        elem.update((t.name, t.data_type) for t in inferred.graph.initializer)
        new = []
        for node in qgemms(inferred.graph):
            mnk, ins = _qgemm_mnk(node, shapes), list(node.input)
            if mnk is None or shapes.shape(node.output[0]) is not None:
                continue
            # Y: 8-bit, of y_zero_point's type, where y_scale is given; float otherwise
            quantised = len(ins) > 7 and ins[7]
            t = elem.get(ins[8], onnx.TensorProto.UINT8) if quantised and len(ins) > 8 and ins[8] else \
                onnx.TensorProto.UINT8 if quantised else onnx.TensorProto.FLOAT
            new.append(helper.make_tensor_value_info(node.output[0], t, list(mnk[:2])))
        if not new:
            break
        m = onnx.ModelProto()
        m.CopyFrom(model_proto)
        m.graph.value_info.extend(new)
        try:
            model_proto, inferred = m, shape_inference.infer_shapes(m, data_prop=True)
        except Exception:  # noqa: BLE001 - best effort, as the first inference
            break
    return model_proto, inferred


def _custom_macs(node, shapes: _Shapes) -> int | None:
    """MACs of a :data:`CUSTOM_MAC_OPS` node, from its inputs' shapes (ONNX's shape inference does not know these
    ops, so their outputs' shapes are often unknown): onnxruntime's ``FusedMatMul`` (a MatMul with transposed
    operands) and ``com.microsoft`` ``Attention`` (input ``[B, S, H_in]`` times the packed QKV weights
    ``[H_in, H_q + H_k + H_v]``, then B·S·S·(H_q + H_v) for the scores and their weighted sum, heads cancelling)."""
    ins = list(node.input)
    shp = [shapes.shape(i) if i else None for i in ins]
    if node.op_type == "QGemm":
        mnk = _qgemm_mnk(node, shapes)
        return None if mnk is None else prod(mnk)
    if node.op_type == "FusedMatMul":
        a, b = shp[0], shp[1] if len(shp) > 1 else None
        if a is None or b is None or len(a) < 2 or len(b) < 2 \
                or _attr(node, "transBatchA", 0) or _attr(node, "transBatchB", 0):
            return None
        m, k = (a[-1], a[-2]) if _attr(node, "transA", 0) else (a[-2], a[-1])
        n = b[-2] if _attr(node, "transB", 0) else b[-1]
        lead_a, lead_b = a[:-2], b[:-2]
        width = max(len(lead_a), len(lead_b))
        lead_a, lead_b = [1] * (width - len(lead_a)) + lead_a, [1] * (width - len(lead_b)) + lead_b
        return prod(max(x, y) for x, y in zip(lead_a, lead_b)) * m * n * k
    # com.microsoft Attention
    x, w = shp[0], shp[1] if len(shp) > 1 else None
    if x is None or w is None or len(x) != 3 or len(w) != 2:
        return None
    sizes = list(_attr(node, "qkv_hidden_sizes", None) or [w[1] // 3] * 3)
    if len(sizes) != 3:
        return None
    b, s, h_in = x
    return b * s * h_in * w[1] + b * s * s * (sizes[0] + sizes[2])
