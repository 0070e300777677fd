"""Defects a property scan of the simulator's performance models found (session 40): a card listing its memory
columns in descending order, a grid starting at 0 CPUs, and ``rate_at`` with no GPU."""

from __future__ import annotations

import math

import pytest

from perfpredict.card import SensitivityCard, SensitivityDemand
from perfpredict.sched.cluster import Allocation, Share
from perfpredict.sched.paper_cards import paper_model
from perfpredict.sim.run import load_perf_models
from tests.test_card import build_card


def _model(tmp_path, cpu_values, mem_values, matrix, demand_cpus, demand_mem):
    card, _ = build_card()
    card.sensitivity = SensitivityCard(cpu_values=cpu_values, mem_values_gb=mem_values, matrix=matrix,
                                       profiled_cpu_values=cpu_values,
                                       demand=SensitivityDemand(cpus=demand_cpus, mem_gb=demand_mem), threshold=0.1)
    card.save(tmp_path / "job" / "card.json")
    return load_perf_models(tmp_path)["job"]


def _rate(pm, cpus, mem):
    return pm.rate(Allocation((Share(0, 1, cpus, mem, devices=(0,)),)), 1)


def test_memory_columns_listed_high_to_low_are_read_with_their_values(tmp_path):
    """125 GB then 62.5 GB, where 62.5 GB gives half the speed: read as listed, 250 GB came out slower than 125."""
    pm = _model(tmp_path, [1, 2, 3], [125.0, 62.5], [[1.0, 0.5], [2.0, 1.0], [3.0, 1.5]], 3, 125.0)
    assert pm.mem_per_gpu == (62.5, 125.0)
    rates = [_rate(pm, 3, m) for m in (31.25, 62.5, 100.0, 125.0, 250.0)]
    # simulate's reference is Synergy's share, 3 CPUs and 62.5 GB a GPU: twice as fast from 125 GB
    assert rates[1] == pytest.approx(1.0) and rates[3] == pytest.approx(2.0) and rates[4] == pytest.approx(2.0)
    assert all(b >= a for a, b in zip(rates, rates[1:]))


def test_a_grid_starting_at_zero_cpus_gives_no_nan_for_a_share_at_float_noise_below_zero(tmp_path):
    pm = _model(tmp_path, [0, 3, 6], [62.5], [[0.0], [1.0], [1.5]], 3, 62.5)
    assert _rate(pm, -1e-10, 62.5) == 0.0 and not math.isnan(pm.w(-1e-12, 62.5))


def test_rate_at_no_gpu_is_zero_with_a_grid_too():
    assert paper_model("resnet18").rate_at(0, 1) == 0.0 == paper_model("mcnn").rate_at(0, 1)
