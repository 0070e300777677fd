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

Saved bytes need no correction: the count of :mod:`perfpredict.features.saved` follows the real forward, in
which a checkpointed segment keeps only its inputs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from perfpredict.workload.forward_args import call_forward


class _PhaseFlops(FlopCounterMode):
    """FLOPs of the forward (with the loss), the backward and the recomputation in it, apart."""

    def __init__(self) -> None:
        super().__init__(display=False)
        self.backward = False
        self.by_phase = {"forward": 0, "backward": 0, "recompute": 0}

    def _count_flops(self, func_packet, out, args, kwargs):  # FlopCounterMode's one counting hook
        count = self.flop_registry.get(func_packet)
        if count is not None:
            phase = "forward" if not self.backward else "recompute" if torch.is_grad_enabled() else "backward"
            self.by_phase[phase] += int(count(*args, **kwargs, out_val=out))
        return out


def step_flops(model: torch.nn.Module, inputs: tuple, loss_fn: Callable) -> dict[str, int]:
    """FLOPs of one default training step of ``model`` on ``inputs`` (train mode; ``loss_fn(outputs)`` the
    loss), by phase: ``forward`` (and the loss), ``backward`` (the gradients) and ``recompute`` (forward work
    the backward ran again). The gradients it leaves are cleared; nothing trains: every phase is 0."""
    counter = _PhaseFlops()
    model.train()
    try:
        with counter:
            loss = loss_fn(call_forward(model, inputs))
            if not (isinstance(loss, torch.Tensor) and loss.requires_grad):
                return dict.fromkeys(counter.by_phase, 0)
            counter.backward = True
            loss.backward()
    finally:
        model.zero_grad(set_to_none=True)
    return dict(counter.by_phase)


def recompute_step_ratio(flops: dict[str, int]) -> float | None:
    """A step's work with its recomputation over the same without (forward + backward FLOPs); None where
    nothing is recomputed or the step does no counted work."""
    step = flops["forward"] + flops["backward"]
    if flops["recompute"] <= 0 or step <= 0:
        return None
    return (step + flops["recompute"]) / step
