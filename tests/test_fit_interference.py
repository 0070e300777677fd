"""Horus's slowdown-vs-cumulative-utilisation fit: recovers known shapes, says when a branch is missing."""

from __future__ import annotations

import numpy as np
import pytest

from perfpredict.card import ColocationInfo, PairColocation
from perfpredict.fit.interference import (
    InterferenceFitError,
    InterferenceModel,
    fit_interference,
    interference_points,
)


def _truth(u: np.ndarray) -> np.ndarray:
    # Continuous at 1.0: 0.3·u below; 0.3 + 0.5(u-1) + 1.2(u-1)² above.
    return np.where(u <= 1.0, 0.3 * u, 0.3 + 0.5 * (u - 1) + 1.2 * (u - 1) ** 2)


def test_recovers_a_line_below_and_a_quadratic_above_the_knee():
    u = np.linspace(0.2, 1.9, 18)
    m = fit_interference(u, _truth(u))
    assert m.linear == pytest.approx((0.0, 0.3), abs=1e-9)
    # 0.3 + 0.5(u-1) + 1.2(u-1)^2 = (0.3 - 0.5 + 1.2) + (0.5 - 2.4)u + 1.2u^2
    assert m.quadratic == pytest.approx((1.0, -1.9, 1.2), abs=1e-9)
    assert m.r2_linear == pytest.approx(1.0) and m.r2_quadratic == pytest.approx(1.0)
    assert m.jump_at_knee == pytest.approx(0.0, abs=1e-9)
    grid = np.array([0.1, 0.55, 1.0, 1.33, 2.2])
    assert m.predict(grid) == pytest.approx(_truth(grid), abs=1e-9)
    assert m.predict(0.5) == pytest.approx(0.15)
    assert m.n_linear + m.n_quadratic == 18 and not m.notes


def test_noisy_points_fit_with_r2_below_one_and_round_trip_through_a_dict():
    rng = np.random.default_rng(0)
    u = rng.uniform(0.2, 2.0, 60)
    y = np.clip(_truth(u) + rng.normal(0, 0.03, u.size), 0, None)
    m = fit_interference(u, y)
    assert 0.8 < m.r2_linear < 1.0 and 0.8 < m.r2_quadratic < 1.0
    back = InterferenceModel.from_dict(m.to_dict())
    assert back.predict([0.4, 1.5]) == pytest.approx(m.predict([0.4, 1.5]))


def test_a_missing_branch_borrows_the_other_and_says_so():
    u = np.array([0.2, 0.4, 0.6, 0.8])
    m = fit_interference(u, 0.5 * u)
    assert m.quadratic is None and m.jump_at_knee is None
    assert m.predict(1.5) == pytest.approx(0.75)  # the line, extended
    assert any("linear fit is extended" in n for n in m.notes)
    with pytest.raises(InterferenceFitError, match="too few"):
        fit_interference([0.5, 1.5], [0.1, 0.9])
    with pytest.raises(InterferenceFitError, match="finite"):
        fit_interference([0.5, np.nan], [0.1, 0.2])
    with pytest.raises(InterferenceFitError, match=">= 0"):
        fit_interference([0.5, 0.6], [0.1, -0.2])


def test_points_come_from_measured_gpu_pairs_only():
    class Card:
        def __init__(self, pairs):
            self.colocation = ColocationInfo(batch_size=8, window_s=1.0, pairs=pairs)

    gpu = PairColocation(partner="zoo:mlp", job_slowdown=0.4, partner_slowdown=0.2, cumulative_gpu_utilization=1.3)
    cpu = PairColocation(partner="zoo:mlp", job_slowdown=0.5, partner_slowdown=0.1)
    failed = PairColocation(partner="zoo:mlp", status="oom", cumulative_gpu_utilization=1.1)
    us, ys = interference_points([Card([gpu, cpu, failed]), type("NoColo", (), {"colocation": None})()])
    assert us == [1.3, 1.3] and ys == [0.4, 0.2]
