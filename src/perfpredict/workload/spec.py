"""What perfpredict knows how to run: a :class:`Workload` (callables) and its picklable :class:`WorkloadRef`
(defined in :mod:`perfpredict.workload.ref`, which does not import torch, and re-exported here).

A workload comes either from a user's ``model.py`` (see README, "The model.py convention") or from the
built-in zoo. Profiling runs every measurement in a fresh subprocess, so a workload must be re-creatable
from a small, picklable reference — that is :class:`WorkloadRef`; :meth:`WorkloadRef.load` rebuilds the
callables in whatever process needs them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from perfpredict.workload.ref import DEFAULT_BATCH_SIZES, PRECISIONS, WorkloadRef, check_precision  # noqa: F401

#: the autocast dtype of each mixed precision
AUTOCAST_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}


def default_loss(outputs: Any) -> torch.Tensor:
    """The mean of the model's outputs, as a float scalar: the documented default ``loss_fn``.

    Nested outputs (tuples, lists, dicts — e.g. an LSTM's ``(output, (h, c))``) contribute the mean of each
    floating-point tensor they contain, summed, so every output takes part in the backward pass.
    """
    tensors = [t for t in iter_tensors(outputs) if t.is_floating_point()]
    if not tensors:
        raise TypeError("the model returned no floating-point tensor, so the default loss (mean of outputs) "
                        "cannot be formed; define loss_fn(outputs) in the model file")
    total = tensors[0].float().mean()
    for t in tensors[1:]:
        total = total + t.float().mean()
    return total


def iter_tensors(obj: Any):
    """Every tensor in ``obj`` (a tensor, or lists, tuples and dicts of them, nested)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, Mapping):
        for v in obj.values():
            yield from iter_tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from iter_tensors(v)


def sample_input_bytes(wl: Any) -> int:
    """The bytes of one sample's forward inputs: every tensor of ``wl.inputs(1)`` (the features' and the
    card's ``input_bytes_per_sample``)."""
    return sum(t.numel() * t.element_size() for t in iter_tensors(wl.inputs(1)))


def parameter_bytes(model: torch.nn.Module, trainable: bool | None = None) -> int:
    """Bytes of ``model``'s parameters: all of them, or only those that get gradients (``trainable=True``) or
    only the frozen ones (``trainable=False``, ``requires_grad=False``)."""
    return sum(p.numel() * p.element_size() for p in model.parameters()
               if trainable is None or p.requires_grad == trainable)


@dataclass(frozen=True)
class PackedWeights:
    """Weights a quantized module holds packed for its kernels (``quantize_dynamic``'s Linear): no
    ``nn.Parameter``, so ``model.parameters()`` misses them. ``count`` and ``bytes`` (at their stored size: one
    byte a qint8 weight, two a float16 one; the float32 bias at four) are of the packed weights that could be
    unpacked; ``uncounted`` names the modules whose packed weights could not (a quantized LSTM or convolution)."""

    count: int = 0
    bytes: int = 0
    uncounted: tuple[str, ...] = ()


def packed_weights(model: torch.nn.Module) -> PackedWeights:
    """The weights ``model``'s quantized modules hold packed (:class:`PackedWeights`)."""
    try:
        from torch.ao.nn.quantized.modules.linear import LinearPackedParams
    except Exception:  # noqa: BLE001 - a torch without the quantized modules packs nothing
        LinearPackedParams = ()  # noqa: N806
    count = size = 0
    uncounted = []
    for name, module in model.named_modules():
        if isinstance(module, LinearPackedParams):
            weight, bias = module._weight_bias()
            stored = weight.element_size() if weight.is_quantized else torch.empty(0, dtype=module.dtype).element_size()
            count += weight.numel()
            size += weight.numel() * stored
            if bias is not None:
                count += bias.numel()
                size += bias.numel() * bias.element_size()
        elif any(isinstance(v, torch.ScriptObject) and not isinstance(v, torch._C.ScriptModule)
                 for v in vars(module).values()):  # a TorchScript module's own ``_c`` is a ScriptObject too
            uncounted.append(name or type(module).__name__)
    return PackedWeights(count, size, tuple(uncounted))


def weights_precision(model: torch.nn.Module, precision: str) -> str:
    """What a card's ``run.precision`` says of a run at autocast ``precision``: for a run without autocast,
    the dtype every floating-point weight and buffer has when they all share one (``fp64`` for
    ``model.double()``, ``fp16`` for ``model.half()``, ``bf16`` for ``model.bfloat16()``: every op runs in it),
    else ``precision``."""
    dtypes = {t.dtype for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()}
    if precision != "fp32" or len(dtypes) != 1:
        return precision
    return _PRECISION_OF_DTYPE.get(dtypes.pop(), precision)


_PRECISION_OF_DTYPE = {torch.float64: "fp64", torch.float16: "fp16", torch.bfloat16: "bf16"}


def default_optimizer(params) -> torch.optim.Optimizer:
    """The documented default ``make_optimizer``: SGD with momentum 0.9 and a learning rate of 0.

    A zero learning rate does the same arithmetic as any SGD-momentum step (torch has no shortcut for it:
    the momentum buffer is updated and ``param.add_(grad, alpha=-lr)`` still runs), so it costs what a real
    step costs and allocates the same state. But the weights stay at their initial values: the default loss
    (mean of the outputs) is unbounded below and would otherwise drive the outputs to -inf within a few
    hundred iterations, and every timed iteration does identical work (no drift, no denormals).
    """
    return torch.optim.SGD(params, lr=0.0, momentum=0.9)


def optimizer_state_copies(opt: Any, params: Any = None) -> float:
    """How many copies of a trained weight ``opt`` keeps as state (SGD with momentum 1, its momentum buffer;
    plain SGD 0; Adam/AdamW 2, exp_avg and exp_avg_sq), found without allocating any state of the real model: a
    probe of the same class and defaults over one small tensor takes one step with a zero gradient, and its state
    tensors shaped like that tensor are counted, each at its bytes over the tensor's (a bfloat16 state of a
    float32 weight is half a copy). Scalars such as Adam's ``step`` do not count. Param groups of their own
    options (``amsgrad`` in one group only) are probed each with them, and their copies weighed by the group's
    trained bytes among ``params`` (the tensors a step updates; None: all): a parameter no step uses gets no
    gradient, so no state, and its group's options do not weigh. A ValueError when no probe can be made or
    stepped (an object that is not a torch optimizer, such as a wrapper around two; an optimizer whose step needs
    a closure)."""
    if not isinstance(opt, torch.optim.Optimizer):
        raise ValueError(f"make_optimizer() returned {type(opt).__name__}, not a torch.optim.Optimizer")
    stepped = None if params is None else {id(p) for p in params}
    weighed = [(_group_options(g), sum(p.numel() * p.element_size() for p in g["params"]
                                       if p.requires_grad and (stepped is None or id(p) in stepped)))
               for g in opt.param_groups]
    if not any(w for _, w in weighed):
        weighed = [({}, 1)]
    found: dict[str, float] = {}  # by the group's options: groups told apart by weight decay alone probe once
    for options, _ in weighed:
        found.setdefault(repr(options), _state_copies_of_group(opt, options))
    return sum(found[repr(o)] * w for o, w in weighed) / sum(w for _, w in weighed)


def _state_copies_of_group(opt: torch.optim.Optimizer, options: dict[str, Any]) -> float:
    """:func:`optimizer_state_copies` of one param group's ``options``: the state a probe over one small tensor
    keeps after a step."""
    p = torch.zeros(4, 3, requires_grad=True)
    try:
        with _global_rngs_kept():
            probe = type(opt)([{"params": [p], **options}], **_probe_defaults(opt))
            p.grad = torch.zeros_like(p)
            probe.step()
    except Exception as e:  # noqa: BLE001 - a user's optimizer class: any failure means "cannot tell"
        raise ValueError(f"a probe {type(opt).__name__} over one tensor could not take a step "
                         f"({type(e).__name__}: {str(e)[:120]})") from None
    state = probe.state.get(p, {})
    size = p.numel() * p.element_size()
    return sum(t.numel() * t.element_size() for t in state.values()
               if isinstance(t, torch.Tensor) and t.shape == p.shape) / size


class _NewTensorBytes(TorchDispatchMode):
    """The bytes of the tensors the ops under it allocate (an output sharing no input's storage), counted until
    the tensor is freed, and their most at once. Scalars (a step counter's arithmetic) are left out."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0

    def _freed(self, n: int) -> None:
        self.live -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        import weakref

        from torch.utils._pytree import tree_leaves

        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.dim() > 0 and t.untyped_storage()._cdata not in inputs:
                n = t.untyped_storage().nbytes()
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._freed, n)
        return out


#: The implementation torch runs an optimizer whose ``foreach`` is None (its default) in on each device kind:
#: one tensor at a time on the CPU (torch has no foreach kernels there), ``torch._foreach_*`` over every weight
#: at once on CUDA (``torch.optim.optimizer._default_to_fused_or_foreach``).
DEFAULT_FOREACH = {"cpu": False, "cuda": True}


def optimizer_step_bytes(opt: Any, params: Any) -> dict[str, float]:
    """The most bytes of temporaries ``opt``'s step holds at once over the trained tensors ``params`` (besides
    the weights, gradients and state), per device kind as torch would run it there (:data:`DEFAULT_FOREACH`
    where a param group leaves ``foreach`` to torch, single-tensor for a ``differentiable`` one and for
    Adafactor: :func:`_default_foreach`): a copy of the same class, param groups and options over "meta" tensors
    shaped like the group's trained tensors (nothing allocated) takes two steps, the second counted
    (:class:`_NewTensorBytes`); a tensor of ``params`` in none of ``opt``'s groups is not stepped. A step meta
    tensors cannot take is counted over real CPU tensors instead (:func:`_real_step_peak`), its second and third
    steps. Adam one tensor at a time holds ``exp_avg_sq.sqrt()`` and its quotient by the bias correction (2 x the
    tensor) and the previous tensor's ``denom``; its foreach step holds ``_foreach_sqrt`` of every exp_avg_sq (1 x
    all trained bytes); fused AdamW and SGD with momentum hold none. A ValueError where no such copy can step."""
    trained = {id(p) for p in params if p.requires_grad}
    groups = [(g, [(tuple(p.shape), p.dtype) for p in g["params"] if id(p) in trained]) for g in opt.param_groups]
    groups = [(g, shapes) for g, shapes in groups if shapes]
    shapes = [s for _, s in groups]
    out = {}
    probed: dict[str, float] = {}  # by the groups' options: a kind run as another (foreach told, fused) steps once
    for kind, default in DEFAULT_FOREACH.items():
        options = [_group_options(g) for g, _ in groups]
        for g, o in zip((g for g, _ in groups), options):
            if "foreach" in o and o["foreach"] is None and not o.get("fused"):
                o["foreach"] = _default_foreach(opt, g, default)
        if not options:
            out[kind] = 0.0
            continue
        if repr(options) not in probed:
            try:
                peak = _step_peak(opt, options, shapes, lambda s, d: torch.zeros(s, dtype=d, device="meta"))
            except Exception:  # noqa: BLE001 - fused=True refuses meta tensors, .item() has no value on them
                peak = _real_step_peak(opt, options, shapes)
            probed[repr(options)] = peak
        out[kind] = probed[repr(options)]
    return out


#: The most trained bytes :func:`_real_step_peak` steps real tensors of: larger weights are scaled down to it
REAL_PROBE_BYTES = 4 * 2 ** 20


def _step_peak(opt: torch.optim.Optimizer, options: list[dict[str, Any]],
               shapes: list[list[tuple[tuple[int, ...], torch.dtype]]],
               tensor: Callable[[tuple[int, ...], torch.dtype], torch.Tensor], counted: int = 1) -> float:
    """The most bytes of new tensors a copy of ``opt`` (param groups ``options`` over tensors ``tensor(shape,
    dtype)`` of ``shapes``, gradients made alike) holds at once in the ``counted`` steps after its first (which makes
    the state). The caller's random generators are left as found (:func:`_global_rngs_kept`)."""
    kw = [{**o, "params": [tensor(s, d).requires_grad_() for s, d in sh]} for o, sh in zip(options, shapes)]
    with _global_rngs_kept():
        probe = type(opt)(kw, **_probe_defaults(opt))
        for group in kw:
            for p in group["params"]:
                p.grad = tensor(tuple(p.shape), p.dtype)
        probe.step()
        counter = _NewTensorBytes()
        with counter:
            for _ in range(counted):
                probe.step()
    return float(counter.peak)


@contextlib.contextmanager
def _global_rngs_kept():
    """torch's CPU, numpy's and Python's global random states restored on leaving: a probe steps the user's
    optimizer, whose step may draw from them (noise, a random skip), and must not move a seeded caller's streams."""
    import random

    import numpy as np

    states = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])


def _real_step_peak(opt: torch.optim.Optimizer, options: list[dict[str, Any]],
                    shapes: list[list[tuple[tuple[int, ...], torch.dtype]]]) -> float:
    """:func:`_step_peak` over real CPU tensors (seeded normal values, the global generator left alone), for a step
    meta tensors cannot take: ``fused=True`` (torch refuses meta tensors) or one that reads a value with
    ``.item()`` (Adafactor, ASGD, LAMB-style trust ratios). Such a step can branch on values, so its second and third
    steps are counted: ASGD with ``t0=0`` (NT-ASGD's) copies its average in the second and averages from the third
    on, holding ``param.sub(ax)`` (1 x the weight); a meta step cannot branch on a value. Weights of more than
    :data:`REAL_PROBE_BYTES` in all are scaled down to about it (:func:`_scaled_shape`) and the count scaled back up
    by their bytes' ratio: a step's large temporaries are whole tensors' sizes. Measured on a 64 MiB
    Linear(4096, 4096) on the CPU (new-tensor count, torch.profiler's allocator events and peak RSS alike): fused
    AdamW 0 (an in-place kernel), Adafactor 64 MiB (``row_var @ col_var``, 1 x the weight), ASGD one tensor at a
    time 0 (``ax.copy_(param)`` while its ``mu`` is 1, before ``t0`` steps), ASGD or Adafactor foreach 64 (1 x all
    trained bytes)."""
    total = sum(_shape_bytes(s, d) for sh in shapes for s, d in sh)
    share = min(1.0, REAL_PROBE_BYTES / total) if total else 1.0
    small = [[(_scaled_shape(s, share), d) for s, d in sh] for sh in shapes]
    gen = torch.Generator().manual_seed(0)
    try:
        peak = _step_peak(opt, options, small, lambda s, d: torch.randn(s, dtype=d, generator=gen), counted=2)
    except Exception as e:  # noqa: BLE001 - a user's optimizer class: any failure means "cannot tell"
        raise ValueError(f"a {type(opt).__name__} could not take a step over meta tensors nor small CPU ones "
                         f"({type(e).__name__}: {str(e)[:120]})") from None
    return peak if share == 1.0 else peak * total / sum(_shape_bytes(s, d) for sh in small for s, d in sh)


def _shape_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """The bytes of a tensor of ``shape`` and ``dtype``."""
    return math.prod(shape) * dtype.itemsize


def _scaled_shape(shape: tuple[int, ...], share: float) -> tuple[int, ...]:
    """``shape`` with about ``share`` of its elements, taken off its largest dims first ((4096, 4096) at 1/16 is
    (256, 4096)): a small dim (a kernel's 3) rounded up would keep more than the share."""
    dims, left = list(shape), share
    for i in sorted(range(len(dims)), key=lambda i: -dims[i]):
        if left >= 1 or dims[i] == 0:
            break
        new = max(1, math.ceil(dims[i] * left))
        left *= dims[i] / new
        dims[i] = new
    return tuple(dims)


def _default_foreach(opt: torch.optim.Optimizer, group: dict[str, Any], on_device: bool) -> bool:
    """Whether torch runs ``group`` of ``opt`` (its ``foreach`` None) with its foreach kernels where the device
    has them (``on_device``): not for a ``differentiable`` group (``_default_to_fused_or_foreach`` answers
    single-tensor), save SGD's, which asks it with ``differentiable=False`` whatever the group says; never for
    Adafactor, which runs foreach only when told (``foreach=True``), on CUDA too."""
    if isinstance(opt, _SINGLE_TENSOR_UNLESS_TOLD):
        return False
    return on_device and not (group.get("differentiable") and not isinstance(opt, torch.optim.SGD))


#: torch's optimizers whose ``foreach=None`` means one tensor at a time on every device (torch/optim/_adafactor.py:
#: ``if foreach: _multi_tensor_adafactor``, no ``_default_to_fused_or_foreach``)
_SINGLE_TENSOR_UNLESS_TOLD = tuple(c for c in (getattr(torch.optim, "Adafactor", None),) if c is not None)


def _group_options(group: dict[str, Any]) -> dict[str, Any]:
    """A param group's options (all but its params) as a probe takes them: ``capturable`` and ``differentiable``
    off, as :func:`_probe_defaults` turns them off."""
    options = {k: v for k, v in group.items() if k != "params"}
    options.update({k: False for k in ("capturable", "differentiable") if options.get(k)})
    return options


def _probe_defaults(opt: torch.optim.Optimizer) -> dict[str, Any]:
    """The defaults ``type(opt)``'s constructor takes (AdamW's hold Adam's decoupled_weight_decay, which AdamW()
    refuses), with ``capturable`` and ``differentiable`` off: how the step runs, not what state it keeps
    (capturable wants CUDA tensors, differentiable a non-leaf)."""
    import inspect

    sig = inspect.signature(type(opt))
    takes_any = any(a.kind is inspect.Parameter.VAR_KEYWORD for a in sig.parameters.values())
    defaults = {k: v for k, v in opt.defaults.items() if takes_any or k in sig.parameters}
    defaults.update({k: False for k in ("capturable", "differentiable") if defaults.get(k)})
    return defaults


#: torch.optim's optimizers that cannot be named (:func:`parse_optimizer`), and why: no probe can step them as a
#: training job of dense weights would
UNNAMEABLE_OPTIMIZERS = {"lbfgs": "its step needs a closure", "sparseadam": "it takes sparse gradients only",
                         "muon": "it takes 2-D weights only"}
#: names besides torch's classes' own: (class name, options)
OPTIMIZER_ALIASES = {"sgd-momentum": ("sgd", {"momentum": 0.9})}


def torch_optimizers() -> dict[str, type]:
    """torch.optim's own optimizer classes by lower-case name, less :data:`UNNAMEABLE_OPTIMIZERS`: all a caller
    may name (:func:`parse_optimizer`), never code of its own."""
    return {n.lower(): c for n, c in sorted(vars(torch.optim).items())
            if isinstance(c, type) and issubclass(c, torch.optim.Optimizer) and c is not torch.optim.Optimizer
            and n.lower() not in UNNAMEABLE_OPTIMIZERS}


def optimizer_names() -> list[str]:
    """What :func:`parse_optimizer` takes before a ``:``, for an error's list."""
    return sorted([*torch_optimizers(), *OPTIMIZER_ALIASES])


@dataclass(frozen=True)
class NamedOptimizer:
    """One of torch.optim's own optimizers and constructor options a caller named (:func:`parse_optimizer`)."""

    cls: type
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.cls.__name__}({', '.join(f'{k}={v!r}' for k, v in self.options.items())})"

    def build(self, params: Any) -> torch.optim.Optimizer:
        return self.cls(params, **self.options)


def parse_optimizer(text: str) -> NamedOptimizer:
    """``NAME[:KEY=VALUE,...]`` as the optimizer it names: NAME one of torch.optim's classes, case-insensitive
    (:func:`optimizer_names`: ``adamw``, ``sgd``; ``sgd-momentum`` is ``sgd:momentum=0.9``), KEY one of its
    constructor's options, VALUE a number, true, false or none (``adamw:foreach=true``,
    ``adam:amsgrad=true``). Only torch's classes are built, so nothing of the caller's runs. A ValueError
    naming what is wrong (an unknown name lists the known ones)."""
    import inspect

    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"give an optimizer name, one of {', '.join(optimizer_names())}; got {text!r}"[:300])
    name, _, rest = text.strip().partition(":")
    name = name.strip().lower()
    cls_name, options = OPTIMIZER_ALIASES.get(name, (name, {}))
    cls = torch_optimizers().get(cls_name)
    if cls is None:
        why = f" ({UNNAMEABLE_OPTIMIZERS[name]})" if name in UNNAMEABLE_OPTIMIZERS else ""
        raise ValueError(f"unknown optimizer {name[:60]!r}{why}: give one of torch.optim's "
                         f"{', '.join(optimizer_names())}, optionally with options as adamw:foreach=true")
    takes = [k for k in inspect.signature(cls).parameters if k != "params"]
    options = dict(options)
    for item in (x.strip() for x in rest.split(",") if x.strip()):
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq or key not in takes:
            raise ValueError(f"{cls.__name__} option {item[:60]!r} is not KEY=VALUE with KEY one of "
                             f"{', '.join(takes)}")
        options[key] = _option_value(value, key)
    named = NamedOptimizer(cls, options)
    try:
        named.build([torch.zeros(1, requires_grad=True)])
    except Exception as e:  # noqa: BLE001 - torch's own check of the options (a negative momentum)
        raise ValueError(f"{named.label[:200]} is refused by torch: {type(e).__name__}: {str(e)[:160]}") from None
    return named


def _option_value(text: str, key: str) -> bool | int | float | None:
    """An optimizer option's VALUE (:func:`parse_optimizer`): true, false, none or a number."""
    words = {"true": True, "false": False, "none": None}
    if text.lower() in words:
        return words[text.lower()]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    raise ValueError(f"optimizer option {key}={text[:40]!r}: the value is a number, true, false or none")


@dataclass
class Workload:
    """A runnable training job: the hooks of the ``model.py`` convention, with defaults filled in.

    ``loss_fn`` takes ``(outputs)`` or, when ``example_targets`` is given, ``(outputs, targets)``.
    """

    name: str
    ref: WorkloadRef
    build_model: Callable[[], torch.nn.Module]
    example_inputs: Callable[[int], Any]
    loss_fn: Callable[..., torch.Tensor] = default_loss
    make_optimizer: Callable[[Any], torch.optim.Optimizer] = default_optimizer
    example_targets: Callable[[int], Any] | None = None
    #: Input pipeline (Synergy sensitivity profiling): ``make_dataset()`` returns a map-style dataset of raw
    #: items as read from storage; ``preprocess(item)`` is the per-sample CPU work (decode, augment) that
    #: turns one into a training sample. Either may be absent.
    make_dataset: Callable[[], Any] | None = None
    preprocess: Callable[[Any], Any] | None = None
    #: ``train_step(model, inputs, targets, optimizer) -> loss | None``: one whole training step of the user's
    #: own (gradient accumulation, clipping, several losses or optimizers), timed instead of the default
    #: zero_grad/forward/loss/backward/step. ``inputs`` is what ``example_inputs`` returned, on the device.
    train_step: Callable[..., Any] | None = None
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    #: one of :data:`PRECISIONS`: the file's ``PRECISION``, ``--precision``, or fp32
    precision: str = "fp32"
    #: measure ``torch.compile(model)`` instead of the eager model
    compile: bool = False

    def with_options(self, precision: str | None = None, compile: bool | None = None) -> Workload:  # noqa: A002
        """This workload run at ``precision`` and/or compiled (None: unchanged); its ref carries the choices to
        the measuring processes."""
        wl = self
        if precision is not None:
            p = check_precision(precision)
            wl = replace(wl, precision=p, ref=replace(wl.ref, precision=p))
        if compile is not None:
            wl = replace(wl, compile=bool(compile), ref=replace(wl.ref, compile=bool(compile)))
        return wl

    def prepared(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module the measured steps call: ``torch.compile(model)`` with ``compile``, else ``model``. Inductor
        compiles at the first call, so its time lands in the first (warm-up) step and the start-up ν.

        Torch's own error logging is silenced first: dynamo logs a model's error with a full traceback to
        stderr before raising it, and the measuring process reports that error itself, in one line."""
        if not self.compile:
            return model
        import logging

        logging.getLogger("torch").setLevel(logging.CRITICAL)
        return torch.compile(model)

    def autocast(self, device: torch.device | str) -> contextlib.AbstractContextManager:
        """The context the forward pass and the loss run in: ``torch.autocast`` for bf16/fp16, else nothing."""
        dtype = AUTOCAST_DTYPES.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(torch.device(device).type, dtype=dtype)

    def grad_scaler(self, device: torch.device | str) -> torch.amp.GradScaler | None:
        """fp16's loss scaler (gradients in float16 underflow without it); None for fp32 and bf16."""
        if self.precision != "fp16":
            return None
        return torch.amp.GradScaler(torch.device(device).type)

    @property
    def source(self) -> str:
        """What the user typed to name this workload (a path or ``zoo:<family>[...]``)."""
        return self.ref.describe()

    def inputs(self, batch_size: int, device: torch.device | str = "cpu") -> tuple[Any, ...]:
        """The forward arguments for ``batch_size``, moved to ``device``, always as a tuple: a
        :class:`~perfpredict.workload.forward_args.KeywordInputs` when ``example_inputs`` returned a dict
        (call the model with :func:`~perfpredict.workload.forward_args.call_forward`)."""
        args = self.example_inputs(batch_size)
        _not_none(args, "example_inputs", "the forward arguments: a tensor, a tuple or a dict")
        if isinstance(args, Mapping):
            from perfpredict.workload.forward_args import KeywordInputs

            return KeywordInputs({k: to_device(v, device) for k, v in args.items()})
        if not isinstance(args, tuple):
            args = (args,)
        return tuple(to_device(a, device) for a in args)

    def step_inputs(self, batch_size: int, device: torch.device | str, mode: str) -> Any:
        """What the timed step takes: :meth:`inputs`, or for a ``train_step`` hook in train mode the value
        ``example_inputs`` returned (a tensor, tuple or dict), moved to ``device``."""
        if mode == "train" and self.train_step is not None:
            args = self.example_inputs(batch_size)
            _not_none(args, "example_inputs", "the forward arguments: a tensor, a tuple or a dict")
            return to_device(args, device)
        return self.inputs(batch_size, device)

    def targets(self, batch_size: int, device: torch.device | str = "cpu") -> Any:
        if self.example_targets is None:
            return None
        targets = self.example_targets(batch_size)
        _not_none(targets, "example_targets", "the targets loss_fn(outputs, targets) takes, or leave the hook out")
        return to_device(targets, device)

    def optimizer(self, params: Any) -> torch.optim.Optimizer:
        """``make_optimizer(params)``, checked: a hook that returns something else (e.g. a stub that returns
        None) used to fail later inside the timed step, as an AttributeError at ``zero_grad``."""
        if self.make_optimizer is default_optimizer and self.train_step is None:
            # (a train_step hook may train no weight of the model: an adversarial input, a style transfer's
            # image)
            params = list(params)
            if not any(isinstance(p, torch.Tensor) and p.requires_grad for p in params):
                # torch's own words blamed a make_optimizer the file may not have ("optimizer got an empty
                # parameter list" for a quantized model), or failed later at backward (a wholly frozen one)
                from perfpredict.errors import ModelLoadError

                raise ModelLoadError(f"the model has no parameter that requires grad ({len(params)} parameter tensors, "
                                     "none trainable: e.g. a quantized or wholly frozen model), so a training step "
                                     "has nothing to train: measure it with --mode infer", step="make_optimizer")
        opt = self.make_optimizer(params)
        if not (callable(getattr(opt, "step", None)) and callable(getattr(opt, "zero_grad", None))):
            from perfpredict.errors import ModelLoadError

            raise ModelLoadError(f"make_optimizer() returned {type(opt).__name__}, expected a torch.optim.Optimizer "
                                 "(an object with step() and zero_grad())", step="make_optimizer")
        return opt

    def loss(self, outputs: Any, targets: Any = None) -> torch.Tensor:
        # the default loss (mean of the outputs) has no use for targets: a file with example_targets for its own
        # train_step, and no loss_fn, still gets its saved tensors counted with it
        if self.example_targets is None or self.loss_fn is default_loss:
            return self.loss_fn(outputs)
        return self.loss_fn(outputs, targets)


def to_device(obj: Any, device: torch.device | str) -> Any:
    """Move tensors (possibly nested in tuples/lists/dicts) to ``device``; leave everything else as is."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, Mapping):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    return obj


def _not_none(value: Any, hook: str, expected: str) -> None:
    """A hook that returned None (a stub, a missing ``return``) is the model file's mistake, named as such: it
    used to surface later as a TypeError inside forward or the loss, blamed on that step."""
    if value is None:
        from perfpredict.errors import ModelLoadError

        raise ModelLoadError(f"{hook}() returned None; it must return {expected}", step=hook)
