"""Review of session 48's real-tensor step probe (``optimizer_step_bytes`` over small CPU tensors).

- ASGD with ``t0=0`` (as AWD-LSTM's NT-ASGD builds it) averages from its third step on: one tensor at a time, each
  step then holds ``param.sub(ax)`` (1 x the weight; torch.profiler's allocator peak 8 MiB a step over a
  Linear(2048, 1024) from step 3 on), but the probe counted only the second step, which still copies (0): it charged
  none. The probe now counts the most of a second and a third step.
- A user's step that draws from the global generators (a random skip read with ``.item()``, noise added to the
  update) advanced the caller's torch, numpy and Python random streams when probed over real tensors (and the
  state-copies probe's real step): a seeded script calling the probe drew other numbers after it. The probes now
  leave them as they found them.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

from perfpredict.workload.spec import optimizer_state_copies, optimizer_step_bytes
from tests.conftest import allocator_peak_of_step


def test_asgd_averaging_from_the_start_is_charged_what_its_steps_hold() -> None:
    """ASGD(t0=0) one tensor at a time (the CPU's default): from the third step on every step holds 1 x the
    weight (measured); the probe charges that, not the second step's copy (0)."""
    net = nn.Linear(2048, 1024)  # 8 MiB: scaled down by the real probe
    params = list(net.parameters())
    charged = optimizer_step_bytes(torch.optim.ASGD(params, t0=0), params)
    torch.manual_seed(0)
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.ASGD(params, t0=0, foreach=False)
    peaks = [allocator_peak_of_step(opt) for _ in range(5)]
    assert peaks[1] < 4096 and min(peaks[2:]) >= net.weight.numel() * 4, peaks
    assert charged["cpu"] == pytest.approx(max(peaks[2:]), rel=0.02), (charged, peaks)


class NoisySkip(torch.optim.Optimizer):
    """SGD that skips an update at random (a coin read with ``.item()``: no meta-tensor step) and adds noise drawn
    from torch's, numpy's and Python's global generators."""

    def __init__(self, params, lr: float = 0.1) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None or torch.rand((), device=p.device).item() < 0.1:
                    continue
                scale = 1e-3 * np.random.rand() * random.random()
                p.add_(p.grad + torch.randn_like(p) * scale, alpha=-group["lr"])


def _draws() -> tuple[float, float, float]:
    return torch.rand(()).item(), float(np.random.rand()), random.random()


def test_the_probes_leave_the_global_generators_alone() -> None:
    """A seeded caller draws the same numbers after probing a step that draws from the global generators."""
    params = list(nn.Linear(64, 32).parameters())
    opt = NoisySkip(params)
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    expected = _draws()
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    step_bytes = optimizer_step_bytes(opt, params)
    assert optimizer_state_copies(opt, params) == 0
    assert _draws() == expected
    assert step_bytes["cpu"] > 0  # it was probed (over real tensors), not refused
