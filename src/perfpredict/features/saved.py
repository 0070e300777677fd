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

Run at batch sizes 1 and 2, the difference is the exact per-sample part, as for the other graph features.
This executes the model's forward, so it is for model files and the zoo, never for uploaded ONNX files.
"""

from __future__ import annotations

import torch


def saved_tensor_bytes(model: torch.nn.Module, inputs: tuple, loss_fn=None) -> int:
    """Bytes of the distinct storages autograd saves during one training-mode forward (+ loss) on the CPU."""
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

    sdpa = F.scaled_dot_product_attention

    def fused_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, *args, **kwargs):  # noqa: ARG001
        return sdpa(query, key, value, attn_mask, 0.0, *args, **kwargs)

    model.train()
    F.scaled_dot_product_attention = fused_sdpa
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model(*inputs)
            if loss_fn is not None:
                loss_fn(out)
    finally:
        F.scaled_dot_product_attention = sdpa
    return int(sum(seen.values()))


def saved_bytes_split(workload, model: torch.nn.Module | None = None) -> tuple[int, int]:
    """(per-sample, fixed) saved bytes of ``workload``, from forward passes at batch sizes 1 and 2."""
    if model is None:
        torch.manual_seed(0)
        model = workload.build_model()
    model = model.to("cpu")

    def loss(out):
        return workload.loss(out, None)

    s1 = saved_tensor_bytes(model, workload.inputs(1))
    s2 = saved_tensor_bytes(model, workload.inputs(2))
    per = s2 - s1
    return int(max(per, 0)), int(max(s1 - per, 0))
