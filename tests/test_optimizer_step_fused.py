"""The step temporaries of optimizers the meta-tensor probe cannot step: fused AdamW (torch refuses meta tensors),
Adafactor and ASGD (their steps read values with ``.item()``). They were charged none, with a note, whatever they
hold: measured on the CPU (a new-tensor counter, torch.profiler's allocator events and peak RSS alike) over a
64 MiB Linear(4096, 4096), Adafactor's step holds 64 MiB (``row_var @ col_var``, 1 x the weight) and ASGD's foreach
step (its default on CUDA) 64 MiB; fused AdamW and ASGD one tensor at a time hold none. They are now counted over
real CPU tensors, scaled down past ``REAL_PROBE_BYTES``. Adafactor runs one tensor at a time on CUDA too unless
told ``foreach=True``, where the probe ran its foreach step.

Each charge is checked against torch.profiler's count of the allocator's live bytes in a real step of the same
optimizer over the real model's weights on the CPU, run as torch runs it on that device kind."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from perfpredict.workload.spec import optimizer_step_bytes
from tests.conftest import allocator_peak_of_step, fused_adamw_on_cpu

FUSED = pytest.mark.skipif(not fused_adamw_on_cpu(), reason="this torch has no fused AdamW on the CPU")
#: name: (the optimizer as a model file makes it, its options as torch runs it on the CPU, on CUDA)
OPTIMIZERS: dict[str, tuple[Callable, dict, dict]] = {
    "adamw": (lambda p: torch.optim.AdamW(p), {"foreach": False}, {"foreach": True}),
    "adamw_fused": (lambda p: torch.optim.AdamW(p, fused=True), {"fused": True}, {"fused": True}),
    "adafactor": (lambda p: torch.optim.Adafactor(p), {"foreach": False}, {"foreach": False}),
    "adafactor_foreach": (lambda p: torch.optim.Adafactor(p, foreach=True), {"foreach": True}, {"foreach": True}),
    "asgd": (lambda p: torch.optim.ASGD(p), {"foreach": False}, {"foreach": True}),
}
#: a model stepped whole, and one whose 8 MiB weight the probe scales down
MODELS = {"small": lambda: nn.Sequential(nn.Linear(64, 128), nn.Linear(128, 128), nn.Linear(128, 32)),
          "scaled": lambda: nn.Linear(2048, 1024)}


def _profiled_step_peak(cls: type, options: dict, model: nn.Module) -> int:
    """The most bytes torch's allocator holds at once beyond its start in a real step (the second: the first
    makes the state) of ``cls(**options)`` over ``model``'s weights, by torch.profiler's memory events."""
    torch.manual_seed(0)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    opt = cls(params, **options)
    opt.step()
    return allocator_peak_of_step(opt)


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("name", [pytest.param(n, marks=FUSED) if "fused" in n else n for n in OPTIMIZERS])
def test_the_step_charge_is_what_a_real_step_holds(name: str, model: str) -> None:
    """Per device kind, the probe's charge is the allocator's peak in a real CPU step run as torch runs it on
    that kind (scalars and a scaled weight's row and column means aside: 2%, 4 KiB)."""
    make, on_cpu, on_cuda = OPTIMIZERS[name]
    net = MODELS[model]()
    params = list(net.parameters())
    if model == "scaled":
        from perfpredict.workload.spec import REAL_PROBE_BYTES

        assert sum(p.numel() * p.element_size() for p in params) > REAL_PROBE_BYTES
    charged = optimizer_step_bytes(make(params), params)
    cls = type(make(params))
    for kind, options in (("cpu", on_cpu), ("cuda", on_cuda)):
        measured = _profiled_step_peak(cls, options, MODELS[model]())
        assert charged[kind] == pytest.approx(measured, rel=0.02, abs=4096), (kind, charged, measured)


def test_the_measured_temporaries_of_a_large_weight() -> None:
    """Over one 8 MiB weight (its bias aside): Adafactor's step holds 1 x the weight, ASGD's foreach step (CUDA's
    default) 1 x, one tensor at a time (the CPU's) none, fused AdamW none."""
    net = MODELS["scaled"]()
    params = list(net.parameters())
    weight = net.weight.numel() * 4
    adafactor = optimizer_step_bytes(torch.optim.Adafactor(params), params)
    asgd = optimizer_step_bytes(torch.optim.ASGD(params), params)
    assert adafactor["cpu"] == adafactor["cuda"] == pytest.approx(weight, rel=0.02)
    assert asgd["cpu"] == 0 and asgd["cuda"] == pytest.approx(weight, rel=0.01)
    if fused_adamw_on_cpu():
        assert optimizer_step_bytes(torch.optim.AdamW(params, fused=True), params) == {"cpu": 0.0, "cuda": 0.0}
