"""The forward work a training step runs again during its backward pass: activation checkpointing.

``torch.utils.checkpoint.checkpoint`` (and ``checkpoint_sequential``) keeps only a segment's inputs for the
backward pass and runs the segment's forward again when its gradient is needed, so a checkpointed step costs
about one forward of those segments more. Nothing in an exported graph shows it (the export runs one forward),
and a model's forward decides whether to checkpoint at run time (``if self.training``), so it is counted on
one real step: a forward, the loss and a backward on the CPU at a small batch, under a
:class:`~torch.utils.flop_counter.FlopCounterMode` whose counts are split by phase. The autograd engine runs
backward functions with gradient recording off, and both checkpoint implementations (reentrant or not) switch
it back on to recompute a segment, so an op run during the backward with gradient recording on is
recomputation. This runs the model (a model file or the zoo, never an uploaded ONNX file), as the saved-bytes
count (:mod:`perfpredict.features.saved`) already does.

The forward's saved bytes need no correction: the count of :mod:`perfpredict.features.saved` follows the real
forward, in which a checkpointed segment keeps only its inputs. But the backward holds more: a segment's
recomputed saved tensors live until its gradient is done, so its peak holds the segments' inputs and one
segment's activations. :func:`recomputed_saved_bytes` counts those on the saved-bytes count's own steps. No
``saved_tensors_hooks`` of the counter's sees them: non-reentrant checkpointing packs them with its own hooks
(innermost wins), so the count follows storages instead (:class:`_RecomputedStorages`).

The same step says which parameters it never uses (:func:`step_count`): those whose storage no op of its forward
takes. The exporter drops such a layer (a replaced head kept as an attribute, an auxiliary classifier behind a
flag), so its weights are missing from the graph's bytes although the module holds them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from perfpredict.workload.forward_args import call_forward


class _PhaseFlops(FlopCounterMode):
    """FLOPs of the forward (with the loss), the backward and the recomputation in it, apart."""

    def __init__(self) -> None:
        super().__init__(display=False)
        self.backward = False
        self.by_phase = {"forward": 0, "backward": 0, "recompute": 0}
        self.read: set[int] = set()  # the storages the forward's ops took as arguments

    def _count_flops(self, func_packet, out, args, kwargs):  # FlopCounterMode's one counting hook, every op's
        if not self.backward:
            self.read |= _storage_ptrs((args, kwargs))
        count = self.flop_registry.get(func_packet)
        if count is not None:
            phase = "forward" if not self.backward else "recompute" if torch.is_grad_enabled() else "backward"
            self.by_phase[phase] += int(count(*args, **kwargs, out_val=out))
        return out


@dataclass(frozen=True)
class StepCount:
    """What one default training step showed (:func:`step_count`)."""

    #: FLOPs by phase: ``forward`` (and the loss), ``backward`` (the gradients) and ``recompute`` (forward work
    #: the backward ran again); every phase 0 where nothing trains
    flops: dict[str, int]
    #: the names of the parameters no op of the forward (nor the loss) took: they get no gradient, so no
    #: optimizer state, and hold their weight only
    unused: tuple[str, ...] = ()


def step_count(model: torch.nn.Module, inputs: tuple, loss_fn: Callable) -> StepCount:
    """One default training step of ``model`` on ``inputs`` (train mode; ``loss_fn(outputs)`` the loss): its
    FLOPs by phase and the parameters it never uses (:class:`StepCount`). The gradients it leaves are cleared."""
    counter = _PhaseFlops()
    model.train()
    try:
        with counter:
            loss = loss_fn(call_forward(model, inputs))
            if isinstance(loss, torch.Tensor) and loss.requires_grad:
                counter.backward = True
                loss.backward()
            else:
                counter.by_phase = dict.fromkeys(counter.by_phase, 0)
    finally:
        model.zero_grad(set_to_none=True)
    # a parameter of no bytes has no storage to follow: it costs nothing either way
    unused = tuple(n for n, p in model.named_parameters()
                   if p.numel() and p.untyped_storage().data_ptr() not in counter.read)
    return StepCount(flops=dict(counter.by_phase), unused=unused)


def recompute_step_ratio(flops: dict[str, int]) -> float | None:
    """A step's work with its recomputation over the same without (forward + backward FLOPs); None where
    nothing is recomputed or the step does no counted work."""
    step = flops["forward"] + flops["backward"]
    if flops["recompute"] <= 0 or step <= 0:
        return None
    return (step + flops["recompute"]) / step


class _RecomputedStorages(TorchDispatchMode):
    """The bytes of the storages a backward's recomputation allocates (ops run with gradient recording on, as in
    :class:`_PhaseFlops`), followed until they are freed: their most alive at once when the backward proper
    resumes, at the first op after them that runs with recording off and allocates (a checkpoint's pack hooks
    run with it off too, but only alias what they keep). A segment's recomputed forward is then done and only
    what it saved for its backward is left (the checkpoint's hooks keep those, non-reentrant; the recomputed
    graph, reentrant): transients the recomputation freed are not counted, as the saved-bytes count counts no
    transient either. Segment inputs are no new storages, so they are not counted twice."""

    def __init__(self) -> None:
        super().__init__()
        self.alive: dict[int, int] = {}  # storage address -> bytes, while the storage lives
        self.most = 0
        self._recomputed = False  # an op recorded since the last look

    def _freed(self, ptr: int) -> None:
        self.alive.pop(ptr, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        new = _new_storages(out, args, kwargs)
        if torch.is_grad_enabled():
            self._recomputed = True
            for st in new:
                self._follow(st)
        elif self._recomputed and new:
            self._recomputed = False
            self.most = max(self.most, sum(self.alive.values()))
        return out

    def _follow(self, st) -> None:
        ptr = st.data_ptr()
        if ptr not in self.alive:
            self.alive[ptr] = st.nbytes()
            # the storage's Python object lives as long as its C++ storage does (torch keeps it), so its
            # finalizer runs when the storage is freed
            weakref.finalize(st, self._freed, ptr)


def _storage_ptrs(tree) -> set[int]:
    """The storage addresses of the tensors in ``tree`` (an op's arguments); a tensor without a plain storage (a
    sparse or nested one) has none."""
    ptrs = set()
    for t in tree_flatten(tree)[0]:
        if isinstance(t, torch.Tensor):
            try:
                ptrs.add(t.untyped_storage().data_ptr())
            except (RuntimeError, NotImplementedError):
                pass
    return ptrs


def _new_storages(out, args, kwargs) -> list:
    """The storages of ``out``'s tensors that none of the op's tensor arguments has (not a view, nor in place)."""
    given = _storage_ptrs((args, kwargs))
    storages = (t.untyped_storage() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
    return [st for st in storages if st.data_ptr() and st.data_ptr() not in given]


def recomputed_saved_bytes(loss: torch.Tensor) -> int:
    """Run ``loss.backward()`` and return the most bytes its recomputation of activation-checkpointed segments
    saved for the backward at once (:class:`_RecomputedStorages`); 0 where nothing is recomputed. The gradient
    seed is made before the count: ``backward`` would make it with gradient recording on."""
    seed = torch.ones_like(loss)
    counter = _RecomputedStorages()
    with counter:
        loss.backward(seed)
    return counter.most
