"""Microbenchmarks of single kernels on this CPU: what each kernel class costs per call, per MAC and per byte.

An eager PyTorch step runs about one kernel per ONNX node (:mod:`perfpredict.estimators.kernel_nodes`), and the
classes differ by orders of magnitude in what one MAC or one byte costs: a depthwise convolution runs at
memory speed, a small element-wise op costs its dispatch overhead, a large GEMM runs near the vector units'
peak. A roofline with one rate for every MAC misses all three (family-CV MAPE of the CPU inference-time
baseline: 57% on the Xeon VM; MobileNetV2 was under-predicted 4x).

Each benchmark here is a small ``nn.Module`` that runs one kind of kernel at one size. It is exported to ONNX
and read by the same graph walk as a user's model, so its kernel descriptors are the ones a model's nodes get
(a Linear on a 3-D input becomes a MatMul and an Add, GELU five element-wise nodes: whatever the exporter
makes of a layer, the costs are fitted to it). It is then timed as the profiler times a model: inference passes
under ``torch.inference_mode`` or training steps (zero_grad, forward, the default loss, backward and an
SGD-momentum step), median of repeated calls after a warm-up. :func:`fit_costs` fits every class's cost
parameters at once by non-negative least squares on relative error, and the table goes to
:mod:`perfpredict.estimators.kernel_time`.

The sizes are drawn (seeded) over the range the zoo's layers span, capped so a call stays under ~50 ms.

``device="cuda"`` times the same modules on a GPU (synchronising after each call, as the profiler does), for a
GPU's own table; the kernels are still read off a CPU export, since the graph is the same.
"""

from __future__ import annotations

import math
import platform
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from perfpredict.errors import first_line
from perfpredict.estimators.kernel_nodes import KernelNode
from perfpredict.profile.timing import TimingConfig, time_iterations

MODES = ("infer", "train")


@dataclass
class Bench:
    """One microbenchmark: a name, and a builder of (module, inputs)."""

    name: str
    kind: str
    build: Callable[[], tuple[Any, tuple]]


def catalogue(seed: int = 0, per_kind: int = 24) -> list[Bench]:
    """The benchmarks: ``per_kind`` seeded sizes of each kind of layer; half as many for transposed
    convolutions, attention products, softmax and embeddings, 1.5x for element-wise ops, and the pools' share
    split between max and average pooling (299 in all at the default 24)."""
    import torch
    from torch import nn

    rng = random.Random(seed)
    out: list[Bench] = []

    def add(kind: str, name: str, build: Callable[[], tuple[Any, tuple]]) -> None:
        out.append(Bench(f"{kind}:{name}", kind, build))

    class Fn(nn.Module):
        def __init__(self, fn: Callable[..., Any], *mods: nn.Module) -> None:
            super().__init__()
            self.fn = fn
            self.mods = nn.ModuleList(mods)

        def forward(self, *xs):
            return self.fn(self.mods, *xs)

    def seq(*mods: nn.Module) -> nn.Module:
        return mods[0] if len(mods) == 1 else nn.Sequential(*mods)

    def pick(xs):
        return rng.choice(xs)

    def under(macs: float, limit: float = 4e8) -> bool:
        return macs <= limit

    # dense convolutions (incl. 3-channel stems, 1x1 and 7x7 kernels, strides)
    n = 0
    while n < per_kind:
        cin, cout, k, s, hw, b = (pick([3, 8, 16, 32, 64, 128, 256]), pick([8, 16, 32, 64, 128, 256]),
                                  pick([1, 3, 3, 5, 7]), pick([1, 1, 2]), pick([7, 14, 28, 56, 112]), pick([1, 4, 16]))
        macs = b * cout * (hw // s) ** 2 * cin * k * k
        if not under(macs) or macs < 1e4:
            continue
        add("conv", f"{cin}-{cout}-k{k}s{s}-{hw}-b{b}", lambda cin=cin, cout=cout, k=k, s=s, hw=hw, b=b: (
            nn.Conv2d(cin, cout, k, s, k // 2), (torch.randn(b, cin, hw, hw),)))
        n += 1
    # depthwise (and grouped) convolutions
    n = 0
    while n < per_kind:
        c, k, s, hw, b = (pick([16, 32, 64, 96, 144, 192, 384, 576, 960]), pick([3, 3, 5, 7]), pick([1, 1, 2]),
                          pick([7, 14, 28, 56, 112]), pick([1, 4, 16]))
        if b * c * hw * hw * 4 > 64e6:
            continue
        add("conv_grouped", f"{c}-k{k}s{s}-{hw}-b{b}", lambda c=c, k=k, s=s, hw=hw, b=b: (
            nn.Conv2d(c, c, k, s, k // 2, groups=c), (torch.randn(b, c, hw, hw),)))
        n += 1
    for _ in range(per_kind // 2):
        cin, cout, hw, b = pick([16, 32, 64, 128, 256]), pick([8, 16, 32, 64, 128]), pick([4, 8, 16, 32, 64]), pick([1, 4, 16])
        if not under(b * cin * hw * hw * cout * 4):
            continue
        add("conv_transpose", f"{cin}-{cout}-{hw}-b{b}", lambda cin=cin, cout=cout, hw=hw, b=b: (
            nn.ConvTranspose2d(cin, cout, 2, 2), (torch.randn(b, cin, hw, hw),)))
    # linear layers on 2-D and 3-D inputs
    n = 0
    while n < per_kind:
        m, k, nn_, three = pick([1, 4, 16, 64, 256, 1024, 4096]), pick([16, 64, 128, 256, 512, 1024, 4096]), \
            pick([10, 16, 64, 128, 256, 512, 1024, 4096]), rng.random() < 0.4
        if not under(m * k * nn_) or m * k * 4 > 64e6:
            continue
        shape = (max(m // 16, 1), min(m, 16), k) if three else (m, k)
        add("gemm", f"{'x'.join(map(str, shape))}-{nn_}", lambda k=k, nn_=nn_, shape=shape: (
            nn.Linear(k, nn_), (torch.randn(*shape),)))
        n += 1
    # activation x activation products (attention)
    for _ in range(per_kind // 2):
        b, h, seq_len, d = pick([1, 4, 16]), pick([1, 4, 8]), pick([16, 64, 128, 256]), pick([16, 32, 64])
        add("matmul", f"{b}x{h}x{seq_len}x{d}", lambda b=b, h=h, seq_len=seq_len, d=d: (
            Fn(lambda _m, q, k: torch.matmul(q, k.transpose(-1, -2))),
            (torch.randn(b, h, seq_len, d), torch.randn(b, h, seq_len, d))))
    # recurrent layers (one or two stacked, one or two directions: the sizes the zoo's LSTM and speech models
    # and ordinary sequence models use); a step loops, so sizes are capped by MACs x steps
    for cell in (nn.LSTM, nn.GRU, nn.RNN):
        n = 0
        while n < per_kind:
            i, hdim, t, b = (pick([16, 32, 64, 128, 256, 512]), pick([32, 64, 128, 256, 512, 1024]),
                             pick([8, 16, 32, 64, 128, 256]), pick([1, 4, 16, 64]))
            layers, bidir = pick([1, 1, 2]), rng.random() < 0.3
            gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[cell.__name__]
            macs = b * t * gates * hdim * (i + hdim) * layers * (2 if bidir else 1)
            if macs > 4e8:
                continue
            add(cell.__name__.lower(), f"{i}-{hdim}-t{t}-b{b}-l{layers}{'-bi' if bidir else ''}",
                lambda cell=cell, i=i, hdim=hdim, t=t, b=b, layers=layers, bidir=bidir: (
                    Fn(lambda mods, x: mods[0](x)[0], cell(i, hdim, num_layers=layers, batch_first=True,
                                                        bidirectional=bidir)), (torch.randn(b, t, i),)))
            n += 1
    # normalisation, pooling, softmax, copies, element-wise
    sizes = [2**e for e in range(10, 23)]

    def act_shape(elems: int) -> tuple[int, ...]:
        c = pick([16, 32, 64, 128, 256])
        hw = max(int(math.sqrt(elems / c)), 1)
        return (1, c, hw, hw)

    for _ in range(per_kind):
        e = pick(sizes)
        shp = act_shape(e)
        kind = pick(["bn", "ln"])
        if kind == "bn":
            add("norm", f"bn-{'x'.join(map(str, shp))}", lambda shp=shp: (nn.BatchNorm2d(shp[1]), (torch.randn(*shp),)))
        else:
            d = pick([64, 128, 256, 512, 768])
            rows = max(e // d, 1)
            add("norm", f"ln-{rows}x{d}", lambda rows=rows, d=d: (nn.LayerNorm(d), (torch.randn(1, rows, d),)))
    for _ in range(per_kind):
        shp = act_shape(pick(sizes))
        kind = pick(["max", "max", "avg", "gap", "mean"])
        mod = {"max": lambda: nn.MaxPool2d(2), "avg": lambda: nn.AvgPool2d(2),
               "gap": lambda: nn.AdaptiveAvgPool2d(1),
               "mean": lambda: Fn(lambda _m, x: x.mean(dim=(2, 3)))}[kind]
        add("maxpool" if kind == "max" else "pool", f"{kind}-{'x'.join(map(str, shp))}",
            lambda shp=shp, mod=mod: (mod(), (torch.randn(*shp),)))
    for _ in range(per_kind // 2):
        rows, cols = pick([16, 64, 256, 1024, 4096, 16384]), pick([64, 128, 256, 1000])
        add("softmax", f"{rows}x{cols}", lambda rows=rows, cols=cols: (nn.Softmax(-1), (torch.randn(rows, cols),)))
    for _ in range(per_kind):
        e = pick(sizes)
        kind = pick(["heads", "cat", "slice"])
        if kind == "heads":  # [B, L, H, D] -> [B, H, L, D], as attention splits heads
            h, d = pick([4, 8, 12]), pick([32, 64])
            seq_len = max(e // (h * d), 1)
            shp = (1, seq_len, h, d)
            build = (lambda shp=shp: (Fn(lambda _m, x: x.transpose(1, 2).contiguous() * 1.0),
                                      (torch.randn(*shp),)))
        elif kind == "cat":
            shp = act_shape(e)
            build = (lambda shp=shp: (Fn(lambda _m, x, y: torch.cat([x, y], 1)),
                                      (torch.randn(*shp), torch.randn(*shp))))
        else:
            shp = act_shape(e)
            build = (lambda shp=shp: (Fn(lambda _m, x: x[:, : shp[1] // 2].contiguous() * 1.0),
                                      (torch.randn(*shp),)))
        add("copy", f"{kind}-{'x'.join(map(str, shp))}", build)
    for _ in range(per_kind // 2):
        v, d, idx = pick([1000, 10000, 100000]), pick([16, 64, 256]), pick([64, 1024, 16384])
        add("gather", f"{v}x{d}-{idx}", lambda v=v, d=d, idx=idx: (
            nn.Embedding(v, d), (torch.randint(0, v, (1, idx)),)))
    for _ in range(per_kind * 3 // 2):
        shp = act_shape(pick(sizes))
        kind = pick(["relu", "relu", "add", "mul", "gelu", "sigmoid", "hardswish", "relu6"])
        fns: dict[str, Callable[..., Any]] = {
            "relu": lambda _m, x: torch.relu(x), "add": lambda _m, x: x + x * 0.5, "mul": lambda _m, x: x * x,
            "gelu": lambda _m, x: nn.functional.gelu(x), "sigmoid": lambda _m, x: torch.sigmoid(x),
            "hardswish": lambda _m, x: nn.functional.hardswish(x), "relu6": lambda _m, x: nn.functional.relu6(x)}
        add("pointwise", f"{kind}-{'x'.join(map(str, shp))}", lambda shp=shp, fn=fns[kind]: (
            Fn(fn), (torch.randn(*shp),)))
    return out


def kernel_nodes_of(module: Any, inputs: tuple) -> list[KernelNode]:
    """The kernel descriptors of ``module(*inputs)``'s ONNX export, as a model's graph walk makes them."""
    from perfpredict.features.graph import analyze_onnx
    from perfpredict.features.onnx_export import export_onnx

    return analyze_onnx(export_onnx(module, inputs).model_proto).kernel_nodes


def time_call(module: Any, inputs: tuple, mode: str, min_time_s: float = 0.15, warmup: int = 3,
              device: str = "cpu") -> float:
    """Median seconds of one inference pass or training step of ``module`` on ``inputs``, timed as the
    profiler times a model (inference under ``torch.inference_mode``; training with the default loss and an
    SGD-momentum step) on ``device`` ("cpu", or "cuda[:i]", synchronised after every call)."""
    import torch

    from perfpredict.workload.spec import default_loss, default_optimizer

    module = module.to(device)
    inputs = tuple(x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs)
    sync = (lambda: torch.cuda.synchronize(device)) if str(device).startswith("cuda") else (lambda: None)

    if mode == "train":
        module.train()
        params = [p for p in module.parameters() if p.requires_grad]
        xs = tuple(x.requires_grad_(True) if x.is_floating_point() and not params else x for x in inputs)
        opt = default_optimizer(params) if params else None

        def step() -> None:
            if opt is not None:
                opt.zero_grad()  # set_to_none is torch's default; a wrapper may not take it
            loss = default_loss(module(*xs))
            loss.backward()
            if opt is not None:
                opt.step()
    else:
        module.eval()

        def step() -> None:
            with torch.inference_mode():
                module(*inputs)

    # the profiler's loop: a fixed warm-up, then at least 5 iterations and min_time_s of them (no stability
    # test: one layer's steps barely vary), at most 2000
    cfg = TimingConfig(warmup_iters=warmup, warmup_s=0.0, min_iters=5, max_iters=2000, min_time_s=min_time_s,
                       max_time_s=float("inf"), rel_tol=float("inf"))
    return time_iterations(step, sync, cfg).stats()["median_s"]


def measure(benches: Iterable[Bench], modes: Iterable[str] = MODES,
            progress: Callable[[str], None] | None = None, device: str = "cpu") -> list[dict[str, Any]]:
    """Time every benchmark in every mode on ``device``; one record per benchmark: its kernels and seconds by
    mode. A benchmark that fails to build, export or run (a CUDA OOM included) is recorded with its error and
    left out of the fit."""
    import torch

    records = []
    for b in benches:
        rec: dict[str, Any] = {"name": b.name, "kind": b.kind}
        try:
            torch.manual_seed(0)
            module, inputs = b.build()
            rec["nodes"] = [[k.cls, k.macs, k.io_bytes, k.weight_bytes, k.steps]
                            for k in kernel_nodes_of(module, inputs)]
            rec["seconds"] = {m: time_call(module, inputs, m, device=device) for m in modes}
        except Exception as e:  # noqa: BLE001 - one broken benchmark must not lose the others
            rec["error"] = f"{type(e).__name__}: {first_line(e)[:200]}"
        records.append(rec)
        if progress:
            progress(b.name)
    return records


def machine_description(device: str = "cpu") -> dict[str, Any]:
    """What the cost table depends on: the device the timings ran on, the CPU model and the threads they used,
    the torch build (and for a GPU its name and CUDA version)."""
    import os

    import torch

    from perfpredict.hostinfo import cpu_id, cpu_model_name

    # cpu_id: two VMs both named "AMD EPYC" ran the same steps a median 0.75x apart; the id tells them apart
    out = {"device": str(device), "cpu_model": cpu_model_name(), "cpu_id": cpu_id(), "cpu_count": os.cpu_count(),
           "threads": torch.get_num_threads(), "torch_version": torch.__version__,
           "python_version": platform.python_version(), "machine": platform.machine()}
    if str(device).startswith("cuda"):
        out |= {"gpu_name": torch.cuda.get_device_name(device), "cuda_version": torch.version.cuda}
    return out
