"""The throughput-vs-batch fit (perfpredict.fit.rate): recovery of known coefficients, LOO model selection,
anchored extrapolation, uncertainty, small-sample cases, errors, latency and the card round trip.

All data are synthetic throughputs generated from known closed forms (optionally with seeded multiplicative
noise), so every expected value is known exactly.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from perfpredict.errors import FitError, PerfPredictError
from perfpredict.fit import Prediction, RateModel, fit_rate_model, lat
from perfpredict.fit.rate import CONSTANT, LINEAR, QUADRATIC, QUADRATIC_MARGIN

# --- ground-truth forms --------------------------------------------------------------------------------
ALPHA, BETA = 0.02, 0.001  # linear time: T(b) = ALPHA + BETA*b  (s)
K0, K1, K2 = 50.0, 30.0, -0.2  # quadratic rate: sPR(b) = K0 + K1 b + K2 b^2 (samples/s); <0 beyond b~151.6

B = np.array([1, 2, 4, 8, 16, 32, 64], dtype=float)


def linear_rate(b):
    b = np.asarray(b, dtype=float)
    return b / (ALPHA + BETA * b)


def quad_rate(b, k0=K0, k1=K1, k2=K2):
    b = np.asarray(b, dtype=float)
    return k0 + k1 * b + k2 * b * b


def cand(model: RateModel, kind: str):
    return next(c for c in model.candidates if c.kind == kind)


@pytest.fixture(scope="module")
def lin_model() -> RateModel:
    return fit_rate_model(B, linear_rate(B))


@pytest.fixture(scope="module")
def quad_model() -> RateModel:
    return fit_rate_model(B, quad_rate(B))


# --- exact recovery ------------------------------------------------------------------------------------
def test_linear_time_coefficients_recovered_exactly(lin_model):
    c = cand(lin_model, LINEAR).coefficients
    assert c["alpha"] == pytest.approx(ALPHA, rel=1e-9)
    assert c["beta"] == pytest.approx(BETA, rel=1e-9)
    # and the model reproduces every measured iteration time
    np.testing.assert_allclose(lin_model.iter_time(B), ALPHA + BETA * B, rtol=1e-9)


def test_quadratic_rate_coefficients_recovered_exactly(quad_model):
    c = cand(quad_model, QUADRATIC).coefficients
    assert c["k0"] == pytest.approx(K0, rel=1e-9)
    assert c["k1"] == pytest.approx(K1, rel=1e-9)
    assert c["k2"] == pytest.approx(K2, rel=1e-9)
    np.testing.assert_allclose(quad_model.throughput(B), quad_rate(B), rtol=1e-9)


# --- selection -----------------------------------------------------------------------------------------
def test_selection_picks_linear_on_linear_data(lin_model):
    assert lin_model.kind == LINEAR
    assert lin_model.coefficients == cand(lin_model, LINEAR).coefficients
    assert {c.kind for c in lin_model.candidates} == {LINEAR, QUADRATIC}
    assert "leave-one-out" in lin_model.selection


def test_selection_picks_quadratic_on_strongly_quadratic_data(quad_model):
    q = cand(quad_model, QUADRATIC).loo_rel_error
    l_ = cand(quad_model, LINEAR).loo_rel_error
    # the data really are decisive: the quadratic beats the parsimony margin by a wide berth
    assert q < l_ * (1.0 - QUADRATIC_MARGIN) * 0.5
    assert quad_model.kind == QUADRATIC
    assert quad_model.coefficients == cand(quad_model, QUADRATIC).coefficients
    assert quad_model.loo_rel_error == q


@pytest.mark.parametrize("w, ratio_range, expected", [
    (0.40, (1 - QUADRATIC_MARGIN, 1.0), LINEAR),      # quadratic lower, but by less than the margin
    (0.45, (0.0, 1 - QUADRATIC_MARGIN), QUADRATIC),   # quadratic lower by more than the margin
])
def test_parsimony_margin(w, ratio_range, expected):
    # a blend of linear-time and quadratic-rate throughput: mildly curved, noise-free
    b = np.array([4, 8, 16, 24, 32, 48, 64, 96], dtype=float)
    r = w * quad_rate(b, 100.0, 40.0, -0.2) + (1 - w) * linear_rate(b)
    m = fit_rate_model(b, r)
    q, l_ = cand(m, QUADRATIC).loo_rel_error, cand(m, LINEAR).loo_rel_error
    assert ratio_range[0] <= q / l_ < ratio_range[1]
    assert m.kind == expected
    assert f"{l_:.3g}" in m.selection and f"{q:.3g}" in m.selection


def test_loo_error_is_zero_for_true_linear_model(lin_model):
    assert cand(lin_model, LINEAR).loo_rel_error == pytest.approx(0.0, abs=1e-9)
    assert cand(lin_model, QUADRATIC).loo_rel_error > 0.01


def test_loo_error_of_true_quadratic_comes_only_from_range_edges(quad_model):
    # Interior held-out points are predicted exactly by the quadratic fitted without them; the two edge
    # points fall outside the held-out fit's range and are predicted by the anchored-linear extrapolation.
    errs = []
    for i in range(len(B)):
        keep = np.arange(len(B)) != i
        sub = fit_rate_model(B[keep], quad_rate(B[keep]), kind=QUADRATIC, cross_validate=False)
        t_true = B[i] / quad_rate(B[i])
        err = abs(float(sub.iter_time(B[i])) - t_true) / t_true
        if 0 < i < len(B) - 1:
            assert err == pytest.approx(0.0, abs=1e-9)
        errs.append(err)
    assert cand(quad_model, QUADRATIC).loo_rel_error == pytest.approx(np.mean(errs), rel=1e-9)
    assert errs[0] > 0 and errs[-1] > 0


def test_r2_reported_for_each_candidate(lin_model, quad_model):
    for m in (lin_model, quad_model):
        for c in m.candidates:
            assert c.r2 is not None and math.isfinite(c.r2) and c.r2 <= 1.0 + 1e-12
    assert cand(lin_model, LINEAR).r2 == pytest.approx(1.0, abs=1e-12)
    assert cand(lin_model, QUADRATIC).r2 < 0.999
    assert cand(quad_model, QUADRATIC).r2 == pytest.approx(1.0, abs=1e-12)
    assert cand(quad_model, LINEAR).r2 < 0.95
    assert lin_model.r2 == cand(lin_model, LINEAR).r2
    assert quad_model.r2 == cand(quad_model, QUADRATIC).r2
    # each candidate says which quantity its R² is on
    assert cand(lin_model, LINEAR).target == "iter_time_s"
    assert cand(lin_model, QUADRATIC).target == "samples_per_s"


# --- noise ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("truth", ["linear", "quadratic"])
def test_noisy_fit_predicts_interior_held_out_point(truth):
    b = np.array([2, 4, 8, 16, 32, 48, 64, 128], dtype=float)
    held = 12.0
    f = linear_rate if truth == "linear" else (lambda x: quad_rate(x, 100.0, 40.0, -0.2))
    t_true = held / float(f(held))
    errs = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        r = f(b) * np.exp(rng.normal(0.0, 0.03, len(b)))  # 3% multiplicative timing noise
        m = fit_rate_model(b, r)
        assert m.kind == (LINEAR if truth == "linear" else QUADRATIC)
        p = m.predict(held)
        assert not p.extrapolated
        errs.append(abs(p.iter_time_s - t_true) / t_true)
        # the reported in-range uncertainty is of the order of the noise, not 0 and not huge
        assert 0.01 <= m.rel_uncertainty < 0.2
    assert max(errs) < 0.08
    assert float(np.median(errs)) < 0.03


# --- extrapolation -------------------------------------------------------------------------------------
def test_quadratic_extrapolation_stays_positive_increasing_and_continuous(quad_model):
    m = quad_model
    assert m.kind == QUADRATIC
    lo, hi = m.batch_range
    assert (lo, hi) == (1, 64)
    q = cand(m, QUADRATIC)
    # the quadratic itself turns negative beyond b ~ 151.6: its own iteration time is infinite there
    assert not np.isfinite(q.iter_time(200.0))
    far = np.array([65, 100, 150, 152, 200, 400, 1000, 4096], dtype=float)
    t = m.iter_time(far)
    assert np.all(np.isfinite(t)) and np.all(t > 0)
    assert np.all(np.diff(t) > 0)
    thr = m.throughput(far)
    assert np.all(np.isfinite(thr)) and np.all(thr > 0)
    # continuity at both edges
    eps = 1e-7
    assert m.iter_time(hi * (1 + eps)) == pytest.approx(m.iter_time(hi), rel=1e-6)
    assert m.iter_time(lo * (1 - eps)) == pytest.approx(m.iter_time(lo), rel=1e-6)
    # below the range too: positive and increasing in b
    near = np.array([0.1, 0.25, 0.5, 0.9], dtype=float)
    tb = m.iter_time(near)
    assert np.all(tb > 0) and np.all(np.diff(tb) > 0) and tb[-1] < m.iter_time(lo)
    # inside the range it is exactly the quadratic
    inside = np.linspace(lo, hi, 17)
    np.testing.assert_allclose(m.iter_time(inside), inside / quad_rate(inside), rtol=1e-9)
    # outside it is the linear-time shape, scaled to meet the quadratic at the edge
    lin = cand(m, LINEAR).coefficients
    expect = (hi / quad_rate(hi)) * (lin["alpha"] + lin["beta"] * far) / (lin["alpha"] + lin["beta"] * hi)
    np.testing.assert_allclose(t, expect, rtol=1e-9)
    assert m.predict(200).extrapolated and not m.predict(32).extrapolated


def test_uncertainty_constant_inside_and_growing_outside(quad_model, lin_model):
    for m in (quad_model, lin_model):
        lo, hi = m.batch_range
        u0 = m.rel_uncertainty
        assert u0 > 0
        for b in np.linspace(lo, hi, 9):
            assert m.uncertainty(b) == u0
        above = [m.uncertainty(hi * f) for f in (1.01, 1.5, 2, 4, 16, 1024)]
        below = [m.uncertainty(lo / f) for f in (1.01, 1.5, 2, 4, 16)]
        for seq in (above, below):
            assert seq[0] > u0
            assert all(b > a for a, b in zip(seq, seq[1:]))
        # one doubling beyond the edge doubles it: u * (1 + 1)
        assert m.uncertainty(2 * hi) == pytest.approx(2 * u0)
        assert m.uncertainty(lo / 4) == pytest.approx(3 * u0)
        p = m.predict(4 * hi)
        assert p.rel_uncertainty == pytest.approx(3 * u0)
        lo_t, hi_t = p.iter_time_interval
        assert 0 < lo_t < p.iter_time_s < hi_t


# --- small samples -------------------------------------------------------------------------------------
def test_single_point_constant_rate():
    m = fit_rate_model([16], [800.0])
    assert m.kind == CONSTANT and m.fit_points == 1
    assert m.coefficients == {"rate": pytest.approx(800.0)}
    assert m.batch_range == (16, 16)
    assert "single" in m.selection
    assert m.iter_time(16) == pytest.approx(16 / 800.0)
    assert m.throughput(64) == pytest.approx(800.0)
    assert m.throughput(2) == pytest.approx(800.0)
    assert m.rel_uncertainty == pytest.approx(0.5)
    assert m.uncertainty(32) == pytest.approx(1.0)  # one doubling out


def test_two_points_exact_linear():
    b = [4, 32]
    m = fit_rate_model(b, linear_rate(b))
    assert m.kind == LINEAR and m.fit_points == 2
    assert [c.kind for c in m.candidates] == [LINEAR]
    assert m.coefficients["alpha"] == pytest.approx(ALPHA, rel=1e-9)
    assert m.coefficients["beta"] == pytest.approx(BETA, rel=1e-9)
    assert m.loo_rel_error is None
    assert "2 batch sizes" in m.selection
    # an exact fit says nothing about its error: uncertainty is not the 1% floor
    assert m.rel_uncertainty >= 0.25


def test_three_points_select_linear_and_say_why():
    b = np.array([4.0, 16.0, 64.0])
    # even on quadratic data (which a 3-parameter form fits exactly), 3 points cannot cross-validate it
    m = fit_rate_model(b, quad_rate(b))
    assert m.kind == LINEAR
    assert "fewer than 4 batch sizes" in m.selection
    assert {c.kind for c in m.candidates} == {LINEAR, QUADRATIC}
    assert cand(m, QUADRATIC).loo_rel_error is None
    assert cand(m, LINEAR).loo_rel_error is not None and cand(m, LINEAR).loo_rel_error > 0
    assert m.rel_uncertainty == pytest.approx(max(cand(m, LINEAR).loo_rel_error, 0.01))


def test_forced_kind():
    m = fit_rate_model(B, quad_rate(B), kind=LINEAR)
    assert m.kind == LINEAR and m.selection == "forced"
    assert all(c.loo_rel_error is None for c in m.candidates)
    m = fit_rate_model(B, linear_rate(B), kind=CONSTANT)
    assert m.kind == CONSTANT and m.selection == "forced"
    # the constant rate is the geometric mean of the measured rates
    assert m.coefficients["rate"] == pytest.approx(float(np.exp(np.mean(np.log(linear_rate(B))))), rel=1e-12)


def test_forced_exact_quadratic_does_not_claim_one_percent_uncertainty():
    b = np.array([4.0, 16.0, 64.0])
    m = fit_rate_model(b, quad_rate(b), kind=QUADRATIC)
    assert m.kind == QUADRATIC
    # three parameters through three points: zero residual, no information about the error
    two = fit_rate_model(b[:2], quad_rate(b[:2]))
    assert m.rel_uncertainty >= two.rel_uncertainty


# --- invalid input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("bs, rates, kw", [
    ([1, 2, 3], [10.0, 20.0], {}),                            # mismatched lengths
    ([], [], {}),                                             # nothing at all
    ([1, 2, 4], [0.0, -5.0, float("nan")], {}),               # no positive finite throughput
    ([0, -1, float("inf")], [10.0, 20.0, 30.0], {}),          # no positive finite batch size
    ([4, 8], [100.0, 150.0], {"kind": QUADRATIC}),            # quadratic needs >= 3 points
    ([4, 8, 16], [100.0, 150.0, 180.0], {"kind": "cubic"}),   # unknown kind
])
def test_invalid_inputs_raise_fit_error(bs, rates, kw):
    with pytest.raises(FitError) as ei:
        fit_rate_model(bs, rates, **kw)
    assert isinstance(ei.value, PerfPredictError)
    assert "fit rate model" in str(ei.value) and "\n" not in str(ei.value)


def test_unusable_points_are_dropped():
    b = [1, 2, 4, 8, 16, 32, 64]
    r = list(linear_rate(b))
    m_clean = fit_rate_model(b, r)
    m = fit_rate_model(b + [128, 256, 0], r + [float("nan"), 0.0, 10.0])
    assert m.fit_points == 7 and m.batch_range == (1, 64)
    assert m.coefficients == pytest.approx(m_clean.coefficients, rel=1e-9)


def test_duplicate_batch_sizes_average_iteration_time():
    # two measurements at b=4 with iteration times 0.1 s and 0.3 s: the fit sees 0.2 s (mean time), not the
    # time implied by the mean rate (4 / mean(40, 13.33) = 0.15 s)
    b = [4, 4, 8]
    r = [4 / 0.1, 4 / 0.3, 8 / 0.4]
    m = fit_rate_model(b, r)
    assert m.fit_points == 2 and m.kind == LINEAR
    # exact line through (4, 0.2) and (8, 0.4): alpha 0, beta 0.05
    assert m.iter_time(4) == pytest.approx(0.2, rel=1e-9)
    assert m.iter_time(8) == pytest.approx(0.4, rel=1e-9)
    assert m.coefficients["beta"] == pytest.approx(0.05, rel=1e-9)
    assert m.coefficients["alpha"] == pytest.approx(0.0, abs=1e-12)
    # order of the input does not matter
    m2 = fit_rate_model([8, 4, 4], [r[2], r[1], r[0]])
    assert m2.coefficients == pytest.approx(m.coefficients, rel=1e-12)


# --- latency -------------------------------------------------------------------------------------------
def test_latency_is_iterations_times_iteration_time_plus_nu(quad_model, lin_model):
    for m in (lin_model, quad_model):
        for n, b, nu in [(0, 8, 1.5), (1, 8, 0.0), (1000, 16, 2.25), (37, 200, 0.5), (10, 0.5, 0.1)]:
            expect = n * m.iter_time(b) + nu
            assert m.latency(n, b, nu) == pytest.approx(expect, rel=1e-12)
            assert lat(m, n, b, nu) == m.latency(n, b, nu)
            assert type(m.latency(n, b, nu)) is float
        assert m.latency(100, 8) == pytest.approx(100 * (ALPHA + BETA * 8) if m is lin_model else
                                                  100 * 8 / quad_rate(8.0), rel=1e-9)
        with pytest.raises(ValueError):
            m.latency(-1, 8)
        with pytest.raises(ValueError):
            lat(m, -0.5, 8, 1.0)
        with pytest.raises(ValueError):
            m.iter_time(0)


# --- card round trip and types -------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["linear", "quadratic", "constant"])
def test_card_round_trip_reproduces_predictions(which, lin_model, quad_model):
    m = {"linear": lin_model, "quadratic": quad_model,
         "constant": fit_rate_model([16], [800.0])}[which]
    card = m.to_card(device="cpu")
    assert card.device == "cpu" and card.source == "fitted"
    back = RateModel.from_card(card)
    grid = np.array([0.25, 0.5, 1, 3, 8, 16, 31, 64, 65, 100, 150, 200, 1000, 10000], dtype=float)
    np.testing.assert_array_equal(back.iter_time(grid), m.iter_time(grid))
    np.testing.assert_array_equal(back.throughput(grid), m.throughput(grid))
    for b in grid:
        assert back.uncertainty(b) == m.uncertainty(b)
        assert back.predict(b) == m.predict(b)
    assert back.kind == m.kind and back.batch_range == m.batch_range
    assert [c.kind for c in back.candidates] == [c.kind for c in m.candidates]
    # through JSON as well (floats must survive exactly)
    from perfpredict.card import RateModelCard

    again = RateModel.from_card(RateModelCard.model_validate_json(card.model_dump_json()))
    np.testing.assert_array_equal(again.iter_time(grid), m.iter_time(grid))


def test_scalar_in_float_out_array_in_array_out(quad_model):
    m = quad_model
    for fn in (m.iter_time, m.throughput):
        assert type(fn(8)) is float
        assert type(fn(np.float64(8.0))) is float
        assert type(fn(500)) is float
        out = fn([4, 8, 500])
        assert isinstance(out, np.ndarray) and out.shape == (3,)
        out2 = fn(np.array([[4.0, 8.0], [16.0, 500.0]]))
        assert isinstance(out2, np.ndarray) and out2.shape == (2, 2)
        assert out2[1, 1] == fn(500)
    assert isinstance(m.predict(8), Prediction)


def test_twelve_points_fit_quickly_without_recursive_loo():
    b = np.arange(1, 13, dtype=float) * 8
    r = quad_rate(b, 100.0, 40.0, -0.1) * np.exp(np.random.default_rng(0).normal(0, 0.02, len(b)))
    t0 = time.perf_counter()
    m = fit_rate_model(b, r)
    elapsed = time.perf_counter() - t0
    assert elapsed < 2.0
    assert m.fit_points == 12
    assert all(c.loo_rel_error is not None and math.isfinite(c.loo_rel_error) for c in m.candidates)


def test_the_selection_names_the_points_the_fit_left_out():
    """A sweep records an OOM or an error as a NaN or zero throughput; the fit leaves it out, and says so."""
    clean = fit_rate_model([2, 8, 32], [100.0, 350.0, 700.0])
    m = fit_rate_model([2, 4, 8, 16, 32], [100.0, float("nan"), 350.0, 0.0, 700.0])
    assert m.fit_points == 3 and "2 unusable point(s) left out (batch sizes 4, 16)" in m.selection
    assert m.coefficients == pytest.approx(clean.coefficients)
    assert "left out" not in clean.selection


def test_the_two_unknown_nnls_matches_scipys_on_random_problems():
    """The closed-form NNLS behind the linear-time fit and GENIE's comm penalty gives scipy's optimum,
    including the cases where one or both unknowns are pinned at 0."""
    from scipy.optimize import nnls

    from perfpredict.fit.nnls import nnls2

    rng = np.random.default_rng(0)
    pinned = 0
    for _ in range(300):
        A = rng.normal(size=(int(rng.integers(2, 8)), 2))
        y = rng.normal(size=A.shape[0])
        want, _ = nnls(A, y)
        got = np.array(nnls2(A, y))
        assert np.all(got >= 0)
        assert np.sum((A @ got - y) ** 2) == pytest.approx(np.sum((A @ want - y) ** 2), rel=1e-9, abs=1e-12)
        pinned += int(np.any(want == 0))
    assert pinned > 50  # the constrained branch was exercised, not only the unconstrained one


def test_two_batch_sizes_say_exactly_only_when_the_line_passes_through_both():
    """Steps that got faster per step with a larger batch (a busy host) printed 'linear_time fitted exactly'
    beside R² = -0.85: the non-negative coefficients cannot reach such points."""
    assert fit_rate_model([2, 4], [100.0, 150.0]).selection == "2 batch sizes: linear_time fitted exactly"
    m = fit_rate_model([2, 4], [100.0, 1000.0])
    assert m.r2 < 0 and "held non-negative, which cannot pass through both points" in m.selection
