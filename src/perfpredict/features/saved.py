"""Bytes autograd saves for the backward pass: the activation memory a training step really holds.

The ONNX graph lists every intermediate tensor, but PyTorch keeps only some of them alive until backward: an
in-place ReLU's output is not kept separately, fused attention (``scaled_dot_product_attention``) keeps a
log-sum-exp instead of the L×L score matrix, a cuDNN LSTM keeps a reserve buffer. Counting through
``torch.autograd.graph.saved_tensors_hooks`` during one CPU forward pass gives what is saved, independently
of the device: every saved tensor's storage counted once, parameters (already in P) left out.

Attention is counted as the GPU runs it. On CUDA, fused attention (memory-efficient / flash kernels) keeps no
score matrix even with attention dropout; on the CPU, attention dropout forces the unfused math path, which
would count the L×L scores and dropout masks (4× the saved bytes of a 256-token encoder layer). So the
count runs ``scaled_dot_product_attention`` without its internal dropout, which takes the CPU's fused path
and saves what the CUDA kernels save.

Dropout is counted as the GPU runs it too. On CUDA, ``F.dropout`` runs the fused ``native_dropout`` kernel,
which saves a 1-byte boolean mask; on the CPU it multiplies by a float noise tensor and saves that (4 bytes
per element), which overcounted a transformer layer's three dropouts by 12-25 % of its saved bytes. The
count routes ``F.dropout`` through ``torch.native_dropout``, whose CPU kernel saves the same boolean mask.

The loss is part of the forward: a language model's cross-entropy keeps its log-softmax, as large as the
logits (batch × sequence × vocabulary), until backward.

``kernels="cpu"`` counts what the CPU's own kernels save instead (no rerouting): the unfused attention
with dropout keeps its L×L scores and dropout masks, ``F.dropout`` its float noise. That is what a training
step on the CPU really holds, 1.5-2.7x the CUDA count for the zoo's transformers and ViTs and the same bytes
for every model with neither attention nor dropout. The CPU's RSS baseline charges this count, the GPU's
memory baselines the CUDA one.

Run at batch sizes 1 and 2 (2 and 4 when the training-mode forward rejects batch 1, as BatchNorm1d does), the
difference is the exact per-sample part, as for the other graph features.
This executes the model's forward, so it is for model files and the zoo, never for uploaded ONNX files.
"""

from __future__ import annotations

import torch

from perfpredict.features import _split
from perfpredict.workload.forward_args import call_forward

#: The kernels a count can follow: "cuda" (fused attention, 1-byte dropout masks; the default) or "cpu".
KERNELS = ("cuda", "cpu")


def saved_tensor_bytes(model: torch.nn.Module, inputs: tuple, loss_fn=None, kernels: str = "cuda") -> int:
    """Bytes of the distinct storages autograd saves during one training-mode forward (+ loss) on the CPU,
    as the ``kernels`` of :data:`KERNELS` save them (see the module docstring)."""
    return saved_and_recomputed_bytes(model, inputs, loss_fn, kernels)[0]


def saved_and_recomputed_bytes(model: torch.nn.Module, inputs: tuple, loss_fn=None, kernels: str = "cuda",
                               backward: bool = False) -> tuple[int, int]:
    """:func:`saved_tensor_bytes`, and with ``backward`` (and a loss that needs a gradient) the most bytes the
    backward then run recomputes and saves at once for activation checkpointing
    (:func:`~perfpredict.features.recompute.recomputed_saved_bytes`), its recomputation following the same
    ``kernels``; 0 without. The gradients it leaves are cleared."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
    param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
    param_ptrs |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        try:
            st = t.untyped_storage()
            ptr = st.data_ptr()
            if ptr and ptr not in param_ptrs:
                seen[ptr] = max(seen.get(ptr, 0), st.nbytes())
        except (RuntimeError, NotImplementedError):  # sparse / nested tensors have no plain storage
            seen[id(t)] = t.numel() * t.element_size()
        return t

    import torch.nn.functional as F

    sdpa, dropout = F.scaled_dot_product_attention, F.dropout

    def fused_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, *args, **kwargs):  # noqa: ARG001
        return sdpa(query, key, value, attn_mask, 0.0, *args, **kwargs)

    def fused_dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002
        if not training or p <= 0.0 or p >= 1.0 or not input.is_floating_point():
            return dropout(input, p, training, inplace)
        return torch.native_dropout(input, p, True)[0]  # what CUDA runs: saves a bool mask

    model.train()
    if kernels == "cuda":
        F.scaled_dot_product_attention, F.dropout = fused_sdpa, fused_dropout
    recomputed = 0
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = call_forward(model, inputs)
            loss = loss_fn(out) if loss_fn is not None else None
        # the backward after the hooks: a reentrant checkpoint's recomputed saved tensors would reach them
        if backward and isinstance(loss, torch.Tensor) and loss.requires_grad:
            from perfpredict.features.recompute import recomputed_saved_bytes

            recomputed = recomputed_saved_bytes(loss)
    finally:
        F.scaled_dot_product_attention, F.dropout = sdpa, dropout
        if backward:
            model.zero_grad(set_to_none=True)
    return int(sum(seen.values())), int(recomputed)


def saved_bytes_split(workload, model: torch.nn.Module | None = None, kernels: str = "cuda") -> tuple[int, int]:
    """(per-sample, fixed) saved bytes of ``workload`` as ``kernels`` save them, from forward passes at batch
    sizes 1 and 2 (2 and 4 for a model whose training-mode forward rejects batch 1)."""
    return saved_and_recomputed_split(workload, model, kernels)[0]


def saved_and_recomputed_split(workload, model: torch.nn.Module | None = None, kernels: str = "cuda",
                               backward: bool = False) -> tuple[tuple[int, int], tuple[int, int]]:
    """:func:`saved_bytes_split`, and with ``backward`` the (per-sample, fixed) split of the bytes the
    backward recomputes and saves at once (:func:`saved_and_recomputed_bytes`), from the same steps; (0, 0)
    without."""
    if model is None:
        torch.manual_seed(0)
        model = workload.build_model()
    model = model.to("cpu")

    def run(b: int) -> tuple[int, int]:
        targets = workload.targets(b)
        return saved_and_recomputed_bytes(model, workload.inputs(b), loss_fn=lambda out: workload.loss(out, targets),
                                          kernels=kernels, backward=backward)

    b1, b2 = 1, 2
    try:
        s1 = run(b1)
    except Exception:  # noqa: BLE001 - some models reject batch 1 in training mode (BatchNorm1d: one value per
        # channel), as extract_features' exports at 1 and 2 fall back to 2 and 4
        b1, b2 = 2, 4
        s1 = run(b1)
    s2 = run(b2)
    return _split_at_least_zero(s1[0], s2[0], b1, b2), _split_at_least_zero(s1[1], s2[1], b1, b2)


def _split_at_least_zero(at_b1: int, at_b2: int, b1: int, b2: int) -> tuple[int, int]:
    """(per-sample, fixed) of a count at batch sizes ``b1`` and ``b2``, each held at 0 or more."""
    per, fixed = _split(at_b1, at_b2, b1, b2)
    return max(per, 0), max(fixed, 0)
