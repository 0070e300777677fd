"""The machine code a model's run pages in: which pages of torch's shared libraries each kind of op touches.

A CPU measurement's RSS increase is not only tensors. The measuring process is a fork of a server that
imported torch, and a fork does not copy the page-table entries of file-backed mappings, so every page of
``libtorch_cpu.so`` (and oneDNN, MKL, OpenMP) that the model's kernels execute is faulted in and counted
again: 16 MiB for an MLP, 23 MiB for the zoo's Transformer, 34 MiB for the speech model on the Xeon VM,
measured as the child's ``RssFile`` growth. That is a third to a half of a small model's inference RSS, and
it depends on *which* kernels run, not on their sizes, so it is the largest error of the inference memory
estimator (family-CV MAPE 10.6% → 5.9% on the Xeon when the measured value is subtracted).

This module measures it per op kind. For each entry of :data:`CATALOGUE` (an ONNX op type and the small
PyTorch modules that run it the way eager PyTorch does), a fresh fork of the measuring server builds the
module and runs it as the profiler would (inference passes, or training steps with SGD-momentum), and
``/proc/self/pagemap`` gives the set of file-backed pages that became resident in that process: exact page
identities (library, page offset), so sets of different ops can be unioned and shared code counts once.
:mod:`perfpredict.estimators.code_footprint` turns a graph's op types into the union of their sets.

Linux only (``/proc/self/pagemap``; its present bit needs no privileges). Page sets depend on the torch
build and the CPU's instruction set (ATen compiles kernels per ISA), so a table records both.
"""

from __future__ import annotations

import os
import platform
import struct
from collections.abc import Callable
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_file_pages() -> set[tuple[str, int]]:
    """(library file name, page index in the file) of every file-backed page mapped in this process now."""
    maps = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith("/"):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                maps.append((lo, hi, os.path.basename(parts[5]), int(parts[2], 16) // PAGE))
    out: set[tuple[str, int]] = set()
    with open("/proc/self/pagemap", "rb") as f:
        for lo, hi, name, first in maps:
            f.seek(lo // PAGE * 8)
            data = f.read((hi - lo) // PAGE * 8)
            for i, (v,) in enumerate(struct.iter_unpack("<Q", data)):
                if v >> 63:
                    out.add((name, first + i))
    return out


def _entries() -> dict[str, tuple[tuple[str, ...], Callable[[], tuple[Any, tuple]]]]:
    """name -> (ONNX op types it stands for, builder returning (module, inputs)). Shapes are small but not
    trivial, so each op takes the vectorised kernels a real layer takes (both of the CPU's two threads)."""
    import torch
    from torch import nn

    def img(c=16, s=16):
        return (torch.randn(4, c, s, s),)

    def seq(d=64, L=32):
        return (torch.randn(4, L, d),)

    class Fn(nn.Module):
        def __init__(self, fn, *mods):
            super().__init__()
            self.fn, self.mods = fn, nn.ModuleList(mods)

        def forward(self, *xs):
            return self.fn(*self.mods, *xs) if len(self.mods) else self.fn(*xs)

    def lin_in(fn):  # an op applied after a Linear, so a training step has a weight to update
        return lambda: (Fn(lambda l, x: fn(l(x)), nn.Linear(64, 64)), seq())

    def lin_mod(make):  # a module made in the builder, after a Linear
        def build():
            return Fn(lambda l, mod, x: mod(l(x)), nn.Linear(64, 64), make()), seq()
        return build

    def conv_in(make):  # a module made in the builder, after a 1x1 convolution
        def build():
            m = make()
            return Fn(lambda c, mod, x: mod(c(x)), nn.Conv2d(16, 16, 1), m), img()
        return build

    return {
        "identity": ((), lambda: (Fn(lambda l, x: l(x), nn.Identity()), seq())),
        "conv2d": (("Conv",), lambda: (nn.Conv2d(16, 32, 3, padding=1), img())),
        "conv2d_depthwise": (("Conv",), lambda: (nn.Conv2d(16, 16, 3, padding=1, groups=16), img())),
        "conv_transpose2d": (("ConvTranspose",), lambda: (nn.ConvTranspose2d(16, 8, 2, stride=2), img())),
        "linear_2d": (("Gemm",), lambda: (nn.Linear(64, 64), (torch.randn(8, 64),))),
        "linear_3d": (("MatMul",), lambda: (nn.Linear(64, 64), seq())),
        "batched_matmul": (("MatMul",), lambda: (Fn(lambda l, x: torch.matmul(l(x), l(x).transpose(1, 2)),
                                                    nn.Linear(64, 64)), seq())),
        "batch_norm2d": (("BatchNormalization",), conv_in(lambda: nn.BatchNorm2d(16))),
        "layer_norm": (("LayerNormalization",), lin_mod(lambda: nn.LayerNorm(64))),
        "relu": (("Relu",), lin_in(torch.relu)),
        "relu6": (("Clip",), lin_in(nn.functional.relu6)),
        "gelu": (("Erf", "Gelu"), lin_in(nn.functional.gelu)),
        "sigmoid": (("Sigmoid",), lin_in(torch.sigmoid)),
        "tanh": (("Tanh",), lin_in(torch.tanh)),
        "softmax": (("Softmax",), lin_in(lambda x: torch.softmax(x, -1))),
        "log_softmax": (("LogSoftmax",), lin_in(lambda x: torch.log_softmax(x, -1))),
        "hardswish": (("HardSwish",), lin_in(nn.functional.hardswish)),
        "hardsigmoid": (("HardSigmoid",), lin_in(nn.functional.hardsigmoid)),
        "leaky_relu": (("LeakyRelu",), lin_in(nn.functional.leaky_relu)),
        "max_pool2d": (("MaxPool",), conv_in(lambda: nn.MaxPool2d(2))),
        "avg_pool2d": (("AveragePool",), conv_in(lambda: nn.AvgPool2d(2))),
        "global_avg_pool": (("GlobalAveragePool",), conv_in(lambda: nn.AdaptiveAvgPool2d(1))),
        "mean": (("ReduceMean",), lin_in(lambda x: x.mean(1))),
        "sum": (("ReduceSum",), lin_in(lambda x: x.sum(1))),
        "sqrt": (("Sqrt",), lin_in(lambda x: (x * x + 1).sqrt())),
        "add": (("Add",), lin_in(lambda x: x + x)),
        "sub": (("Sub",), lin_in(lambda x: x - 1.0)),
        "mul": (("Mul",), lin_in(lambda x: x * x)),
        "div": (("Div",), lin_in(lambda x: x / 3.0)),
        "concat": (("Concat",), lin_in(lambda x: torch.cat([x, x], -1))),
        "transpose": (("Transpose",), lin_in(lambda x: x.transpose(1, 2).contiguous())),
        "embedding": (("Gather",), lambda: (nn.Embedding(1000, 64), (torch.randint(0, 1000, (4, 32)),))),
        "lstm": (("LSTM",), lambda: (Fn(lambda m, x: m(x)[0], nn.LSTM(64, 64, batch_first=True)), seq())),
        "gru": (("GRU",), lambda: (Fn(lambda m, x: m(x)[0], nn.GRU(64, 64, batch_first=True)), seq())),
        "rnn": (("RNN",), lambda: (Fn(lambda m, x: m(x)[0], nn.RNN(64, 64, batch_first=True)), seq())),
        # A MatMul -> Softmax -> MatMul chain is attention; eager PyTorch runs nn.MultiheadAttention and
        # nn.TransformerEncoderLayer through their own kernels (a fused fast path in inference).
        "attention": (("Attention",), lambda: (nn.TransformerEncoder(
            nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), 1, enable_nested_tensor=False), seq())),
    }


#: The entries' names, in measuring order (the builders import torch, so they are made in the child).
CATALOGUE: tuple[str, ...] = (
    "identity", "conv2d", "conv2d_depthwise", "conv_transpose2d", "linear_2d", "linear_3d", "batched_matmul",
    "batch_norm2d", "layer_norm", "relu", "relu6", "gelu", "sigmoid", "tanh", "softmax", "log_softmax",
    "hardswish", "hardsigmoid", "leaky_relu", "max_pool2d", "avg_pool2d", "global_avg_pool", "mean", "sum",
    "sqrt", "add", "sub", "mul", "div", "concat", "transpose", "embedding", "lstm", "gru", "rnn", "attention")


def onnx_ops_of(name: str) -> tuple[str, ...]:
    return _entries()[name][0]


def measure_entry(name: str, mode: str = "infer", threads: int | None = None, iterations: int = 5) -> dict[str, Any]:
    """In *this* process (a fresh fork of the measuring server): build entry ``name``, run ``iterations``
    inference passes (``mode="infer"``, under ``torch.inference_mode``) or training steps (``"train"``:
    forward, mean loss, backward, SGD-momentum step), and return the file-backed pages that became resident,
    as ``{library: sorted page indices}``."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    before = resident_file_pages()
    torch.manual_seed(0)
    ops, build = _entries()[name]
    model, inputs = build()
    if mode == "infer":
        model.eval()
        for _ in range(iterations):
            with torch.inference_mode():
                model(*inputs)
    else:
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.SGD(params, lr=0.01, momentum=0.9) if params else None
        for _ in range(iterations):
            out = model(*inputs)
            loss = out.float().mean()
            if opt:
                opt.zero_grad()  # set_to_none is torch's default; a wrapper may not take it
            if loss.requires_grad:
                loss.backward()
            if opt:
                opt.step()
    pages: dict[str, list[int]] = {}
    for lib, idx in resident_file_pages() - before:
        pages.setdefault(lib, []).append(idx)
    return {"name": name, "onnx_ops": list(ops), "mode": mode,
            "pages": {lib: sorted(v) for lib, v in sorted(pages.items())}}


def _child(req: tuple[str, str, int | None], conn) -> None:
    """Fork-server child: ``req`` is (entry name, mode, threads)."""
    try:
        conn.send(measure_entry(*req))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which names the entry
        conn.send({"name": req[0], "error": f"{type(e).__name__}: {e}"})
    finally:
        conn.close()


def measure_catalogue(mode: str = "infer", names: tuple[str, ...] = CATALOGUE, threads: int | None = 2,
                      timeout_s: float = 120.0, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every entry's page set, each measured in a fresh fork of the fork server (the profiler's own
    start method and runner, so the pages counted are those a profiled model's process faults in, and a
    child that dies or hangs is reported as the profiler reports it)."""
    if not os.path.exists("/proc/self/pagemap"):
        raise RuntimeError("code-page measurement needs Linux's /proc/self/pagemap")
    from perfpredict.profile.runner import run_entry

    out: dict[str, Any] = {}
    for name in names:
        if progress:
            progress(name)
        res = run_entry(_child, (name, mode, threads), timeout_s, {"name": name})
        if "error" in res:
            raise RuntimeError(f"code pages of {name!r} ({mode}): {res['error']}")
        out[name] = {"onnx_ops": res["onnx_ops"], "pages": _to_ranges(res["pages"])}
    return out


def _to_ranges(pages: dict[str, list[int]]) -> dict[str, list[list[int]]]:
    """Sorted page indices as [first, last] runs (a few hundred runs instead of thousands of numbers)."""
    out = {}
    for lib, idx in pages.items():
        runs: list[list[int]] = []
        for i in idx:
            if runs and i == runs[-1][1] + 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        out[lib] = runs
    return out


def machine_description(threads: int | None = 2) -> dict[str, Any]:
    """What a page table depends on: the CPU model (ATen's per-ISA kernels), the torch build, the threads."""
    import torch

    from perfpredict.hostinfo import cpu_model_name

    return {"cpu_model": cpu_model_name(), "torch": torch.__version__, "python": platform.python_version(),
            "page_size": PAGE, "threads": threads}
