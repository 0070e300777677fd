"""The speedup curve (perfpredict.fit.speedup): concave non-decreasing least-squares fit through the origin,
exact interpolation of already-concave data, the physical bounds S(1/n) ≥ 1/n and S(k) ≤ k, the capped
parametric tail, uncertainty, the JSON round trip and input validation.

Data are synthetic: Amdahl / power-law curves (concave through the origin over fractional and whole p) and
seeded noisy versions of them, so expected values are known.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from perfpredict.errors import FitError
from perfpredict.fit import SpeedupCurve, SpeedupFitError, fit_speedup_curve
from perfpredict.fit.speedup import (
    AMDAHL,
    COLOCATED,
    DATA_PARALLEL,
    FLAT,
    POWER_LAW,
    SOLO,
)

F = 0.9  # Amdahl parallel fraction
P = np.array([1 / 4, 1 / 3, 1 / 2, 1, 2, 4, 8])


def amdahl(p, f=F):
    return 1.0 / ((1.0 - f) + f / np.asarray(p, dtype=float))


def assert_monotone_concave(curve: SpeedupCurve, hi: float = 256.0) -> None:
    # a uniform grid straddling every knot, the join with the tail, and far into the tail
    grid = np.linspace(0.0, hi, 20001)
    s = curve.speedup(grid)
    assert np.all(np.isfinite(s))
    assert s[0] == 0.0
    assert np.all(np.diff(s) >= -1e-12), "curve decreases somewhere"
    assert np.all(np.diff(s, 2) <= 1e-9), "curve is convex somewhere"


def sse(curve: SpeedupCurve, p, s) -> float:
    return float(np.sum(((curve.speedup(p) - s) / s) ** 2))


@pytest.fixture(scope="module")
def exact() -> SpeedupCurve:
    return fit_speedup_curve(P, amdahl(P))


@pytest.fixture(scope="module")
def noisy_data():
    rng = np.random.default_rng(7)
    s = amdahl(P) * (1.0 + 0.08 * rng.standard_normal(P.size))
    s[P == 1] = 1.0
    s[4] = s[5] * 1.05  # S(2) > S(4): non-monotone
    return P, s


# --- exact data ------------------------------------------------------------------------------------------
def test_exact_interpolation_of_concave_monotone_data(exact):
    np.testing.assert_allclose(exact.speedup(P), amdahl(P), rtol=1e-11)
    np.testing.assert_allclose(exact.residuals, 0.0, atol=1e-11)
    assert exact.speedup(1.0) == 1.0
    # between knots: straight line between the measured neighbours
    mid = 0.5 * (amdahl(2) + amdahl(4))
    assert exact.speedup(3.0) == pytest.approx(mid, rel=1e-9)
    assert exact.speedup(3.0) < amdahl(3.0)  # chord of a strictly concave curve lies below it


def test_exact_piecewise_linear_data_reproduced():
    p = [0.25, 0.5, 1, 2, 4]
    s = [0.3, 0.55, 1.0, 1.6, 2.2]  # slopes 1.2, 1.0, 0.9, 0.6, 0.3: concave through the origin
    c = fit_speedup_curve(p, s)
    np.testing.assert_allclose(c.speedup(p), s, rtol=1e-9)
    assert c.speedup(3.0) == pytest.approx(1.9, rel=1e-9)
    assert c.speedup(0.75) == pytest.approx(0.775, rel=1e-9)


def test_amdahl_tail_recovers_parameter_and_extrapolates_exactly(exact):
    assert exact.tail.kind == AMDAHL
    assert exact.tail.fitted == pytest.approx(F, rel=1e-9)
    assert not exact.tail.capped
    far = np.array([16.0, 64.0, 1024.0])
    np.testing.assert_allclose(exact.speedup(far), amdahl(far), rtol=1e-9)
    assert exact.saturation == pytest.approx(1.0 / (1.0 - F), rel=1e-9)


def test_power_law_tail_on_power_law_data():
    a = 0.8
    c = fit_speedup_curve(P, P ** a, tail=POWER_LAW)
    assert c.tail.kind == POWER_LAW
    assert c.tail.used == pytest.approx(a, rel=1e-9)
    np.testing.assert_allclose(c.speedup([16.0, 100.0]), np.array([16.0, 100.0]) ** a, rtol=1e-9)
    assert c.saturation == float("inf")


def test_fractional_points_kept_and_classified(exact):
    kinds = [q.kind for q in exact.points]
    assert kinds == [COLOCATED] * 3 + [SOLO] + [DATA_PARALLEL] * 3
    assert exact.p_range == (0.25, 8.0)
    assert exact.knots[0] == (0.0, 0.0)
    assert [k[0] for k in exact.knots[1:]] == pytest.approx(list(P))
    # aggregate over n co-located copies is n*S(1/n) >= 1
    for n in (2, 3, 4):
        assert n * exact.speedup(1.0 / n) >= 1.0


# --- noisy, non-monotone data ----------------------------------------------------------------------------
def test_noisy_nonmonotone_input_gives_monotone_concave_curve(noisy_data):
    p, s = noisy_data
    assert np.any(np.diff(s[p >= 1]) < 0)  # the input really is non-monotone
    c = fit_speedup_curve(p, s)
    assert_monotone_concave(c)
    assert c.speedup(1.0) == 1.0
    assert np.max(np.abs(c.residuals)) > 1e-3  # it had to move points
    eff = c.efficiency(np.linspace(0.05, 100, 500))
    assert np.all(np.diff(eff) <= 1e-12)


def test_noisy_fit_is_the_least_squares_projection(noisy_data):
    """No concave non-decreasing curve through (0,0) and (1,1) with the same knots fits better: compare with
    a general-purpose constrained optimiser on the knot values."""
    from scipy.optimize import minimize

    p, s = noisy_data
    c = fit_speedup_curve(p, s)
    x = np.concatenate([[0.0], p])  # knots: 0 and the (distinct, sorted) p's

    def obj(y):
        return float(np.sum(((y[1:] - s) / s) ** 2))

    def slopes(y):
        return np.diff(y) / np.diff(x)

    cons = [{"type": "eq", "fun": lambda y: y[0]},
            {"type": "eq", "fun": lambda y: y[1 + int(np.flatnonzero(p == 1)[0])] - 1.0},
            {"type": "ineq", "fun": lambda y: -np.diff(slopes(y))},
            {"type": "ineq", "fun": lambda y: slopes(y)[-1:]}]
    ref = minimize(obj, np.concatenate([[0.0], amdahl(p)]), constraints=cons, method="SLSQP",
                   options={"ftol": 1e-14, "maxiter": 500})
    assert ref.success
    ours = sse(c, p, s)
    assert ours <= ref.fun * (1 + 1e-6) + 1e-12
    assert ours == pytest.approx(ref.fun, rel=1e-4)


def test_superlinear_and_thrashing_points_projected_onto_bounds():
    p = [0.5, 1, 2, 4]
    s = [0.4, 1.0, 2.4, 3.0]  # co-location aggregate 0.8 < 1, and S(2) > 2
    c = fit_speedup_curve(p, s)
    assert c.speedup(0.5) >= 0.5 - 1e-12
    assert c.speedup(2.0) <= 2.0 + 1e-12
    assert_monotone_concave(c)


def test_sigma_weights_points():
    p = [1, 2, 4, 8]
    s = [1.0, 1.5, 3.2, 3.6]  # S(4) sits above the chord: not concave
    loose = fit_speedup_curve(p, s)
    tight = fit_speedup_curve(p, s, sigma=[1.0, 1.0, 1e-6, 1.0])
    assert abs(tight.speedup(4.0) - 3.2) < 1e-4
    assert abs(loose.speedup(4.0) - 3.2) > 1e-2
    assert_monotone_concave(tight)


def test_p1_added_when_absent():
    c = fit_speedup_curve([0.5, 2, 4], [0.6, 1.8, 3.0])
    assert c.speedup(1.0) == 1.0
    assert "added by definition" in c.notes


# --- extrapolation and uncertainty -----------------------------------------------------------------------
def test_extrapolation_positive_nondecreasing_and_uncertainty_grows(noisy_data):
    p, s = noisy_data
    c = fit_speedup_curve(p, s)
    far = np.array([8.0, 12.0, 16.0, 64.0, 512.0, 4096.0])
    sp = c.speedup(far)
    assert np.all(sp > 0)
    assert np.all(np.diff(sp) >= 0)
    u = c.uncertainty(far)
    assert u[0] == pytest.approx(c.rel_uncertainty)
    assert np.all(np.diff(u) > 0)
    assert c.uncertainty(32.0) == pytest.approx(c.rel_uncertainty * (1 + 2), rel=1e-12)
    assert c.is_extrapolation(9.0) and not c.is_extrapolation(3.0)


def test_below_smallest_p_is_linear_to_origin(exact):
    lo = 0.25
    assert exact.speedup(lo / 2) == pytest.approx(exact.speedup(lo) / 2, rel=1e-12)
    assert exact.speedup(0.0) == 0.0
    assert exact.uncertainty(lo / 4) == pytest.approx(exact.rel_uncertainty * 3, rel=1e-12)
    assert exact.is_extrapolation(0.1)


def test_tail_slope_capped_at_a_plateau():
    c = fit_speedup_curve([0.5, 1, 2, 4, 8], [0.6, 1.0, 1.7, 2.5, 2.5])
    assert c.tail.capped and c.tail.fitted > 0.5
    assert c.tail.used == pytest.approx(0.0, abs=1e-12)
    assert c.speedup(64.0) == pytest.approx(2.5, rel=1e-9)
    assert_monotone_concave(c)


def test_tail_capped_to_last_segment_slope_keeps_concavity():
    # last segment slope (3.3-3.0)/4 = 0.075, far below what an Amdahl fit to these points would give
    p, s = [1, 2, 4, 8], [1.0, 1.9, 3.0, 3.3]
    c = fit_speedup_curve(p, s)
    assert c.tail.capped
    eps = 1e-4
    tail_slope = (c.speedup(8 + eps) - c.speedup(8)) / eps
    assert tail_slope == pytest.approx(0.075, rel=1e-3)
    assert_monotone_concave(c)


def test_flat_tail_without_data_parallel_points():
    c = fit_speedup_curve([0.25, 0.5, 1], [0.3, 0.55, 1.0])
    assert c.tail.kind == FLAT
    assert c.speedup([2.0, 16.0]) == pytest.approx([1.0, 1.0])
    assert c.uncertainty(4.0) == pytest.approx(3 * c.rel_uncertainty)


def test_in_range_uncertainty_from_loo(exact, noisy_data):
    c = fit_speedup_curve(*noisy_data)
    assert c.loo_rel_error is not None and c.loo_rel_error > 0
    assert c.rel_uncertainty == pytest.approx(max(c.loo_rel_error, 0.01))
    # one non-unit point: the curve goes through it, which tells nothing about its error
    one = fit_speedup_curve([1, 2], [1.0, 1.8])
    assert one.loo_rel_error is None
    assert one.rel_uncertainty == pytest.approx(0.25)
    assert one.speedup(2.0) == pytest.approx(1.8)


# --- raw throughputs -------------------------------------------------------------------------------------
def test_from_throughputs_normalises_by_p1():
    base = 120.0
    c = SpeedupCurve.from_throughputs(P, base * amdahl(P))
    np.testing.assert_allclose(c.speedup(P), amdahl(P), rtol=1e-9)


def test_from_throughputs_aggregate_colocated_and_repeated_p1():
    p = [0.5, 0.5, 1, 1, 2]
    per_copy = 0.6 * 100.0
    t = [2 * per_copy, 2 * per_copy, 99.0, 101.0, 180.0]  # aggregate of 2 copies; noisy p=1 pair
    c = SpeedupCurve.from_throughputs(p, t, aggregate_colocated=True)
    assert c.speedup(0.5) == pytest.approx(0.6, rel=1e-9)
    assert c.speedup(2.0) == pytest.approx(1.8, rel=1e-9)


def test_from_throughputs_requires_p1():
    with pytest.raises(ValueError, match="p = 1"):
        SpeedupCurve.from_throughputs([0.5, 2, 4], [50.0, 180.0, 300.0])


# --- round trip ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tail", [AMDAHL, POWER_LAW, FLAT])
def test_to_dict_json_round_trip(noisy_data, tail):
    p, s = noisy_data
    c = fit_speedup_curve(p, s, sigma=0.05, tail=tail)
    d = json.loads(json.dumps(c.to_dict()))
    back = SpeedupCurve.from_dict(d)
    grid = np.array([0.0, 0.1, 0.3, 1.0, 2.5, 8.0, 20.0, 300.0])
    np.testing.assert_array_equal(back.speedup(grid), c.speedup(grid))
    np.testing.assert_array_equal(back.uncertainty(grid[1:]), c.uncertainty(grid[1:]))
    np.testing.assert_array_equal(back.residuals, c.residuals)
    assert back == c
    assert set(d["points"][0]) == {"p", "speedup", "kind"}  # the card's SpeedupPointCard fields


# --- validation ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("p", "s", "match"), [
    ([0.0, 1, 2], [0.1, 1, 1.8], "p must be > 0"),
    ([-0.5, 1, 2], [0.1, 1, 1.8], "p must be > 0"),
    ([1, 2], [1.0, 1.8, 3.0], "2 allocations p but 3 speedups"),
    ([1, 2, np.nan], [1.0, 1.8, 3.0], "NaN"),
    ([1, 2, 4], [1.0, np.nan, 3.0], "NaN"),
    ([1, 2], [1.0, -1.8], "speedup must be > 0"),
    ([1, 2, 4], [1.2, 2.0, 3.0], "speedup at p = 1 must be 1"),
    ([1, 1], [1.0, 1.0], "at least one measurement at p != 1"),
    ([], [], "no p values"),
])
def test_validation_errors(p, s, match):
    with pytest.raises(ValueError, match=match) as info:
        fit_speedup_curve(p, s)
    assert isinstance(info.value, FitError) and isinstance(info.value, SpeedupFitError)


def test_validation_sigma_and_tail_and_queries(exact):
    with pytest.raises(ValueError, match="sigma"):
        fit_speedup_curve([1, 2, 4], [1.0, 1.8, 3.0], sigma=[0.1, 0.1])
    with pytest.raises(ValueError, match="sigma must be > 0"):
        fit_speedup_curve([1, 2, 4], [1.0, 1.8, 3.0], sigma=0.0)
    with pytest.raises(ValueError, match="unknown tail"):
        fit_speedup_curve([1, 2], [1.0, 1.8], tail="cubic")
    with pytest.raises(ValueError):
        exact.speedup(-1.0)
    with pytest.raises(ValueError):
        exact.speedup([1.0, np.nan])
    with pytest.raises(ValueError):
        exact.uncertainty(0.0)


@pytest.mark.parametrize("edit, says", [
    (lambda k: k["speedup"].__setitem__(3, -1.0), "must not fall"),
    (lambda k: k["p"].__setitem__(2, 10.0), "allocations must increase"),
    (lambda k: k["p"].pop(), "as many speedups as allocations"),
    (lambda k: k["speedup"].__setitem__(0, 0.5), "origin"),
])
def test_a_saved_curve_with_impossible_knots_is_refused(exact, edit, says):
    """A hand-edited curve used to load and answer S(1) = -1, or interpolate through knots out of order."""
    d = json.loads(json.dumps(exact.to_dict()))
    edit(d["knots"])
    with pytest.raises(ValueError, match=says):
        SpeedupCurve.from_dict(d)
