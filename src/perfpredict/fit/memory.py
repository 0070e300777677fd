"""Horus eq. 2, the analytic memory estimate: GMem = M^f + M^b + δ = (B·A + P) + B·G + δ.

How perfpredict reads the terms (the paper names them but does not define them operationally):

- ``A``: activation bytes per sample — every intermediate tensor of the forward graph (ONNX analysis), which
  autograd keeps alive until the backward pass in training.
- ``P``: parameter bytes. In train mode P also holds what lives as long as the parameters do: their
  gradients (one more copy of the trainable parameters: a frozen one, ``requires_grad=False``, gets none)
  and the optimizer state (measured from the optimizer after a step, e.g.
  SGD-momentum one copy, Adam two).
- ``G``: activation-gradient bytes per sample of the backward pass; taken equal to ``A`` (each saved
  activation receives a gradient of its own size). Zero in inference mode.
- ``δ``: initialisation overhead — the CUDA context measured by NVML before the model was built; 0 on CPU,
  where the measurement is an increase over the process's pre-model baseline.

It is an upper-bound style estimate (the real allocator frees activation gradients as backward proceeds);
the card shows it beside the measured peak so the gap is visible.
"""

from __future__ import annotations

from perfpredict.card import GraphFeatures, HorusMemoryEstimate


def horus_memory_estimate(features: GraphFeatures, batch_size: int, *, mode: str, param_bytes: int,
                          optimizer_state_bytes: int = 0, overhead_bytes: int = 0,
                          trainable_param_bytes: int | None = None) -> HorusMemoryEstimate | None:
    """Eq. 2 for ``batch_size``; None when the graph features are unavailable. ``trainable_param_bytes``: the
    bytes of the parameters that get gradients (None: all of ``param_bytes``)."""
    if mode not in ("train", "infer"):
        raise ValueError(f"mode must be 'train' or 'infer', got {mode!r}")
    if not features.available or features.activation_bytes_per_sample is None:
        return None
    a = batch_size * features.activation_bytes_per_sample + (features.activation_bytes_fixed or 0)
    p = param_bytes
    g = 0
    if mode == "train":
        grads = param_bytes if trainable_param_bytes is None else trainable_param_bytes
        p = param_bytes + grads + optimizer_state_bytes
        g = a
    return HorusMemoryEstimate(batch_size=batch_size, activations=int(a), parameters=int(p), gradients=int(g),
                               overhead=int(overhead_bytes), total=int(a + p + g + overhead_bytes))
